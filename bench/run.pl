#!/usr/bin/perl

# make bench: ngx_feed_module measured side by side with an OpenResty-style
# Lua peer and with nginx serving the same bytes from a file, on one Redis and
# one nginx with one worker.  Prints a table and writes docs/benchmarks.md.
#
# FEED_BENCH_QUICK=1: a smoke run with tiny sizes (not written to docs/).
# FEED_BENCH_PHASES=1,4: only those parts (not written to docs/ either).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(strftime);
use List::Util qw(sum max);
use FeedTest qw(json_decode);

Test::More->builder->no_ending(1);

my $QUICK = $ENV{FEED_BENCH_QUICK};
my %PHASES = map { $_ => 1 } split /,/, $ENV{FEED_BENCH_PHASES} || '1,2,3,4,5';
my $ALL = keys %PHASES == 5;
my $ROOT = FeedTest->root;
my $DUR = $QUICK ? 1 : 5;
my $CONNS = 32;
my @FANOUT = $ENV{FEED_BENCH_FANOUT}
    ? split(/,/, $ENV{FEED_BENCH_FANOUT})
    : $QUICK ? (500) : (10_000, 100_000);
my $started = time;

# under make test-asan: ASan's slow unwinder (libgcc's) takes a lock that
# LuaJIT's registered frames make it take again from inside, and deadlocks
my $t = FeedTest->new(no_access_log => 1,
    asan_options => 'fast_unwind_on_malloc=1');
my $dir = $t->dir;
my (@table, @notes, %result);

$t->start_redis;
$t->start_mongo;

mkdir "$dir/static";
system('cc', "$ROOT/bench/seed.c", '-o', "$dir/seed",
    split(' ', `pkg-config --cflags --libs libbson-1.0`)) == 0
    or die "cannot build bench/seed.c\n";

my $sha = '';

sub conf {
    my (%o) = @_;
    my $mode = $o{mode} || 'link';
    my $mongo = $o{mongo} ? '%%MONGO_URI_' . uc($o{mongo}) . '%%'
                          : '%%MONGO_URI%%';
    my $timeout = $o{mongo_timeout} || '10s';
    my $m = $mode eq 'embed' ? 'e' : 'l';
    my $lua = $sha ? <<"EOF" : '';
        location ~ ^/lua/([^/]+)/timeline\$ {
            set \$feed_uid \$1;
            set \$feed_redis_port %%PORT_REDIS%%;
            set \$feed_read_sha $sha;
            set \$feed_ttl 604800;
            set \$feed_mode $m;
            content_by_lua_file $ROOT/bench/peer.lua;
        }
        location ~ ^/luas/([^/]+)/timeline\$ {
            set \$feed_uid \$1;
            set \$feed_redis_port %%PORT_REDIS%%;
            set \$feed_read_sha $sha;
            set \$feed_ttl 604800;
            set \$feed_mode $m;
            content_by_lua_file $ROOT/bench/peer_script.lua;
        }
EOF

    return <<"EOF";
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
worker_rlimit_nofile 16384;
thread_pool feedtp threads=16;
events { worker_connections 8192; }
http {
    lua_package_path "/usr/share/lua/5.1/?.lua;;";
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    feed_redis_timeout 5s;
    feed_mongo_uri "$mongo";
    feed_mongo_timeout $timeout;
    feed_thread_pool feedtp;
    feed_cache_mode $mode;
    feed_fanout on;
    feed_fanout_page 200000;
    feed_fanout_block 200ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%% backlog=4096;
        location ~ ^/users/([^/]+)/following/([^/]+)\$ { feed_follow \$1 \$2; }
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location ~ ^/users/([^/]+)/timeline\$ { feed_timeline \$1; }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location /static/ { alias $dir/static/; default_type application/json; }
        location = /status { feed_status; }
$lua
    }
}
EOF
}

sub start_nginx {
    my (%o) = @_;
    $t->stop;
    $t->write_conf(conf(%o))->run;
    $t->wait_for(5, sub {
        my $j = $t->get('/status')->{json} or return 0;
        $j->{redis}{up} && $j->{mongo}{up};
    }) or die "nginx is not ready\n";
}

sub post {
    my ($user, $body) = @_;
    my $r = $t->http('POST', "/users/$user/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    die "post: $r->{status}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}

sub follow {
    my ($u, $v) = @_;
    my $r = $t->http('PUT', "/users/$u/following/$v");
    return if $r->{status} == 204;

    print STDERR "follow $u $v: status $r->{status} $r->{body}\n",
        `tail -5 $dir/error.log`, `tail -3 $dir/mongo-commands.log`,
        `tail -5 $dir/mongo.out`;
    die "follow: $r->{status}\n";
}

sub wrk {
    my ($url, %o) = @_;
    my @cmd = ('wrk', '-t1', '-c' . ($o{conns} || $CONNS),
        '-d' . ($o{dur} || $DUR) . 's', '--latency');
    push @cmd, '-s', $o{script} if $o{script};
    my $out = `@cmd http://127.0.0.1:${\ $t->port('http')}$url 2>&1`;

    my %r = (rps => 0, out => $out);
    $r{rps} = $1 if $out =~ /Requests\/sec:\s+([\d.]+)/;
    $r{errors} = ($out =~ /Non-2xx or 3xx responses: (\d+)/) ? $1 : 0;
    $r{errors} += $1 if $out =~ /Socket errors: .*?timeout (\d+)/;

    for my $p (50, 90, 99) {
        next unless $out =~ /^\s+$p%\s+([\d.]+)(us|ms|s)\s*$/m;
        $r{"p$p"} = $1 * { us => 0.001, ms => 1, s => 1000 }->{$2};
    }

    return \%r;
}

sub body {
    my ($url) = @_;
    my $r = $t->get($url);
    die "GET $url: $r->{status}\n" unless $r->{status} == 200;
    return $r->{body};
}

# the script the module runs for a read, as Redis saw it

sub read_sha {
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
        . $t->port('redis')) or die "redis: $!\n";
    print $s "*1\r\n\$7\r\nMONITOR\r\n";
    <$s>;
    $t->get('/users/reader/timeline');
    while (my $line = <$s>) {
        return $1 if $line =~ /"EVALSHA" "([0-9a-f]{40})" "\d+" "feed:tl:/i;
    }
    die "no EVALSHA seen\n";
}

sub phase { $PHASES{ $_[0] } }

# EVALSHA calls Redis served so far
sub evalshas {
    my $s = $t->redis('INFO', 'commandstats');
    return $s =~ /cmdstat_evalsha:calls=(\d+)/ ? $1 : 0;
}

sub fmt_ms { defined $_[0] ? sprintf('%.2f', $_[0]) : '-' }

# ---------------------------------------------------------------- data --

my @authors = map { "a$_" } 1 .. 5;
my $per = $QUICK ? 15 : 40;

start_nginx(mode => 'link');

for my $a (@authors) {
    follow('reader', $a);
    post($a, "post $_ of $a: some words about the day, a link or two, "
        . "and a few more words to make it an ordinary post") for 1 .. $per;
}

# --------------------------------------------------- 1. hot path reads --

if (phase(1)) {

    for my $mode (qw(link embed)) {
        $t->redis('FLUSHALL');
        start_nginx(mode => $mode);

        body('/users/reader/timeline?limit=50');
        $sha ||= read_sha();
        start_nginx(mode => $mode);

        for my $limit (20, 50) {
            my $url = "/users/reader/timeline?limit=$limit";
            my $mine = body($url);
            for my $peer ('lua', 'luas') {
                die "the $peer peer's answer differs from the module's\n"
                    unless body("/$peer/reader/timeline?limit=$limit") eq $mine;
            }

            open my $fh, '>', "$dir/static/t$limit.json" or die $!;
            print $fh $mine;
            close $fh;

            my $m = wrk($url);
            my $l = wrk("/lua/reader/timeline?limit=$limit");
            my $ls = wrk("/luas/reader/timeline?limit=$limit");
            my $s = wrk("/static/t$limit.json");

            push @table, [ "hit, limit $limit, $mode", length($mine), $m, $l,
                           $s, $ls ];
        }
    }

}

# ------------------------------------------- 2. the event loop is free --

if (phase(2)) {

    start_nginx(mode => 'link');
    body('/users/reader/timeline');

    # One run of hits, through windows alternately undisturbed and
    # disturbed by a stream of misses, so that the machine's drift (its
    # speed moves by 15% between runs) falls on both alike.  Hits are
    # counted by Redis, one EVALSHA each: INFO answers at once, where
    # /status would wait on the slowed MongoDB.
    my ($win, $nwin) = ($QUICK ? 1 : 3, $QUICK ? 4 : 8);

    $t->mongo_latency(300);

    my $hits_out = "$dir/hits.out";
    my $hits = fork();
    if ($hits == 0) {
        exec("wrk -t1 -c$CONNS -d" . ($win * $nwin + 2) . "s --latency "
            . "http://127.0.0.1:${\ $t->port('http')}/users/reader/timeline "
            . "> $hits_out 2>&1");
    }

    sleep 1;

    my (@calm, @busy, $misses);
    for my $w (0 .. $nwin - 1) {
        my $miss;
        if ($w % 2) {
            $miss = fork();
            if ($miss == 0) {
                exec("wrk -t1 -c16 -d${win}s -s $ROOT/bench/misses.lua "
                    . "http://127.0.0.1:${\ $t->port('http')}/ -- " . $$ . "w$w"
                    . int(time * 1000) . " > $dir/misses$w.out 2>&1");
            }
        }

        my ($n0, $t0) = (evalshas(), time);
        sleep $win;
        my ($n1, $t1) = (evalshas(), time);
        push @{ $w % 2 ? \@busy : \@calm }, ($n1 - $n0) / ($t1 - $t0);

        next unless $miss;
        waitpid($miss, 0);
        if (open my $fh, '<', "$dir/misses$w.out") {
            local $/;
            $misses += $1 if <$fh> =~ /(\d+) requests in/;
        }
    }

    waitpid($hits, 0);
    $t->mongo_latency(0);

    my $all = { out => '' };
    if (open my $fh, '<', $hits_out) {
        local $/;
        $all->{out} = <$fh>;
        $all->{p99} = $1 * { us => 0.001, ms => 1, s => 1000 }->{$2}
            if $all->{out} =~ /^\s+99%\s+([\d.]+)(us|ms|s)\s*$/m;
    }

    my $calm = sum(@calm) / @calm;
    my $busy = sum(@busy) / @busy;
    $result{loop} = { calm => $calm, busy => $busy, misses => $misses // 0,
        ratio => $calm ? $busy / $calm : 0, p99 => $all->{p99},
        windows => [ map { $_ % 2 ? $busy[$_ >> 1] : $calm[$_ >> 1] }
                     0 .. $nwin - 1 ], win => $win };
}

# ------------------------------------------------------- 3. stampede --

if (phase(3)) {

    my $storm = 'storm';
    follow($storm, $_) for @authors;

    $t->mongo_latency(200);
    my $before = () = $t->mongo_commands;

    my $n = $QUICK ? 100 : 1000;
    my @h = map { $t->http_start('GET', "/users/$storm/timeline",
        timeout => 30) } 1 .. $n;
    my @res = map { $t->http_end($_) } @h;
    $t->mongo_latency(0);

    my @cmds = $t->mongo_commands;
    my $rebuilds = grep {
        $_->{cmd} eq 'find' && ($_->{coll} // '') eq 'follows'
        && ($_->{filter}{src} // '') eq $storm
    } @cmds[$before .. $#cmds];

    my %bodies = map { $_->{body} => 1 } grep { $_->{status} == 200 } @res;
    $result{storm} = {
        n => $n, ok => scalar(grep { $_->{status} == 200 } @res),
        identical => scalar(keys %bodies) == 1, rebuilds => $rebuilds,
    };

}

# --------------------------------------------------------- 4. fanout --

if (phase(4)) {

    # a stand-in of their own: its unique indexes are not enforced (mongomock
    # checks each insert against the whole collection), and it goes after

    $t->stop;
    $t->start_mongo(name => 'mongofan', args => ['--no-unique']);

    for my $f (@FANOUT) {
        my $star = "star$f";

        # the follows go in the stand-in's data file while it is stopped

        $t->stop;
        $t->stop_mongo('mongofan');
        system("$dir/seed", "$dir/mongofan-db/standin-data.bson", 'feed', $star,
            $f) == 0 or die "seed failed\n";
        $t->start_mongo(name => 'mongofan', args => ['--no-unique']);
        start_nginx(mode => 'link', mongo => 'mongofan',
            mongo_timeout => '60s');

        # every follower has a cached timeline

        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
            . $t->port('redis')) or die "redis: $!\n";
        my $req = '';
        for my $i (1 .. $f) {
            my $k = "feed:tl:{f$i}";
            $req .= "*3\r\n\$5\r\nRPUSH\r\n\$" . length($k) . "\r\n$k\r\n"
                . "\$24\r\n000000000000000000000000\r\n";
        }
        print $s $req;
        <$s> for 1 .. $f;

        my @sample = (1, $f, map { 1 + int(rand($f)) } 1 .. 198);
        my %seen;

        my $st0 = $t->get('/status', timeout => 120)->{json}{fanout}{deliveries}
            // 0;
        my $t0 = time;
        my $id = post($star, "news for $f followers");
        my $t201 = time;

        my ($tdone, $deadline) = (undef, time + 120);

        while (time < $deadline) {
            my @left = grep { !$seen{$_} } @sample;
            if (@left) {
                my $q = '';
                for my $i (@left) {
                    my $k = "feed:tl:{f$i}";
                    $q .= "*3\r\n\$6\r\nLINDEX\r\n\$" . length($k)
                        . "\r\n$k\r\n"
                        . "\$1\r\n0\r\n";
                }
                print $s $q;
                for my $i (@left) {
                    my $r = FeedTest::_resp_read($s);
                    $seen{$i} = time if defined $r && $r eq $id;
                }
            }

            my $d = $t->get('/status', timeout => 120)
                ->{json}{fanout}{deliveries}
                // 0;
            if ($d - $st0 >= $f + 1 || ($d - $st0 >= $f && !@left)) {
                $tdone = time;
                last if !@left;
            }
            last if $tdone && !@left;
            sleep 0.002;
        }

        # the module times its own deliveries: first batch sent, last reply

        # (the status pings MongoDB too, which the stand-in answers slowly with
        # a hundred thousand follows in memory)
        my $sr = $t->get('/status', timeout => 120);
        my $fs = $sr->{json}{fanout} || {};
        print STDERR "fanout $f: status $sr->{status}, elapsed $sr->{elapsed}: "
            . substr($sr->{body}, 0, 600) . "\n" if $ENV{FEED_BENCH_DEBUG};
        my $ms = $fs->{last_post_ms} // 0;
        my $nd = $fs->{last_post_deliveries} // 0;

        my @delays = sort { $a <=> $b } map { ($_ - $t0) * 1000 } values %seen;
        my $first = $seen{1};
        $result{"fanout$f"} = {
            n => $f,
            seen => scalar(@delays),
            done => $tdone ? ($tdone - $t0) : undef,
            rate => $nd ? $nd / (($ms || 1) / 1000) : undef,
            deliver_ms => $ms,
            e2e => $tdone ? $f / ($tdone - $t0) : undef,
            p50 => @delays ? $delays[int(@delays * 0.5)] : undef,
            p99 => @delays ? $delays[int(@delays * 0.99)] : undef,
            first => $first ? ($first - $t0) * 1000 : undef,
        };

        $t->redis('FLUSHALL');
    }

    $t->stop;
    $t->stop_mongo('mongofan');

}

# --------------------------------------------------------- 5. memory --

if (phase(5)) {

    my $cap = 800;
    my $memposts = $QUICK ? 60 : $cap + 50;

    start_nginx(mode => 'link');
    follow('mem', 'memauthor');
    post('memauthor', "memory post $_: an ordinary post of about one hundred "
        . "and forty characters, like most of them, with words")
        for 1 .. $memposts;

    for my $mode (qw(link embed)) {
        $t->redis('FLUSHALL');
        start_nginx(mode => $mode);
        body('/users/mem/timeline');

        my $key = 'feed:tl:{mem}';
        my $len = $t->redis('LLEN', $key);
        my $bytes = $t->redis('MEMORY', 'USAGE', $key, 'SAMPLES', '0');
        my $first = $t->redis('LINDEX', $key, 0);
        my $post = $mode eq 'link'
            ? $t->redis('MEMORY', 'USAGE', 'feed:p:' . substr($first, 0, 24))
            : 0;

        $result{"mem$mode"} = { entries => $len, bytes => $bytes,
            per => $bytes / $len, post => $post };
    }
}

# nginx stops gracefully, with nothing alarming in its log over the run

my $stopped = $t->stop;
$t->cleanup;
my @bad = $t->bad_log_lines;
my @sanitizer = $t->sanitizer_reports;

# -------------------------------------------------------------- report --

my $cores = `nproc`;
chomp $cores;
my $date = strftime('%Y-%m-%d %H:%M UTC', gmtime);
my $cpu = (grep { /model name/ } `cat /proc/cpuinfo`)[0] // '';
$cpu =~ s/.*:\s*//;
chomp $cpu;

my @out;
push @out, "# Benchmarks", '',
    "Measured $date on $cores cores ($cpu), by `make bench` "
    . "(`bash bench/run`, " . sprintf('%.0f', time - $started)
    . " s), one nginx worker, one redis-server, the MongoDB stand-in. "
    . "wrk -t1 -c$CONNS, ${DUR} s per run, on the same machine.", '';

if (phase(1)) {
    push @out, "## 1. Hot path: a timeline read from the cache", '',
        "Requests/s and latency (ms) of the same page, answered by: the "
        . "module; "
        . "the OpenResty-style peer (`bench/peer.lua`: lua-resty-redis with "
        . "keepalive, plain commands pipelined, the logic in Lua, on the same "
        . "Redis data); nginx serving the same bytes from a file; and, for "
        . "reference, a Lua handler calling the module's own read script "
        . "(`bench/peer_script.lua`: the same Redis work as the module, so "
        . "only "
        . "the nginx side differs). Every answer was checked byte for byte "
        . "against the module's.", '',
        '| read | bytes | module req/s | p50 | p99 | Lua req/s | p50 | p99 '
        . '| static req/s | **module/Lua** | **module/static** '
        . '| Lua+script req/s | module/Lua+script |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|---|';

    for my $row (@table) {
        my ($name, $bytes, $m, $l, $s, $ls) = @$row;
        push @out, sprintf('| %s | %d | %.0f | %s | %s | %.0f | %s | %s | %.0f '
            . '| **%.2f** | **%.2f** | %.0f | %.2f |', $name, $bytes,
            $m->{rps}, fmt_ms($m->{p50}), fmt_ms($m->{p99}),
            $l->{rps}, fmt_ms($l->{p50}), fmt_ms($l->{p99}), $s->{rps},
            $l->{rps} ? $m->{rps} / $l->{rps} : 0,
            $s->{rps} ? $m->{rps} / $s->{rps} : 0,
            $ls->{rps}, $ls->{rps} ? $m->{rps} / $ls->{rps} : 0);
    }

    push @out, '',
        'Targets: module ≥ 2.0× the Lua peer, ≥ 0.6× static.', '';
}

if (phase(2)) {
    my $lp = $result{loop};
    push @out, "## 2. The event loop is never blocked", '',
        sprintf('Cache hits, in one run of %d s through windows of %d s, '
            . 'alternately undisturbed and while 16 connections keep '
            . 'reading timelines of new users (misses, each waiting on '
            . 'MongoDB with 300 ms injected latency; %d answered). Hits '
            . 'per second, counted by Redis, in each window: %s. '
            . 'Undisturbed %.0f req/s, with misses %.0f req/s (p99 of all '
            . 'hits %s ms): ratio **%.2f** (target ≥ 0.9).',
            $lp->{win} * @{ $lp->{windows} }, $lp->{win}, $lp->{misses},
            join(', ', map { sprintf($_ % 2 ? '*%.0f*' : '%.0f',
                $lp->{windows}[$_]) } 0 .. $#{ $lp->{windows} }),
            $lp->{calm}, $lp->{busy}, fmt_ms($lp->{p99}), $lp->{ratio}),
        '';
}

if (phase(3)) {
    my $sm = $result{storm};
    push @out, "## 3. Stampede", '',
        sprintf('%d concurrent cold reads of one user (MongoDB at 200 ms): '
            . '%d answered 200, %s; MongoDB rebuilds: **%d** (target 1).',
            $sm->{n}, $sm->{ok},
            $sm->{identical} ? 'all identical' : 'NOT all identical',
            $sm->{rebuilds}), '';
}

if (phase(4)) {
    push @out, "## 4. Fanout", '',
        'One post by an author whose followers all have a cached timeline. '
        . 'Followers are read from the MongoDB stand-in in one page. '
        . '"Delivering" '
        . 'is the time the module spent delivering into Redis (from its first '
        . 'script call for the post to the last reply, as `feed_status` '
        . 'reports '
        . 'it), hence the delivery rate; "end to end" counts from the POST to '
        . 'the last follower reached, reading the followers from the stand-in '
        . 'included; visibility is sampled over 200 followers.', '',
        '| followers | delivered | delivering (ms) | delivery rate (/s) '
        . '| all reached (s) | end to end (/s) | first visible (ms) '
        . '| visible p50 (ms) | p99 (ms) |',
        '|---|---|---|---|---|---|---|---|---|';

    for my $f (@FANOUT) {
        my $r = $result{"fanout$f"};
        push @out, sprintf('| %d | %s | %s | **%s** | %s | %s | %s | %s | %s |',
            $f, $r->{done} ? 'all' : 'NOT all', $r->{deliver_ms} // '-',
            $r->{rate} ? sprintf('%.0f', $r->{rate}) : '-',
            $r->{done} ? sprintf('%.2f', $r->{done}) : '-',
            $r->{e2e} ? sprintf('%.0f', $r->{e2e}) : '-',
            fmt_ms($r->{first}), fmt_ms($r->{p50}), fmt_ms($r->{p99}));
    }

    push @out, '', 'Target: ≥ 200,000 deliveries/s.', '';
}

if (phase(5)) {
    push @out, "## 5. Memory", '',
        '`MEMORY USAGE` of a full cached timeline, divided by its entries.', '',
        '| mode | entries | bytes | bytes per entry | post copy (link) |',
        '|---|---|---|---|---|';

    for my $mode (qw(link embed)) {
        my $r = $result{"mem$mode"};
        push @out, sprintf('| %s | %d | %d | **%.1f** | %s |', $mode,
            $r->{entries}, $r->{bytes}, $r->{per},
            $mode eq 'link' ? "$r->{post} B once per post" : 'in the entry');
    }

    push @out, '', 'Target: ≤ 64 B per entry in link mode.', '';
}

my $report = join("\n", @out) . "\n";
print $report;

if (!$stopped || @bad || @sanitizer) {
    print STDERR "nginx did not stop gracefully\n" unless $stopped;
    print STDERR "error.log: $_\n" for @bad;
    print STDERR "sanitizer report: $_\n" for @sanitizer;
    exit 1;
}

if (!$QUICK && $ALL) {
    my $file = "$ROOT/docs/benchmarks.md";
    my $old = '';
    if (open my $fh, '<', $file) {
        local $/;
        $old = <$fh>;
        $old = $1 if $old =~ /(\n## Analysis.*)\z/s;
        $old = '' unless $old =~ /^\n## Analysis/;
    }
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $report, $old;
    close $fh;
    print "written to docs/benchmarks.md\n";
}
