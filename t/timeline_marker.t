#!/usr/bin/perl

# The read marker of a home timeline: PUT and GET
# /users/{uid}/timeline/marker.  A round trip; the marker never moves back
# without "force" (200, unchanged), and does with it; If-Match against the
# version (409, nothing changed) and ETag; every bad input answered with
# its 400 and nothing written (MongoDB's document as it was); identity
# (403); 405 with Allow; two workers answer the same marker, and so does
# nginx after a reload; Redis down (the PUT is stored in MongoDB, 503 until
# Redis takes its copy; GETs from MongoDB), Redis flushed (GET from MongoDB,
# cached again); concurrent PUTs end on the newest marker, versions growing
# with the ids.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short enc json_int is_error statuses);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run('httpid');
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 500ms;
    feed_mongo_timeout 2s;

    server {
        # reuseport: the kernel spreads the connections over both workers
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        add_header X-Worker $pid always;
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
        location = /metrics { feed_metrics; }
        location = /status { feed_status; }
    }

    server {
        listen 127.0.0.1:%%PORT_HTTPID%%;
        feed_identity $http_x_user;
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
    }
}
EOF

# ---------------------------------------------------------------- helpers --

sub id { sprintf('%024x', $_[0]) }

sub uri { "/users/$_[0]/timeline/marker" }

sub put {
    my ($user, $body, %o) = @_;
    return $t->http('PUT', uri($user), body => ref $body ? enc($body) : $body,
        headers => { 'Content-Type' => 'application/json',
                     %{ $o{headers} || {} } },
        $o{port} ? (port => $o{port}) : ());
}

sub get { $t->get(uri($_[0]), @_[1 .. $#_]) }

# the marker's document as MongoDB has it, as one string
sub doc { enc([ $t->mongo_find('markers', enc({ _id => $_[0] })) ]) }

sub mongo_version {
    my ($d) = $t->mongo_find('markers', enc({ _id => $_[0] }));
    return undef unless $d;
    my $v = $d->{version};
    return ref $v ? $v->{'$numberLong'} : $v;
}

sub is_marker {
    my ($r, $id, $version, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $j = $r->{json};
    my $ok = $r->{status} == 200 && ref $j eq 'HASH'
        && ($r->{headers}{'content-type'} // '') =~ m{^application/json}
        && ($j->{last_read_id} // '') eq $id
        && json_int($j->{version})
        && (!defined $version || $j->{version} == $version)
        && ($j->{updated_at} // '')
            =~ /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
        && ($r->{headers}{etag} // '') eq ($j->{version} // '')
        && keys %$j == 3;
    ok($ok, "$name: 200 $id" . (defined $version ? " version $version" : ''))
        or diag(short($r));
    return $ok;
}

# --------------------------------------------------------------- round trip --

# both workers on Redis first: on a busy machine a worker's first commands
# (its connect, the scripts loaded) can take longer than the 500 ms above,
# and the first PUT would be a 503 that the client is told to retry
ok($t->wait_for(15, sub {
    my $st = statuses($t);
    keys %$st == 2 && !grep { !$_->{redis}{up} } values %$st;
}), 'both workers reached Redis');

is_error(get('ann'), 404, 'not_found', 'GET without a marker');

my $r = put('ann', { last_read_id => id(100) });
is_marker($r, id(100), 1, 'first PUT');
my $at = $r->{json}{updated_at};

$r = get('ann');
is_marker($r, id(100), 1, 'GET after it');
is($r->{json}{updated_at}, $at, 'GET: the PUT\'s updated_at');
like($r->{headers}{'x-feed-cache'} // '', qr/^(HIT|MISS)$/,
    'GET: from the cache or filled');
is(get('ann')->{headers}{'x-feed-cache'}, 'HIT', 'GET again: HIT');

is_marker(put('ann', { last_read_id => id(200) }), id(200), 2,
    'PUT forward');
is_marker(get('ann'), id(200), 2, 'GET: the new marker');
is_marker(put('ann', { last_read_id => id(200) }), id(200), 2,
    'PUT the same id: unchanged');

# ------------------------------------------------------------ never backwards --

is_marker(put('ann', { last_read_id => id(150) }), id(200), 2,
    'PUT backwards: 200, unchanged');
is_marker(put('ann', { last_read_id => id(150), force => JSON::PP::false }),
    id(200), 2, 'PUT backwards, force false: unchanged');
is_marker(get('ann'), id(200), 2, 'GET: not moved back');
is(mongo_version('ann'), 2, 'MongoDB: version 2');

is_marker(put('ann', { last_read_id => id(150), force => JSON::PP::true }),
    id(150), 3, 'PUT backwards with force');
is_marker(get('ann'), id(150), 3, 'GET: moved back');

# ------------------------------------------------------------------ If-Match --

is_error(put('ann', { last_read_id => id(300) },
    headers => { 'If-Match' => '2' }), 409, 'version_conflict',
    'If-Match of an old version');
is_marker(get('ann'), id(150), 3, 'GET after the 409: unchanged');

$r = put('ann', { last_read_id => id(300) }, headers => { 'If-Match' => '3' });
is_marker($r, id(300), 4, 'If-Match of the current version');
is_marker(put('ann', { last_read_id => id(400) },
    headers => { 'If-Match' => '"4"' }), id(400), 5, 'If-Match quoted');

is_error(put('new1', { last_read_id => id(1) },
    headers => { 'If-Match' => '1' }), 409, 'version_conflict',
    'If-Match 1 without a marker');
is_error(get('new1'), 404, 'not_found', 'no marker made by the 409');
is_marker(put('new1', { last_read_id => id(1) },
    headers => { 'If-Match' => '0' }), id(1), 1, 'If-Match 0: the first');

# ------------------------------------------------------------ bad input --

my $before = doc('ann');
my $big = enc({ last_read_id => id(500), x => 'a' x 2000 });

my @bad = (
    [ 'not JSON', 'last_read_id', 'invalid_json' ],
    [ 'empty body', '', 'invalid_json' ],
    [ 'an array', '[1]', 'invalid_json' ],
    [ 'a string', '"' . id(500) . '"', 'invalid_json' ],
    [ 'two objects', enc({ last_read_id => id(500) }) x 2, 'invalid_json' ],
    [ 'not UTF-8', "{\"last_read_id\": \"\xff\"}", 'invalid_utf8' ],
    [ 'no last_read_id', '{}', 'invalid_last_read_id' ],
    [ 'only force', '{"force": true}', 'invalid_last_read_id' ],
    [ 'short id', enc({ last_read_id => 'abc' }), 'invalid_last_read_id' ],
    [ 'uppercase id', enc({ last_read_id => uc('a' . id(500)) }),
        'invalid_last_read_id' ],
    [ 'id a number', '{"last_read_id": 500}', 'invalid_last_read_id' ],
    [ 'id an $oid', '{"last_read_id": {"$oid": "' . id(500) . '"}}',
        'invalid_last_read_id' ],
    [ 'id null', '{"last_read_id": null}', 'invalid_last_read_id' ],
    [ 'force 1', '{"last_read_id": "' . id(500) . '", "force": 1}',
        'invalid_force' ],
    [ 'force "true"', '{"last_read_id": "' . id(500) . '", "force": "true"}',
        'invalid_force' ],
    [ 'unknown field', enc({ last_read_id => id(500), seen => 1 }),
        'unknown_field' ],
    [ 'field twice', '{"last_read_id": "' . id(500) . '", "last_read_id": "'
        . id(600) . '"}', 'duplicate_field' ],
    [ 'body over 1024 bytes', $big, 'request_too_large' ],
);

for my $b (@bad) {
    my ($name, $body, $code) = @$b;
    is_error(put('ann', $body), 400, $code, "PUT $name");
}

for my $im ('abc', '-1', '1.5', '', '*', '99999999999999999999', '"3') {
    is_error(put('ann', { last_read_id => id(500) },
        headers => { 'If-Match' => $im }), 400, 'invalid_if_match',
        "If-Match \"$im\"");
}

# a chunked body past the limit: its size is known once read
$r = $t->http('PUT', uri('ann'), raw => "PUT " . uri('ann') . " HTTP/1.1\r\n"
    . "Host: localhost\r\nConnection: close\r\n"
    . "Transfer-Encoding: chunked\r\n\r\n"
    . sprintf('%x', length $big) . "\r\n$big\r\n0\r\n\r\n");
is_error($r, 400, 'request_too_large', 'PUT chunked over 1024 bytes');

is(doc('ann'), $before, 'MongoDB: the marker as it was after every 400');
is_marker(get('ann'), id(400), 5, 'GET after the 400s: unchanged');

# --------------------------------------------------------- methods, identity --

for my $m (qw(POST DELETE PATCH)) {
    $r = $t->http($m, uri('ann'), body => enc({ last_read_id => id(900) }));
    is_error($r, 405, 'method_not_allowed', $m);
    is($r->{headers}{allow}, 'GET, HEAD, PUT', "$m: Allow");
}

is_error(put('ann', { last_read_id => id(900) }, port => $t->port('httpid'),
    headers => { 'X-User' => 'bob' }), 403, 'forbidden', 'PUT as bob');
is_error($t->get(uri('ann'), port => $t->port('httpid'),
    headers => { 'X-User' => 'bob' }), 403, 'forbidden', 'GET as bob');
is_error(put('ann', { last_read_id => id(900) }, port => $t->port('httpid')),
    401, 'unauthorized', 'PUT without an identity');
is_marker(put('ann', { last_read_id => id(500) }, port => $t->port('httpid'),
    headers => { 'X-User' => 'ann' }), id(500), 6, 'PUT as ann');
is_marker($t->get(uri('ann'), port => $t->port('httpid'),
    headers => { 'X-User' => 'ann' }), id(500), 6, 'GET as ann');
is(mongo_version('ann'), 6, 'MongoDB: only ann\'s own PUT written');

is_error(put('a b', { last_read_id => id(1) }), 400, 'invalid_user_id',
    'a bad user id') if 0;      # not routed: the space ends the path

# --------------------------------------------------------- workers, reload --

my (%seen, %workers);
for (1 .. 40) {
    $r = get('ann');
    $workers{ $r->{headers}{'x-worker'} // '' }++;
    $seen{ $r->{status} == 200 ? "$r->{json}{last_read_id} "
        . "$r->{json}{version}" : short($r) }++;
}
is(scalar keys %workers, 2, '40 GETs: answered by both workers')
    or diag(join(' ', keys %workers));
is_deeply([ keys %seen ], [ id(500) . ' 6' ], '40 GETs: one marker')
    or diag(join("\n", keys %seen));

$r = $t->http('HEAD', uri('ann'));
ok($r->{status} == 200 && ($r->{headers}{etag} // '') eq '6'
    && $r->{body} eq '', 'HEAD: 200, ETag, no body') or diag(short($r));

ok($t->reload, 'reload: new workers');
is_marker(get('ann'), id(500), 6, 'GET after the reload');

# ------------------------------------------------------------- Redis flushed --

$t->redis('FLUSHALL');
$r = get('ann');
is_marker($r, id(500), 6, 'GET after FLUSHALL');
is($r->{headers}{'x-feed-cache'}, 'MISS', 'from MongoDB');
ok($t->wait_for(3, sub { get('ann')->{headers}{'x-feed-cache'} eq 'HIT' }),
    'cached again');
is($t->redis('HGET', 'feed:mk:{ann}', 'v'), 6, 'Redis: version 6');

# ------------------------------------------------ Redis refuses the copy --

# out of memory, Redis takes no write but a DEL: the PUT drops the copy and
# answers 503; GETs read MongoDB (the fill is refused too), never the old copy

$t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$t->redis('CONFIG', 'SET', 'maxmemory', '1');

$r = put('ann', { last_read_id => id(600) });
is_error($r, 503, 'unavailable', 'PUT with Redis out of memory');
is(mongo_version('ann'), 7, 'MongoDB has it: version 7');
is($t->redis('EXISTS', 'feed:mk:{ann}'), 0, 'Redis: the old copy dropped');
$r = get('ann');
is_marker($r, id(600), 7, 'GET: the stored marker');
is($r->{headers}{'x-feed-cache'}, 'MISS', 'from MongoDB');

$t->redis('CONFIG', 'SET', 'maxmemory', '0');

is_marker(put('ann', { last_read_id => id(600) }), id(600), 7,
    'its retry: 200');
is($t->redis('HGET', 'feed:mk:{ann}', 'v'), 7, 'Redis: version 7');

# ------------------------------------------------------------- Redis down --

$t->stop_redis;

$r = put('ann', { last_read_id => id(700) });
is_error($r, 503, 'unavailable', 'PUT with Redis down');
is($r->{headers}{'retry-after'}, 1, 'Retry-After');
is(mongo_version('ann'), 8, 'MongoDB has it: version 8');

$r = get('ann');
is_marker($r, id(700), 8, 'GET with Redis down: from MongoDB');
is($r->{headers}{'x-feed-cache'}, 'BYPASS', 'BYPASS');

$r = put('ann', { last_read_id => id(650) });
is_error($r, 503, 'unavailable', 'PUT backwards with Redis down');

$t->start_redis;
ok($t->wait_for(10, sub {
    (get('ann')->{headers}{'x-feed-cache'} // '') =~ /HIT|MISS/ }),
    'Redis back');

is_marker(put('ann', { last_read_id => id(700) }), id(700), 8,
    'the PUT again once Redis is back');
is_marker(get('ann'), id(700), 8, 'GET');

# ----------------------------------------------------------- concurrent PUTs --

# 12 clients, 5 rounds: each PUT of a distinct id in a shuffled order; the
# answers seen by version never go back, the last is the newest id

my @ids = map { 1000 + $_ } 1 .. 60;
my @order = sort { ($a * 7919) % 61 <=> ($b * 7919) % 61 } @ids;
my @answers;

while (my @batch = splice(@order, 0, 12)) {
    my @h = map {
        $t->http_start('PUT', uri('cc'), body => enc({ last_read_id => id($_) }),
            headers => { 'Content-Type' => 'application/json' })
    } @batch;
    push @answers, map { $t->http_end($_) } @h;
}

my @bad_answers = grep { $_->{status} != 200 } @answers;
is(scalar @bad_answers, 0, 'every concurrent PUT: 200')
    or diag(join("\n", map { short($_) } @bad_answers));

my (%by_version, $mono);
$mono = 1;
for my $a (grep { $_->{status} == 200 } @answers) {
    my ($v, $id) = ($a->{json}{version}, $a->{json}{last_read_id});
    $mono = 0 if defined $by_version{$v} && $by_version{$v} ne $id;
    $by_version{$v} = $id;
}
my @v = sort { $a <=> $b } keys %by_version;
for my $i (1 .. $#v) {
    $mono = 0 unless $v[$i] > $v[$i - 1]
        && $by_version{ $v[$i] } gt $by_version{ $v[$i - 1] };
}
ok($mono, 'one marker per version, ids growing with versions')
    or diag(join(' ', map { "$_:$by_version{$_}" } @v));

$r = get('cc');
is_marker($r, id(1060), mongo_version('cc'), 'the last marker: the newest');
is($r->{json}{version}, $v[-1], 'its version: the highest answered');

# -------------------------------------------------------------------- metrics --

like($t->get('/metrics')->{body},
    qr/^feed_requests_total\{endpoint="timeline_marker",code="2xx"\} [1-9]/m,
    'metrics: the endpoint timeline_marker');

$t->done;
