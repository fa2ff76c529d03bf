#!/usr/bin/perl

# conf/nginx.conf as shipped, on real Redis and MongoDB: the API works
# (the graph, posts, timelines, blocks and mutes, and the read state:
# hidden posts, the read marker, unread counts, seen posts); every
# request nginx itself rejects (a malformed request line, bad headers, a
# URI or headers too large) is answered with its 4xx and the JSON error
# body, never nginx's HTML page or a 500; its rate limits answer 429 with
# the JSON error and Retry-After past their bursts.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(short is_error follow_each none_failed post parallel
    tl_ids read_state_is);
use Time::HiRes qw(time sleep);

my $t = FeedTest->new;

$t->start_backends;
$t->write_conf($t->shipped_conf)->run;

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

sleep 2.1;
my $t0 = time;
my @res = parallel($t, 50, map { [ 'GET', '/users/sa/timeline' ] } 1 .. 200);
my $took = time - $t0;
my @limited = grep { $_->{status} == 429 } @res;
my @other = grep { $_->{status} != 429 && $_->{status} != 200 } @res;
ok(!@other, '200 reads at once: 200 or 429') or diag(statuses_of(@res));
ok(@res - @limited <= 100 + 50 * $took + 2,
    'no more than the burst and the rate answered: ' . statuses_of(@res)
    . sprintf(' in %.2f s', $took));
ok(@limited, 'past them, 429');
is_error($limited[0] || {}, 429, 'too_many_requests', 'a limited read');
is($limited[0] && $limited[0]{headers}{'retry-after'}, 1, 'with Retry-After');

sleep 2.1;
# at once, as the reads above: one at a time, a follow slower than the
# rate (a busy machine, MongoDB's few round trips) would never meet it
$t0 = time;
@res = parallel($t, 40, map { [ 'PUT', "/users/rl/following/rl$_" ] }
    1 .. 40);
$took = time - $t0;
@limited = grep { $_->{status} == 429 } @res;
@other = grep { $_->{status} != 429 && $_->{status} != 204 } @res;
ok(@limited && !@other && @res - @limited <= 20 + 10 * $took + 2,
    '40 follows at once: past 20, 429: ' . statuses_of(@res)
    . sprintf(' in %.2f s', $took));
is($t->get('/users/sa/timeline')->{status}, 200,
    'a read is not limited by the writes');

$t->done;
