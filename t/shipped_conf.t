#!/usr/bin/perl

# conf/nginx.conf as shipped, on real Redis and MongoDB: the API works
# (the graph, posts, timelines, blocks and mutes, and the read state:
# hidden posts, the read marker, unread counts, seen posts); every
# request nginx itself rejects (a malformed request line, bad headers, a
# URI or headers too large) is answered with its 4xx and the JSON error
# body, never nginx's HTML page or a 500; its rate limits answer 429 with
# the JSON error and Retry-After past their bursts to any address but
# this host's and the trusted ones, a proxied client's real address
# included (the configuration as behind a proxy on this host: requests
# with X-Forwarded-For come from the address they name there).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(short is_error follow_each none_failed post parallel
    tl_ids read_state_is behind_proxy);
use Time::HiRes qw(time sleep);

my $t = FeedTest->new;

# a client of another host (TEST-NET-3), and one made trusted
my $OTHER = '203.0.113.7';
my $TRUSTED = '203.0.113.9';

$t->start_backends;
$t->write_conf(behind_proxy($t->shipped_conf, $TRUSTED))->run;

# ------------------------------------------------------------ the API works --

none_failed([ follow_each($t, 'sb', 'sa') ], 'sa follows sb');

my $id = post($t, 'sb', 'hello');
ok($id, 'sb posts');

# /metrics, restricted as /status is, answers the local host
my $m = $t->get('/metrics');
is($m->{status}, 200, 'GET /metrics from 127.0.0.1: 200') or diag(short($m));
is($m->{headers}{'content-type'} // '',
    'text/plain; version=0.0.4; charset=utf-8', '/metrics: the text format');
like($m->{body}, qr/^feed_posts_created_total [1-9]/m,
    '/metrics: the post counted');

my $r = $t->wait_for(5, sub {
    my $r = $t->get('/users/sa/timeline');
    return $r->{status} == 200 && @{$r->{json}{items} || []} ? $r : undef;
}) || $t->get('/users/sa/timeline');
is(join(' ', map { $_->{id} } @{$r->{json}{items} || []}), $id // '',
    'the post in the timeline') or diag(short($r));

# blocks and mutes: the shipped locations
for my $w (qw(blocks mutes)) {
    is($t->http('PUT', "/users/sa/$w/sx")->{status}, 204, "PUT $w");
    my $l = $t->get("/users/sa/$w");
    is(join(' ', map { $_->{id} } @{$l->{json}{items} || []}), 'sx',
        "GET $w") or diag(short($l));
}
is_error($t->http('PUT', '/users/sx/following/sa'), 403, 'blocked',
    'a follow of a blocking user');
is($t->http('DELETE', "/users/sa/$_/sx")->{status}, 204, "DELETE $_")
    for qw(blocks mutes);

# read state: hidden posts, the read marker, unread counts, seen posts
my @ids = ((reverse map { post($t, 'sb', "more $_") } 1, 2), $id);
ok($t->wait_for(5, sub {
    (tl_ids($t->get('/users/sa/timeline?limit=3'))->[0] // '')
        eq ($ids[0] // 'none') }), 'two more posts in the timeline');
read_state_is($t, 'sa', \@ids, 'read state');

is_error($t->get('/no/such/thing'), 404, 'not_found', 'unknown path');
is_error($t->get('/_error/400'), 404, 'not_found', 'error page asked directly');

# the live timeline and a long poll: the shipped locations
{
    my $s = FeedTest::SSE->open(port => $t->port('http'),
        path => '/users/sa/timeline/stream');
    is($s->status, 200, 'GET /users/sa/timeline/stream: 200');
    is($s->header('x-accel-buffering'), 'no', 'not buffered by proxies');
    my $h = $t->http_start('GET',
        "/users/sa/timeline?since_id=$ids[0]&wait=20", timeout => 30);
    sleep 0.3;
    my $live = post($t, 'sb', 'live');
    my $ev;
    for (1 .. 5) {
        $ev = $s->next_event(timeout => 3) or last;
        last if $ev->{event} eq 'update';
    }
    is($ev && $ev->{id}, $live, 'the stream: the new post as an update');
    my $w = $t->http_end($h);
    is(join(' ', map { $_->{id} } @{$w->{json}{items} || []}), $live // '',
        'the long poll: answered with the new post');
    $s->close;
}

# ------------------------------------------------- what nginx itself rejects --

my $line = "HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
my $long = 'a' x 9000;

my @bad = (
    # request lines nginx cannot parse: no URI yet when the error page runs
    [ 'space in the path', "GET /users/a b/timeline $line\r\n", 400 ],
    [ '%00 in the path', "GET /x%00y $line\r\n", 400 ],
    [ 'bad escape in the path', "GET /users/a%zz/timeline $line\r\n", 400 ],
    [ 'path above the root', "GET /users/../../x $line\r\n", 400 ],
    [ 'bad method character', "G\@T /users/a/timeline $line\r\n", 400 ],
    [ 'lowercase method', "get /users/a/timeline $line\r\n", 400 ],
    [ 'bad HTTP version', "GET /users/a/timeline HTTP/1.x\r\n\r\n", 400 ],
    [ 'control character', "GET /users/a\x01/timeline $line\r\n", 400 ],
    [ 'URI too long', "GET /$long $line\r\n", 414 ],
    [ 'unsupported HTTP version', "GET /users/a/timeline HTTP/9.1\r\n"
        . "Host: localhost\r\n\r\n", 505 ],

    # header errors: the request line was fine
    [ 'no Host header', "GET /users/a/timeline HTTP/1.1\r\n\r\n", 400 ],
    [ 'two Host headers', "GET /users/a/timeline $line" . "Host: b\r\n\r\n",
        400 ],
    [ 'bad header line', "GET /users/a/timeline $line" . "Bad Header\r\n\r\n",
        400 ],
    [ 'bad Content-Length', "POST /users/a/posts $line"
        . "Content-Length: x\r\n\r\n", 400 ],
    [ 'header too large', "GET /users/a/timeline $line"
        . "X-Big: $long\r\n\r\n", 400 ],
    [ 'unknown Transfer-Encoding', "POST /users/a/posts $line"
        . "Transfer-Encoding: foo\r\n\r\n", 501 ],
);

my %code = (400 => 'bad_request', 414 => 'uri_too_long',
    501 => 'not_implemented', 505 => 'http_version_not_supported');

for my $case (@bad) {
    my ($name, $raw, $status) = @$case;
    my $r = $t->http('GET', '/', raw => $raw);
    is_error($r, $status, $code{$status}, $name);
}

unlike($t->error_log, qr/empty URI in redirect/,
    'no redirect of a request without URI to a named location');

# ---------------------------------------------------------- rate limits --

# 50 requests a second per address, bursts of 100; writes 10 and 20

sub statuses_of {
    my %n;
    $n{$_->{status}}++ for @_;
    return join ', ', map { "$n{$_} x $_" } sort keys %n;
}

# $n requests of $method $uri$i (a post's body for POST), all at once
# from $from (this host without it); the responses and the seconds taken
sub burst {
    my ($from, $n, $method, $uri) = @_;
    my $body = $method eq 'POST' ? '{"body": "burst"}' : undef;
    my $h = $from ? { 'X-Forwarded-For' => $from } : {};
    my $t0 = time;
    my @res = parallel($t, 50,
        map { [ $method, $uri . ($method eq 'PUT' ? $_ : ''), $body, $h ] }
            1 .. $n);
    return (time - $t0, @res);
}

# every answer of a burst is $status: none limited
sub none_limited {
    my ($status, $name, $took, @res) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    ok(!grep({ $_->{status} != $status } @res),
        "$name: all $status, " . statuses_of(@res)
        . sprintf(' in %.2f s', $took));
}

# this host: far past the bursts and the rates, nothing refused
none_limited(200, '300 reads from 127.0.0.1',
    burst(undef, 300, 'GET', '/users/sa/timeline'));
none_limited(201, '300 posts from 127.0.0.1',
    burst(undef, 300, 'POST', '/users/lo/posts'));
none_limited(204, '300 follows from 127.0.0.1',
    burst(undef, 300, 'PUT', '/users/lo/following/lo'));

# a trusted address, behind the proxy
none_limited(200, "300 reads from $TRUSTED (trusted)",
    burst($TRUSTED, 300, 'GET', '/users/sa/timeline'));
none_limited(204, "100 follows from $TRUSTED (trusted)",
    burst($TRUSTED, 100, 'PUT', '/users/tr/following/tr'));

# any other address, behind the proxy: limited by it
my ($took, @res) = burst($OTHER, 200, 'GET', '/users/sa/timeline');
my @limited = grep { $_->{status} == 429 } @res;
my @other = grep { $_->{status} != 429 && $_->{status} != 200 } @res;
ok(!@other, "200 reads at once from $OTHER: 200 or 429")
    or diag(statuses_of(@res));
ok(@res - @limited <= 100 + 50 * $took + 2,
    'no more than the burst and the rate answered: ' . statuses_of(@res)
    . sprintf(' in %.2f s', $took));
ok(@limited, 'past them, 429');
is_error($limited[0] || {}, 429, 'too_many_requests', 'a limited read');
is($limited[0] && $limited[0]{headers}{'retry-after'}, 1, 'with Retry-After');
is($t->get('/users/sa/timeline')->{status}, 200,
    'meanwhile 127.0.0.1 reads: its own limit, none');

sleep 2.1;
# at once, as the reads above: one at a time, a follow slower than the
# rate (a busy machine, MongoDB's few round trips) would never meet it
($took, @res) = burst($OTHER, 40, 'PUT', '/users/rl/following/rl');
@limited = grep { $_->{status} == 429 } @res;
@other = grep { $_->{status} != 429 && $_->{status} != 204 } @res;
ok(@limited && !@other && @res - @limited <= 20 + 10 * $took + 2,
    "40 follows at once from $OTHER: past 20, 429: " . statuses_of(@res)
    . sprintf(' in %.2f s', $took));
is_error($limited[0] || {}, 429, 'too_many_requests', 'a limited write');
is($t->get('/users/sa/timeline',
    headers => { 'X-Forwarded-For' => $OTHER })->{status}, 200,
    'a read is not limited by the writes');

# limit_req names the address it limited: the real one, never this host
my @log = $t->error_log =~ /limiting requests, [^\n]*client: (\S+),/g;
my %by = map { $_ => 1 } @log;
is(join(' ', sort keys %by), $OTHER, "requests limited: of $OTHER only");

$t->done;
