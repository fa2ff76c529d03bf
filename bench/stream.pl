# bench/stream.pl: part 13 of make bench (bench/run.pl loads it), live
# timelines (issue 31): what streams cost a worker and what they get.
#
# One nginx worker, link mode, every post pushed (no pull): an author,
# "star", with N followers (10,000; FEED_BENCH_STREAMS), each with a cached
# timeline of 20 of star's posts.  Streams are held by client processes of
# 1,000 sockets each, which note when each stream gets its first update.
#
#   - memory: the worker's RSS and PSS (smaps_rollup) before and after N
#     idle streams, one per follower: per stream, nginx's request included,
#     the worker's reader of each user too;
#   - hits: wrk on a reader's first page (a LOCAL hit) with and without
#     the N streams open on the same worker, alternately, two rounds;
#   - delivery: star posts while the N streams are open: for each stream,
#     the time from the post's 201 to its update event (p50, p99, max),
#     and to its delivery into the first and the last follower's list
#     (the fanout's own pace: reading 10,000 followers from the stand-in);
#   - fanout: the module's own delivery rate for a post (its first batch
#     to its last reply, /status), the median of seven posts with the N
#     streams open (each once the last was sent to every stream) and of
#     seven without, two rounds; the lists polled as for the delivery in
#     both.  Then seven more each way with redis-server alone on the first
#     core, everything else on the second (taskset), as when Redis has a
#     machine of its own.

use strict;
use warnings;

use IO::Socket::INET;
use IO::Select;
use List::Util qw(sum max min);
use Time::HiRes qw(time sleep);
use POSIX ();

# the worker's memory: VmRSS, and Pss and Private_Dirty of smaps_rollup, KB
sub st_mem {
    my ($pid) = @_;
    my %m;
    open my $fh, '<', "/proc/$pid/status" or return {};
    while (<$fh>) { $m{rss} = $1 if /^VmRSS:\s+(\d+)/ }
    close $fh;
    if (open $fh, '<', "/proc/$pid/smaps_rollup") {
        while (<$fh>) {
            $m{pss} = $1 if /^Pss:\s+(\d+)/;
            $m{dirty} = $1 if /^Private_Dirty:\s+(\d+)/;
        }
        close $fh;
    }
    return \%m;
}

sub st_worker {
    my ($t) = @_;
    my $r = $t->get('/status', timeout => 60);
    my $j = $r->{json}
        or die "part 13: no /status: $r->{status} "
               . ($r->{error} // substr($r->{body} // '', 0, 200)) . "\n";
    return $j;
}

sub st_note { print STDERR "part 13: @_\n" if $ENV{FEED_BENCH_DEBUG} }

# a client process holding streams $from..$to (users f<i>): it notes the
# time of each stream's first update; SIGTERM makes it write them and exit
sub st_client {
    my ($port, $from, $to, $file) = @_;

    my $pid = fork() // die "fork: $!\n";
    return $pid if $pid;

    my (%sock, %first, %buf);
    my $sel = IO::Select->new;
    my $done = 0;
    my $parent = getppid();
    local $SIG{TERM} = sub { $done = 1 };

    # nothing of the bench's output held: it ends when its parent does
    open STDOUT, '>', '/dev/null';
    open STDERR, '>', '/dev/null';

    for my $i ($from .. $to) {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
            Proto => 'tcp') or next;
        $s->blocking(0);
        syswrite($s, "GET /users/f$i/timeline/stream HTTP/1.1\r\n"
            . "Host: bench\r\nAccept: text/event-stream\r\n\r\n");
        $sock{fileno $s} = [$s, $i];
        $sel->add($s);
    }

    open my $ready, '>', "$file.ready";
    close $ready;

    # reads what is there, noting each stream's first update; false when
    # nothing came in $wait seconds
    my $read = sub {
        my ($wait) = @_;
        my @r = $sel->can_read($wait) or return 0;
        for my $s (@r) {
            my $n = sysread($s, my $b, 65536);
            my $e = $sock{fileno $s} or next;
            if (!$n) {
                $sel->remove($s);
                next;
            }
            next if $first{$e->[1]};
            $buf{$e->[1]} .= $b;
            $first{$e->[1]} = time if $buf{$e->[1]} =~ /event: update/;
            delete $buf{$e->[1]} if $first{$e->[1]};
        }
        return 1;
    };

    while (!$done) {
        POSIX::_exit(0) if getppid() != $parent;
        if (!$sel->count) {
            sleep 0.2;
            next;
        }
        $read->(0.2);
    }

    # what is still on its way is read (events sent before the TERM)
    my $end = time + 1;
    while ($sel->count && time < $end && $read->(0.2)) { }

    # _exit: the bench's harness, forked with it, must not stop nginx
    open my $out, '>', $file or POSIX::_exit(1);
    print $out "$_ $first{$_}\n" for keys %first;
    close $out;
    POSIX::_exit(0);
}

# $n streams in processes of 1,000, once the worker holds them all
sub st_open {
    my ($t, $dir, $n) = @_;
    my @c;
    for (my $from = 1; $from <= $n; $from += 1000) {
        my $to = min($from + 999, $n);
        my $file = "$dir/stream-client-$from";
        unlink $file, "$file.ready";
        push @c, { pid => st_client($t->port('http'), $from, $to, $file),
                   file => $file };
    }
    $t->wait_for(120, sub { !grep { !-e "$_->{file}.ready" } @c })
        or die "stream clients not ready\n";
    $t->wait_for(120, sub {
        my $st = st_worker($t)->{streams} || {};
        ($st->{streams} // 0) >= $n;
    }) or die "part 13: the worker does not hold $n streams\n";
    return \@c;
}

# the clients' first updates, {user index => time}, as they stop
sub st_close {
    my ($t, $clients, $n) = @_;
    my %first;
    kill 'TERM', $_->{pid} for @$clients;
    for my $c (@$clients) {
        waitpid($c->{pid}, 0);
        open my $fh, '<', $c->{file} or next;
        while (<$fh>) { $first{$1} = $2 if /^(\d+) ([\d.]+)$/ }
        close $fh;
    }
    $t->wait_for(60, sub {
        ((st_worker($t)->{streams} || {})->{streams} // 1) == 0 });
    return \%first;
}

# star's post, and what the fanout says of it; $vis: when it was in the
# first and the last follower's list (polled every 2 ms from the 201)
sub st_post_fanout {
    my ($t, $body, $vis) = @_;
    my $w0 = st_worker($t);
    my $d0 = $w0->{fanout}{deliveries} // 0;
    my ($r0, $c0) = (st_redis($t), st_cpu($w0->{pid}));
    my $k0 = st_clients_cpu($t);
    my $id = st_post($t, $body);
    my $t201 = time;
    my $n = $t->{st_n};
    st_visible($t, $id, $t201, $vis) if $vis;
    $t->wait_for(120, sub {
        (st_worker($t)->{fanout}{deliveries} // 0) - $d0 >= $n
    }) or die "part 13: the fanout did not deliver\n";
    my $fs = st_worker($t)->{fanout};
    my $ms = $fs->{last_post_ms} || 1;
    my ($r1, $c1) = (st_redis($t), st_cpu($w0->{pid}));
    st_note(sprintf('%s: %d ms, redis %.1f ms, worker %.1f ms, clients '
        . '%.1f ms', $body, $ms, ($r1->{cpu} - $r0->{cpu}) * 1000,
        ($c1 - $c0) * 1000, (st_clients_cpu($t) - $k0) * 1000));
    st_note('  ' . join(' ', map { sprintf('%s %d/%dus', $_,
        $r1->{cmd}{$_}[0] - ($r0->{cmd}{$_}[0] // 0),
        $r1->{cmd}{$_}[1] - ($r0->{cmd}{$_}[1] // 0)) }
        grep { $r1->{cmd}{$_}[0] != ($r0->{cmd}{$_}[0] // 0) }
        sort keys %{ $r1->{cmd} })) if $ENV{FEED_BENCH_DEBUG};
    return { id => $id, t201 => $t201,
             rate => ($fs->{last_post_deliveries} // 0) / ($ms / 1000) };
}

# FEED_BENCH_PERF=<dir>: the worker's profile during a post, in
# <dir>/perf-<round>.<post> (perf report -i <that file>); needs Debian's
# linux-perf, which the bench does not install
sub st_perf {
    my ($pid, $post) = @_;
    return undef unless $ENV{FEED_BENCH_PERF};
    my $file = "$ENV{FEED_BENCH_PERF}/perf-$post";
    my $p = fork() // return undef;
    if ($p == 0) {
        open STDOUT, '>', '/dev/null';
        open STDERR, '>', '/dev/null';
        { exec('perf', 'record', '-g', '-F', '20000', '-o', $file,
               '-p', $pid) }
        POSIX::_exit(1);
    }
    sleep 0.5;
    return $p;
}

sub st_perf_end {
    my ($p) = @_;
    return unless $p;
    kill 'INT', $p;
    waitpid($p, 0);
}

# the posts whose fanout rates' median is taken, each way
my $RATES = 7;

# while the second series of posts fans out, redis-server has the first
# core to itself, and the rest (nginx, the stand-in, the clients, this
# process) the second, as if Redis ran on a machine of its own
sub st_pin {
    my ($t, $on) = @_;
    my @rest = (st_worker($t)->{pid}, $$, grep { defined }
        $t->pid('mongostr'), map { $_->{pid} } @{ $t->{st_clients} || [] });
    system("taskset -a -p " . ($on ? 1 : 3) . " " . $t->pid('redis')
        . " >/dev/null");
    system("taskset -a -p " . ($on ? 2 : 3) . " $_ >/dev/null") for @rest;
}

# the stream clients' CPU seconds so far
sub st_clients_cpu {
    my ($t) = @_;
    my $c = 0;
    $c += st_cpu($_->{pid}) for @{ $t->{st_clients} || [] };
    return $c;
}

# a process's CPU seconds so far (the scheduler's nanoseconds: /proc's
# stat counts in ticks of 10 ms)
sub st_cpu {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/schedstat" or return 0;
    my ($ns) = split ' ', <$fh> // '';
    return ($ns // 0) / 1e9;
}

sub st_visible {
    my ($t, $id, $t201, $vis) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
        . $t->port('redis')) or die "redis: $!\n";
    my %seen;
    my @keys = ('feed:tl:{f1}', "feed:tl:{f$t->{st_n}}");
    while (keys(%seen) < @keys && time < $t201 + 30) {
        for my $k (@keys) {
            next if $seen{$k};
            print $s "*3\r\n\$6\r\nLINDEX\r\n\$" . length($k)
                . "\r\n$k\r\n\$1\r\n0\r\n";
            my $v = FeedTest::_resp_read($s) // '';
            $seen{$k} = time if unpack('H24', substr($v, 0, 12)) eq $id;
        }
        sleep 0.002;
    }
    my @at = sort { $a <=> $b } values %seen;
    $vis->{first} = $at[0];
    $vis->{last} = $at[-1];
}

sub st_post {
    my ($t, $body) = @_;
    my $r = $t->http('POST', '/users/star/posts',
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}), timeout => 60);
    die "post: $r->{status}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}

# Redis's EVALSHA calls and CPU seconds so far
sub st_redis {
    my ($t) = @_;
    my $s = $t->redis('INFO', 'cpu', 'commandstats');
    my ($e) = $s =~ /^cmdstat_evalsha:calls=(\d+)/m;
    my %cmd = map { $_->[0] => [$_->[1], $_->[2]] }
        map { [/^cmdstat_(\S+?):calls=(\d+),usec=(\d+)/] }
        grep { /^cmdstat_/ } split /\r?\n/, $s;
    my ($u) = $s =~ /^used_cpu_user:([\d.]+)/m;
    my ($y) = $s =~ /^used_cpu_sys:([\d.]+)/m;
    return { evalsha => $e // 0, cpu => ($u // 0) + ($y // 0),
             cmd => \%cmd };
}

sub st_pct {
    my ($v, $p) = @_;
    return undef unless @$v;
    return $v->[min($#$v, int(@$v * $p))];
}

sub bench_stream {
    my ($t, $dir, $n, $o) = @_;

    $t->{st_n} = $n;
    my %r = (n => $n);

    # every follower's timeline cached (the fanout only delivers to them)
    # as a rebuild leaves it: the list (here its end alone), its version
    # (a nonce, "N": no pull author) and its filters (none), 20 posts each
    # once star posted; and a reader's first page a LOCAL hit.  With their
    # times to live (feed_cache_ttl, 7 days, the version and filters twice
    # that): without them, Redis looks no written key up in its table of
    # expiries, and the fanout without streams, before any stream's read
    # set one, was up to 25% faster than it can be in production

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
        . $t->port('redis')) or die "redis: $!\n";
    my $req = '';
    my $cmd = sub {
        my $c = '*' . scalar(@_) . "\r\n";
        $c .= '$' . length($_) . "\r\n$_\r\n" for @_;
        return $c;
    };
    for my $i (1 .. $n) {
        $req .= $cmd->('RPUSH', "feed:tl:{f$i}", "\0" x 12)
            . $cmd->('EXPIRE', "feed:tl:{f$i}", 7 * 86400)
            . $cmd->('SET', "feed:tln:{f$i}", "bench$i" . 'N',
                     'EX', 14 * 86400)
            . $cmd->('HSET', "feed:tlf:{f$i}", '', '1')
            . $cmd->('EXPIRE', "feed:tlf:{f$i}", 14 * 86400);
    }
    print $s $req;
    <$s> for 1 .. 5 * $n;

    st_post_fanout($t, "warm $_") for 1 .. 20;

    my $url = '/users/f1/timeline';
    $t->get($url) for 1 .. 3;

    my $pid = st_worker($t)->{pid};

    # memory, hits and delivery, with and without the streams, twice

    for my $round (1, 2) {
        st_note("round $round");

        # a fresh worker each round: memory freed by the last is reused,
        # and would hide what the streams take
        main::start_nginx(%{ $o->{nginx} }) if $round > 1;

        # the live mark of the last round's streams lapsed, as it would
        # 30 s after them: deliveries without streams are not told
        $t->redis('DEL', $_) for @{ $t->redis('KEYS', 'feed:live*') || [] };
        $t->get($url) for 1 .. 3;
        $pid = st_worker($t)->{pid};
        st_note('tracked keys: '
            . ($t->redis('INFO', 'stats') =~ /tracking_total_keys:(\d+)/)[0]);
        sleep 1;
        my $m0 = st_mem($pid);
        push @{ $r{hits_without} }, main::wrk($url, %$o)->{rps};
        for my $pin (0, 1) {
            st_pin($t, $pin);
            push @{ $r{"fanout_without$pin"} }, st_median(map {
                st_post_fanout($t, "plain $round.$pin.$_", {})->{rate}
            } 1 .. $RATES);
        }
        st_pin($t, 0);

        st_note('opening the streams');
        my $c = $t->{st_clients} = st_open($t, $dir, $n);
        st_note('open');
        sleep 2;
        my $m1 = st_mem($pid);
        push @{ $r{mem} }, { map { $_ => (($m1->{$_} // 0)
            - ($m0->{$_} // 0)) * 1024 / $n } qw(rss pss dirty) };

        push @{ $r{hits_with} }, main::wrk($url, %$o)->{rps};

        # the clients note each stream's first update: this post's
        st_note('posting');
        my $r0 = st_redis($t);
        my $u0 = st_sent($t);
        my %vis;
        my $p = st_post_fanout($t, "live $round", \%vis);
        st_note('posted');
        my $sent = st_sent($t, $u0 + $n);
        my $r1 = st_redis($t);
        push @{ $r{redis} }, {
            reads => $r1->{evalsha} - $r0->{evalsha},
            us => ($r1->{cpu} - $r0->{cpu}) * 1e6 };

        # more posts, each once the last was sent to every stream: the
        # fanout's rate is their median, as without the streams
        for my $pin (0, 1) {
            st_pin($t, $pin);
            my @rates;
            for my $i (1 .. $RATES) {
                # the clients, on this machine, done reading the last
                # post's events (on their own machines, they would cost
                # this one nothing)
                sleep 1;
                my $perf = st_perf($pid, "$round.$pin.$i");
                push @rates,
                    st_post_fanout($t, "live $round.$pin.$i", {})->{rate};
                st_perf_end($perf);
                $sent = st_sent($t, $sent + $n);
            }
            push @{ $r{"fanout_with$pin"} }, st_median(@rates);
        }
        st_pin($t, 0);
        my $first = st_close($t, $c, $n);
        $t->{st_clients} = [];
        my @d = sort { $a <=> $b }
            map { max(0, ($first->{$_} - $p->{t201}) * 1000) } keys %$first;
        push @{ $r{delivery} }, { got => scalar(@d), p50 => st_pct(\@d, 0.5),
            p99 => st_pct(\@d, 0.99), max => $d[-1],
            visible => [map { defined $_ ? ($_ - $p->{t201}) * 1000 : -1 }
                            @vis{qw(first last)}] };
    }

    $r{reads} = st_worker($t)->{streams}{reads};
    return \%r;
}

sub st_mean { @_ ? sum(@_) / @_ : 0 }

sub st_median {
    my @v = sort { $a <=> $b } @_;
    return @v ? $v[$#v / 2] : 0;
}

# the updates the worker sent so far; with $want, once they are (at most
# 30 s)
sub st_sent {
    my ($t, $want) = @_;
    my $u = 0;
    $t->wait_for(30, sub {
        my $m = $t->get('/metrics', timeout => 60)->{body} // '';
        ($u) = $m =~ /^feed_stream_events_total\{event="update"\} (\d+)/m;
        ($u //= 0) >= ($want // 0);
    });
    return $u;
}

sub stream_report {
    my ($r, $cmd, $date) = @_;
    my @o;
    my $n = $r->{n};

    push @o, '## 13. Live timelines', '',
        "Measured $date by `$cmd` (bench/stream.pl): one worker, link "
        . "mode, $n streams of $n followers of one author, each with 20 "
        . 'posts cached; streams held by client processes of 1,000 '
        . 'sockets each on the same machine.', '';

    push @o, '| round | memory per idle stream (RSS / PSS / private dirty) '
        . '| hits without / with the streams | ratio | fanout without / '
        . "with (deliveries/s, median of $RATES posts) | ratio "
        . '| the same, Redis on a core of its own | ratio '
        . '| 201 → in the first / last '
        . 'list | 201 → event p50 / p99 / max '
        . '| streams that got it | Redis for the post: EVALSHA, CPU |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|';
    for my $i (0 .. $#{ $r->{mem} }) {
        my $m = $r->{mem}[$i];
        my $d = $r->{delivery}[$i];
        my $rd = $r->{redis}[$i];
        push @o, sprintf('| %d | %.0f / %.0f / %.0f B | %.0f / %.0f req/s '
            . '| %.2f× | %.0f / %.0f | %.2f× | %.0f / %.0f | %.2f× '
            . '| %.0f / %.0f ms '
            . '| %.0f / %.0f / %.0f ms '
            . '| %d of %d | %d, %.0f ms |', $i + 1, $m->{rss}, $m->{pss},
            $m->{dirty},
            $r->{hits_without}[$i], $r->{hits_with}[$i],
            $r->{hits_with}[$i] / ($r->{hits_without}[$i] || 1),
            (map { ($r->{"fanout_without$_"}[$i], $r->{"fanout_with$_"}[$i],
                    $r->{"fanout_with$_"}[$i]
                    / ($r->{"fanout_without$_"}[$i] || 1)) } 0, 1),
            @{ $d->{visible} || [-1, -1] },
            $d->{p50} // -1, $d->{p99} // -1, $d->{max} // -1, $d->{got},
            $n, $rd->{reads}, $rd->{us} / 1000);
    }
    push @o, '';
    return @o;
}

1;
