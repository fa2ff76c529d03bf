# bench/local_hits.pl: part 12 of make bench (bench/run.pl loads it),
# local hits (issue 30): a worker answers its copy of a first page with no
# Redis command while Redis's client-side caching (CLIENT TRACKING, the
# invalidations heard on the worker's watch connection, a heartbeat every
# 100 ms) vouches that none of the page's keys changed.
#
# Three things are measured, on one nginx worker, link mode:
#
#   - first pages of 20 and 50 posts read by wrk with local hits
#     (`feed_cache_tracking on`, the default), with one round trip each
#     (`feed_cache_tracking off`, the "before") and from a file by nginx
#     (the same bytes), alternately, two rounds; for each module run, the
#     Redis commands sent (`INFO commandstats` deltas over the run, the
#     bench's own INFO left out) and Redis's CPU (`INFO cpu`,
#     used_cpu_user + used_cpu_sys), per request.  The watch's heartbeat
#     (a PUBLISH per worker every 100 ms, whatever the reads) is counted
#     apart; so are the commands the same node sends over as long with no
#     reads at all (an idle window before each run: the fanout consumer's
#     XREADGROUP ... BLOCK loop);
#   - staleness under load: while wrk reads a reader's first page, a
#     probe posts (an author the reader follows) and reads the page until
#     the post is on it, then deletes the posts and reads until each is
#     gone, checking every read sent after the delete's 204;
#   - the same with two nginx nodes on one Redis: the changes made through
#     the first node, the load and the probe's reads on the second.

use strict;
use warnings;

use IO::Select;
use List::Util qw(sum max min);
use Time::HiRes qw(time sleep);

# Redis's commandstats and CPU seconds, in one INFO
sub lh_redis_info {
    my ($t) = @_;
    my $s = $t->redis('INFO', 'cpu', 'commandstats');
    my %c;
    $c{$1} = $2 while $s =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    my ($u) = $s =~ /^used_cpu_user:([\d.]+)/m;
    my ($y) = $s =~ /^used_cpu_sys:([\d.]+)/m;
    return { cmds => \%c, cpu => ($u // 0) + ($y // 0), time => time };
}

# what Redis did between two lh_redis_info(): calls by command (the INFO
# of the first left out), CPU seconds, seconds
sub lh_redis_delta {
    my ($a, $b) = @_;
    my %d;
    for my $c (keys %{ $b->{cmds} }) {
        my $n = $b->{cmds}{$c} - ($a->{cmds}{$c} // 0);
        $n-- if $c eq 'info';
        $d{$c} = $n if $n > 0;
    }
    return { cmds => \%d, cpu => $b->{cpu} - $a->{cpu},
             s => $b->{time} - $a->{time} };
}

sub lh_status {
    my ($node) = @_;
    my $j = $node->get('/status', timeout => 60)->{json}
        or die "part 12: no /status\n";
    return $j;
}

# reads of the page through /c/ (X-Feed-Cache) until one is LOCAL
sub lh_until_local {
    my ($node, $url, $timeout) = @_;
    my $end = time + ($timeout // 3);
    while (time < $end) {
        my $r = $node->get("/c$url");
        return 1 if ($r->{headers}{'x-feed-cache'} // '') eq 'LOCAL';
        sleep 0.01;
    }
    return 0;
}

# one wrk run of $url on the node of $t with the Redis window around it,
# after an idle window of the same length (no reads) for the background
sub lh_measured_run {
    my ($t, $url, $dur) = @_;

    my $i0 = lh_redis_info($t);
    sleep $dur;
    my $i1 = lh_redis_info($t);
    my $idle = lh_redis_delta($i0, $i1);

    my $s0 = lh_status($t);
    my $r0 = lh_redis_info($t);
    my $w = wrk($url);
    my $r1 = lh_redis_info($t);
    my $s1 = lh_status($t);
    my $run = lh_redis_delta($r0, $r1);

    my $lp = sub { ($s1->{local_pages}{$_[0]} // 0)
                   - ($s0->{local_pages}{$_[0]} // 0) };
    return { %$w, redis => $run, idle => $idle,
             local => $lp->('answered_without_redis'),
             answered => $lp->('answered') };
}

# wrk in the background on a node, until lh_load_end(): its pid and output
sub lh_load_start {
    my ($node, $url, $conns, $out) = @_;
    my $s0 = lh_status($node);
    my $pid = fork();
    die "fork: $!\n" unless defined $pid;
    if ($pid == 0) {
        open STDOUT, '>', $out or POSIX::_exit(127);
        open STDERR, '>&', \*STDOUT;
        exec('wrk', '-t1', "-c$conns", '-d600s', '--latency',
            'http://127.0.0.1:' . $node->port('http') . $url)
            or POSIX::_exit(127);
    }
    sleep 0.5;
    return { pid => $pid, out => $out, s0 => $s0, node => $node };
}

# wrk stops on SIGINT and prints what it measured
sub lh_load_end {
    my ($l) = @_;
    kill 'INT', $l->{pid};
    waitpid($l->{pid}, 0);
    my $s1 = lh_status($l->{node});
    my $out = '';
    if (open my $fh, '<', $l->{out}) {
        local $/;
        $out = <$fh> // '';
    }
    my %r = (local => ($s1->{local_pages}{answered_without_redis} // 0)
        - ($l->{s0}{local_pages}{answered_without_redis} // 0));
    $r{requests} = $1 if $out =~ /(\d+) requests in/;
    $r{rps} = $1 if $out =~ /Requests\/sec:\s+([\d.]+)/;
    $r{errors} = ($out =~ /Non-2xx or 3xx responses: (\d+)/) ? $1 : 0;
    return \%r;
}

# The probe: $n posts by $author through $writer, each read on $reader's
# first page of $user until it is there; then each deleted through
# $writer, newest first, and read until it is gone and for a while after
# the delete's 204.  Times in ms, from the 201 (a post) and from the
# DELETE sent (a delete).
sub lh_probe {
    my ($writer, $reader, $author, $user, $n, $tag) = @_;
    my $url = "/users/$user/timeline?limit=20";
    my (%res, @ids);
    $res{seen} = {};
    my $read = sub {
        my $r = $reader->get("/c$url");
        die "part 12: GET $url: $r->{status}\n" unless $r->{status} == 200;
        $res{seen}{ $r->{headers}{'x-feed-cache'} // '-' }++;
        return $r;
    };

    for my $k (1 .. $n) {
        $res{local_before}++ if lh_until_local($reader, $url, 2);
        my $r = $writer->http('POST', "/users/$author/posts",
            headers => { 'Content-Type' => 'application/json' },
            body => qq({"body": "probe $tag $k: is it on the page yet?"}));
        die "part 12: post: $r->{status}\n" unless $r->{status} == 201;
        my $t201 = time;
        my $id = $r->{json}{id};
        push @ids, $id;
        my $end = $t201 + 5;
        my $at;
        while (time < $end) {
            my $g = $read->();
            if (index($g->{body}, $id) >= 0) { $at = time; last }
        }
        if (defined $at) { push @{ $res{visible} }, ($at - $t201) * 1000 }
        else { $res{missed}++ }
    }

    for my $id (reverse @ids) {
        $res{local_before_delete}++ if lh_until_local($reader, $url, 2);
        my $h = $writer->http_start('DELETE', "/users/$author/posts/$id");
        my $t0 = time;
        my $sel = IO::Select->new($h->{sock});
        my ($gone, $t204, $end) = (undef, undef, $t0 + 5);
        while (time < $end) {
            if (!defined $t204 && $sel->can_read(0)) {
                my $d = $writer->http_end($h);
                die "part 12: delete: $d->{status}\n" unless $d->{status} == 204;
                $t204 = time;
                push @{ $res{answered} }, ($t204 - $t0) * 1000;
            }
            my $sent = time;
            my $g = $read->();
            my $shown = index($g->{body}, $id) >= 0;
            if ($shown) {
                # sent after the 204 was in: a delete served after its 204
                $res{after_204}++ if defined $t204 && $sent > $t204;
                $res{again}++ if defined $gone;
            } elsif (!defined $gone) {
                $gone = time;
                push @{ $res{gone} }, ($gone - $t0) * 1000;
            }
            $res{reads_after_204}++ if defined $t204 && $sent > $t204;
            # on for 300 ms once the post is gone and the 204 is in
            $end = max($t204, $gone) + 0.3
                if defined $t204 && defined $gone && $end > $t0 + 4.9;
        }
        if (!defined $t204) {
            my $d = $writer->http_end($h);
            die "part 12: delete: $d->{status}\n" unless $d->{status} == 204;
        }
        $res{not_gone}++ unless defined $gone;
    }

    $res{n} = $n;
    return \%res;
}

# nginx as start_nginx() left it
sub bench_local_hits {
    my ($t, $authors, $posts, $quick, $o) = @_;
    my $conns = $o->{conns};
    my $dur = $o->{dur};
    my %res = (posts => $posts, rounds => $quick ? 1 : 2,
               probes => $quick ? 2 : 20, conns => $conns, dur => $dur);
    my $dir = $t->dir;
    my $t12 = time;

    # lh reads; lhp is the probe's author, followed by lh only
    start_nginx(mode => 'link');
    follow('lh', $_) for @$authors, 'lhp';

    # -- first pages: local hits, round trips, static --

    my %bytes;
    for my $round (1 .. $res{rounds}) {
        for my $trk (qw(on off)) {
            start_nginx(mode => 'link',
                $trk eq 'off' ? (extra => 'feed_cache_tracking off;') : ());
            for my $limit (20, 50) {
                my $url = "/users/lh/timeline?limit=$limit";
                my $page = body($url);
                if (!defined $bytes{$limit}) {
                    $bytes{$limit} = $page;
                    open my $fh, '>', "$dir/static/lh$limit.json" or die $!;
                    print $fh $page;
                    close $fh;
                }
                die "part 12: the page of $limit changed\n"
                    unless $page eq $bytes{$limit};
                if ($trk eq 'on') {
                    # a machine too loaded for a heartbeat every 300 ms
                    # gives no local hits: the runs show it
                    lh_until_local($t, $url, 10)
                        or $res{not_local}{$limit}++;
                } else {
                    body($url) for 1 .. 2;
                }
                push @{ $res{runs}{$limit}{$trk} },
                    lh_measured_run($t, $url, $dur);
                push @{ $res{runs}{$limit}{static} },
                    wrk("/static/lh$limit.json") if $trk eq 'on';
            }
        }
    }
    $res{bytes}{$_} = length $bytes{$_} for keys %bytes;

    # -- staleness, one node: the load, the changes and the probe on it --

    start_nginx(mode => 'link');
    my $url = '/users/lh/timeline?limit=20';
    lh_until_local($t, $url, 10);
    my $l = lh_load_start($t, $url, $conns, "$dir/lh-load1.out");
    $res{one} = lh_probe($t, $t, 'lhp', 'lh', $res{probes}, 'one');
    $res{one}{load} = lh_load_end($l);

    # -- two nodes on one Redis: changes through the first, the load and
    # the reads on the second --

    my $u = FeedTest->new(no_access_log => 1,
        asan_options => 'fast_unwind_on_malloc=1');
    my $port = $t->port('redis');
    my $mongo = $t->mongo_uri;
    my $c = conf(mode => 'link');
    $c =~ s/%%PORT_REDIS%%/$port/g;
    $c =~ s/%%MONGO_URI%%/$mongo/g;
    $u->write_conf($c)->run;
    $u->wait_for(5, sub {
        my $j = $u->get('/status')->{json} or return 0;
        $j->{redis}{up} && $j->{mongo}{up};
    }) or die "part 12: the second node is not ready\n";

    lh_until_local($u, $url, 10);
    $l = lh_load_start($u, $url, $conns, "$dir/lh-load2.out");
    $res{two} = lh_probe($t, $u, 'lhp', 'lh', $res{probes}, 'two');
    $res{two}{load} = lh_load_end($l);

    $u->stop or push @{ $res{bad} }, 'the second node did not stop gracefully';
    push @{ $res{bad} }, map { "second node: $_" } $u->bad_log_lines;
    push @{ $res{sanitizer} }, $u->sanitizer_reports;
    $u->cleanup;

    $res{s} = time - $t12;
    return \%res;
}

sub lh_mean { @_ ? sum(@_) / @_ : 0 }

sub lh_pct {
    my ($p, @v) = @_;
    return undef unless @v;
    @v = sort { $a <=> $b } @v;
    my $i = int(@v * $p / 100);
    return $v[ $i >= @v ? $#v : $i ];
}

sub lh_met { $_[0] ? '**met**' : '**not met**' }

sub local_hits_report {
    my ($res, $cmd, $date) = @_;
    my @out;
    my $dur = $res->{dur};

    push @out, '## 12. Local hits: first pages with no Redis command', '',
        "Measured $date by `$cmd` (this part: "
        . sprintf('%.0f', $res->{s} // 0) . ' s), on a machine other '
        . 'work may share: see the runs. A reader follows five authors '
        . "($res->{posts} posts) and the probe's author; one nginx worker, link mode. Its first "
        . 'page, read by wrk -t1 -c' . $res->{conns} . ", $dur s a run, "
        . 'with local hits (`feed_cache_tracking on`, the default: the '
        . "worker's copy answered with no Redis command while Redis's "
        . 'client-side caching vouches for its keys, `X-Feed-Cache: '
        . 'LOCAL`), with one round trip each (`feed_cache_tracking off`, '
        . 'the read script checks the copy), and by nginx from a file '
        . "holding the same bytes, in turn, $res->{rounds} round(s). Redis "
        . 'is measured over each module run: `INFO commandstats` (calls by '
        . 'command, the bench\'s own `INFO` left out) and `INFO cpu` '
        . '(used_cpu_user + used_cpu_sys), per request. The watch\'s '
        . 'heartbeat (one `PUBLISH` per worker every 100 ms, whatever the '
        . 'reads) is counted apart, and so is what the node sends in an '
        . 'idle window of the same length just before the run (no reads: '
        . 'the fanout consumer\'s `XREADGROUP ... BLOCK` loop, the '
        . 'heartbeat).', '',
        '| first page | read | bytes | req/s (runs) | **mean req/s** '
        . '| p99 ms | **× static** | answered without Redis '
        . '| **Redis commands per request** (all but the heartbeat) '
        . '| heartbeat PUBLISH /s | **Redis CPU µs per request** '
        . '| Redis CPU ms/s, run (idle window) '
        . '| Redis commands in the run (idle window) |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|---|';

    my (%ratio, %cmds_per, %cpu_per, %extra);
    for my $limit (20, 50) {
        my $runs = $res->{runs}{$limit};
        my $static = lh_mean(map { $_->{rps} } @{ $runs->{static} });
        for my $how (qw(on off static)) {
            my @r = @{ $runs->{$how} || [] } or next;
            my $mean = lh_mean(map { $_->{rps} } @r);
            my $name = { on => 'module, local hits (tracking on)',
                off => 'module, a round trip (tracking off)',
                static => 'static file' }->{$how};
            my $p99 = fmt_ms(max(map { $_->{p99} // 0 } @r));
            my $runs_s = join(', ', map { sprintf('%.0f', $_->{rps}) } @r);
            if ($how eq 'static') {
                push @out, sprintf('| %d | %s | %d | %s | **%.0f** | %s '
                    . '| 1.00 | | | | | | |', $limit, $name,
                    $res->{bytes}{$limit}, $runs_s, $mean, $p99);
                next;
            }
            my $req = sum(map { $_->{requests} // 0 } @r) || 1;
            my %by;
            my %idle;
            my ($pub, $secs, $cpu, $isecs, $icpu) = (0, 0, 0, 0, 0);
            for my $x (@r) {
                $isecs += $x->{idle}{s};
                $icpu += $x->{idle}{cpu};
                $by{$_} += $x->{redis}{cmds}{$_} for keys %{ $x->{redis}{cmds} };
                $idle{$_} += $x->{idle}{cmds}{$_} for keys %{ $x->{idle}{cmds} };
                $secs += $x->{redis}{s};
                $cpu += $x->{redis}{cpu};
            }
            $pub = delete($by{publish}) // 0;
            delete $idle{publish};
            my $other = sum(values %by) // 0;
            # no post is made during the runs: a stream command is the
            # fanout consumer's idle loop (XREADGROUP ... BLOCK, its
            # claims), sent as often with no reads; any other command
            # is the reads'
            my $stream = sum(map { $by{$_} } grep { /^x/ } keys %by) // 0;
            my $stream_idle = sum(map { $idle{$_} } grep { /^x/ }
                keys %idle) // 0;
            my $local = sum(map { $_->{local} } @r);
            my $ratio = $static ? $mean / $static : 0;
            $ratio{$limit}{$how} = $ratio;
            $cmds_per{$limit}{$how} = $other / $req;
            $cpu_per{$limit}{$how} = $cpu * 1e6 / $req;
            $extra{$limit}{$how} = $other - $stream;
            $extra{$limit}{"stream_$how"} = $stream / $req;
            $extra{$limit}{"idle_$how"} = "$stream in the run, "
                . "$stream_idle in the idle window";
            push @out, sprintf('| %d | %s | %d | %s | **%.0f** | %s '
                . '| **%.2f** | %.1f%% | **%s** | %.1f | **%.3f** '
                . '| %.1f (%.1f) | %s |',
                $limit, $name, $res->{bytes}{$limit}, $runs_s, $mean, $p99,
                $ratio, 100 * min(1, $local / $req),
                $other ? sprintf('%.5f', $other / $req) : '0',
                $secs ? $pub / $secs : 0, $cpu * 1e6 / $req,
                $secs ? $cpu * 1000 / $secs : 0,
                $isecs ? $icpu * 1000 / $isecs : 0,
                join(', ', map { "$_ $by{$_} (" . ($idle{$_} // 0) . ')' }
                    sort { $by{$b} <=> $by{$a} } keys %by) || 'none');
        }
    }

    push @out, '', 'No read of the page of ' . join(' and ',
        sort keys %{ $res->{not_local} }) . ' was answered `LOCAL` within '
        . '10 s before a run with local hits.' if $res->{not_local};

    my $ok_ratio = !grep { ($ratio{$_}{on} // 0) < 1.0 } 20, 50;
    my $ok_cmds = !grep { $extra{$_}{on} } 20, 50;
    my $ok_cpu = !grep { ($cpu_per{$_}{on} // 1e9) > 0.2 } 20, 50;
    push @out, '',
        'Targets (issue 30), with local hits:',
        '',
        sprintf('- module/static ≥ 1.0 for first pages of 20 and 50 posts: '
            . '%s (%.2f and %.2f; %.2f and %.2f with a round trip).',
            lh_met($ok_ratio), map({ $ratio{$_}{on} // 0 } 20, 50),
            map({ $ratio{$_}{off} // 0 } 20, 50)),
        sprintf('- Redis commands per hit of a page that did not change, 0: '
            . '%s. Every command but the heartbeat: %s and %s per request '
            . '(pages of 20 and 50), of which the fanout consumer\'s idle '
            . 'loop (stream commands, `XREADGROUP ... BLOCK`: %s and %s '
            . 'per request; %s, and %s) sends as many with no reads at all; '
            . 'any other command: **%d** and **%d** in the runs. With a '
            . 'round trip: %.2f and %.2f per request (`EVALSHA` and the '
            . 'commands its script runs, which commandstats counts too).',
            lh_met($ok_cmds),
            map({ sprintf('%.5f', $cmds_per{$_}{on} // 0) } 20, 50),
            map({ sprintf('%.5f', $extra{$_}{stream_on} // 0) } 20, 50),
            map({ $extra{$_}{idle_on} // '-' } 20, 50),
            map({ $extra{$_}{on} // 0 } 20, 50),
            map({ $cmds_per{$_}{off} // 0 } 20, 50)),
        sprintf('- Redis CPU per hit ≤ 0.2 µs, averaged over the run: %s '
            . '(%.3f and %.3f µs; with a round trip %.2f and %.2f µs).',
            lh_met($ok_cpu), map({ $cpu_per{$_}{on} // 0 } 20, 50),
            map({ $cpu_per{$_}{off} // 0 } 20, 50)), '';

    push @out, '### Staleness', '',
        "While wrk -t1 -c$res->{conns} reads the reader's first page (limit "
        . '20) on the node read, a probe makes ' . $res->{probes}
        . ' posts by an author the reader follows, one at a time, each once '
        . 'the page is answered `LOCAL` again, and reads the page (through a '
        . 'location that shows `X-Feed-Cache`, new connections, one read at '
        . 'a time) until the post is on it: time from the `201`. Then it '
        . 'deletes them, newest first, each once the page is `LOCAL` again, '
        . 'and reads the page from the DELETE sent until the post is gone '
        . 'and for 300 ms after the `204` (which waits 400 ms): time from '
        . 'the DELETE sent; every read sent after the `204` came back is '
        . 'checked. "Two nodes": a second nginx node on the same Redis and '
        . 'MongoDB, the posts and deletes made through the first, the load '
        . 'and the probe\'s reads on the second.', '',
        '| nodes | change | n | p50 ms | **p99 ms** | max ms | not within 5 s '
        . '| reads after the 204 showing it | shown again once gone '
        . '| load req/s | load answered without Redis | probe reads |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|';

    my %ok;
    for my $which (qw(one two)) {
        my $p = $res->{$which} or next;
        my $ld = $p->{load};
        my $lshare = $ld->{requests} ? sprintf('%.1f%%',
            100 * min(1, $ld->{local} / $ld->{requests})) : '-';
        $ok{$which}{share} = $lshare;
        my $seen = join(', ', map { "$_ $p->{seen}{$_}" }
            sort keys %{ $p->{seen} });
        my $nodes = $which eq 'one' ? 'one' : 'two (A → B)';
        my @v = @{ $p->{visible} || [] };
        my @g = @{ $p->{gone} || [] };
        push @out, sprintf('| %s | post → visible | %d | %s | **%s** | %s '
            . '| %d | | | %s | %s | %s |', $nodes, scalar(@v),
            fmt_ms(lh_pct(50, @v)), fmt_ms(lh_pct(99, @v)), fmt_ms(max(@v)),
            $p->{missed} // 0, $ld->{rps} ? sprintf('%.0f', $ld->{rps}) : '-',
            $lshare, $seen);
        push @out, sprintf('| %s | delete → gone | %d | %s | **%s** | %s '
            . '| %d | **%d** of %d | %d | | | |', $nodes, scalar(@g),
            fmt_ms(lh_pct(50, @g)), fmt_ms(lh_pct(99, @g)), fmt_ms(max(@g)),
            $p->{not_gone} // 0, $p->{after_204} // 0,
            $p->{reads_after_204} // 0, $p->{again} // 0);
        $ok{$which}{visible} = @v && !$p->{missed}
            && lh_pct(99, @v) <= 300;
        $ok{$which}{gone} = @g && !$p->{not_gone} && lh_pct(99, @g) <= 300;
        $ok{$which}{p99v} = fmt_ms(lh_pct(99, @v));
        $ok{$which}{p99g} = fmt_ms(lh_pct(99, @g));
        $ok{$which}{after} = !$p->{after_204} && !$p->{again};
    }

    my $ans = $res->{one}{answered} || [];
    push @out, '',
        sprintf('The deletes\' 204s came %s ms after the DELETE (p50, '
            . 'one node). The page was answered `LOCAL` before %d of the %d '
            . 'changes on one node, %d of %d on two.',
            fmt_ms(lh_pct(50, @$ans)),
            map({ ($res->{$_}{local_before} // 0)
                  + ($res->{$_}{local_before_delete} // 0),
                  2 * ($res->{$_}{n} // 0) } qw(one two))), '',
        'Targets (issue 30):', '',
        '- post → visible on a hot reader\'s first page, p99 ≤ 300 ms, '
        . 'copies served the whole time: ' . lh_met($ok{one}{visible})
        . " (p99 $ok{one}{p99v} ms; the load's reads answered without "
        . "Redis meanwhile: $ok{one}{share}).",
        '- delete → gone, p99 ≤ 300 ms: ' . lh_met($ok{one}{gone})
        . " (p99 $ok{one}{p99g} ms); never served after the delete's 204: "
        . lh_met($ok{one}{after}) . '.',
        '- two nodes, a change through A seen on B\'s hits within the same '
        . 'bound: posts ' . lh_met($ok{two}{visible})
        . " (p99 $ok{two}{p99v} ms), deletes " . lh_met($ok{two}{gone})
        . " (p99 $ok{two}{p99g} ms), never after the 204 "
        . lh_met($ok{two}{after}) . " (B's load answered without Redis: "
        . "$ok{two}{share}).", '';

    return @out;
}

1;
