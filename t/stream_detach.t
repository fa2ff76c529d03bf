#!/usr/bin/perl

# Live timelines on HTTP/1.x let their request go once live (issue 31's
# memory target): the stream writes to the connection itself from then on.
# What a client sees must not change, byte for byte:
#
#   - HTTP/1.0: close-delimited, no chunk framing in the bytes, events
#     arrive, the end of the stream is the connection closed;
#   - HTTP/1.1: valid chunked framing, checked on the raw bytes through
#     several events, and the last chunk "0\r\n\r\n" on a reload;
#   - the access log line written when the stream goes live (status 200),
#     not when it ends;
#   - bytes a client sends after its request are dropped, the stream goes
#     on; a client that closes its end is a stream gone (/status);
#   - stub_status still counts a live stream as writing;
#   - HTTP/2 (h2c, prior knowledge, curl): the request-bound path, events
#     arrive;
#   - TLS (HTTP/1.1): the same chunked bytes through ngx_ssl_send_chain,
#     and its last chunk on the reload;
#   - a graceful stop with live streams: no alert.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
my $dir = $t->dir;

# TLS when there is what it takes: a self-signed certificate
my $TLS = -x '/usr/bin/openssl' && eval { require IO::Socket::SSL; 1 }
    && system("/usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
        . "-subj /CN=localhost -keyout $dir/key.pem -out $dir/cert.pem "
        . "2> $dir/openssl.out") == 0;
my $TLS_LISTEN = $TLS ? "listen 127.0.0.1:%%PORT_TLS%% ssl;\n"
    . "        ssl_certificate $dir/cert.pem;\n"
    . "        ssl_certificate_key $dir/key.pem;" : '';

$t->start_redis;
$t->start_mongo;

(my $conf = <<'EOF2') =~ s/%%TLS_LISTEN%%/$TLS_LISTEN/;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;
    feed_cache_size 40;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        listen 127.0.0.1:%%PORT_H2%% http2;
        %%TLS_LISTEN%%
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
        location = /stub { stub_status; }
    }
}
EOF2
$t->write_conf($conf)->run('h2', $TLS ? 'tls' : ());

ok($t->wait_for(10, sub {
    my $j = $t->get('/status')->{json} or return 0;
    $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch}
        && $j->{pull}{watch}{tracking};
}), 'nginx up, the watch tracking');

my $port = $t->port('http');

sub post {
    my ($a, $body) = @_;
    my $r = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    die "post: $r->{status}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}
sub streams { $t->get('/status')->{json}{streams}{streams} // -1 }

# a raw client: the request as given, then the bytes as they come;
# tls => 1: through TLS, on the TLS port
sub raw_open {
    my ($req, %o) = @_;
    my $s = $o{tls}
        ? IO::Socket::SSL->new(PeerAddr => '127.0.0.1:' . $t->port('tls'),
            SSL_verify_mode => 0)
        : IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
            Proto => 'tcp');
    $s or die "connect: $!\n";
    syswrite($s, $req);
    return { sock => $s, bytes => '', eof => 0 };
}
# reads until the bytes match $re or $timeout passed; true when matched
sub raw_until {
    my ($c, $re, $timeout) = @_;
    my $end = time + ($timeout // 3);
    while ($c->{bytes} !~ $re) {
        my $left = $end - time;
        return 0 if $left <= 0 || $c->{eof};
        # (TLS: what the socket's buffer holds is not seen by select)
        next unless ($c->{sock}->can('pending') && $c->{sock}->pending)
            || IO::Select->new($c->{sock})->can_read($left);
        my $n = sysread($c->{sock}, my $b, 65536);
        if (!$n) {
            $c->{eof} = 1;
            next;
        }
        $c->{bytes} .= $b;
    }
    return 1;
}
sub raw_closed {
    my ($c, $timeout) = @_;
    raw_until($c, qr/(?!)/, $timeout // 5);
    return $c->{eof};
}
# the body of a chunked response, strictly: every chunk "hex CRLF data
# CRLF"; (body, the last chunk seen, error)
sub dechunk {
    my ($bytes) = @_;
    my ($body, $last) = ('', 0);
    while (length $bytes) {
        $bytes =~ s/^([0-9a-f]+)\r\n//
            or return ($body, $last, 'no chunk size at: '
                . substr($bytes, 0, 20));
        my $n = hex $1;
        if ($n == 0) {
            return ($body, 1, $bytes eq "\r\n" ? undef
                : 'not CRLF after the last chunk');
        }
        return ($body, $last, 'a chunk cut short') if length $bytes < $n + 2;
        $body .= substr($bytes, 0, $n, '');
        $bytes =~ s/^\r\n// or return ($body, $last, 'no CRLF after data');
    }
    return ($body, $last, undef);
}
sub access_lines {
    my ($re) = @_;
    open my $fh, '<', $t->dir . '/access.log' or return ();
    return grep { $_ =~ $re } <$fh>;
}

is($t->http('PUT', '/users/ann/following/bob')->{status}, 204,
    'ann follows bob');
is($t->http('PUT', '/users/dan/following/bob')->{status}, 204,
    'dan follows bob');
my $p0 = post('bob', 'old');
ok($t->wait_for(5, sub {
    ($t->get('/users/ann/timeline?limit=1')->{json}{items}[0]{id} // '')
        eq $p0 }), 'the old post in ann\'s timeline');
ok($t->wait_for(5, sub {
    ($t->get('/users/dan/timeline?limit=1')->{json}{items}[0]{id} // '')
        eq $p0 }), 'and in dan\'s (his list made: the fanout delivers to it)');

# ---------------------------------------------------------- HTTP/1.0 --

my $h10 = raw_open("GET /users/ann/timeline/stream HTTP/1.0\r\n"
    . "Host: x\r\nAccept: text/event-stream\r\n\r\n");
ok(raw_until($h10, qr/\r\n\r\n:\n\n/), 'HTTP/1.0: the header, then ":"');
like($h10->{bytes}, qr{^HTTP/1\.1 200 }, 'HTTP/1.0: 200');
unlike($h10->{bytes}, qr/^Transfer-Encoding:/mi,
    'HTTP/1.0: no Transfer-Encoding');
sleep 0.3;

# ---------------------------------------------------------- HTTP/1.1 --

my $h11 = raw_open("GET /users/ann/timeline/stream HTTP/1.1\r\n"
    . "Host: x\r\nAccept: text/event-stream\r\n\r\n");
ok(raw_until($h11, qr/\r\n\r\n.*:\n\n\r\n/s),
    'HTTP/1.1: the header, then ":"');
like($h11->{bytes}, qr/^Transfer-Encoding: chunked\r$/mi,
    'HTTP/1.1: chunked');
sleep 0.3;

my $tls;
if ($TLS) {
    $tls = raw_open("GET /users/ann/timeline/stream HTTP/1.1\r\n"
        . "Host: x\r\n\r\n", tls => 1);
    ok(raw_until($tls, qr/\r\n\r\n.*:\n\n\r\n/s),
        'TLS: the header, then ":"');
    sleep 0.3;
}

# the access log line is there once the stream is live: its request went
my @log = access_lines(
    qr{"GET /users/ann/timeline/stream HTTP/1\.[01]" 200 });
is(scalar @log, $TLS ? 3 : 2,
    'the access log has the live streams, status 200')
    or diag(join '', @log);

my @p = map { post('bob', "live $_") } 1 .. 3;
ok(raw_until($h10, qr/data: .*live 3/), 'HTTP/1.0: the events arrive');
my ($head10, $body10) = split /\r\n\r\n/, $h10->{bytes}, 2;
is(scalar(() = $body10 =~ /^event: update$/mg), 3, 'HTTP/1.0: 3 updates');
unlike($body10, qr/^[0-9a-f]+\r$/m, 'HTTP/1.0: no chunk framing');
like($body10, qr/^id: $p[2]$/m, 'HTTP/1.0: the newest with its id');

ok(raw_until($h11, qr/live 3/), 'HTTP/1.1: the events arrive');

# extra bytes after the request: dropped, the stream goes on
syswrite($h11->{sock}, "GET /x HTTP/1.1\r\nHost: x\r\n\r\nnonsense\r\n");
sleep 0.3;
push @p, post('bob', 'live 4');
ok(raw_until($h11, qr/live 4/), 'bytes sent after the request: dropped, '
    . 'the stream goes on');

my ($head11, $chunked) = split /\r\n\r\n/, $h11->{bytes}, 2;
my ($body11, $last, $err) = dechunk($chunked);
ok(!defined $err, 'HTTP/1.1: valid chunked framing through the events')
    or diag("$err\n$chunked");
ok(!$last, 'no last chunk yet');
is(scalar(() = $body11 =~ /^event: update$/mg), 4, 'HTTP/1.1: 4 updates');
unlike($body11, qr/HTTP|nonsense/, 'nothing of the extra bytes sent back');

SKIP: {
    skip 'no openssl or IO::Socket::SSL', 3 unless $TLS;

    ok(raw_until($tls, qr/live 4/), 'TLS: the events arrive');
    syswrite($tls->{sock}, "nonsense\r\n\r\n");
    sleep 0.3;
    push @p, post('bob', 'live 5');
    ok(raw_until($tls, qr/live 5/), 'TLS: bytes sent after: dropped');
    my ($body, $last, $err)
        = dechunk((split /\r\n\r\n/, $tls->{bytes}, 2)[1]);
    ok(!defined $err && !$last && $body =~ /live 5/,
        'TLS: valid chunked framing') or diag($err);
}
ok(raw_until($h11, qr/live 5/), 'HTTP/1.1: and the next');

my $n = $TLS ? 3 : 2;
is(streams(), $n, "status: $n streams");

# stub_status: the live streams are counted as writing (and the request
# asking for it)
my $stub = $t->get('/stub')->{body} // '';
like($stub, qr/Writing: @{[ $n + 1 ]} /,
    'stub_status: the streams are writing') or diag($stub);

# ---------------------------------------------- a client that goes --

my $h3 = raw_open("GET /users/dan/timeline/stream HTTP/1.1\r\n"
    . "Host: x\r\n\r\n");
ok(raw_until($h3, qr/:\n\n\r\n/), 'one more stream');
sleep 0.3;
ok($t->wait_for(3, sub { streams() == $n + 1 }), 'status: one more');
close $h3->{sock};
ok($t->wait_for(3, sub { streams() == $n }),
    'a client that closed its end: its stream gone');
$stub = $t->get('/stub')->{body} // '';
like($stub, qr/Active connections: @{[ $n + 1 ]} .*Writing: @{[ $n + 1 ]} /s,
    'stub_status: its connection gone, not writing')
    or diag($stub);

# ------------------------------------------------------------ HTTP/2 --

SKIP: {
    skip 'no curl with HTTP/2', 7
        unless `curl -V 2>/dev/null` =~ /^Features:.*\bHTTP2\b/m;

    my $out = $t->dir . '/h2.out';
    my $pid = fork() // die "fork: $!\n";
    if (!$pid) {
        open STDOUT, '>', $out or die;
        open STDERR, '>', "$out.err";
        exec('curl', '-sN', '--http2-prior-knowledge', '-D', "$out.head",
            '--max-time', '20', 'http://127.0.0.1:' . $t->port('h2')
            . '/users/dan/timeline/stream');
        exit 1;
    }
    my $slurp = sub { open my $fh, '<', $_[0] or return ''; local $/;
        <$fh> // '' };
    ok($t->wait_for(5, sub { $slurp->($out) =~ /^:$/m }), 'HTTP/2: open');
    like($slurp->("$out.head"), qr{^HTTP/2 200}, 'HTTP/2: 200');
    my $id = post('bob', 'live h2');
    ok($t->wait_for(5, sub { $slurp->($out) =~ /^id: $id$/m }),
        'HTTP/2: the event arrives') or diag($slurp->($out));
    is(streams(), $n + 1, 'status: the HTTP/2 stream counted');
    my $h2log = qr{"GET /users/dan/timeline/stream HTTP/2\.0" 200 };
    is(scalar(access_lines($h2log)), 0,
        'HTTP/2: request-bound, no access log line while it lives');
    kill 'TERM', $pid;
    waitpid($pid, 0);
    ok($t->wait_for(3, sub { streams() == $n }), 'HTTP/2: gone with curl');
    ok($t->wait_for(3, sub { access_lines($h2log) == 1 }),
        'HTTP/2: its access log line when it ends');
}

# ---------------------------------------------------- reload: the end --

ok($t->reload(15), 'reload: new workers');
ok(raw_closed($h11), 'HTTP/1.1: closed after the reload');
($body11, $last, $err) = dechunk((split /\r\n\r\n/, $h11->{bytes}, 2)[1]);
ok(!defined $err && $last, 'HTTP/1.1: ended by the last chunk')
    or diag($err // 'no last chunk');
ok(raw_closed($h10), 'HTTP/1.0: closed after the reload');
SKIP: {
    skip 'no openssl or IO::Socket::SSL', 2 unless $TLS;
    ok(raw_closed($tls), 'TLS: closed after the reload');
    my ($body, $last, $err)
        = dechunk((split /\r\n\r\n/, $tls->{bytes}, 2)[1]);
    ok(!defined $err && $last, 'TLS: ended by the last chunk')
        or diag($err // 'no last chunk');
}
($head10, $body10) = split /\r\n\r\n/, $h10->{bytes}, 2;
unlike($body10, qr/^0\r$/m, 'HTTP/1.0: no last chunk');

# ---------------------------------------------- graceful stop, live --

my $s = FeedTest::SSE->open(port => $port,
    path => '/users/ann/timeline/stream');
is($s->status, 200, 'a stream on the new worker');
ok($t->wait_for(5, sub { streams() == 1 }), 'status: 1 stream');

$t->done;
