#!/usr/bin/perl

# make bench: ngx_feed_module measured side by side with an OpenResty-style
# Lua peer and with nginx serving the same bytes from a file, on one Redis and
# one nginx with one worker.  Prints a table and writes docs/benchmarks.md.
#
# FEED_BENCH_QUICK=1: a smoke run with tiny sizes (not written to docs/).
# FEED_BENCH_PHASES=1,4: only those parts (not written to docs/ either,
# unless FEED_BENCH_WRITE=1: then only their sections are replaced there).
# FEED_BENCH_PULL=1000,100000: part 6's authors (their followers).
# FEED_BENCH_PHASES=12: local hits (bench/local_hits.pl, issue 30).
# FEED_BENCH_PHASES=13: live timelines (bench/stream.pl, issue 31);
# FEED_BENCH_STREAMS=10000: how many streams.
# FEED_BENCH_PHASES=14: misses of a reader of 5,000 authors (issue 34).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX qw(strftime);
use List::Util qw(sum max min);
use FeedTest qw(json_decode);
use FeedCluster;

Test::More->builder->no_ending(1);

my $QUICK = $ENV{FEED_BENCH_QUICK};
my %PHASES = map { $_ => 1 } split /,/,
    $ENV{FEED_BENCH_PHASES} || '1,2,3,4,5,6,7,8,9,10,11,12,13,14';
my $ALL = keys %PHASES == 14;
my $ROOT = FeedTest->root;
my $DUR = $QUICK ? 1 : 5;
my $CONNS = 32;
my @FANOUT = $ENV{FEED_BENCH_FANOUT}
    ? split(/,/, $ENV{FEED_BENCH_FANOUT})
    : $QUICK ? (500) : (10_000, 100_000);
my @PULL = $ENV{FEED_BENCH_PULL}
    ? split(/,/, $ENV{FEED_BENCH_PULL})
    : $QUICK ? (20, 200, 600) : (1_000, 100_000, 1_000_000);
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
    my $pull = defined $o{pull} ? "\n    feed_pull_threshold $o{pull};" : '';
    my $extra = $o{extra} ? "\n    $o{extra}" : '';
    my $redis = $o{redis} || '127.0.0.1:%%PORT_REDIS%%';
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
events { worker_connections 16000; }
http {
    lua_package_path "/usr/share/lua/5.1/?.lua;;";
    feed_redis $redis;
    feed_redis_timeout 5s;
    feed_mongo_uri "$mongo";
    feed_mongo_timeout $timeout;
    feed_thread_pool feedtp;
    feed_cache_mode $mode;
    feed_fanout on;
    feed_fanout_page 200000;
    feed_fanout_block 200ms;
    feed_stream_max 15000;$pull$extra

    server {
        listen 127.0.0.1:%%PORT_HTTP%% backlog=4096;
        location ~ ^/users/([^/]+)/following/([^/]+)\$ { feed_follow \$1 \$2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)\$ { feed_mute \$1 \$2; }
        location ~ ^/users/([^/]+)/seen\$ { feed_seen \$1; }
        location ~ ^/users/([^/]+)/hidden/([^/]+)\$ { feed_hide \$1 \$2; }
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)\$ {
            feed_user_post \$1 \$2;
        }
        location ~ ^/users/([^/]+)/timeline\$ { feed_timeline \$1; }
        location ~ ^/users/([^/]+)/timeline/stream\$ {
            feed_timeline_stream \$1;
        }
        location ~ ^/users/([^/]+)/timeline/marker\$ {
            feed_timeline_marker \$1;
        }
        location ~ ^/users/([^/]+)/timeline/unread\$ {
            feed_timeline_unread \$1;
        }
        location ~ ^/c/users/([^/]+)/timeline\$ {
            feed_timeline \$1;
            add_header X-Feed-Cache \$feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location /static/ { alias $dir/static/; default_type application/json; }
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
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
    my $out = `@cmd 'http://127.0.0.1:${\ $t->port('http')}$url' 2>&1`;

    my %r = (rps => 0, out => $out);
    $r{rps} = $1 if $out =~ /Requests\/sec:\s+([\d.]+)/;
    $r{requests} = $1 if $out =~ /(\d+) requests in/;
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

        my @rows;
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

            # the module's reads answered with no Redis command (local
            # hits, feed_cache_tracking on, the default)
            my $s0 = status_json();
            my $m = wrk($url);
            my $s1 = status_json();
            $m->{local} = ($s1->{local_pages}{answered_without_redis} // 0)
                - ($s0->{local_pages}{answered_without_redis} // 0);
            my $l = wrk("/lua/reader/timeline?limit=$limit");
            my $ls = wrk("/luas/reader/timeline?limit=$limit");
            my $s = wrk("/static/t$limit.json");

            push @rows, [ "hit, limit $limit, $mode", length($mine), $m, $l,
                          $s, $ls, $mine ];
        }

        # the same reads with one round trip each (feed_cache_tracking
        # off: the read script checks the worker's copy), the "before"
        start_nginx(mode => $mode, extra => 'feed_cache_tracking off;');
        for my $row (@rows) {
            my ($limit) = $row->[0] =~ /limit (\d+)/;
            my $url = "/users/reader/timeline?limit=$limit";
            die "tracking off: the module's answer differs\n"
                unless body($url) eq pop @$row;
            body($url) for 1 .. 2;
            push @$row, wrk($url);
            push @table, $row;
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
        # every post pushed: with the default feed_pull_threshold, an
        # author of 10,000 followers or more would be turning to pull
        # (part 6 measures that)
        start_nginx(mode => 'link', mongo => 'mongofan',
            mongo_timeout => '60s', pull => 'off');

        # every follower has a cached timeline

        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
            . $t->port('redis')) or die "redis: $!\n";
        my $req = '';
        for my $i (1 .. $f) {
            my $k = "feed:tl:{f$i}";
            $req .= "*3\r\n\$5\r\nRPUSH\r\n\$" . length($k) . "\r\n$k\r\n"
                . "\$12\r\n" . ("\0" x 12) . "\r\n";
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
                    $seen{$i} = time if defined $r
                        && unpack('H24', substr($r, 0, 12)) eq $id;
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
            ? $t->redis('MEMORY', 'USAGE', 'feed:p:' . substr($first, 0, 12))
            : 0;

        # an active user's every key after the usual reads: first pages
        # of 20 and 100 (kept, page stored after the answer), a deep page
        body('/users/mem/timeline?limit=20') for 1 .. 2;
        my $p100 = FeedTest::json_decode(body('/users/mem/timeline?limit=100'));
        body('/users/mem/timeline?limit=100');
        my $last = $p100->{items}[-1]{id};
        body("/users/mem/timeline?limit=20&max_id=$last") if $last;
        sleep 0.5;
        my %keys;
        my $cursor = 0;
        do {
            my $r = $t->redis('SCAN', $cursor, 'MATCH', '*{mem}*',
                'COUNT', 1000);
            $cursor = $r->[0];
            $keys{$_} = $t->redis('MEMORY', 'USAGE', $_, 'SAMPLES', '0')
                for @{ $r->[1] };
        } while ($cursor);
        my $all = 0;
        $all += $_ for values %keys;

        $result{"mem$mode"} = { entries => $len, bytes => $bytes,
            per => $bytes / $len, post => $post, user => $all,
            pages => $keys{'feed:tlp:{mem}'} // 0,
            nkeys => scalar(keys %keys) };
    }
}

# --------------------------------------------------- 6. pull authors --

# Redis INFO commandstats: { command => [calls, usec] }
sub redis_cmdstats {
    my %c;
    my $s = $t->redis('INFO', 'commandstats');
    $c{$1} = [$2, $3] while $s =~ /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/mg;
    return \%c;
}

# The stand-in's counts of documents sent back (find, getMore, aggregate,
# findAndModify) and matched by count, per namespace (its serverStatus)
sub mongo_returned {
    my ($name) = @_;
    my $py = <<'PY';
import sys, json
from pymongo import MongoClient
s = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000,
                socketTimeoutMS=600000).admin.command('serverStatus')
print(json.dumps({k: {ns: int(n) for ns, n in v.items()}
                  for k, v in s['standin'].items()}))
PY
    my $uri = $t->mongo_uri($name);
    open my $fh, '-|', $FeedTest::PYTHON, '-c', $py, $uri
        or die "serverStatus: $!\n";
    local $/;
    my $out = <$fh>;
    close $fh or die "serverStatus failed\n";
    return json_decode($out);
}

# the stream entries all acknowledged by the consumer group: every post so
# far fanned out (XINFO GROUPS and STREAM: commands the module never sends,
# so that they can be told apart in commandstats)
sub fanout_idle {
    my $st = eval { $t->redis('XINFO', 'STREAM', 'feed:posts') } or return 0;
    my %st = @$st;
    my $gs = $t->redis('XINFO', 'GROUPS', 'feed:posts');
    for my $g (@$gs) {
        my %g = @$g;
        return 0 if $g{pending} || $g{'last-delivered-id'} ne
            $st{'last-generated-id'};
    }
    return 1;
}

sub wait_fanout {
    my ($timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        return 1 if fanout_idle();
        sleep 0.002;
    }
    return 0;
}

sub status_json {
    my $j = $t->get('/status', timeout => 600)->{json};
    die "no /status\n" unless $j;
    return $j;
}

# One post by $author, from the POST to its stream entry acknowledged:
# the Redis commands and time of that window (commandstats deltas, the
# bench's own INFO and XINFO taken out), the stand-in's documents read,
# MongoDB commands, deliveries

# the commands the module's scripts run: counted by commandstats as well,
# their time inside their EVALSHA's
my %IN_SCRIPTS;
for my $f (glob("$ROOT/ngx_feed_module/scripts/*.lua"),
    glob("$ROOT/ngx_feed_module/scripts/lib/*.lua"))
{
    open my $fh, '<', $f or next;
    local $/;
    my $lua = <$fh>;
    $IN_SCRIPTS{lc $1} = 1 while $lua =~ /redis\.p?call\(\s*['"](\w+)/g;
}

sub post_cost {
    my ($author, $body, $timeout) = @_;

    wait_fanout(600) or die "fanout busy before $author posts\n";
    my $st0 = status_json();
    my $m0 = mongo_returned('mongopull');
    my @log0 = $t->mongo_commands('mongopull');
    my $r0 = redis_cmdstats();

    my $t0 = time;
    my $id = post($author, $body);
    my $t201 = time;
    wait_fanout($timeout) or die "the fanout of ${author}'s post did not end\n";
    my $t1 = time;

    my $r1 = redis_cmdstats();
    my $m1 = mongo_returned('mongopull');
    my @log1 = $t->mongo_commands('mongopull');
    my $st1 = status_json();

    my (%cmds, $calls, $inner, $usec);
    for my $c (keys %$r1) {
        next if $c eq 'info' || $c =~ /^xinfo\|(?:stream|groups)$/;
        my ($n, $u) = ($r1->{$c}[0] - ($r0->{$c}[0] // 0),
                       $r1->{$c}[1] - ($r0->{$c}[1] // 0));
        next unless $n;
        $cmds{$c} = [$n, $u];
        if ($IN_SCRIPTS{ (split /\|/, $c)[0] }) {
            $inner += $n;
        } else {
            $calls += $n;
            $usec += $u;
        }
    }

    my (%docs, $docs);
    for my $k ('returned', 'counted') {
        for my $ns (keys %{ $m1->{$k} }) {
            my $n = $m1->{$k}{$ns} - ($m0->{$k}{$ns} // 0);
            next unless $n;
            $docs{"$ns" . ($k eq 'counted' ? ' (count)' : '')} = $n;
            $docs += $n;
        }
    }

    my %mcmds;
    for my $c (@log1[scalar(@log0) .. $#log1]) {
        next if $c->{cmd} =~ /^(?:hello|isMaster|ismaster|ping|serverStatus|endSessions)$/;
        $mcmds{$c->{cmd} . ($c->{coll} ? " $c->{coll}" : '')}++;
    }

    my $d = sub {
        my ($part, $k) = @_;
        return ($st1->{$part}{$k} // 0) - ($st0->{$part}{$k} // 0);
    };

    return {
        id => $id, post_ms => ($t201 - $t0) * 1000,
        done_s => $t1 - $t0, calls => $calls // 0, usec => $usec // 0,
        inner => $inner // 0,
        cmds => \%cmds, docs => $docs // 0, docs_by => \%docs,
        mongo => \%mcmds,
        deliveries => $d->('fanout', 'deliveries'),
        listed => $d->('pull', 'listed'), to_pull => $d->('pull', 'to_pull'),
    };
}

# GETs of the users' first pages, pipelined over a few connections, round
# after round, until each answer holds $id: { user => seconds from $since }

sub poll_visible {
    my ($users, $id, $since, $deadline) = @_;
    my $nconn = 8;
    my %seen;

    while (time < $deadline) {
        my @left = grep { !exists $seen{$_} } @$users or last;
        my @groups;
        push @{ $groups[$_ % $nconn] }, $left[$_] for 0 .. $#left;

        # new connections each round: keepalive_requests ends old ones
        my @conns;
        for my $g (grep { $_ } @groups) {
            my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
                . $t->port('http')) or die "connect: $!\n";
            $s->syswrite(join '', map {
                "GET /users/$_/timeline HTTP/1.1\r\nHost: localhost\r\n\r\n"
            } @$g);
            push @conns, { sock => $s, buf => '', users => $g };
        }

        for my $c (@conns) {
            for my $u (@{ $c->{users} }) {
                my ($status, $body) = read_response($c);
                die "GET /users/$u/timeline: $status\n" unless $status == 200;
                $seen{$u} = time - $since if index($body, $id) >= 0;
            }
            close $c->{sock};
        }
    }

    return \%seen;
}

sub read_response {
    my ($c) = @_;

    while (1) {
        my $h = index($c->{buf}, "\r\n\r\n");
        if ($h >= 0) {
            my $head = substr($c->{buf}, 0, $h);
            my ($status) = $head =~ m{^HTTP/1\.1 (\d+)};
            my $end;
            if ($head =~ /^content-length:\s*(\d+)/mi) {
                $end = $h + 4 + $1 if length($c->{buf}) >= $h + 4 + $1;
            } elsif ($head =~ /^transfer-encoding:\s*chunked/mi) {
                my $z = index($c->{buf}, "\r\n0\r\n\r\n", $h);
                $end = $z + 7 if $z >= 0;
            } else {
                die "a response with no length\n";
            }
            if (defined $end) {
                my $body = substr($c->{buf}, $h + 4, $end - $h - 4);
                substr($c->{buf}, 0, $end, '');
                return ($status, $body);
            }
        }
        my $n = sysread($c->{sock}, $c->{buf}, 65536, length $c->{buf});
        die "connection closed\n" unless $n;
    }
}

sub pct {
    my ($p, @v) = @_;
    return undef unless @v;
    @v = sort { $a <=> $b } @v;
    return $v[ int(@v * $p / 100) >= @v ? $#v : int(@v * $p / 100) ];
}

if (phase(6)) {

    my $t6 = time;

    # -- 6b. the hot path of readers following 0, 5 and 20 pull authors --
    #
    # A stand-in of its own, with a threshold of $hot_t: what a read costs
    # depends on the pull authors' lists, not on how many follow them, and
    # the follows stay real (through the API) and quick to make.

    my $hot_t = $QUICK ? 5 : 50;
    my @push = map { "b$_" } 1 .. 5;
    my @pull = map { "q$_" } 1 .. 20;
    my %follows = (r0 => [@push], r5 => [@push, @pull[0 .. 4]],
                   r20 => [@push, @pull]);
    my @readers = qw(r0 r5 r20);

    $t->stop;
    $t->redis('FLUSHALL');
    $t->start_mongo(name => 'mongohot', args => ['--no-unique']);
    start_nginx(mode => 'link', mongo => 'mongohot', pull => $hot_t);

    for my $r (@readers) {
        follow($r, $_) for @{ $follows{$r} };
    }
    for my $x (1 .. $hot_t) {
        follow("x$x", $_) for @pull;
    }

    # the readers' timelines cached first, then posts arrive: five ordinary
    # authors forty each, the twenty pull authors one in four rounds

    my (%by, $round);
    my $rounds = $QUICK ? 12 : 40;
    for my $round (1 .. $rounds) {
        for my $a (@push, $round % 4 == 2 ? @pull : ()) {
            push @{ $by{$a} }, post($a, "post $round of $a: an ordinary post "
                . "of some words, a link or two, and a few more words");
        }
        if ($round == 1) {
            body("/users/$_/timeline") for @readers;
        }
    }
    wait_fanout(60) or die "fanout did not end\n";

    # each first page is what pushing everything would give: the newest
    # posts of everyone followed

    my %page;
    for my $r (@readers) {
        my $want = join ',', (sort { $b cmp $a }
            map { @{ $by{$_} } } @{ $follows{$r} })[0 .. 19];
        my $j = json_decode(body("/users/$r/timeline?limit=20"));
        my $got = join ',', map { $_->{id} } @{ $j->{items} };
        die "${r}'s first page is not the newest 20 posts of those followed:\n"
            . " want $want\n got  $got\n" unless $got eq $want;
        $page{$r} = { first => "/users/$r/timeline?limit=20",
            deep => "/users/$r/timeline?limit=20&max_id=$j->{next}" };
        $result{hot}{bytes}{$_}{$r} = length(body($page{$r}{$_}))
            for qw(first deep);
    }

    for my $which (qw(first deep)) {
        for my $n (1 .. 2) {
            for my $r (@readers) {
                my $s0 = status_json();
                my $c0 = redis_cmdstats();
                my $w = wrk($page{$r}{$which});
                my $c1 = redis_cmdstats();
                my $s1 = status_json();
                push @{ $result{hot}{$which}{$r} }, {
                    %$w, map({ $_ => ($s1->{pull}{$_} // 0)
                                     - ($s0->{pull}{$_} // 0) }
                        qw(reads pulled merge_us)),
                    copies => ($s1->{local_pages}{answered} // 0)
                        - ($s0->{local_pages}{answered} // 0),
                    script_us => ($c1->{evalsha}[1] // 0)
                        - ($c0->{evalsha}[1] // 0) };
            }
        }
    }
    $result{hot}{threshold} = $hot_t;

    $t->stop;
    $t->stop_mongo('mongohot');
    $t->redis('FLUSHALL');

    # -- 6a. the cost of one post; 6c. post -> visible --
    #
    # Real follow documents and counts: f1..fN follow each author sN (N
    # followers), seeded into the stand-in's data file.  f1..f$nvis have
    # cached timelines built by reads (they follow "pa" too, so that their
    # timelines are not empty) and poll for the posts; every other follower
    # has a cached timeline made in Redis directly, as part 4 does.

    my $nvis = $QUICK ? 20 : 200;
    my $pull_t = $QUICK ? 100 : 10_000;
    my $max = max(@PULL);
    my $db = "$dir/mongopull-db/standin-data.bson";

    mkdir "$dir/mongopull-db";
    system("$dir/seed", $db, 'feed', 'pa', $nvis) == 0
        && system("$dir/seed", '-p', $db, 'feed', 'pa', 3) == 0
        or die "seed failed\n";
    $t->start_mongo(name => 'mongopull', args => ['--no-unique']);
    start_nginx(mode => 'link', mongo => 'mongopull', pull => $pull_t);
    for my $i (1 .. $nvis) {
        my $j = json_decode(body("/users/f$i/timeline"));
        die "f${i}'s timeline is empty\n" unless @{ $j->{items} };
    }

    $t->stop;
    $t->stop_mongo('mongopull');
    my $ts = time;
    for my $n (@PULL) {
        system("$dir/seed", $db, 'feed', "s$n", $n) == 0
            or die "seed failed\n";
    }
    $t->start_mongo(name => 'mongopull', args => ['--no-unique'],
        wait => 900);
    $result{pull}{load_s} = time - $ts;
    $result{pull}{docs} = sum(@PULL) + $nvis;

    {
        my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
            . $t->port('redis')) or die "redis: $!\n";
        for (my $i = $nvis + 1; $i <= $max; $i += 10_000) {
            my ($req, $n) = ('', 0);
            for my $u ($i .. min($i + 9_999, $max)) {
                my $k = "feed:tl:{f$u}";
                $req .= "*3\r\n\$5\r\nRPUSH\r\n\$" . length($k) . "\r\n$k\r\n"
                    . "\$12\r\n" . ("\0" x 12) . "\r\n";
                $n++;
            }
            print $s $req;
            FeedTest::_resp_read($s) for 1 .. $n;
        }
    }

    start_nginx(mode => 'link', mongo => 'mongopull', pull => $pull_t,
        mongo_timeout => '600s');

    for my $n (@PULL) {
        for my $k (1 .. 2) {
            my $c = post_cost("s$n", "post $k of s$n", 900);
            $c->{n} = $n;
            $c->{k} = $k;
            $c->{mode} = $n < $pull_t ? 'push'
                : $k == 1 ? 'switch (pushed, registers)' : 'pull';
            push @{ $result{pull}{cost} }, $c;
        }
    }

    # post -> visible: the first pages of f1..f$nvis polled from the 201 on

    my @users = map { "f$_" } 1 .. $nvis;
    my (@delays, $missed);
    my $nposts = $QUICK ? 2 : 5;
    for my $k (1 .. $nposts) {
        wait_fanout(900) or die "fanout busy\n";
        my $id = post("s$max", "visible $k");
        my $t201 = time;
        my $seen = poll_visible(\@users, $id, $t201, $t201 + 5);
        push @delays, map { $_ * 1000 } values %$seen;
        $missed += @users - keys %$seen;
    }
    $result{pull}{vis} = { n => scalar(@delays), missed => $missed,
        posts => $nposts, users => $nvis,
        p50 => pct(50, @delays), p99 => pct(99, @delays),
        max => max(@delays) };
    $result{pull}{status} = status_json()->{pull};
    $result{pull}{threshold} = $pull_t;

    $t->stop;
    # a million documents would take the stand-in a minute to save
    $t->stop_proc('mongopull', 'KILL');
    $t->redis('FLUSHALL');
    $result{pull_s} = time - $t6;
}

# ------------------------------------------------- 7. Redis Cluster --

if (phase(7)) {

    # The same hits (embed mode, a cluster's) with a single Redis and with
    # a 3-master cluster on the same machine, alternately, so that the
    # machine's drift falls on both alike: what routing costs.  Then the
    # same post fanned out to the same followers on both, and a master
    # killed under reads.
    my $c = FeedCluster->start($t, masters => 3, replicas => 0);
    my $seeds = join ' ', map { '127.0.0.1:' . $c->port($_) } $c->masters;
    my $rounds = $QUICK ? 1 : 2;
    my $t7 = time;

    for my $round (1 .. $rounds) {
        for my $topo (qw(single cluster)) {
            start_nginx(mode => 'embed',
                $topo eq 'cluster' ? (redis => "$seeds cluster") : ());
            $t->wait_for(5, sub {
                my $j = $t->get('/status')->{json} or return 0;
                $topo eq 'single' || ($j->{redis}{cluster}{masters_up} // 0)
                    == 3;
            }) or die "nginx does not see the cluster\n";

            for my $limit (20, 50) {
                my $url = "/users/reader/timeline?limit=$limit";
                body($url) for 1 .. 2;
                push @{ $result{cluster}{$limit}{$topo} }, wrk($url);
            }
        }
    }

    $result{cluster}{master} = $c->master_of('feed:tl:{reader}');

    cluster_pull($c, "$seeds cluster", $rounds);
    cluster_fanout($c, "$seeds cluster", $rounds);
    cluster_failover($c, "$seeds cluster");

    $t->stop;
    $t->stop_mongo('mongoclu');
    $t->stop_proc($_, 'TERM') for $c->names, 'c9';
    $result{cluster}{s} = time - $t7;
}

# a key's hash slot, as Redis computes it (CRC16 XMODEM of its hash tag)
sub key_slot {
    my ($k) = @_;
    $k = $1 if $k =~ /\{([^}]+)\}/;
    my $crc = 0;
    for my $b (unpack 'C*', $k) {
        $crc ^= $b << 8;
        $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff
                             : ($crc << 1) & 0xffff for 1 .. 8;
    }
    return $crc & 16383;
}

# a cached timeline (an end marker) for each of f1..fN: on the port of
# each one's node, pipelined
sub cache_lists {
    my ($n, $port_of) = @_;
    my (%req, %count);
    for my $i (1 .. $n) {
        my $k = "feed:tl:{f$i}";
        my $port = $port_of->($k);
        $req{$port} .= "*3\r\n\$5\r\nRPUSH\r\n\$" . length($k)
            . "\r\n$k\r\n\$12\r\n" . ("\0" x 12) . "\r\n";
        $count{$port}++;
    }
    for my $port (keys %req) {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port")
            or die "redis $port: $!\n";
        print $s $req{$port};
        FeedTest::_resp_read($s) for 1 .. $count{$port};
    }
}

# first pages of a reader of 5 pushed authors (p0) and of one who follows
# 5 pull authors too (p5), on a single Redis (where the pull watch vouches
# for the worker's copies) and on the cluster (where the read script
# checks the pull authors' versions): req/s of each
sub cluster_pull {
    my ($c, $seeds, $rounds) = @_;
    my @push = map { "pb$_" } 1 .. 5;
    my @pull = map { "pq$_" } 1 .. 5;
    my %follows = (p0 => [@push], p5 => [@push, @pull]);

    $t->stop;
    $t->redis('FLUSHALL');
    $c->cmd($_, 'FLUSHALL') for $c->masters;
    $t->start_mongo(name => 'mongopull', args => ['--no-unique']);
    start_nginx(mode => 'embed', mongo => 'mongopull', pull => 5);

    for my $r (keys %follows) {
        follow($r, $_) for @{ $follows{$r} };
    }
    for my $x (1 .. 5) {
        follow("px$x", $_) for @pull;
    }
    for my $round (1 .. 8) {
        post($_, "post $round of $_: an ordinary post of some words, a "
            . 'link or two, and a few more words') for @push, @pull;
        body("/users/$_/timeline") for $round == 1 ? keys %follows : ();
    }
    wait_fanout(60) or die "fanout did not end\n";

    for my $round (1 .. $rounds) {
        for my $topo (qw(single cluster)) {
            start_nginx(mode => 'embed', mongo => 'mongopull', pull => 5,
                $topo eq 'cluster' ? (redis => $seeds) : ());
            $t->wait_for(5, sub {
                my $j = $t->get('/status')->{json} or return 0;
                $topo eq 'single' || ($j->{redis}{cluster}{masters_up} // 0)
                    == 3;
            }) or die "nginx does not see the cluster\n";

            for my $r (sort keys %follows) {
                my $url = "/users/$r/timeline?limit=20";
                body($url) for 1 .. 3;
                my $n = @{ json_decode(body($url))->{items} // [] };
                die "$r: $n posts on the first page on the $topo\n"
                    unless $n == 20;
                push @{ $result{cluster}{pull}{$r}{$topo} }, wrk($url);
            }
        }
    }
    $t->stop_mongo('mongopull');
}

# one post of starc to its N followers, each with a cached timeline, on a
# single Redis and on the cluster alternately: deliveries/s as the module
# times them (first batch sent to last reply)
sub cluster_fanout {
    my ($c, $seeds, $rounds) = @_;
    my $n = $QUICK ? 500 : 20_000;

    $t->stop;
    $t->start_mongo(name => 'mongoclu', args => ['--no-unique']);
    $t->stop_mongo('mongoclu');
    system("$dir/seed", "$dir/mongoclu-db/standin-data.bson", 'feed', 'starc',
        $n) == 0 or die "seed failed\n";
    $t->start_mongo(name => 'mongoclu', args => ['--no-unique']);

    my %slots;
    for my $r (@{ $c->cmd(($c->masters)[0], 'CLUSTER', 'SLOTS') }) {
        $slots{$_} = $r->[2][1] for $r->[0] .. $r->[1];
    }
    cache_lists($n, sub { $t->port('redis') });
    cache_lists($n, sub { $slots{ key_slot($_[0]) } });

    for my $round (1 .. $rounds) {
        for my $topo (qw(single cluster)) {
            start_nginx(mode => 'embed', mongo => 'mongoclu',
                mongo_timeout => '60s', pull => 'off',
                $topo eq 'cluster' ? (redis => $seeds) : ());
            $t->wait_for(5, sub {
                my $j = $t->get('/status')->{json} or return 0;
                $topo eq 'single' || ($j->{redis}{cluster}{masters_up} // 0)
                    == 3;
            }) or die "nginx does not see the cluster\n";

            my $d0 = $t->get('/status', timeout => 60)->{json}{fanout}
                {deliveries} // 0;
            post('starc', "news for $n followers, $topo $round");
            my ($fs, $end) = ({}, time + 120);
            while (time < $end) {
                $fs = $t->get('/status', timeout => 60)->{json}{fanout} || {};
                last if ($fs->{deliveries} // 0) - $d0 >= $n;
                sleep 0.05;
            }
            my $ms = $fs->{last_post_ms} || 1;
            push @{ $result{cluster}{fanout}{$topo} }, {
                n => ($fs->{deliveries} // 0) - $d0,
                ms => $ms,
                rate => ($fs->{last_post_deliveries} // 0) / ($ms / 1000) };
        }
    }
    $result{cluster}{fanout}{followers} = $n;
}

# a replica for the master of f1's timeline, then that master killed while
# f1 reads its timeline over and over: the time without a hit
sub cluster_failover {
    my ($c, $seeds) = @_;

    my $victim = $c->master_of('feed:tl:{f1}');
    my $port = $c->start_node('c9');
    my $out = `redis-cli --cluster add-node 127.0.0.1:$port 127.0.0.1:${\
        $c->port($victim)} --cluster-slave --cluster-master-id ${\
        $c->node_id($victim)} 2>&1`;
    die "add-node failed:\n$out" if $?;
    $t->wait_for(20, sub {
        ($c->cmd('c9', 'INFO', 'replication') // '')
            =~ /master_link_status:up/ }) or die "the replica is not in sync\n";

    start_nginx(mode => 'embed', mongo => 'mongoclu', pull => 'off',
        redis => $seeds);
    $t->wait_for(5, sub {
        (($t->get('/status')->{json} || {})->{redis}{cluster}{masters_up}
            // 0) == 3 }) or die "nginx does not see the cluster\n";
    $t->get('/c/users/f1/timeline') for 1 .. 2;

    my ($killed, $last_hit, $first_hit, %seen);
    my $end = time + 30;
    while (time < $end) {
        if (!$killed && (time - $end + 30) > 1) {
            $t->stop_proc($victim, 'KILL');
            $killed = time;
        }
        my $r = $t->get('/c/users/f1/timeline', timeout => 5);
        my $cache = $r->{status} == 200 ? body_cache($r) : $r->{status};
        if ($killed) {
            $seen{$cache}++;
            if ($cache eq 'HIT') { $first_hit = time; last }
        } elsif ($cache eq 'HIT') {
            $last_hit = time;
        }
        sleep 0.01;
    }
    $result{cluster}{failover} = { gap => $first_hit ? $first_hit - $last_hit
        : undef, after_kill => $first_hit ? $first_hit - $killed : undef,
        seen => \%seen, victim => $victim };
}

# X-Feed-Cache of a timeline's answer ('' without the header)
sub body_cache { $_[0]{headers}{'x-feed-cache'} // '' }

# ---------------------------------------- 8. timelines kept in MongoDB --

if (phase(8)) {
    require "$FindBin::Bin/models.pl";
    $result{models} = bench_models($t, $dir, $QUICK);
}

# --------------------------------------------------- 9. read filters --

if (phase(9)) {
    require "$FindBin::Bin/filters.pl";
    $result{filters} = bench_filters($t, \@authors, @authors * $per, $QUICK);
}

# ------------------------------------------- 10. read state: unseen --

if (phase(10)) {
    require "$FindBin::Bin/seen.pl";
    $result{seen} = bench_seen($t, \@authors, @authors * $per, $QUICK);
}

# ---------------------------------------------- 11. read state: unread --

if (phase(11)) {
    require "$FindBin::Bin/read_state.pl";
    $result{read_state} = bench_read_state($t, \@authors, @authors * $per,
                                           $QUICK);
}

# ------------------------------------------------------ 12. local hits --

if (phase(12)) {
    require "$FindBin::Bin/local_hits.pl";
    $result{local_hits} = bench_local_hits($t, \@authors, @authors * $per,
        $QUICK, { conns => $CONNS, dur => $DUR });
}

# ---------------------------------------------------- 13. live timelines --

if (phase(13)) {
    require "$FindBin::Bin/stream.pl";
    my $n = $ENV{FEED_BENCH_STREAMS} || ($QUICK ? 1000 : 10_000);

    # star's followers in a stand-in of their own, as part 4 does

    $t->stop;
    $t->start_mongo(name => 'mongostr', args => ['--no-unique']);
    $t->stop_mongo('mongostr');
    system("$dir/seed", "$dir/mongostr-db/standin-data.bson", 'feed', 'star',
        $n) == 0 or die "seed failed\n";
    $t->start_mongo(name => 'mongostr', args => ['--no-unique']);
    my %nginx = (mode => 'link', mongo => 'mongostr',
        mongo_timeout => '60s', pull => 'off');
    start_nginx(%nginx);

    $result{stream} = bench_stream($t, $dir, $n,
        { conns => $CONNS, dur => $DUR, nginx => \%nginx });

    $t->redis('FLUSHALL');
    $t->stop;
    $t->stop_mongo('mongostr');
}

# ------------------------------------- 14. misses of many authors --

if (phase(14)) {
    require "$FindBin::Bin/misses_many.pl";
    $result{misses_many} = bench_misses_many($t, $QUICK);
}

# nginx stops gracefully, with nothing alarming in its log over the run

my $stopped = $t->stop;
$t->cleanup;
my @bad = ($t->bad_log_lines, @{ $result{local_hits}{bad} || [] });
my @sanitizer = ($t->sanitizer_reports,
    @{ $result{local_hits}{sanitizer} || [] });

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
    # run alone, the part says when and how (the file's header is of the
    # last whole run)
    my $cmd = "FEED_BENCH_PHASES=" . ($ENV{FEED_BENCH_PHASES} // '')
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, "## 1. Hot path: a timeline read from the cache", '',
        ($ALL ? '' : "Measured $date by `$cmd`, wrk -t1 -c$CONNS, $DUR s "
            . 'a run. ')
        . "Requests/s and latency (ms) of the same page, answered by: the "
        . "module; "
        . "the OpenResty-style peer (`bench/peer.lua`: lua-resty-redis with "
        . "keepalive, plain commands pipelined, the logic in Lua, on the same "
        . "Redis data); nginx serving the same bytes from a file; and, for "
        . "reference, a Lua handler calling the module's own read script "
        . "(`bench/peer_script.lua`: the same Redis work as the module, so "
        . "only "
        . "the nginx side differs). Every answer was checked byte for byte "
        . "against the module's. The module runs with local hits "
        . "(`feed_cache_tracking on`, the default: a worker answers its "
        . "copy of a first page with no Redis command while Redis tracks "
        . "its keys; \"without Redis\": the share of its reads answered so, "
        . "`local_pages.answered_without_redis` in `feed_status`), then "
        . "with `feed_cache_tracking off` (one round trip a read, the "
        . "script checking the copy: \"tracking off\"), in the same "
        . "pass; part 12 has their Redis cost.", '',
        '| read | bytes | module req/s | p50 | p99 | without Redis '
        . '| tracking off req/s | p99 | Lua req/s | p50 | p99 '
        . '| static req/s | **module/Lua** | **module/static** '
        . '| **tracking off/static** | Lua+script req/s '
        . '| module/Lua+script |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|';

    my $low;
    for my $row (@table) {
        my ($name, $bytes, $m, $l, $s, $ls, $off) = @$row;
        my $ratio = $s->{rps} ? $m->{rps} / $s->{rps} : 0;
        $low = $ratio if !defined $low || $ratio < $low;
        push @out, sprintf('| %s | %d | %.0f | %s | %s | %.0f%% | %.0f | %s '
            . '| %.0f | %s | %s | %.0f '
            . '| **%.2f** | **%.2f** | **%.2f** | %.0f | %.2f |', $name,
            $bytes, $m->{rps}, fmt_ms($m->{p50}), fmt_ms($m->{p99}),
            100 * min(1, ($m->{local} // 0) / ($m->{requests} || 1)),
            $off->{rps}, fmt_ms($off->{p99}),
            $l->{rps}, fmt_ms($l->{p50}), fmt_ms($l->{p99}), $s->{rps},
            $l->{rps} ? $m->{rps} / $l->{rps} : 0, $ratio,
            $s->{rps} ? $off->{rps} / $s->{rps} : 0,
            $ls->{rps}, $ls->{rps} ? $m->{rps} / $ls->{rps} : 0);
    }

    push @out, '',
        'Targets: module ≥ 2.0× the Lua peer, ≥ 0.6× static; with local '
        . 'hits ≥ 1.0× static (issue 30): '
        . (($low // 0) >= 1.0 ? '**met**' : '**not met**')
        . sprintf(' (%.2f at the lowest).', $low // 0), '';
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
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, "## 5. Memory", '',
        ($ALL ? '' : "Measured $date by `$cmd`. ")
        . '`MEMORY USAGE` of a full cached timeline, divided by its entries; '
        . 'then of every key of its user (`SCAN` of `*{mem}*`) once first '
        . 'pages of 20 and 100 and a deep page were read: the list, its '
        . 'version, filters, the kept first pages (`feed:tlp`).', '',
        '| mode | entries | list bytes | bytes per entry | post copy (link) '
        . '| the user\'s keys | their bytes | of which kept pages '
        . '| × the list |',
        '|---|---|---|---|---|---|---|---|---|';

    for my $mode (qw(link embed)) {
        my $r = $result{"mem$mode"};
        push @out, sprintf('| %s | %d | %d | **%.1f** | %s | %d | %d | %d '
            . '| **%.2f×** |', $mode,
            $r->{entries}, $r->{bytes}, $r->{per},
            $mode eq 'link' ? "$r->{post} B once per post" : 'in the entry',
            $r->{nkeys}, $r->{user}, $r->{pages},
            $r->{user} / ($r->{bytes} || 1));
    }

    push @out, '', 'Targets: ≤ 64 B per entry in link mode (issue 4); '
        . '≤ 16 B per entry and a user\'s keys ≤ 1.1× the list (issue 33).',
        '';
}

if (phase(6)) {
    my $pr = $result{pull};
    my $hot = $result{hot};
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '')
        . ($ENV{FEED_BENCH_PULL} ? " FEED_BENCH_PULL=$ENV{FEED_BENCH_PULL}"
            : '') . ' make bench';

    push @out, "## 6. Pull authors", '',
        "Measured $date by `$cmd` (this part: "
        . sprintf('%.0f', $result{pull_s} // 0) . ' s).', '',
        "### Cost of one post", '',
        sprintf('`feed_pull_threshold %d`%s. Author sN has N '
            . 'followers: real follow documents f1..fN in the stand-in and a '
            . 'follow_counts count of N (%d documents, seeded into its data '
            . 'file: loaded in %.0f s), and every follower has a cached '
            . 'timeline. Each author posts twice; for the authors at or above '
            . 'the threshold the first post is the switch (still pushed, it '
            . 'registers the author with the cached followers), the second is '
            . 'pulled. The window runs from the POST to its stream entry '
            . 'acknowledged. Redis: `INFO commandstats` deltas (calls, usec) '
            . 'over the window, the bench\'s own `INFO` and `XINFO` left out '
            . '(the consumer\'s idle `XREADGROUP ... BLOCK` loop is in them): '
            . '"Redis calls" are the commands nginx sent, "in scripts" those '
            . 'the scripts ran (commandstats counts them too; by name: a '
            . 'command the scripts use counts as theirs), "Redis time" the '
            . 'time of the commands nginx sent (an EVALSHA\'s includes what '
            . 'its script ran). '
            . 'MongoDB: documents the stand-in sent back (find, getMore, '
            . 'aggregate, findAndModify; its `serverStatus`), '
            . 'which with the module\'s indexes is also what MongoDB would '
            . 'read.', $pr->{threshold},
            $pr->{threshold} == 10_000 ? ' (the default)' : '',
            $pr->{docs}, $pr->{load_s}), '',
        '| followers | post | deliveries | **Redis calls** | in scripts '
        . '| **Redis time (µs)** | **MongoDB documents read** '
        . '| MongoDB commands | POST → acknowledged (s) '
        . '| Redis, by command (calls/µs) |',
        '|---|---|---|---|---|---|---|---|---|---|';

    for my $c (@{ $pr->{cost} }) {
        my @by = sort { $c->{cmds}{$b}[1] <=> $c->{cmds}{$a}[1] }
            keys %{ $c->{cmds} };
        push @out, sprintf('| %d | %d: %s | %d | **%d** | %d | **%d** '
            . '| **%d** (%s) | %s | %.3f | %s |', $c->{n}, $c->{k}, $c->{mode},
            $c->{deliveries}, $c->{calls}, $c->{inner}, $c->{usec},
            $c->{docs},
            join(', ', map { "$_ $c->{docs_by}{$_}" }
                sort keys %{ $c->{docs_by} }) || '-',
            join(', ', map { "$_ $c->{mongo}{$_}" }
                sort keys %{ $c->{mongo} }) || '-',
            $c->{done_s},
            join(', ', map { "$_ $c->{cmds}{$_}[0]/$c->{cmds}{$_}[1]" }
                @by));
    }

    push @out, '', 'Target: a pull author\'s post costs O(1), whatever '
        . 'the followers.', '';

    push @out, '### Hot path', '',
        sprintf('Requests/s of the same kind of page (limit 20) for readers '
            . 'who follow 5 ordinary authors and 0, 5 or 20 pull authors '
            . '(a stand-in of its own with `feed_pull_threshold %d`, so that '
            . 'the pull authors\' follows are made through the API: a read '
            . 'depends on the pull authors\' lists, not on their follower '
            . 'counts). Each page was checked to be the newest 20 posts of '
            . 'those followed. "first" is the first page (kept, and the '
            . 'worker\'s copy of it, checked by the read script), "deep" '
            . 'the page its '
            . '`next` points to (`max_id`). Two alternating rounds of '
            . 'wrk -t1 -c%d, %d s each; merged reads, pulled posts and merge '
            . 'time from `feed_status` ("pull"), per request, and the '
            . 'read script\'s Redis time per request (`EVALSHA` in '
            . '`INFO commandstats`); "copies": answered from the worker\'s '
            . 'own copy of the page (`local_pages`).',
            $hot->{threshold}, $CONNS, $DUR), '',
        '| page | pull authors | bytes | req/s (runs) | **mean req/s** '
        . '| **× 0 pull authors** | p50 | p99 | copies per request '
        . '| **script µs per request** | merged reads per request '
        . '| pulled per merged read | merge µs per merged read |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|---|';

    for my $which (qw(first deep)) {
        my $mean = sub {
            my @r = @{ $hot->{$which}{ $_[0] } };
            return sum(map { $_->{rps} } @r) / @r;
        };
        my $base = $mean->('r0');
        for my $r (qw(r0 r5 r20)) {
            my @runs = @{ $hot->{$which}{$r} };
            my $req = sum(map { $_->{requests} // 0 } @runs) || 1;
            my $reads = sum(map { $_->{reads} } @runs);
            push @out, sprintf('| %s | %s | %d | %s | **%.0f** | **%.2f** '
                . '| %s | %s | %.2f | **%.1f** | %.2f | %s | %s |', $which,
                substr($r, 1),
                $hot->{bytes}{$which}{$r}, join(', ', map { sprintf('%.0f', $_->{rps}) }
                    @runs), $mean->($r), $base ? $mean->($r) / $base : 0,
                fmt_ms(max(map { $_->{p50} // 0 } @runs)),
                fmt_ms(max(map { $_->{p99} // 0 } @runs)),
                sum(map { $_->{copies} } @runs) / $req,
                sum(map { $_->{script_us} } @runs) / $req, $reads / $req,
                $reads ? sprintf('%.1f', sum(map { $_->{pulled} } @runs)
                    / $reads) : '-',
                $reads ? sprintf('%.1f', sum(map { $_->{merge_us} } @runs)
                    / $reads) : '-');
        }
    }

    my $v = $pr->{vis};
    push @out, '', 'Target: ≥ 0.8× with 20 pull authors.', '',
        '### Post → visible', '',
        sprintf('%d followers of the %d-follower author (cached timelines, '
            . 'registered by the switch) read their first page over and over, '
            . 'pipelined on 8 connections, from the POST\'s 201 on, for %d '
            . 'posts: %d sightings, %d missed within 5 s. Time from the 201 to '
            . 'the first page holding the post: p50 **%s ms**, p99 **%s ms**, '
            . 'max %s ms (target ≤ 1 s).', $v->{users}, max(@PULL),
            $v->{posts}, $v->{n}, $v->{missed}, fmt_ms($v->{p50}),
            fmt_ms($v->{p99}), fmt_ms($v->{max})), '';

    my $ps = $pr->{status} || {};
    push @out, '`feed_status` "pull" at the end: '
        . join(', ', map { "$_ " . ($ps->{$_} // 'null') }
            qw(threshold authors listed reads pulled merge_us loads to_pull
               to_push)) . '.', '';
}

if (phase(7)) {
    my $cl = $result{cluster};
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, "## 7. Redis Cluster", '',
        "Measured $date by `$cmd`.", '',
        'Hits of the same page (embed mode, the only one a cluster takes), '
        . 'one nginx worker, with a single Redis and with a 3-master '
        . 'cluster (`feed_redis <3 seeds> cluster`, no replicas) on the same '
        . 'machine, the two alternately (' . scalar(@{ $cl->{20}{single} })
        . ' rounds). The reader\'s keys are on ' . $cl->{master}
        . '; every read runs one script there, which checks that '
        . 'node\'s copy of the deleted posts.', '',
        '| read | single req/s | cluster req/s | **cluster/single** '
        . '| p50 single / cluster | p99 single / cluster |',
        '|---|---|---|---|---|---|';

    for my $limit (20, 50) {
        my ($s, $k) = map { $cl->{$limit}{$_} } qw(single cluster);
        my $ms = sum(map { $_->{rps} } @$s) / @$s;
        my $mk = sum(map { $_->{rps} } @$k) / @$k;
        push @out, sprintf('| hit, limit %d | %s | %s | **%.2f** | %s / %s '
            . '| %s / %s |', $limit,
            join(', ', map { sprintf('%.0f', $_->{rps}) } @$s),
            join(', ', map { sprintf('%.0f', $_->{rps}) } @$k),
            $ms ? $mk / $ms : 0,
            fmt_ms(max(map { $_->{p50} // 0 } @$s)),
            fmt_ms(max(map { $_->{p50} // 0 } @$k)),
            fmt_ms(max(map { $_->{p99} // 0 } @$s)),
            fmt_ms(max(map { $_->{p99} // 0 } @$k)));
    }

    push @out, '', 'First pages (limit 20) of a reader of 5 pushed authors '
        . '(p0) and of one who follows 5 pull authors too (p5, '
        . '`feed_pull_threshold 5`), same machine, alternately. The '
        . 'worker vouches for its copy of p5\'s page while its watch heard '
        . 'no change of the 5 lists: on the cluster, the watch of the '
        . 'reader\'s master, where that master\'s copies of the lists '
        . 'publish their changes.', '',
        '| reader | single req/s | cluster req/s | **cluster/single** |',
        '|---|---|---|---|';
    for my $r (qw(p0 p5)) {
        my ($s, $k) = map { $cl->{pull}{$r}{$_} } qw(single cluster);
        next unless $s && $k;
        my $ms = sum(map { $_->{rps} } @$s) / @$s;
        my $mk = sum(map { $_->{rps} } @$k) / @$k;
        push @out, sprintf('| %s | %s | %s | **%.2f** |', $r,
            join(', ', map { sprintf('%.0f', $_->{rps}) } @$s),
            join(', ', map { sprintf('%.0f', $_->{rps}) } @$k),
            $ms ? $mk / $ms : 0);
    }

    my $fo = $cl->{fanout};
    push @out, '', "One post to $fo->{followers} followers, each with a "
        . 'cached timeline, on a single Redis and on the cluster, '
        . 'alternately: deliveries/s as the module times them (first batch '
        . 'sent to last reply, `feed_status` fanout `last_post_ms`), '
        . 'batches of 500 (of one node each on the cluster).', '',
        '| topology | deliveries | ms | deliveries/s |', '|---|---|---|---|';
    for my $topo (qw(single cluster)) {
        push @out, sprintf('| %s | %s | %s | %s |', $topo,
            join(', ', map { $_->{n} } @{ $fo->{$topo} }),
            join(', ', map { $_->{ms} } @{ $fo->{$topo} }),
            join(', ', map { sprintf('%.0f', $_->{rate}) } @{ $fo->{$topo} }));
    }
    my $mean = sub { my @r = @{ $fo->{$_[0]} }; sum(map { $_->{rate} } @r)
        / @r };
    push @out, '', sprintf('Cluster/single: **%.2f×**.',
        $mean->('single') ? $mean->('cluster') / $mean->('single') : 0);

    my $fv = $cl->{failover};
    push @out, '', sprintf('Failover: a replica added to %s (the master of '
        . 'f1\'s timeline), then %s killed (`SIGKILL`, '
        . '`cluster-node-timeout 1000`) while f1 reads its timeline every '
        . '10 ms: the first hit %s s after the kill, **%s s** without a hit '
        . '(answers meanwhile: %s).', $fv->{victim}, $fv->{victim},
        defined $fv->{after_kill} ? sprintf('%.2f', $fv->{after_kill}) : '-',
        defined $fv->{gap} ? sprintf('%.2f', $fv->{gap}) : 'never',
        join(', ', map { "$_ ×$fv->{seen}{$_}" } sort keys %{ $fv->{seen} }));

    push @out, '', 'Targets: hits ≥ 0.85× of the single Redis; this part '
        . sprintf('took %.0f s.', $cl->{s} // 0), '';
}

if (phase(8)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, models_report($result{models}, $cmd, $date);
}

if (phase(9)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, filters_report($result{filters}, $cmd, $date);
}

if (phase(10)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, seen_report($result{seen}, $cmd, $date);
}

if (phase(11)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, read_state_report($result{read_state}, $cmd, $date);
}

if (phase(12)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, local_hits_report($result{local_hits}, $cmd, $date);
}

if (phase(13)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, stream_report($result{stream}, $cmd, $date);
}

if (phase(14)) {
    my $cmd = $ALL ? 'make bench' : "FEED_BENCH_PHASES=$ENV{FEED_BENCH_PHASES}"
        . ($ENV{FEED_BENCH_WRITE} ? ' FEED_BENCH_WRITE=1' : '') . ' make bench';
    push @out, misses_many_report($result{misses_many}, $cmd, $date);
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

} elsif (!$QUICK && $ENV{FEED_BENCH_WRITE}) {
    # only the parts run here: each "## N." section replaced where it is
    # (or put before the analysis), the rest of the file as it was
    my $file = "$ROOT/docs/benchmarks.md";
    open my $in, '<', $file or die "$file: $!\n";
    my $doc = do { local $/; <$in> };
    close $in;

    for my $sec (split /^(?=## \d+\. )/m, $report) {
        my ($n) = $sec =~ /^## (\d+)\. / or next;
        $sec =~ s/\n*\z/\n\n/;
        $doc =~ s/^## \Q$n\E\. .*?(?=^## |\z)/$sec/ms
            or $doc =~ s/^(?=## Analysis)/$sec\n/m
            or $doc .= "\n$sec";
    }

    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $doc;
    close $fh;
    print "sections written to docs/benchmarks.md\n";
}
