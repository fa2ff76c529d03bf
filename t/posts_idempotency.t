#!/usr/bin/perl

# Idempotent posts: POST /users/{uid}/posts with an Idempotency-Key.  A
# retry with the key and the same content (even written otherwise) gets
# the first 201 again, same id, Location and JSON, and makes nothing: one
# post in MongoDB, one entry in the stream; the key with other content is
# 422 and writes nothing; keys are per user; bad keys are 400; posts
# without a key make a post each time and never touch the keys; many
# retries at once over 4 workers make one post and one entry and all get
# it; a first attempt whose post never got stored, or whose client gave
# up, is made by the retry, once; a key older than an hour is a new one;
# MongoDB down is 503 and the retry after it works.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use JSON::PP ();
use POSIX ();
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short enc now_ms is_error post_problems status_all
    $STREAM);

my $t = FeedTest->new(fresh_mongo => 1);
my $REAL = FeedTest::real_mongo();
my $PYTHON = '/usr/bin/python3';

$t->start_backends;

$t->write_conf(<<'EOF')->run;
worker_processes 4;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 500ms;
    feed_mongo_timeout 3s;
    feed_stream feed:posts maxlen=100000;

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        add_header X-Pid $pid always;

        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
        location = /status { feed_status; }
    }
}
EOF

my $OID = qr/^[0-9a-f]{24}\z/;

# ---------------------------------------------------------------- helpers --

sub key_headers {
    my ($key) = @_;
    return { 'Content-Type' => 'application/json',
        defined $key ? ('Idempotency-Key' => $key) : () };
}

sub post_start {
    my ($uid, $key, $bytes, %o) = @_;
    return $t->http_start('POST', "/users/$uid/posts", body => $bytes,
        headers => key_headers($key), timeout => $o{timeout} || 15);
}

sub post_key { $t->http_end(post_start(@_)) }

# a 201 with a post by $uid: its id, else undef and a failed test
sub created {
    my ($r, $uid, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @p = $r->{status} == 201 ? post_problems($r->{json}, author => $uid)
        : ('status ' . $r->{status});
    my $id = ref $r->{json} eq 'HASH' ? $r->{json}{id} // '' : '';
    push @p, 'Location ' . ($r->{headers}{location} // '(none)')
        unless ($r->{headers}{location} // '') eq "/posts/$id";
    ok(!@p, "$name: 201, the post, Location")
        or diag(join "\n", @p, short($r));
    return @p ? undef : $id;
}

# the same answer: status, Location and JSON as the first
sub same_answer {
    my ($r, $first, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @p;
    push @p, "status $r->{status}" unless $r->{status} == 201;
    push @p, 'Location ' . ($r->{headers}{location} // '(none)')
        unless ($r->{headers}{location} // '')
            eq ($first->{headers}{location} // 'none');
    push @p, 'JSON differs'
        unless ref $r->{json} eq 'HASH'
            && enc($r->{json}) eq enc($first->{json});
    ok(!@p, "$name: 201, same id, Location and JSON")
        or diag(join "\n", @p, short($r), short($first));
}

sub posts_of {
    my ($uid) = @_;
    return $t->mongo_find('posts', enc({ author => $uid }));
}

# the stream's entries for a post id
sub entries_of {
    my ($id) = @_;
    my $r = eval { $t->redis('XRANGE', $STREAM, '-', '+') };
    return scalar grep {
        my %kv = @{$_->[1] || []};
        ($kv{id} // '') eq $id && ($kv{type} // '') eq 'post'
    } @{ref $r eq 'ARRAY' ? $r : []};
}

sub xlen { my $n = eval { $t->redis('XLEN', $STREAM) }; $n // -1 }

# one post by $uid in MongoDB, with this id, and (after a while for any
# late append) one stream entry for it
sub one_post {
    my ($uid, $id, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @p = posts_of($uid);
    ok(@p == 1 && ($p[0]{_id}{'$oid'} // '') eq $id,
        "$name: one post in MongoDB")
        or diag(scalar(@p) . ' posts: ' . enc(\@p));
    $t->wait_for(5, sub { entries_of($id) >= 1 });
    sleep 0.5;
    is(entries_of($id), 1, "$name: one stream entry");
}

# a change to MongoDB made by hand, through Debian's pymongo: $code runs
# with db (the database), oid (bson's ObjectId) and datetime at hand
sub mongo_py {
    my ($code) = @_;
    my $py = "import sys, datetime\n"
        . "from bson import ObjectId as oid\n"
        . "from pymongo import MongoClient\n"
        . "db = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)"
        . ".get_default_database('feed')\n"
        . $code . "\n";
    system($PYTHON, '-c', $py, $t->mongo_uri) == 0
        or die "pymongo: $code failed\n";
}

sub key_commands {
    return scalar grep { ($_->{coll} // '') eq 'idempotency' }
        $t->mongo_commands;
}

ok($t->wait_for(8, sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
    'redis and mongodb up');

# ------------------------------------------------- 1. a retry, the same --

my ($first, $id);
{
    my $bytes = enc({ body => "h\x{e9}llo", data => { lang => 'fr',
        n => [1, 2.5, { b => 1, a => JSON::PP::true }] } });

    $first = post_key('ann', 'k-1', $bytes);
    $id = created($first, 'ann', 'first attempt');

    for my $i (1 .. 2) {
        my $r = post_key('ann', 'k-1', $bytes);
        same_answer($r, $first, "retry $i");
    }

    one_post('ann', $id, 'retries') if $id;
    is($t->get("/posts/$id")->{status}, 200, 'the post is there') if $id;

    my @k = $t->mongo_find('idempotency', enc({ '_id.u' => 'ann' }));
    ok(@k == 1 && ($k[0]{p}{'$oid'} // '') eq ($id // '')
        && ($k[0]{h} // '') =~ /^[0-9a-f]{40}\z/,
        'the key is stored with the post id and the content hash')
        or diag(enc(\@k));
}

# ------------------------------- 2. the key, other content: 422, nothing --

{
    my $x0 = xlen();
    for my $other ({ body => 'something else' },
        { body => "h\x{e9}llo" },
        { body => "h\x{e9}llo", data => { lang => 'en',
            n => [1, 2.5, { b => 1, a => JSON::PP::true }] } })
    {
        my $r = post_key('ann', 'k-1', enc($other));
        is_error($r, 422, 'idempotency_key_reused',
            'the key with other content ' . enc($other));
    }
    is(scalar(posts_of('ann')), 1, 'other content: no post stored');
    sleep 0.3;
    is(xlen(), $x0, 'other content: nothing enqueued');
}

# ---------------------- 3. the same content written otherwise: the same --

{
    # other order of keys, spacing, escapes, 2.5 as 25e-1, 1 as 1.0
    my $bytes = qq( {\n "data" : {"n": [1.0, 25e-1, {"a": true, "b": 1}],)
        . qq( "lang": "\\u0066r"},\t"body": "h\\u00e9llo"} );
    my $r = post_key('ann', 'k-1', $bytes);
    same_answer($r, $first, 'reformatted same content');
    is(scalar(posts_of('ann')), 1, 'reformatted: still one post');
}

# ------------------------------------------------- 4. keys are per user --

{
    my $bytes = enc({ body => "h\x{e9}llo", data => { lang => 'fr',
        n => [1, 2.5, { b => 1, a => JSON::PP::true }] } });
    my $r = post_key('bob', 'k-1', $bytes);
    my $bid = created($r, 'bob', 'the same key by another user');
    isnt($bid, $id, 'another user: another post');
    one_post('bob', $bid, 'another user') if $bid;
    same_answer(post_key('bob', 'k-1', $bytes), $r, 'another user: retry');
    is(scalar(posts_of('ann')), 1, 'another user: the first user unchanged');
}

# ----------------------------------------------------------- 5. bad keys --

{
    my $x0 = xlen();
    my $k0 = key_commands();
    my %bad = (
        'empty' => '',
        '65 characters' => 'k' x 65,
        '65 two-byte characters' => "\xc3\xa9" x 65,
        'a control character' => "a\x01b",
        'DEL' => "a\x7fb",
        'a C1 control character' => "a\xc2\x85b",
        'a tab' => "a\tb",
        'invalid UTF-8' => "a\xffb",
    );
    for my $what (sort keys %bad) {
        my $r = post_key('carl', $bad{$what}, enc({ body => 'bad key' }));
        is_error($r, 400, 'invalid_idempotency_key', "a key: $what");
    }

    my $raw = "POST /users/carl/posts HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\nContent-Type: application/json\r\n"
        . "Idempotency-Key: a\r\nIdempotency-Key: b\r\n"
        . "Content-Length: 17\r\n\r\n" . '{"body": "twice"}';
    is_error($t->http_end($t->http_start('POST', '/', raw => $raw)), 400,
        'invalid_idempotency_key', 'a key given twice');

    is(scalar(posts_of('carl')), 0, 'bad keys: no post stored');
    is(key_commands(), $k0, 'bad keys: no key looked up');
    is(xlen(), $x0, 'bad keys: nothing enqueued');

    # a refused body claims no key: the same key then makes the post
    is_error(post_key('carl', 'kb', '{"body": ""}'), 400, 'invalid_body',
        'a bad body with a key');
    is(key_commands(), $k0, 'a bad body with a key: no key looked up');
    created(post_key('carl', 'kb', enc({ body => 'good now' })), 'carl',
        'the key of a bad body, with a good one');

    my $r = post_key('carl', 'k' x 64, enc({ body => '64 characters' }));
    created($r, 'carl', 'a key of 64 characters');
    $r = post_key('carl', "\xc3\xa9" x 64, enc({ body => '64 two-byte' }));
    created($r, 'carl', 'a key of 64 two-byte characters');
    $r = post_key('carl', '{"$x": 1} ./', enc({ body => 'any printable' }));
    created($r, 'carl', 'a key of other printable characters');
}

# ------------------------------------------------------- 6. without a key --

{
    my $k0 = key_commands();
    my $bytes = enc({ body => 'no key' });
    my @ids = map { created(post_key('dan', undef, $bytes), 'dan',
        "no key, post $_") } 1 .. 3;
    my %u = map { ($_ // '') => 1 } @ids;
    is(scalar(keys %u), 3, 'no key: a new post each time');
    is(scalar(posts_of('dan')), 3, 'no key: three posts in MongoDB');
    is(key_commands(), $k0, 'no key: the keys are never read or written');
}

# -------------------------------- 7. many retries at once, over workers --

SKIP: {
    skip 'slows MongoDB down: stand-in only', 1 if $REAL;

    $t->mongo_latency(30);

    for my $round (1 .. 4) {
        my $uid = "eve$round";
        my $bytes = enc({ body => "at once $round" });
        my @h = map { post_start($uid, 'same', $bytes) } 1 .. 16;
        my @r = map { $t->http_end($_) } @h;

        my @bad = grep { $_->{status} != 201 } @r;
        ok(!@bad, "at once $round: 16 times 201")
            or diag(scalar(@bad) . ' failed, first: ' . short($bad[0]));
        my %ids = map { (ref $_->{json} eq 'HASH' ? $_->{json}{id} // '' : '')
            => 1 } @r;
        my %pids = map { ($_->{headers}{'x-pid'} // '') => 1 } @r;
        is(scalar(keys %ids), 1, "at once $round: one id")
            or diag(join ' ', sort keys %ids);
        ok(keys %pids >= 2, "at once $round: answered by "
            . scalar(keys %pids) . ' workers');
        my ($one) = keys %ids;
        one_post($uid, $one, "at once $round");
    }

    # the first attempt claimed the key and is still storing its post:
    # every retry stores it with the claimed id, one of them makes it
    my $bytes = enc({ body => 'in flight' });
    my $r = post_key('zed', 'hash', $bytes);
    my ($k) = $t->mongo_find('idempotency', enc({ '_id.u' => 'zed' }));
    my $pid = sprintf('%08x', int(time)) . join '', map {
        sprintf('%02x', int(rand(256))) } 1 .. 8;
    my $ms = int(now_ms());
    # _id's fields in the module's order, u then k, as MongoDB compares them
    $t->mongo_insert('idempotency', '{"_id": {"u": "eve5", "k": "same"}, '
        . enc({ h => $k->{h} // '', p => { '$oid' => $pid },
            ts => { '$numberLong' => "$ms" }, at => { '$date' => $ms } })
            =~ s/^\{//r);

    my @h = map { post_start('eve5', 'same', $bytes) } 1 .. 16;
    my @r = map { $t->http_end($_) } @h;
    my @bad = grep { $_->{status} != 201
        || ($_->{json}{id} // '') ne $pid } @r;
    ok(!@bad, "at once, first attempt in flight: 16 times 201 with $pid")
        or diag(scalar(@bad) . ' failed, first: ' . short($bad[0]));
    is($r[0]{json}{ts}, $ms, 'at once, first attempt in flight: its ts');
    one_post('eve5', $pid, 'at once, first attempt in flight');

    $t->mongo_latency(0);
}

# --------- 8. the first attempt's post never stored: the retry makes it --

if ($id) {
    mongo_py("db.posts.delete_one({'_id': oid('$id')})");
    $t->redis('DEL', $STREAM);

    my $bytes = enc({ body => "h\x{e9}llo", data => { lang => 'fr',
        n => [1, 2.5, { b => 1, a => JSON::PP::true }] } });
    my $r = post_key('ann', 'k-1', $bytes);
    same_answer($r, $first, 'post lost after the claim: the retry');
    one_post('ann', $id, 'post lost after the claim');
    same_answer(post_key('ann', 'k-1', $bytes), $first,
        'post lost after the claim: one more retry');
    is(entries_of($id), 1, 'post lost after the claim: still one entry');
}

# ----------------------------- 9. the client gave up; its retry is 201 --

SKIP: {
    skip 'slows MongoDB down: stand-in only', 1 if $REAL;

    my $bytes = enc({ body => 'given up' });
    $t->mongo_latency(800);
    my $r = post_key('fay', 'slow', $bytes, timeout => 0.3);
    is($r->{status}, 0, 'a client that gives up: no answer yet');
    $t->mongo_latency(0);

    ok($t->wait_for(5, sub { scalar(posts_of('fay')) == 1 }),
        'a client that gives up: its post stored');
    $r = post_key('fay', 'slow', $bytes);
    my $fid = created($r, 'fay', 'a client that gives up: the retry');
    same_answer(post_key('fay', 'slow', $bytes), $r,
        'a client that gives up: one more retry');

    # the first request's entry comes from it or from the outbox (3 s)
    if ($fid) {
        ok($t->wait_for(8, sub { entries_of($fid) >= 1 }),
            'a client that gives up: its post enqueued');
        sleep 4;
        one_post('fay', $fid, 'a client that gives up');
    }
}

# ---------------------------- 10. the key's post deleted: 404, not made --

{
    my $bytes = enc({ body => 'to be deleted' });
    my $r = post_key('gus', 'del', $bytes);
    my $gid = created($r, 'gus', 'a post to delete');
    if ($gid) {
        is($t->http('DELETE', "/users/gus/posts/$gid")->{status}, 204,
            'deleted');
        is_error(post_key('gus', 'del', $bytes), 404, 'not_found',
            'the retry of a deleted post');
        my @p = posts_of('gus');
        ok(@p == 1 && $p[0]{deleted}, 'a deleted post: not made again')
            or diag(enc(\@p));
    }
}

# --------------------------------- 11. a key older than an hour is new --

if ($id) {
    my @ix = grep { ($_->{name} // '') eq 'expiry' } index_info();
    ok(@ix == 1 && ($ix[0]{expireAfterSeconds} // 0) == 3600
        && enc($ix[0]{key}) eq '{"at":1}',
        'the TTL index: at, 3600 s') or diag(enc([ index_info() ]));

    # MongoDB deletes expired keys late (the stand-in at once): without the
    # index, only the module's own check of the age makes the key new
    mongo_py("db.idempotency.drop_index('expiry')");

    set_age('ann', 'k-1', 61);
    my $r = post_key('ann', 'k-1', enc({ body => 'after an hour' }));
    my $nid = created($r, 'ann', 'an expired key with other content');
    isnt($nid // '', $id, 'an expired key: a new post');
    my @k = $t->mongo_find('idempotency', enc({ '_id.u' => 'ann' }));
    ok(@k == 1 && ($k[0]{p}{'$oid'} // '') eq ($nid // ''),
        'an expired key: claimed again for the new post') or diag(enc(\@k));
    same_answer(post_key('ann', 'k-1', enc({ body => 'after an hour' })),
        $r, 'an expired key: its retry');

    set_age('ann', 'k-1', 59);
    is_error(post_key('ann', 'k-1', enc({ body => 'before an hour' })),
        422, 'idempotency_key_reused', 'a key of 59 minutes');

    set_age('ann', 'k-1', 61);
    $r = post_key('ann', 'k-1', enc({ body => 'after an hour' }));
    my $sid = created($r, 'ann', 'an expired key with the same content');
    ok($sid && $nid && $sid ne $nid, 'an expired key, same content: new post');
}

# the key's claim set back by $minutes
sub set_age {
    my ($uid, $key, $minutes) = @_;
    mongo_py("db.idempotency.update_one({'_id': {'u': '$uid', 'k': '$key'}},"
        . " {'\$set': {'at': datetime.datetime.utcnow()"
        . " - datetime.timedelta(minutes=$minutes)}})");
}

sub index_info {
    my $py = "import sys, json\nfrom pymongo import MongoClient\n"
        . "db = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)"
        . ".get_default_database('feed')\n"
        . "print(json.dumps([{'name': i['name'], 'key': dict(i['key']),"
        . " 'expireAfterSeconds': i.get('expireAfterSeconds')}"
        . " for i in db.idempotency.list_indexes()]))\n";
    open(my $fh, '-|', $PYTHON, '-c', $py, $t->mongo_uri) or return ();
    my $out = do { local $/; <$fh> };
    close $fh;
    my $list = eval { JSON::PP::decode_json($out) };
    return ref $list eq 'ARRAY' ? @$list : ();
}

# -------------------------------------------------- 12. MongoDB down --

SKIP: {
    skip 'stops MongoDB: stand-in only', 1 if $REAL;

    my $bytes = enc({ body => 'while mongodb is down' });
    $t->stop_mongo;

    my $r = post_key('hal', 'down', $bytes);
    is_error($r, 503, 'unavailable', 'mongodb down, with a key');
    like($r->{headers}{'retry-after'} // '', qr/^\d+$/,
        'mongodb down: Retry-After');

    $t->start_mongo;
    ok($t->wait_for(10, sub { status_all($t, 'mongo') }), 'mongodb back');

    # a client retries while it is told 503 (the first command on a pooled
    # connection of before may still meet the old socket)
    $t->wait_for(5, sub {
        $r = post_key('hal', 'down', $bytes);
        $r->{status} != 503;
    });
    my $hid = created($r, 'hal', 'mongodb back: the retry');

    # (another pooled connection of before may meet its old socket too:
    # 503 again, and the client retries)
    my $again;
    $t->wait_for(5, sub {
        $again = post_key('hal', 'down', $bytes);
        $again->{status} != 503;
    });
    same_answer($again, $r, 'mongodb back: one more retry');
    one_post('hal', $hid, 'mongodb back') if $hid;
}

$t->done;
