#!/usr/bin/perl

# bench/stream_nchan.pl: nchan as the engine of live timelines (issue 31),
# measured on Debian's nginx (1.22.1) and libnginx-mod-nchan, one worker.
#
#   perl bench/stream_nchan.pl                 # every part, 10,000 streams
#   NCHAN_PHASES=1,3 NCHAN_N=2000 perl bench/stream_nchan.pl
#
# Parts (NCHAN_PHASES, all by default):
#
#   1. memory per idle stream: NCHAN_N EventSource subscribers (GET with
#      Accept: text/event-stream), one channel each (timeline_<uid>), held
#      idle; the worker's RSS, PSS and private dirty (smaps_rollup) before
#      and after, nchan's shared memory in use (nchan_stub_status), and
#      Redis's used_memory with the Redis store.  Baselines: a request held
#      by echo_sleep (nginx's request alone, with a timer) and one proxied
#      to a socket that accepts and never answers (the request, the
#      upstream and its connection); each with nginx's defaults and with
#      request_pool_size, client_header_buffer_size, connection_pool_size
#      made small (server level);
#   2. delivery: NCHAN_N subscribers on NCHAN_N channels, then one small
#      JSON message published to each channel over HTTP (nchan_publisher
#      on the same nginx, NCHAN_PUB_CONNS keep-alive connections, requests
#      pipelined): publishes/s, and the time from the first publish sent to
#      each subscriber's event (p50, p99, max); with nchan's memory store,
#      its Redis store, and two nginx nodes on one Redis (subscribers on
#      one, the publisher on the other), NCHAN_REPEAT times each (1).  The
#      Redis commands of one publish (INFO commandstats around it, an idle
#      window of the same length shown next to it); the worker's CPU per
#      publish, nchan's shared memory and Redis's memory per stored
#      message, Redis's CPU per publish, and what idle channels cost Redis
#      (10 s of INFO commandstats before publishing);
#   3. hits of ngx_feed_module (FEED_MODULE, build/ngx_http_feed_module.so
#      by default) on one worker, wrk -t1 -c50 -d10s on a warm first page
#      (LOCAL hits), without and with NCHAN_N idle nchan subscribers on the
#      same worker, alternately, NCHAN_ROUNDS (3) rounds; the worker's CPU
#      per request and the heartbeats the streams got.
#
# SSE heartbeats: nchan_eventsource_ping_interval NCHAN_PING (10 s; 0: off).
#
# Every process it starts is stopped at the end (t/lib/FeedTest.pm's END),
# its directory removed.  The subscribers are forked children of at most
# 800 sockets each (select(2) stops at descriptor 1024).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../t/lib";
use FeedTest;
use IO::Socket::INET;
use IO::Select;
use POSIX qw(WNOHANG);
use Socket qw(IPPROTO_TCP TCP_NODELAY);
use List::Util qw(sum max min);
use Time::HiRes qw(time sleep);
use Test::More;

Test::More->builder->no_ending(1);
$| = 1;

my $N = $ENV{NCHAN_N} || 10000;
my $PER_CHILD = 800;
my $PUB_CONNS = $ENV{NCHAN_PUB_CONNS} || 20;
my $PING = $ENV{NCHAN_PING} // 10;       # SSE heartbeat, seconds
my %PHASES = map { $_ => 1 }
    split /,/, ($ENV{NCHAN_PHASES} || '1,2,3');
my $NCHAN_SO = '/usr/lib/nginx/modules/ngx_nchan_module.so';
my $ECHO_SO = '/usr/lib/nginx/modules/ngx_http_echo_module.so';
my $BODY = '{"id":"6b07b2b8e5400021c1005a9d","author":"bob",'
    . '"body":"hello, ann","ts":1795666616917}';

# the small values of part 1's second column (server level)
my $SMALL = {
    request_pool_size => '1k',
    client_header_buffer_size => '256',
    connection_pool_size => '128',
};

my @REPORT;

# subscriber children still running when the script ends go first (this
# END runs before FeedTest's, which stops nginx)
my %KIDS;
my $MAIN = $$;
END {
    if ($$ == $MAIN && %KIDS) {
        kill 'KILL', keys %KIDS;
        waitpid($_, 0) for keys %KIDS;
    }
}
sub say_ { my $l = join('', @_); print "$l\n"; push @REPORT, $l }

# ---------------------------------------------------------------------
# nginx with nchan (parts 1 and 2)

# %o: store => mem|redis, redis_port, server => { directive => value },
#     upstream_port (the never-answering socket of the proxy baseline)
sub nchan_conf {
    my ($t, %o) = @_;
    my $dir = $t->dir;
    my $port = $t->port('http');
    my $server = join '', map { "        $_ $o{server}{$_};\n" }
        sort keys %{ $o{server} || {} };
    my $redis = $o{store} eq 'redis'
        ? "    nchan_redis_url redis://127.0.0.1:$o{redis_port};\n"
          . "    nchan_use_redis on;\n"
        : '';
    my $proxy = $o{upstream_port}
        ? "        location /hold/proxy {\n"
          . "            proxy_pass http://127.0.0.1:$o{upstream_port};\n"
          . "            proxy_read_timeout 3600s;\n        }\n"
        : '';
    my $conf = <<"EOF";
load_module $NCHAN_SO;
load_module $ECHO_SO;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
user root;
worker_processes 1;
worker_rlimit_nofile 50000;
events { worker_connections 24000; multi_accept on; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/client_body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    nchan_shared_memory_size 256m;
$redis
    server {
        listen 127.0.0.1:$port backlog=4096;
$server
        location ~ ^/users/(\\w+)/timeline/stream\$ {
            nchan_subscriber eventsource;
            nchan_channel_id timeline_\$1;
            nchan_eventsource_ping_interval $PING;
        }
        location ~ ^/pub/(\\w+)\$ {
            nchan_publisher;
            nchan_channel_id timeline_\$1;
            nchan_eventsource_event update;
        }
        location /hold/echo { echo_sleep 3600; }
        location /hold/warm { echo_sleep 0.5; }
$proxy
        location = /nchan_status { nchan_stub_status; }
        location = /stub_status { stub_status; }
    }
}
EOF
    open my $fh, '>', "$dir/nginx.conf" or die "nginx.conf: $!\n";
    print $fh $conf;
    close $fh;
    $t->{conf} = "$dir/nginx.conf";
}

# one HTTP/1.0-style GET, the body (small answers only)
sub get_body {
    my ($port, $path) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
        Proto => 'tcp', Timeout => 5) or return '';
    print $s "GET $path HTTP/1.0\r\nHost: x\r\n\r\n";
    local $/;
    my $r = <$s> // '';
    $r =~ s/^.*?\r\n\r\n//s;
    return $r;
}

sub stub {
    my ($port) = @_;
    my $b = get_body($port, '/stub_status');
    my %s;
    @s{qw(active)} = $b =~ /Active connections:\s*(\d+)/;
    @s{qw(reading writing waiting)} =
        $b =~ /Reading:\s*(\d+)\s+Writing:\s*(\d+)\s+Waiting:\s*(\d+)/;
    return \%s;
}

sub nchan_status {
    my ($port) = @_;
    my $b = get_body($port, '/nchan_status');
    my %s;
    $s{$1} = $2 while $b =~ /^([a-z ]+?):\s*([\d.]+)/mg;
    return \%s;
}

# the worker's memory, kB: RSS (status), Pss, Private_Dirty (smaps_rollup)
sub mem {
    my ($pid) = @_;
    my %m;
    open my $fh, '<', "/proc/$pid/smaps_rollup" or die "smaps: $!\n";
    while (my $l = <$fh>) {
        $m{lc $1} = $2 if $l =~ /^(Rss|Pss|Private_Dirty):\s+(\d+) kB/;
    }
    return \%m;
}

# a process's CPU seconds (user + system)
my $TCK = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
sub cpu {
    my ($pid) = @_;
    open my $fh, '<', "/proc/$pid/stat" or return 0;
    my $l = <$fh>;
    $l =~ s/^.*\) //;
    my @f = split ' ', $l;
    return ($f[11] + $f[12]) / $TCK;
}

sub worker_pid {
    my ($t) = @_;
    for (1 .. 100) {
        my @p = $t->worker_pids;
        return $p[0] if @p;
        sleep 0.05;
    }
    die "no worker\n";
}

sub redis_info {
    my ($port, @sec) = @_;
    return FeedTest->redis_cmd_port($port, undef, 'INFO', @sec);
}

sub redis_cpu {
    my ($port) = @_;
    my $s = redis_info($port, 'cpu');
    my ($u) = $s =~ /^used_cpu_user:([\d.]+)/m;
    my ($y) = $s =~ /^used_cpu_sys:([\d.]+)/m;
    return ($u // 0) + ($y // 0);
}

sub redis_used {
    my ($port) = @_;
    my ($m) = redis_info($port, 'memory') =~ /^used_memory:(\d+)/m;
    return $m;
}

sub commandstats {
    my ($port) = @_;
    my $s = redis_info($port, 'commandstats');
    my %c;
    $c{$1} = $2 while $s =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    return \%c;
}

sub cmd_delta {
    my ($a, $b) = @_;
    my %d;
    for (keys %$b) {
        my $n = $b->{$_} - ($a->{$_} // 0);
        $n-- if $_ eq 'info';
        $d{$_} = $n if $n > 0;
    }
    return \%d;
}

# ---------------------------------------------------------------------
# the subscribers: children of at most $PER_CHILD sockets each

# $paths: [path, ...]; %o: headers => 1 (wait for each answer's headers,
# else only for the request written), accept => SSE header.  Returns a
# handle for subs_wait_done / subs_stop.
sub subs_start {
    my ($port, $paths, %o) = @_;
    my @kids;
    my $n = @$paths;
    for (my $i = 0; $i < $n; $i += $PER_CHILD) {
        my $last = min($i + $PER_CHILD, $n) - 1;
        my @mine = @$paths[$i .. $last];
        pipe(my $r, my $w) or die "pipe: $!\n";
        my $out = "$o{dir}/subs.$i";
        my $pid = fork();
        die "fork: $!\n" unless defined $pid;
        if ($pid == 0) {
            close $r;
            sub_child($port, \@mine, $w, $out, %o);
            POSIX::_exit(0);
        }
        close $w;
        $KIDS{$pid} = 1;
        push @kids, { pid => $pid, r => $r, out => $out, n => scalar @mine,
                      buf => '' };
    }
    my $h = { kids => \@kids };
    subs_wait($h, 'ready', 120) or die "subscribers not ready\n";
    $h->{ok} = sum(map { $_->{ok} // 0 } @kids);
    return $h;
}

# lines from the children until each said $what (ready <ok>, done)
sub subs_wait {
    my ($h, $what, $timeout) = @_;
    my $end = time + $timeout;
    my $sel = IO::Select->new(map { $_->{r} } @{ $h->{kids} });
    my %by = map { fileno($_->{r}) => $_ } @{ $h->{kids} };
    while (grep { !$_->{$what} } @{ $h->{kids} }) {
        my $left = $end - time;
        return 0 if $left <= 0;
        for my $fh ($sel->can_read(min($left, 1))) {
            my $k = $by{ fileno $fh };
            my $n = sysread($fh, my $d, 4096);
            if (!$n) { $sel->remove($fh); $k->{$_} = 1 for qw(ready done); next }
            $k->{buf} .= $d;
            while ($k->{buf} =~ s/^(\w+) ?(\d*)\n//) {
                $k->{$1} = 1;
                $k->{ok} = $2 if $1 eq 'ready';
            }
        }
    }
    return 1;
}

# each child's file: "<index> <first data time|-> <data events> <pings>"
# lines
sub subs_stop {
    my ($h) = @_;
    kill 'TERM', $_->{pid} for @{ $h->{kids} };
    my @res;
    for my $k (@{ $h->{kids} }) {
        waitpid($k->{pid}, 0);
        delete $KIDS{ $k->{pid} };
        close $k->{r};
        open my $fh, '<', $k->{out} or next;
        while (my $l = <$fh>) {
            my ($i, $t, $n, $p) = split ' ', $l;
            push @res, { t => ($t eq '-' ? undef : $t), n => $n, p => $p };
        }
        close $fh;
        unlink $k->{out};
    }
    return \@res;
}

sub sub_child {
    my ($port, $paths, $w, $out, %o) = @_;
    my $stop = 0;
    $SIG{TERM} = sub { $stop = 1 };
    my (@socks, @st);
    my $sel = IO::Select->new;
    my %idx;
    my $accept = $o{sse} ? "Accept: text/event-stream\r\n" : '';
    for my $i (0 .. $#$paths) {
        my $s;
        for (1 .. 50) {
            $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
                Proto => 'tcp') and last;
            sleep 0.05;
        }
        die "connect: $!\n" unless $s;
        syswrite($s, "GET $paths->[$i] HTTP/1.1\r\nHost: localhost\r\n"
            . $accept . "\r\n");
        $s->blocking(0);
        push @socks, $s;
        push @st, { buf => '', hdr => 0, first => undef, n => 0, dead => 0 };
        $idx{ fileno $s } = $i;
        $sel->add($s);
    }
    my $ready_sent = 0;
    my $done_sent = 0;
    my $headers = 0;
    syswrite($w, "ready " . scalar(@socks) . "\n"), $ready_sent = 1
        unless $o{headers};
    while (!$stop) {
        my @r = $sel->can_read(0.5);
        my $now = time;
        for my $s (@r) {
            my $i = $idx{ fileno $s };
            my $st = $st[$i];
            my $n = sysread($s, my $d, 65536);
            if (!$n) {
                next if !defined $n && $!{EAGAIN};
                $st->{dead} = 1;
                $sel->remove($s);
                $headers++ unless $st->{hdr}++;
                next;
            }
            $st->{buf} .= $d;
            if (!$st->{hdr}) {
                next unless $st->{buf} =~ s/^HTTP\/1\.1 (\d+)[^\n]*\n.*?\r\n\r\n//s;
                $st->{hdr} = 1;
                $st->{status} = $1;
                $headers++;
            }
            # one event per "data:" line at a line's start
            my $c = () = $st->{buf} =~ /(?:^|\n)data:/g;
            if ($c) {
                $st->{first} //= $now;
                $st->{n} += $c;
            }
            # nchan's heartbeat: "event: ping" and no data line
            $st->{p} += () = $st->{buf} =~ /(?:^|\n)event: ping\n/g;
            # keep only an unfinished line
            $st->{buf} =~ s/^.*\n//s;
        }
        if (!$ready_sent && $headers >= @socks) {
            my $ok = grep { ($_->{status} // 0) == 200 && !$_->{dead} } @st;
            syswrite($w, "ready $ok\n");
            $ready_sent = 1;
        }
        if ($ready_sent && !$done_sent && !grep { !defined $_->{first} } @st) {
            syswrite($w, "done\n");
            $done_sent = 1;
        }
    }
    open my $fh, '>', $out or POSIX::_exit(1);
    for my $i (0 .. $#st) {
        printf $fh "%d %s %d %d\n", $i,
            defined $st[$i]{first} ? sprintf('%.6f', $st[$i]{first}) : '-',
            $st[$i]{n}, $st[$i]{p} // 0;
    }
    close $fh;
}

# ---------------------------------------------------------------------
# the publisher: $conns keep-alive connections, each sending its share of
# POSTs pipelined; the time of the first byte sent, of the last answer,
# and the answers by status

sub publish_all {
    my ($port, $uids, $conns) = @_;
    my @c;
    for my $k (0 .. $conns - 1) {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
            Proto => 'tcp') or die "connect: $!\n";
        setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
        $s->blocking(0);
        push @c, { s => $s, out => '', in => '', want => 0 };
    }
    my $len = length $BODY;
    for my $i (0 .. $#$uids) {
        my $c = $c[$i % $conns];
        $c->{out} .= "POST /pub/$uids->[$i] HTTP/1.1\r\nHost: localhost\r\n"
            . "Content-Type: application/json\r\n"
            . "Content-Length: $len\r\n\r\n$BODY";
        $c->{want}++;
    }
    my %status;
    my $t0 = time;
    my $rs = IO::Select->new(map { $_->{s} } @c);
    my $ws = IO::Select->new(map { $_->{s} } @c);
    my %by = map { fileno($_->{s}) => $_ } @c;
    my $left = @$uids;
    my $end = $t0 + 120;
    while ($left > 0 && time < $end) {
        my ($r, $wr) = IO::Select->select($rs, $ws->count ? $ws : undef,
            undef, 1);
        for my $s (@{ $wr || [] }) {
            my $c = $by{ fileno $s };
            my $n = syswrite($s, $c->{out}, 65536);
            substr($c->{out}, 0, $n, '') if $n;
            $ws->remove($s) unless length $c->{out};
        }
        for my $s (@{ $r || [] }) {
            my $c = $by{ fileno $s };
            my $n = sysread($s, my $d, 262144);
            die "publisher: connection closed\n" unless $n || $!{EAGAIN};
            $c->{in} .= $d if $n;
            while ($c->{in} =~ /^HTTP\/1\.1 (\d+).*?\r\n\r\n/s) {
                my $st = $1;
                my $hl = $+[0];
                my ($cl) = substr($c->{in}, 0, $hl)
                    =~ /Content-Length:\s*(\d+)/i;
                $cl //= 0;
                last if length($c->{in}) < $hl + $cl;
                substr($c->{in}, 0, $hl + $cl, '');
                $status{$st}++;
                $left--;
            }
        }
    }
    my $t1 = time;
    close $_->{s} for @c;
    return { t0 => $t0, t1 => $t1, status => \%status, left => $left };
}

sub pct {
    my ($v, $p) = @_;
    return undef unless @$v;
    return $v->[ min($#$v, int($p / 100 * @$v)) ];
}

sub fmt_status { my $s = shift; join ' ', map { "$_:$s->{$_}" } sort keys %$s }

# ---------------------------------------------------------------------
# part 1: memory per idle stream

sub hold_socket {
    # accepts and never answers, never reads (kernel buffers only)
    my ($port) = @_;
    my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
        Listen => 4096, ReuseAddr => 1, Proto => 'tcp')
        or die "hold listen: $!\n";
    my $pid = fork();
    die "fork: $!\n" unless defined $pid;
    if ($pid == 0) {
        my @keep;
        $SIG{TERM} = sub { POSIX::_exit(0) };
        while (1) { my $c = $l->accept or next; push @keep, $c }
    }
    close $l;
    return $pid;
}

sub memory_run {
    my ($label, $kind, $server) = @_;
    my $t = FeedTest->new;
    my %o = (store => $kind eq 'nchan-redis' ? 'redis' : 'mem',
             server => $server);
    my $hold;
    if ($o{store} eq 'redis') {
        $t->start_redis;
        $o{redis_port} = $t->port('redis');
    }
    if ($kind eq 'proxy') {
        $o{upstream_port} = $t->port('hold');
        $hold = hold_socket($o{upstream_port});
    }
    nchan_conf($t, %o);
    $t->run;
    sleep 2 if $o{redis_port};
    my $port = $t->port('http');
    my $wp = worker_pid($t);

    my @uids = map { "u$_" } 1 .. $N;
    my $path = {
        'nchan-mem' => sub { "/users/$_[0]/timeline/stream" },
        'nchan-redis' => sub { "/users/$_[0]/timeline/stream" },
        echo => sub { "/hold/echo/$_[0]" },
        proxy => sub { "/hold/proxy/$_[0]" },
    }->{$kind};

    # a first round of 100 warms what is allocated once
    my $w = subs_start($port, [ map { $kind =~ /nchan/ ? $path->($_)
                                          : "/hold/warm/$_" }
                                    map { "w$_" } 1 .. 100 ],
        sse => 1, headers => ($kind =~ /nchan/ ? 1 : 0), dir => $t->dir);
    subs_stop($w);
    sleep 1.5;

    my $m0 = mem($wp);
    my $n0 = $kind =~ /nchan/ ? nchan_status($port) : {};
    my $r0 = $o{redis_port} ? redis_used($o{redis_port}) : 0;

    my $h = subs_start($port, [ map { $path->($_) } @uids ],
        sse => 1, headers => ($kind =~ /nchan/ ? 1 : 0), dir => $t->dir);
    # every request in nginx (Writing counts the stub_status one too)
    my $end = time + 30;
    while (time < $end) {
        my $s = stub($port);
        last if ($s->{writing} // 0) >= $N + 1;
        sleep 0.2;
    }
    sleep 2;
    my $st = stub($port);
    my $m1 = mem($wp);
    my $n1 = $kind =~ /nchan/ ? nchan_status($port) : {};
    my $r1 = $o{redis_port} ? redis_used($o{redis_port}) : 0;
    subs_stop($h);

    my $per = sub { ($m1->{$_[0]} - $m0->{$_[0]}) * 1024 / $N };
    my $shm = defined $n1->{'shared memory used'}
        ? ($n1->{'shared memory used'} - $n0->{'shared memory used'})
          * 1024 / $N : undef;
    my $line = sprintf "| %-12s | %-28s | %6d | %6.0f | %6.0f | %6.0f | %s | %s |",
        $kind, $label, $st->{writing} - 1, $per->('rss'), $per->('pss'),
        $per->('private_dirty'),
        defined $shm ? sprintf('%.0f', $shm) : '-',
        $o{redis_port} ? sprintf('%.0f', ($r1 - $r0) / $N) : '-';
    say_($line);
    # TERM: the held requests (echo_sleep 3600) would hold a QUIT back
    $t->stop_proc('nginx', 'TERM');
    if ($hold) { kill 'TERM', $hold; waitpid($hold, 0) }
    $t->stop_redis if $o{redis_port};
}

# ---------------------------------------------------------------------
# part 2: delivery

sub delivery_run {
    my ($kind) = @_;       # mem, redis, redis2 (two nodes)
    my $t = FeedTest->new;
    my %o = (store => $kind eq 'mem' ? 'mem' : 'redis');
    if ($o{store} eq 'redis') {
        $t->start_redis;
        $o{redis_port} = $t->port('redis');
    }
    nchan_conf($t, %o);
    $t->run;
    # nchan answers subscribers 503 until its Redis connection is up
    sleep 2 if $o{redis_port};
    my $port = $t->port('http');
    my $pubport = $port;
    my $u;
    if ($kind eq 'redis2') {
        $u = FeedTest->new;
        nchan_conf($u, %o);
        $u->run;
        sleep 2;
        $pubport = $u->port('http');
    }

    my @uids = map { "u$_" } 1 .. $N;
    my $h = subs_start($port, [ map { "/users/$_/timeline/stream" } @uids ],
        sse => 1, headers => 1, dir => $t->dir);
    say_("    part 2: only $h->{ok} subscribers answered 200 (of $N)")
        if $h->{ok} < $N;
    if ($o{redis_port}) {
        # nchan subscribes to each channel in Redis: wait for all
        my $end = time + 30;
        while (time < $end) {
            my $c = FeedTest->redis_cmd_port($o{redis_port}, undef,
                'PUBSUB', 'NUMPAT');
            my $ch = FeedTest->redis_cmd_port($o{redis_port}, undef,
                'PUBSUB', 'CHANNELS');
            last if ref $ch && @$ch >= $N;
            sleep 0.5;
        }
    }
    sleep 1;

    # one publish alone, its Redis commands (idle window subtracted)
    # and what the idle channels cost Redis meanwhile (10 s, no publish)
    my ($one, $idle, $idle10);
    if ($o{redis_port}) {
        my $c0 = commandstats($o{redis_port});
        sleep 10;
        my $c1 = commandstats($o{redis_port});
        $idle10 = cmd_delta($c0, $c1);
        sleep 1;
        $c0 = commandstats($o{redis_port});
        sleep 0.5;
        $c1 = commandstats($o{redis_port});
        $idle = cmd_delta($c0, $c1);
        my $p = publish_all($pubport, ['solo'], 1);
        sleep 0.5 - ($p->{t1} - $p->{t0});
        my $c2 = commandstats($o{redis_port});
        $one = cmd_delta($c1, $c2);
    }

    my $swp = worker_pid($t);
    my $pwp = $u ? worker_pid($u) : $swp;
    my ($sc0, $pc0) = (cpu($swp), cpu($pwp));
    my $rm0 = $o{redis_port} ? redis_used($o{redis_port}) : 0;
    my $rc0 = $o{redis_port} ? redis_cpu($o{redis_port}) : 0;
    my $shm0 = nchan_status($pubport)->{'shared memory used'} // 0;
    my $pub = publish_all($pubport, \@uids, $PUB_CONNS);
    subs_wait($h, 'done', 30);
    my ($sc1, $pc1) = (cpu($swp), cpu($pwp));
    my $rm1 = $o{redis_port} ? redis_used($o{redis_port}) : 0;
    my $rc1 = $o{redis_port} ? redis_cpu($o{redis_port}) : 0;
    my $shm1 = nchan_status($pubport)->{'shared memory used'} // 0;
    my $res = subs_stop($h);
    my @lat = sort { $a <=> $b }
        map { ($_->{t} - $pub->{t0}) * 1000 } grep { defined $_->{t} } @$res;
    my $got = @lat;
    my $rate = $N / ($pub->{t1} - $pub->{t0});
    my $cpu = $u ? sprintf('%.0f+%.0f', ($pc1 - $pc0) * 1e6 / $N,
                               ($sc1 - $sc0) * 1e6 / $N)
                 : sprintf('%.0f', ($sc1 - $sc0) * 1e6 / $N);
    say_(sprintf "| %-22s | %6d | %7.0f | %6d/%d | %7.0f | %7.0f | %7.0f | %s | %s |",
        { mem => 'memory store', redis => 'Redis store',
          redis2 => 'Redis, 2 nodes' }->{$kind},
        $N, $rate, $got, $N, pct(\@lat, 50) // -1, pct(\@lat, 99) // -1,
        $lat[-1] // -1, $cpu, fmt_status($pub->{status}));
    say_(sprintf "    stored per message: nchan shm %.0f B%s", ($shm1 - $shm0) * 1024 / $N,
        $o{redis_port} ? sprintf(', Redis used_memory %.0f B; Redis CPU %.0f us'
            . ' per publish', ($rm1 - $rm0) / $N, ($rc1 - $rc0) * 1e6 / $N) : '');
    if ($one) {
        my %net = %$one;
        for (keys %$idle) { $net{$_} -= $idle->{$_}; delete $net{$_} if $net{$_} <= 0 }
        say_("    Redis commands of one publish ($kind): "
            . join(', ', map { "$_=$net{$_}" } sort keys %net)
            . "; the 0.5 s before it, idle: "
            . join(', ', map { "$_=$idle->{$_}" } sort keys %$idle));
        my $ev = $idle10->{evalsha} // 0;
        say_(sprintf "    idle channels, 10 s before publishing: %s; %.2f"
            . " EVALSHA per channel per minute",
            join(', ', map { "$_=$idle10->{$_}" } sort keys %$idle10),
            $ev * 6 / $N);
    }
    $u->stop if $u;
    $t->stop;
    $t->stop_redis if $o{redis_port};
}

# ---------------------------------------------------------------------
# part 3: ngx_feed_module's hits with and without idle nchan subscribers

sub hits_part {
    my $t = FeedTest->new(no_access_log => 1);
    $t->start_backends;
    $t->port('http');
    my $conf = <<"EOF";
load_module $NCHAN_SO;
worker_processes 1;
worker_rlimit_nofile 50000;
thread_pool feedtp threads=4;
events { worker_connections 24000; }
http {
    %%FEED_BACKENDS%%
    nchan_shared_memory_size 256m;
    server {
        listen 127.0.0.1:%%PORT_HTTP%% backlog=4096;
        location ~ ^/users/([^/]+)/following/([^/]+)\$ { feed_follow \$1 \$2; }
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location ~ ^/users/(\\w+)/timeline/stream\$ {
            nchan_subscriber eventsource;
            nchan_channel_id timeline_\$1;
            nchan_eventsource_ping_interval $PING;
        }
        location ~ ^/users/([^/]+)/timeline\$ {
            feed_timeline \$1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache \$feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF
    $t->write_conf($conf);
    $t->run;
    my $port = $t->port('http');

    # ann follows bob and carl, who posted 20 posts
    for my $a (qw(bob carl)) {
        my $r = $t->http('PUT', "/users/ann/following/$a");
        die "follow: $r->{status}\n" unless $r->{status} == 204;
    }
    for my $i (1 .. 20) {
        my $a = $i % 2 ? 'bob' : 'carl';
        my $r = $t->http('POST', "/users/$a/posts",
            headers => { 'Content-Type' => 'application/json' },
            body => qq({"body": "post $i of $a"}));
        die "post: $r->{status}\n" unless $r->{status} == 201;
    }
    sleep 1;
    my $url = '/users/ann/timeline';
    my %seen;
    for (1 .. 50) {
        my $r = $t->get($url);
        $seen{ $r->{headers}{'x-feed-cache'} // '-' }++;
        last if ($r->{headers}{'x-feed-cache'} // '') eq 'LOCAL';
        sleep 0.05;
    }
    my $wp = worker_pid($t);
    my @uids = map { "s$_" } 1 .. $N;
    my @runs;
    for my $round (1 .. ($ENV{NCHAN_ROUNDS} || 3)) {
        for my $with (0, 1) {
            my $h;
            my $m0 = mem($wp);
            if ($with) {
                $h = subs_start($port,
                    [ map { "/users/$_/timeline/stream" } @uids ],
                    sse => 1, headers => 1, dir => $t->dir);
                sleep 2;
            }
            my $s0 = $t->get('/status')->{json};
            my $c0 = cpu($wp);
            my $out = `wrk -t1 -c50 -d10s --latency 'http://127.0.0.1:$port$url' 2>&1`;
            my $c1 = cpu($wp);
            my $s1 = $t->get('/status')->{json};
            my $m1 = mem($wp);
            my ($rps) = $out =~ /Requests\/sec:\s+([\d.]+)/;
            my ($p99) = $out =~ /^\s+99%\s+(\S+)/m;
            my $err = ($out =~ /Non-2xx or 3xx responses: (\d+)/) ? $1 : 0;
            my $local = ($s1->{local_pages}{answered_without_redis} // 0)
                - ($s0->{local_pages}{answered_without_redis} // 0);
            my $res = $h ? subs_stop($h) : [];
            my $pings = sum(0, map { $_->{p} } @$res);
            push @runs, { with => $with, rps => $rps };
            my ($reqs) = $out =~ /(\d+) requests in/;
            say_(sprintf "| %d | %-28s | %8.0f | %7s | %6d | %8d | %5.1f | %d | %.0f MB |",
                $round, $with ? "with $h->{ok} nchan streams" : 'without',
                $rps // 0, $p99 // '-', $err, $local,
                ($c1 - $c0) * 1e6 / ($reqs || 1), $pings,
                $m1->{rss} / 1024);
            sleep 3;
        }
    }
    my @w = map { $_->{rps} } grep { $_->{with} } @runs;
    my @wo = map { $_->{rps} } grep { !$_->{with} } @runs;
    say_(sprintf "    with/without (means): %.3f", (sum(@w) / @w) / (sum(@wo) / @wo));
    $t->stop;
}

# ---------------------------------------------------------------------

say_("# stream_nchan.pl: N=$N streams, one worker, nchan "
    . (`dpkg-query -W -f='\${Version}' libnginx-mod-nchan 2>/dev/null` || '?')
    . ", nginx " . ((`/usr/sbin/nginx -v 2>&1` =~ m{/(\S+)})[0] // '?')
    . ", SSE ping every ${PING}s, " . scalar(localtime));

if ($PHASES{1}) {
    say_('');
    say_('## 1. memory per idle stream (bytes per stream; RSS, PSS, private'
        . ' dirty of the worker; nchan shm in use; Redis used_memory)');
    say_('| what | server settings | held | RSS | PSS | priv.dirty | shm | Redis |');
    say_('|---|---|---|---|---|---|---|---|');
    my @small = map { [ "$_ $SMALL->{$_}", { $_ => $SMALL->{$_} } ] }
        sort keys %$SMALL;
    my @conf = ([ 'defaults', {} ], @small, [ 'all three small', $SMALL ]);
    memory_run($_->[0], 'echo', $_->[1]) for @conf;
    memory_run('defaults', 'proxy', {});
    memory_run($_->[0], 'nchan-mem', $_->[1]) for $conf[0], $conf[-1];
    memory_run($_->[0], 'nchan-redis', $_->[1]) for $conf[0], $conf[-1];
}

if ($PHASES{2}) {
    say_('');
    say_("## 2. delivery: one message to each of N channels, one subscriber"
        . " each ($PUB_CONNS publisher connections, pipelined)");
    say_('| store | channels | publishes/s | delivered | p50 ms | p99 ms | max ms | worker CPU us/publish | answers |');
    say_('|---|---|---|---|---|---|---|---|---|');
    for my $r (1 .. ($ENV{NCHAN_REPEAT} || 1)) {
        delivery_run($_) for qw(mem redis redis2);
    }
}

if ($PHASES{3}) {
    say_('');
    say_('## 3. ngx_feed_module hits (wrk -t1 -c50 -d10s, first page, LOCAL)'
        . ' with and without idle nchan streams on the same worker');
    say_('| round | streams | req/s | p99 | errors | LOCAL | worker CPU us/req | SSE pings seen | worker RSS |');
    say_('|---|---|---|---|---|---|---|---|---|');
    hits_part();
}
