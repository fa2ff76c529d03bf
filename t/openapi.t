#!/usr/bin/perl

# docs/openapi.yaml is the API: a real validator (@apidevtools/swagger-
# parser, tools/openapi) finds it valid; the answers of conf/nginx.conf as
# shipped, on real Redis and MongoDB, to what a client asks (the graph,
# blocks and mutes, posts with their errors, timelines, /status, unknown
# paths, other methods, a URI too long, the rate limits, Redis gone), and
# with feed_identity added (401, 403), each have a status the spec
# documents for their path and method, the headers it requires, and a
# body its schema validates (t/lib/openapi_check.py, Debian's jsonschema);
# every documented operation is asked at least once and every path with a
# method it does not take; and the checks fail on answers that are wrong.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Encode ();
use IO::Socket::INET;
use JSON::PP ();
use Test::More;
use Time::HiRes qw(sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(short behind_proxy);

my $ROOT = FeedTest->root;
my $SPEC = "$ROOT/docs/openapi.yaml";
my $VALIDATE = "$ROOT/tools/openapi/validate.js";
my $CHECK = "$FindBin::Bin/lib/openapi_check.py";
my $PYTHON = '/usr/bin/python3';
my $JSON = JSON::PP->new->utf8->canonical;

# ------------------------------------------------------------ the document --

# node $VALIDATE on $file: (exit status, output)
sub validate {
    my ($file) = @_;
    my $out = `node $VALIDATE $file 2>&1`;
    return ($?, $out);
}

{
    # installed by make test (make openapi-deps)
    ok(-d "$ROOT/tools/openapi/node_modules/\@apidevtools",
        'the validator is installed') or diag('make openapi-deps');

    my ($rc, $out) = validate($SPEC);
    ok($rc == 0 && $out =~ /: valid/, 'docs/openapi.yaml is valid OpenAPI')
        or diag($out);

    # the validator sees a broken document: a response without its
    # description, a $ref to nothing
    my $t0 = FeedTest->new;
    open my $in, '<', $SPEC or die "$SPEC: $!\n";
    my $doc = do { local $/; <$in> };
    close $in;
    $doc =~ s/^(\s+)'204': \{\$ref: [^}]*\}$/$1'204': {content: 5}/m
        or die "no 204 to break\n";
    $doc =~ s{'#/components/schemas/PostId'}{'#/components/schemas/Nothing'};
    open my $fh, '>', $t0->dir . '/broken.yaml' or die "broken.yaml: $!\n";
    print $fh $doc;
    close $fh;
    ($rc, $out) = validate($t0->dir . '/broken.yaml');
    ok($rc != 0 && $out =~ /not valid/, 'self-check: a broken copy is not')
        or diag($out);
}

# ---------------------------------------------------------------- answers --

# every answer asked below, for openapi_check.py
my @answers;

# the shipped limits: 50 requests a second, 10 writes; requests are spaced
# so that none is refused (but those asked for a 429)
sub ask {
    my ($t, $name, $want, $method, $uri, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;

    my $r = $t->http($method, $uri, %o);
    sleep($method =~ /^(GET|HEAD)$/ ? 0.025 : 0.11);

    is($r->{status}, $want, "$name: $want") or diag(short($r))
        if defined $want;

    record($name, $method, $uri, $r);
    return $r;
}

# ask() each of [name, status, method, uri]
sub ask_each {
    my ($t, @asks) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    ask($t, @$_) for @asks;
}

sub record {
    my ($name, $method, $uri, $r) = @_;
    (my $path = $uri) =~ s/\?.*//s;
    push @answers, { name => $name, method => $method, path => $path,
        status => $r->{status} + 0, headers => $r->{headers},
        body => Encode::decode('UTF-8', $r->{body}) };
}

sub json_post {
    my ($body, %h) = @_;
    return (body => $body,
        headers => { 'Content-Type' => 'application/json', %h });
}

my $t = FeedTest->new;

# as behind a proxy on this host: the burst of writes below comes from
# another address than this host's, which the rate limits leave alone
$t->start_backends;
$t->write_conf(behind_proxy($t->shipped_conf))->run;

my $id0 = '000000000000000000000001';
my $long_id = 'u' x 65;

# ---------------------------------------------------------------- follows --

ask($t, 'follow', 204, 'PUT', "/users/oa.ann/following/oa.$_")
    for qw(bob carol dave);
ask_each($t,
    [ 'follow again', 204, 'PUT', '/users/oa.ann/following/oa.bob' ],
    [ 'unfollow of one not followed', 204, 'DELETE',
        '/users/oa.ann/following/oa.zed' ],
    [ 'self follow', 400, 'PUT', '/users/oa.ann/following/oa.ann' ],
    [ 'follow, bad uid', 400, 'PUT', '/users/a%20b/following/oa.bob' ],
    [ 'unfollow, bad target', 400, 'DELETE',
        "/users/oa.ann/following/$long_id" ]);

my $r = ask($t, 'following, first page', 200, 'GET',
    '/users/oa.ann/following?limit=2');
my $cursor = ref $r->{json} eq 'HASH' ? $r->{json}{next} : undef;
ok(defined $cursor, 'following: a next cursor') or diag(short($r));
ask($t, 'following, next page', 200, 'GET',
    '/users/oa.ann/following?limit=2&cursor=' . ($cursor // ''));
ask($t, 'following, HEAD', 200, 'HEAD', '/users/oa.ann/following');
ask($t, "following, limit=$_", 400, 'GET',
    "/users/oa.ann/following?limit=$_") for qw(0 101 x 0050);
ask($t, 'following, limit=050', 200, 'GET', '/users/oa.ann/following?limit=050');
ask($t, 'following, bad cursor', 400, 'GET',
    '/users/oa.ann/following?cursor=bm90IG9uZQ');
ask($t, 'followers', 200, 'GET', '/users/oa.bob/followers');
ask($t, 'followers, HEAD', 200, 'HEAD', '/users/oa.bob/followers?limit=1');
ask($t, 'followers, bad uid', 400, 'GET', "/users/$long_id/followers");
ask($t, 'following, URI too long', 414, 'GET',
    '/users/oa.ann/following?cursor=' . ('c' x 9000));

# ------------------------------------------------------- blocks and mutes --

for my $w (qw(blocks mutes)) {
    (my $self = $w) =~ s/s$//;
    ask($t, "$self", 204, 'PUT', "/users/oa.ann/$w/oa.eve");
    ask($t, "$self again", 204, 'PUT', "/users/oa.ann/$w/oa.eve");
    ask($t, "self $self", 400, 'PUT', "/users/oa.ann/$w/oa.ann");
    ask($t, "$w list", 200, 'GET', "/users/oa.ann/$w?limit=1");
    ask($t, "$w list, HEAD", 200, 'HEAD', "/users/oa.ann/$w");
    ask($t, "$w list, bad limit", 400, 'GET', "/users/oa.ann/$w?limit=-1");
    ask($t, "$w list, bad cursor", 400, 'GET', "/users/oa.ann/$w?cursor=x");
    ask($t, "$w list of a bad uid", 400, 'GET', "/users/$long_id/$w");
    ask($t, "un$self of a bad uid", 400, 'DELETE', "/users/$long_id/$w/x");
    ask($t, "a follow of a blocking user", 403, 'PUT',
        '/users/oa.eve/following/oa.ann') if $w eq 'blocks';
    ask($t, "un$self", 204, 'DELETE', "/users/oa.ann/$w/oa.eve");
}

# ------------------------------------------------------------------ posts --

my %posts;
for my $n (1 .. 3) {
    $r = ask($t, "post $n", 201, 'POST', '/users/oa.bob/posts',
        json_post($JSON->encode({ body => "h\x{e9}llo $n",
            $n == 2 ? (data => { lang => 'fr', n => [1, 2.5] }) : () })));
    $posts{$n} = $r->{json}{id} if ref $r->{json} eq 'HASH';
}
my $pid = $posts{1} // $id0;

$r = ask($t, 'post with a key', 201, 'POST', '/users/oa.bob/posts',
    json_post('{"body": "keyed"}', 'Idempotency-Key' => 'oa-k1'));
ask($t, 'its retry', 201, 'POST', '/users/oa.bob/posts',
    json_post('{ "body" : "keyed" }', 'Idempotency-Key' => 'oa-k1'));
ask($t, 'the key, other content', 422, 'POST', '/users/oa.bob/posts',
    json_post('{"body": "other"}', 'Idempotency-Key' => 'oa-k1'));
ask($t, 'a key too long', 400, 'POST', '/users/oa.bob/posts',
    json_post('{"body": "x"}', 'Idempotency-Key' => 'k' x 65));

$r = ask($t, 'post with a key, to delete', 201, 'POST',
    '/users/oa.bob/posts', json_post('{"body": "gone"}',
        'Idempotency-Key' => 'oa-k2'));
my $gone = ref $r->{json} eq 'HASH' ? $r->{json}{id} // $id0 : $id0;
ask($t, 'delete it', 204, 'DELETE', "/users/oa.bob/posts/$gone");
ask($t, 'its retry after the delete', 404, 'POST', '/users/oa.bob/posts',
    json_post('{"body": "gone"}', 'Idempotency-Key' => 'oa-k2'));

ask($t, 'post without Content-Type', 415, 'POST', '/users/oa.bob/posts',
    body => '{"body": "x"}');
ask($t, 'post as text/plain', 415, 'POST', '/users/oa.bob/posts',
    body => '{"body": "x"}', headers => { 'Content-Type' => 'text/plain' });

my @bad = (
    [ 'not JSON', '{"body": ', 400 ],
    [ 'an array', '["x"]', 400 ],
    [ 'not UTF-8', qq({"body": "\xff"}), 400 ],
    [ 'an unknown field', '{"body": "x", "to": "y"}', 400 ],
    [ 'a field twice', '{"body": "x", "body": "y"}', 400 ],
    [ 'no body', '{"data": {}}', 400 ],
    [ 'an empty body', '{"body": ""}', 400 ],
    [ 'data not an object', '{"body": "x", "data": 1}', 400 ],
    [ 'a $ key in data', '{"body": "x", "data": {"$a": 1}}', 400 ],
    [ 'a body too long', $JSON->encode({ body => 'b' x 5001 }), 413 ],
    [ 'data too large', $JSON->encode({ body => 'x',
        data => { d => 'd' x 17000 } }), 413 ],
    [ 'a request too large', $JSON->encode({ body => 'b' x 70000 }), 413 ],
);
ask($t, "post: $_->[0]", $_->[2], 'POST', '/users/oa.bob/posts',
    json_post($_->[1])) for @bad;
ask($t, 'post by a bad uid', 400, 'POST', "/users/$long_id/posts",
    json_post('{"body": "x"}'));

ask($t, 'a post', 200, 'GET', "/posts/$pid");
ask($t, 'a post, HEAD', 200, 'HEAD', "/posts/$pid");
ask($t, 'a post, bad id', 400, 'GET', '/posts/6B0133742A2A3A320A0FBFB4');
ask($t, 'a post, absent', 404, 'GET', "/posts/$id0");
ask($t, 'a post, deleted', 404, 'GET', "/posts/$gone");

$r = ask($t, "bob's posts, first page", 200, 'GET',
    '/users/oa.bob/posts?limit=2');
my ($link) = ($r->{headers}{link} // '') =~ /^<([^>]*)>/;
ok($link, "bob's posts: a Link to the next page") or diag(short($r));
ask($t, "bob's posts, next page", 200, 'GET', $link // '/users/oa.bob/posts');
ask_each($t,
    [ "bob's posts, since_id", 200, 'GET',
        "/users/oa.bob/posts?limit=1&since_id=$pid&max_id=ffffffffffffffffffffffff" ],
    [ "bob's posts, HEAD", 200, 'HEAD', '/users/oa.bob/posts' ],
    [ "bob's posts, bad max_id", 400, 'GET', '/users/oa.bob/posts?max_id=123' ],
    [ "bob's posts, bad limit", 400, 'GET', '/users/oa.bob/posts?limit=' ],
    [ 'posts of a bad uid', 400, 'GET', "/users/$long_id/posts" ],
    [ 'delete by another user', 404, 'DELETE',
        '/users/oa.ann/posts/' . ($posts{3} // $id0) ],
    [ 'delete a bad id', 400, 'DELETE', '/users/oa.bob/posts/x' ],
    [ 'delete an absent post', 404, 'DELETE', "/users/oa.bob/posts/$id0" ]);

# -------------------------------------------------------------- timelines --

# ann follows bob: the fanout brings bob's posts
$t->wait_for(10, sub {
    my $r = $t->get('/users/oa.ann/timeline?limit=2');
    return $r->{status} == 200 && ref $r->{json} eq 'HASH'
        && defined $r->{json}{next};
});
$r = ask($t, 'timeline, first page', 200, 'GET',
    '/users/oa.ann/timeline?limit=2');
($link) = ($r->{headers}{link} // '') =~ /^<([^>]*)>/;
ok($link, 'timeline: a Link to the next page') or diag(short($r));
ask($t, 'timeline, next page', 200, 'GET',
    $link // '/users/oa.ann/timeline');
ask($t, 'timeline, HEAD', 200, 'HEAD', '/users/oa.ann/timeline');
ask($t, 'timeline of a new user (MISS)', 200, 'GET',
    '/users/oa.new/timeline');
ask($t, "timeline, limit=$_", 400, 'GET', "/users/oa.ann/timeline?limit=$_")
    for qw(0 1000);
ask($t, 'timeline, bad since_id', 400, 'GET',
    '/users/oa.ann/timeline?since_id=zz');
ask($t, 'timeline of a bad uid', 400, 'GET', "/users/$long_id/timeline");

# ------------------------------------------------------------ read marker --

my $mk = '/users/oa.ann/timeline/marker';
ask_each($t,
    [ 'marker, none yet', 404, 'GET', $mk ],
    [ 'marker, none yet, HEAD', 404, 'HEAD', $mk ],
    [ 'marker, first PUT', 200, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '"}') ],
    [ 'marker', 200, 'GET', $mk ],
    [ 'marker, HEAD', 200, 'HEAD', $mk ],
    [ 'marker, backwards', 200, 'PUT', $mk,
        json_post('{"last_read_id": "' . $id0 . '"}') ],
    [ 'marker, forced back', 200, 'PUT', $mk,
        json_post('{"last_read_id": "' . $id0 . '", "force": true}') ],
    [ 'marker, an old If-Match', 409, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '"}', 'If-Match' => '1') ],
    [ 'marker, If-Match', 200, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '"}', 'If-Match' => '2') ],
    [ 'marker, a bad If-Match', 400, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '"}', 'If-Match' => 'x') ],
    [ 'marker, not JSON', 400, 'PUT', $mk, json_post('{') ],
    [ 'marker, a bad id', 400, 'PUT', $mk,
        json_post('{"last_read_id": "x"}') ],
    [ 'marker, force not a boolean', 400, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '", "force": 1}') ],
    [ 'marker, an unknown field', 400, 'PUT', $mk,
        json_post('{"last_read_id": "' . $pid . '", "x": 1}') ],
    [ 'marker, over 1024 bytes', 400, 'PUT', $mk,
        json_post($JSON->encode({ last_read_id => $pid, x => 'x' x 1100 })) ],
    [ 'marker, a request too large', 413, 'PUT', $mk,
        json_post($JSON->encode({ last_read_id => $pid, x => 'x' x 70000 })) ],
    [ 'marker of a bad uid', 400, 'GET', "/users/$long_id/timeline/marker" ]);

# ----------------------------------------------------------- hidden posts --

my $hp = "/users/oa.ann/hidden/$pid";
ask_each($t,
    [ 'hide a post', 204, 'PUT', $hp ],
    [ 'hide it again', 204, 'PUT', $hp ],
    [ 'hide an absent post', 204, 'PUT', "/users/oa.ann/hidden/$id0" ],
    [ 'hidden posts', 200, 'GET', '/users/oa.ann/hidden?limit=1' ],
    [ 'hidden posts, HEAD', 200, 'HEAD', '/users/oa.ann/hidden' ],
    [ 'hidden posts, a bad cursor', 400, 'GET',
        '/users/oa.ann/hidden?cursor=%25' ],
    [ 'hide a bad id', 400, 'PUT', '/users/oa.ann/hidden/x' ],
    [ 'hide, a bad uid', 400, 'PUT', "/users/$long_id/hidden/$pid" ],
    [ 'show it again', 204, 'DELETE', $hp ],
    [ 'show, not hidden', 204, 'DELETE', $hp ]);

# ------------------------------------------------------- seen, unseen --

my $sn = '/users/oa.ann/seen';
ask_each($t,
    [ 'seen', 204, 'POST', $sn, json_post('["' . $pid . '"]') ],
    [ 'seen, none', 204, 'POST', $sn, json_post('[]') ],
    [ 'seen, not an array', 400, 'POST', $sn,
        json_post('{"ids": ["' . $pid . '"]}') ],
    [ 'seen, not an id', 400, 'POST', $sn, json_post('["x"]') ],
    [ 'seen, 501 ids', 400, 'POST', $sn,
        json_post($JSON->encode([ ($pid) x 501 ])) ],
    [ 'seen, over 16384 bytes', 400, 'POST', $sn,
        json_post($JSON->encode([ ($pid) x 700 ])) ],
    [ 'seen, a request too large', 413, 'POST', $sn,
        json_post($JSON->encode([ ($pid) x 3000 ])) ],
    [ 'seen of a bad uid', 400, 'POST', "/users/$long_id/seen",
        json_post('[]') ]);
$r = ask($t, 'timeline, unseen', 200, 'GET',
    '/users/oa.ann/timeline?limit=1&unseen=1');
ok(!grep({ $_->{id} eq $pid } @{ ref $r->{json} eq 'HASH'
    ? $r->{json}{items} : [] }), 'timeline, unseen: without the post seen');
($link) = ($r->{headers}{link} // '') =~ /^<([^>]*)>/;
ask($t, 'timeline, unseen, next page', 200, 'GET', $link)
    if $link && $link =~ /unseen=1/;
ask($t, 'timeline, unseen, HEAD', 200, 'HEAD',
    '/users/oa.ann/timeline?unseen=1');
ask($t, 'timeline, unseen=2', 400, 'GET', '/users/oa.ann/timeline?unseen=2');

# ---------------------------------------------------------- unread counts --

my $un = '/users/oa.ann/timeline/unread';
ask_each($t,
    [ 'unread', 200, 'GET', $un ],
    [ 'unread, HEAD', 200, 'HEAD', $un ],
    [ 'unread of a new user (MISS)', 200, 'GET',
        '/users/oa.new2/timeline/unread' ],
    [ 'unread of a bad uid', 400, 'GET', "/users/$long_id/timeline/unread" ]);
$r = ask($t, 'timeline, first page, with a marker', 200, 'GET',
    '/users/oa.ann/timeline?limit=2');
like($r->{headers}{'x-feed-unread'} // '', qr/^\d+\+?$/,
    'timeline with a marker: X-Feed-Unread') or diag(short($r));

# ------------------------------------------- live timelines, long polls --

{
    my $s = FeedTest::SSE->open(port => $t->port('http'),
        path => '/users/oa.ann/timeline/stream');
    is($s->status, 200, 'stream: 200');
    record('stream', 'GET', '/users/oa.ann/timeline/stream',
        { status => $s->status, headers => $s->headers, body => '' });
    $s->close;
}
ask_each($t,
    [ 'stream, bad since_id', 400, 'GET',
        '/users/oa.ann/timeline/stream?since_id=nope' ],
    [ 'stream, bad Last-Event-ID', 400, 'GET',
        '/users/oa.ann/timeline/stream',
        headers => { 'Last-Event-ID' => 'nope' } ],
    [ 'stream of a bad uid', 400, 'GET',
        "/users/$long_id/timeline/stream" ],
    [ 'timeline, a long poll answered at once', 200, 'GET',
        '/users/oa.ann/timeline?since_id=' . ('0' x 24) . '&wait=5' ],
    [ 'timeline, wait=61', 400, 'GET',
        '/users/oa.ann/timeline?since_id=' . ('0' x 24) . '&wait=61' ]);

# ----------------------------------------------- status, paths, methods --

ask($t, 'status', 200, 'GET', '/status');
ask($t, 'status, HEAD', 200, 'HEAD', '/status');
ask($t, 'metrics', 200, 'GET', '/metrics');
ask($t, 'metrics, HEAD', 200, 'HEAD', '/metrics');

my %other = (
    '/users/oa.ann/following/oa.bob' => 'GET',
    '/users/oa.ann/following' => 'POST',
    '/users/oa.ann/followers' => 'DELETE',
    '/users/oa.ann/blocks/oa.eve' => 'POST',
    '/users/oa.ann/blocks' => 'PUT',
    '/users/oa.ann/mutes/oa.eve' => 'GET',
    '/users/oa.ann/mutes' => 'PATCH',
    '/users/oa.bob/posts' => 'PUT',
    "/users/oa.bob/posts/$pid" => 'GET',
    "/posts/$pid" => 'DELETE',
    '/users/oa.ann/timeline' => 'POST',
    '/users/oa.ann/timeline/marker' => 'DELETE',
    '/users/oa.ann/timeline/unread' => 'PUT',
    '/users/oa.ann/timeline/stream' => 'POST',
    "/users/oa.ann/hidden/$pid" => 'GET',
    '/users/oa.ann/hidden' => 'POST',
    '/users/oa.ann/seen' => 'GET',
    '/status' => 'POST',
    '/metrics' => 'DELETE',
);
ask($t, "$other{$_} $_", 405, $other{$_}, $_,
    $other{$_} =~ /^P/ ? (body => '') : ()) for sort keys %other;

ask($t, 'an unknown path', 404, 'GET', '/users/oa.ann');
ask($t, 'the fallback, internal', 404, 'GET',
    '/_feed/timeline?user=oa.ann&limit=10');

# past the writes' burst (20), from another host: 429 with Retry-After
my @h = map { $t->http_start('PUT', "/users/oa.ann/mutes/oa.m$_",
    headers => { 'X-Forwarded-For' => '203.0.113.7' }) } 1 .. 30;
my @res = map { $t->http_end($_) } @h;
my @limited = grep { $res[$_]{status} == 429 } 0 .. $#res;
ok(@limited, 'a burst of writes: some 429') or diag(short($res[-1]));
record("a write past the limits ($_)", 'PUT', "/users/oa.ann/mutes/oa.m$_",
    $res[$_ - 1]) for 1 .. 30;
sleep 2.5;

# Redis gone: a delete is 503, a timeline is BYPASS
$t->stop_redis;
$t->wait_for(5, sub {
    my $j = $t->get('/status')->{json};
    ref $j eq 'HASH' && !$j->{redis}{up};
});
ask($t, 'delete without Redis', 503, 'DELETE',
    "/users/oa.bob/posts/$posts{3}") if $posts{3};
$r = ask($t, 'timeline without Redis', 200, 'GET', '/users/oa.ann/timeline');
ask($t, 'timeline, unseen, without Redis', 503, 'GET',
    '/users/oa.ann/timeline?unseen=1');
ask($t, 'seen without Redis', 503, 'POST', '/users/oa.ann/seen',
    json_post('["' . $id0 . '"]'));
is($r->{headers}{'x-feed-cache'}, 'BYPASS', 'timeline without Redis: BYPASS');
$r = ask($t, 'unread without Redis', 200, 'GET', $un);
is($r->{headers}{'x-feed-cache'}, 'BYPASS', 'unread without Redis: BYPASS');

$t->finish;

# -------------------------------------------------- with feed_identity --

my $ti = FeedTest->new;

$ti->start_backends;
my $conf = $ti->shipped_conf;
$conf =~ s/^(\s*limit_req zone=feed_writes[^\n]*\n)/$1        feed_identity \$http_x_user;\n/m
    or die "no place for feed_identity\n";
# and limits that a few requests reach
$conf =~ s/^(\s*feed_(?:follow|filter)_max) \d+;/$1 1;/mg == 2
    or die "no feed_follow_max, feed_filter_max\n";
$ti->write_conf($conf)->run;

my %ann = (headers => { 'X-User' => 'oa.ann' });
my %bob = (headers => { 'X-User' => 'oa.bob' });

ask($ti, 'identity: follow without one', 401, 'PUT',
    '/users/oa.ann/following/oa.bob');
ask($ti, 'identity: follow as someone else', 403, 'PUT',
    '/users/oa.ann/following/oa.bob', %bob);
ask($ti, 'identity: unfollow as someone else', 403, 'DELETE',
    '/users/oa.ann/following/oa.bob', %bob);
ask($ti, "identity: $_ without one", 401, 'PUT', "/users/oa.ann/$_/oa.bob")
    for qw(blocks mutes);
ask($ti, "identity: un$_ as someone else", 403, 'DELETE',
    "/users/oa.ann/$_/oa.bob", %bob) for qw(blocks mutes);
ask($ti, 'identity: post as someone else', 403, 'POST',
    '/users/oa.ann/posts', json_post('{"body": "x"}', 'X-User' => 'oa.bob'));
ask($ti, 'identity: post without one', 401, 'POST', '/users/oa.ann/posts',
    json_post('{"body": "x"}'));
$r = ask($ti, 'identity: post', 201, 'POST', '/users/oa.ann/posts',
    json_post('{"body": "x"}', 'X-User' => 'oa.ann'));
my $aid = ref $r->{json} eq 'HASH' ? $r->{json}{id} // $id0 : $id0;
ask($ti, 'identity: delete as someone else', 403, 'DELETE',
    "/users/oa.ann/posts/$aid", %bob);
ask($ti, 'identity: block', 204, 'PUT', '/users/oa.ann/blocks/oa.bob', %ann);
ask($ti, "identity: the blocking author's posts", 403, 'GET',
    '/users/oa.ann/posts', %bob);
ask($ti, "identity: the blocking author's posts, HEAD", 403, 'HEAD',
    '/users/oa.ann/posts', %bob);
ask($ti, 'identity: her own posts', 200, 'GET', '/users/oa.ann/posts', %ann);
ask($ti, 'identity: a marker without one', 401, 'PUT',
    '/users/oa.ann/timeline/marker', json_post('{"last_read_id": "' . $aid
    . '"}'));
ask($ti, 'identity: a marker as someone else', 403, 'GET',
    '/users/oa.ann/timeline/marker', %bob);
ask($ti, 'identity: an unread count without one', 401, 'GET',
    '/users/oa.ann/timeline/unread');
ask($ti, 'identity: an unread count as someone else', 403, 'GET',
    '/users/oa.ann/timeline/unread', %bob);
ask($ti, 'identity: an unread count', 200, 'GET',
    '/users/oa.ann/timeline/unread', %ann);
ask($ti, 'identity: hidden posts without one', 401, 'GET',
    '/users/oa.ann/hidden');
ask($ti, 'identity: hide as someone else', 403, 'PUT',
    "/users/oa.ann/hidden/$aid", %bob);
ask($ti, 'identity: seen without one', 401, 'POST', '/users/oa.ann/seen',
    json_post('[]'));
ask($ti, 'identity: seen as someone else', 403, 'POST', '/users/oa.ann/seen',
    json_post('[]', 'X-User' => 'oa.bob'));
ask($ti, 'identity: unseen as someone else', 403, 'GET',
    '/users/oa.ann/timeline?unseen=1', %bob);
ask($ti, 'identity: unseen without one', 401, 'GET',
    '/users/oa.ann/timeline?unseen=1');
ask($ti, 'identity: unseen', 200, 'GET', '/users/oa.ann/timeline?unseen=1',
    %ann);

ask_each($ti,
    [ 'a follow', 204, 'PUT', '/users/oa.bob/following/oa.carol', %bob ],
    [ 'a follow past feed_follow_max', 422, 'PUT',
        '/users/oa.bob/following/oa.dave', %bob ],
    [ 'a mute past feed_filter_max', 422, 'PUT', '/users/oa.ann/mutes/oa.eve',
        %ann ]);

# /status from an address the shipped configuration denies
my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . $ti->port('http'),
    LocalAddr => '127.0.0.2', Proto => 'tcp', Timeout => 5);
ok($s, 'a connection from 127.0.0.2') or diag("connect: $!");
if ($s) {
    $s->syswrite("GET /status HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\n\r\n");
    my $raw = '';
    while ($s->sysread(my $buf, 65536)) { $raw .= $buf }
    $r = FeedTest::parse_response($raw);
    is($r->{status}, 403, 'status from 127.0.0.2: 403') or diag(short($r));
    record('status from 127.0.0.2', 'GET', '/status', $r);
}

$ti->finish;

# ------------------------------------------------------ against the spec --

# openapi_check.py on a list of answers, written into $file: its decoded
# output
sub check_answers {
    my ($file, @list) = @_;
    (my $dir = $file) =~ s{/[^/]*$}{};
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh $JSON->encode(\@list);
    close $fh;
    my $out = `$PYTHON $CHECK $SPEC $file 2>$dir/check.err`;
    my $j = eval { JSON::PP->new->utf8->decode($out) };
    unless ($j) {
        open my $e, '<', "$dir/check.err";
        BAIL_OUT("openapi_check.py failed: $out" . join('', <$e>));
    }
    return $j;
}

my $check = check_answers($t->dir . '/answers.json', @answers);

my (%asked, %statuses, @wrong);
for my $i (0 .. $#answers) {
    my $res = $check->{results}[$i];
    $asked{$res->{operation}}++ if defined $res->{operation};
    $statuses{$res->{operation} // 'other paths'}{$answers[$i]{status}}++;
    push @wrong, "$answers[$i]{name}: " . join('; ', @{$res->{problems}})
        if @{$res->{problems}};
}
ok(!@wrong, scalar(@answers) . ' answers as documented')
    or diag(join "\n", @wrong);

note("$_: " . join(' ', sort keys %{$statuses{$_}})) for sort keys %statuses;

my @unasked = grep { !$asked{$_} } @{$check->{operations}};
ok(!@unasked, 'every documented operation asked')
    or diag("not asked: @unasked");

my @no405 = grep { !$asked{"OTHER $_"} } @{$check->{paths}};
ok(!@no405, 'every path asked with a method it does not take')
    or diag("not asked: @no405");

# the spec cannot drift from the code: every error code the module
# (ngx_http_feed_errors.c/.h) and the shipped error pages answer is
# documented, and no other; the shipped locations are the documented paths

sub slurp {
    my ($file) = @_;
    open my $fh, '<', "$ROOT/$file" or die "$file: $!\n";
    local $/;
    return <$fh>;
}

my $conf_text = slurp('conf/nginx.conf');
my %code = map { $_ => 1 }
    slurp('ngx_feed_module/core/ngx_http_feed_errors.c')
        =~ /ngx_http_feed_err\(\w+,\s*\w+,\s*"(\w+)"/g,
    slurp('ngx_feed_module/core/ngx_http_feed_errors.h')
        =~ /#define\s+\w+_CODE\s+"(\w+)"/g,
    $conf_text =~ /'\{"error":"(\w+)"/g;
my %spec_code = map { $_ => 1 } @{$check->{codes}};
is_deeply([ sort keys %spec_code ], [ sort keys %code ],
    'the error codes documented are those of the code and the shipped conf')
    or diag('not documented: ' . join(' ', grep { !$spec_code{$_} }
        sort keys %code) . '; not in the code: '
        . join(' ', grep { !$code{$_} } sort keys %spec_code));

my @located = sort map {
    (my $p = $_) =~ s/\(\[\^\/\]\+\)/{}/g;
    $p
} grep { !m{^/_} && $_ ne '/' }
    $conf_text =~ m{^\s*location\s+(?:~\s+\^|=\s+)?(\S+?)\$?\s*\{}mg;
is_deeply(\@located,
    [ sort map { (my $p = $_) =~ s/\{\w+\}/{}/g; $p } @{$check->{paths}} ],
    'the shipped locations are the documented paths');

# self-check: wrong answers are found, each for its reason
my ($post) = grep { $_->{method} eq 'GET' && $_->{path} =~ m{^/posts/}
    && $_->{status} == 200 } @answers;
my ($page) = grep { $_->{name} eq 'timeline, first page' } @answers;
my ($na) = grep { $_->{status} == 405 } @answers;
my ($limited) = grep { $_->{status} == 429 } @answers;

my @bad_answers = (
    [ 'a post without author', $post, sub {
        my $j = JSON::PP->new->decode($_[0]{body});
        delete $j->{author};
        $_[0]{body} = JSON::PP->new->encode($j) } ],
    [ 'a post with a field more', $post, sub {
        $_[0]{body} =~ s/^\{/{"likes": 1, / } ],
    [ 'a post whose ts is a string', $post, sub {
        $_[0]{body} =~ s/"ts"\s*:\s*(\d+)/"ts": "$1"/ } ],
    [ 'an undocumented status', $post, sub { $_[0]{status} = 418 } ],
    [ 'an error code not in the enum', $na, sub {
        $_[0]{body} = '{"error": "nope", "message": "x"}' } ],
    [ 'a 405 without Allow', $na, sub { delete $_[0]{headers}{allow} } ],
    [ 'a 405 with another Allow', $na, sub {
        $_[0]{headers}{allow} = 'GET, PUT' } ],
    [ 'a 429 without Retry-After', $limited, sub {
        delete $_[0]{headers}{'retry-after'} } ],
    [ 'a timeline page without X-Feed-Cache', $page, sub {
        delete $_[0]{headers}{'x-feed-cache'} } ],
    [ 'a timeline page whose next is a number', $page, sub {
        $_[0]{body} =~ s/"next"\s*:\s*"[0-9a-f]+"/"next": 1/ } ],
    [ 'a body on a 204', { method => 'PUT', status => 204, headers => {},
        path => '/users/a/following/b', body => '' }, sub {
        $_[0]{body} = '{}' } ],
    [ 'an unknown path not 404', { method => 'GET', status => 404,
        headers => {}, path => '/x', body => '' }, sub {
        $_[0]{status} = 200 } ],
);

my @mutated;
for my $b (@bad_answers) {
    my ($name, $orig, $change) = @$b;
    BAIL_OUT("self-check: no answer to change for '$name'") unless $orig;
    my $a = $JSON->decode($JSON->encode($orig));
    $change->($a);
    push @mutated, $a;
}
$check = check_answers($t->dir . '/wrong-answers.json', @mutated);
for my $i (0 .. $#bad_answers) {
    my $p = $check->{results}[$i]{problems};
    ok(@$p, "self-check: $bad_answers[$i][0] is found")
        and note(join '; ', @$p);
}

done_testing();
