#!/usr/bin/perl

# conf/edge.conf, the example for edge nodes, on real Redis and MongoDB:
#
#   - nginx -t accepts it (a self-signed certificate made here in place of
#     the file's paths);
#   - identity through auth_request, from the stand-in auth service at the
#     end of the file: a follow and a post with a user's bearer token are
#     theirs (204, 201), without a token 401 (the module's), with a token
#     the service refuses 401 (its refusal, as JSON), for someone else 403,
#     a header X-User of the client's own is no identity;
#   - a follow, a post, the follower's timeline read (MISS, then HIT), over
#     TLS (HTTP/1.1 and HTTP/2) as well; reads open to anonymous requests;
#   - the read state (a hidden post, the read marker, unread counts and
#     X-Feed-Unread, seen posts and unseen=1): alice's with her token; 401
#     without one, 403 with bob's, no X-Feed-Unread on an anonymous read;
#   - a delete leaves the timeline;
#   - plain HTTP sends clients to https (308);
#   - the access log has the user and the cache status of each read;
#   - past limit_req's burst of writes: 429 with the JSON error and
#     Retry-After.
#
# Only the ports, certificate paths and log paths are changed, and the
# API server listens on a plain port of the test too, for the harness's
# plain-HTTP client (curl checks TLS).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short is_error tl_ids read_state_is);
use Time::HiRes qw(sleep time);

plan(skip_all => 'no openssl or curl') unless -x '/usr/bin/openssl'
    && -x '/usr/bin/curl';

my $t = FeedTest->new;
my $dir = $t->dir;

# a self-signed certificate for the file's ssl_certificate
system("/usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
    . "-subj /CN=localhost -keyout $dir/privkey.pem "
    . "-out $dir/fullchain.pem 2> $dir/openssl.out") == 0
    or die "openssl req failed\n";

$t->start_backends;

my $conf = $t->conf_file('edge.conf',
    ports => { 80 => 'plain', 443 => 'https', 9000 => 'auth' });
$conf =~ s{/etc/ssl/feed/}{$dir/}g;
$conf =~ s{^(\s*)(listen\s+127\.0\.0\.1:%%PORT_HTTPS%%[^;]*;)$}
    {$1$2\n${1}listen 127.0.0.1:%%PORT_HTTP%%;}m
    or die "edge.conf: no listen 443 ssl\n";
$t->write_conf($conf);

my ($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts conf/edge.conf') or diag($out);

$t->run(qw(https plain auth));

my %TOKEN = (alice => 'Bearer demo-token-alice',
    bob => 'Bearer demo-token-bob');

# a request as $who (a user of %TOKEN, a token as is, or nobody: undef)
sub as {
    my ($who, $method, $uri, %o) = @_;
    my $auth = defined $who ? $TOKEN{$who} // $who : undef;
    my %h = (defined $auth ? (Authorization => $auth) : (),
        defined $o{body} ? ('Content-Type' => 'application/json') : (),
        %{ delete $o{headers} || {} });
    return $t->http($method, $uri, headers => \%h, %o);
}

# ------------------------------------------------------------- identity --

is(as('alice', 'PUT', '/users/alice/following/bob')->{status}, 204,
    'alice follows bob with her token');
is_error(as(undef, 'PUT', '/users/alice/following/carol'), 401,
    'unauthorized', 'a follow without a token');
is_error(as('Bearer forged', 'PUT', '/users/alice/following/carol'), 401,
    'unauthorized', 'a follow with a token the auth service refuses');
is_error(as('alice', 'PUT', '/users/bob/following/alice'), 403,
    'forbidden', "a follow in bob's name with alice's token");
is_error(as(undef, 'PUT', '/users/bob/following/alice',
    headers => { 'X-User' => 'bob' }), 401, 'unauthorized',
    'a follow with a header X-User of its own and no token');

my $r = as('bob', 'POST', '/users/bob/posts', body => '{"body": "hi"}');
is($r->{status}, 201, 'bob posts with his token') or diag(short($r));
my $id = $r->{json} && $r->{json}{id} // '';
is_error(as('alice', 'POST', '/users/bob/posts', body => '{"body": "x"}'),
    403, 'forbidden', "a post in bob's name with alice's token");
is_error(as(undef, 'POST', '/users/bob/posts', body => '{"body": "x"}'),
    401, 'unauthorized', 'a post without a token');

# ------------------------------------------------------------ timelines --

$r = as('alice', 'GET', '/users/alice/timeline');
is($r->{headers}{'x-feed-cache'}, 'MISS', 'the first read: MISS')
    or diag(short($r));
is("@{ tl_ids($r) }", $id, "bob's post in alice's timeline");
$r = as('alice', 'GET', '/users/alice/timeline');
is($r->{headers}{'x-feed-cache'}, 'HIT', 'the next one: HIT')
    or diag(short($r));
is("@{ tl_ids($r) }", $id, 'the same post');

$r = as(undef, 'GET', '/users/alice/timeline');
is("$r->{status} @{ tl_ids($r) }", "200 $id", 'an anonymous read');
is(as(undef, 'GET', "/posts/$id")->{status}, 200, 'an anonymous post read');
is(as(undef, 'GET', '/status')->{status}, 200, '/status asks no token');
$r = as(undef, 'GET', '/metrics');
is($r->{status}, 200, '/metrics asks no token');
like($r->{body}, qr/^feed_timeline_reads_total\{cache="HIT"\} [1-9]/m,
    '/metrics counted the HIT');
is_error(as(undef, 'GET', '/no/such/thing'), 404, 'not_found',
    'an unknown path');

# TLS: curl, as clients do
sub curl {
    my (@args) = @_;
    open(my $fh, '-|', '/usr/bin/curl', '-sk', '--max-time', '10',
        @args) or die "curl: $!\n";
    my $o = do { local $/; <$fh> };
    close $fh;
    return $o // '';
}

my $https = 'https://127.0.0.1:' . $t->port('https');
my $tr = FeedTest::parse_response(curl('--http1.1', '-i', '-H',
    "Authorization: $TOKEN{alice}", "$https/users/alice/timeline"));
# a hit: from Redis, or from the copy of a worker that read it twice
like("$tr->{status} " . ($tr->{headers}{'x-feed-cache'} // '') . " @{
    tl_ids($tr) }", qr/^200 (?:HIT|LOCAL) \Q$id\E\z/,
    'the timeline over TLS')
    or diag(short($tr));
is(curl('--http2', '-o', '/dev/null', '-w', '%{http_version}',
    "$https/users/alice/timeline"), '2', 'HTTP/2 over TLS');

$r = $t->get('/users/alice/timeline', port => $t->port('plain'));
is("$r->{status} " . ($r->{headers}{location} // ''),
    '308 https://localhost/users/alice/timeline', 'plain HTTP: to https');

# the access log: who, what, the cache status; each worker writes its
# lines at least once a second (buffer=64k flush=1s)
my $tl = qr{"GET /users/alice/timeline HTTP/1\.1"};
my %want = (
    'the MISS' =>
        qr{^127\.0\.0\.1 alice \[[^]]+\] $tl 200 \d+ \S+ cache=MISS auth=[\d.]+$}m,
    'a HIT' => qr{^127\.0\.0\.1 alice \[[^]]+\] $tl 200 \d+ \S+ cache=HIT }m,
    'a refused write, no user' =>
        qr{^127\.0\.0\.1 - \[[^]]+\] "PUT /users/alice/following/carol HTTP/1\.1" 401 }m,
);
my $log = $t->wait_for(5, sub {
    my $l = slurp("$dir/feed-access.log");
    return (grep { $l !~ $_ } values %want) ? undef : $l;
}) // slurp("$dir/feed-access.log");
like($log, $want{$_}, "access log: $_") for sort keys %want;

sub slurp {
    open my $fh, '<', $_[0] or return '';
    local $/;
    return <$fh>;
}

# ----------------------------------------------------------- read state --

# hidden posts, the read marker, unread counts, seen posts: alice's own,
# with her token; without one 401, with bob's 403.  The writes' burst
# refilled first (10 a second)
sleep 2.1;
my @ids = reverse map { my $p = as('bob', 'POST', '/users/bob/posts',
    body => qq({"body": "more $_"})); $p->{json} && $p->{json}{id} } 1, 2;
push @ids, $id;
ok($t->wait_for(5, sub { (tl_ids(as('alice', 'GET',
    '/users/alice/timeline?limit=3'))->[0] // '') eq ($ids[0] // 'none') }),
    'two more posts of bob in alice\'s timeline');
read_state_is($t, 'alice', \@ids, 'read state',
    headers => { Authorization => $TOKEN{alice} });
for my $u ('/users/alice/timeline/unread', '/users/alice/timeline/marker',
    '/users/alice/hidden')
{
    is_error(as(undef, 'GET', $u), 401, 'unauthorized', "$u: no token");
    is_error(as('bob', 'GET', $u), 403, 'forbidden', "$u: bob's token");
}
is_error(as(undef, 'POST', '/users/alice/seen', body => "[\"$id\"]"),
    401, 'unauthorized', 'seen posts without a token');
$r = as(undef, 'GET', '/users/alice/timeline');
ok($r->{status} == 200 && !exists $r->{headers}{'x-feed-unread'},
    'an anonymous read of her timeline: no X-Feed-Unread') or diag(short($r));

is(as('bob', 'DELETE', "/users/bob/posts/$_")->{status}, 204,
    'bob deletes a post') for @ids;
$r = as('alice', 'GET', '/users/alice/timeline');
is("$r->{status} @{ tl_ids($r) }", '200 ', 'the timeline without them');

# -------------------------------------------------------------- limits --

# writes: 10 a second, bursts of 20, per address
sleep 2.1;
# at once (as t/shipped_conf.t): one at a time, a follow slower than the
# rate (a busy machine, MongoDB's few round trips) would never meet it
my $t0 = time;
my @res = map { $t->http_end($_) }
    map { $t->http_start('PUT', "/users/alice/following/u$_",
              headers => { Authorization => $TOKEN{alice} }) } 1 .. 40;
my $took = time - $t0;
my @limited = grep { $_->{status} == 429 } @res;
my @other = grep { $_->{status} != 429 && $_->{status} != 204 } @res;
ok(@limited && !@other && @res - @limited <= 20 + 10 * $took + 2,
    '40 follows at once: past 20, 429: '
    . join(' ', map { $_->{status} } @res) . sprintf(' in %.2f s', $took));
is_error($limited[0] || {}, 429, 'too_many_requests', 'a limited write');
is($limited[0] && $limited[0]{headers}{'retry-after'}, 1,
    'with Retry-After');
is(as('alice', 'GET', '/users/alice/timeline')->{status}, 200,
    'reads go on');

$t->done;
