#!/usr/bin/perl

# POST /users/{uid}/seen: the posts a reader saw, kept as Bloom filters in
# Redis (scripts/lib/seen.lua), for reads with ?unseen=1 (their read paths
# are t/timeline_seen.t).
#
#   - 204, and the ids are in the reader's filter: every one of them is
#     found again (no false negative), in one script call;
#   - bad input: not a JSON array, not ids, over 500 ids, an empty body, a
#     body too large: 400 from the error table, nothing written; other
#     methods 405; an empty array 204 and nothing written;
#   - identity (feed_identity): another user 403, none 401, nothing
#     written;
#   - Redis down: 503 with Retry-After;
#   - the false positive rate, on a filter filled to feed_seen_capacity
#     (10,000 ids, 1%): measured on 5,000 ids never sent, within a loose
#     bound around the configured rate; its memory at most 10 bits per id;
#   - rotation (feed_seen_capacity 100): the generation before the
#     current one is dropped when a new one starts, at most two live, and
#     the ids of the dropped one are no longer found;
#   (feed_seen_error and feed_seen_capacity out of range: t/config.t)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use POSIX qw(ceil);
use FeedTest;
use FeedTest::Util qw(enc rd is_error short seen_held);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 500ms;
    feed_mongo_timeout 2s;
    @@SEEN@@

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/seen$ { feed_seen $1; }
    }

    server {
        listen 127.0.0.1:%%PORT_HTTPID%%;
        feed_identity $http_x_user;
        location ~ ^/users/([^/]+)/seen$ { feed_seen $1; }
    }
}
EOF

sub conf {
    my ($seen) = @_;
    (my $c = $CONF) =~ s/\@\@SEEN\@\@/$seen || ''/e;
    return $c;
}

my $RUN = $$ . int(time);

# distinct post ids: $tag (a number) keeps sets apart
sub ids {
    my ($tag, $n) = @_;
    return [ map { sprintf('%08x%08x%08x', $RUN % 4294967296, $tag, $_) }
        1 .. $n ];
}

sub seen {
    my ($user, $body, %o) = @_;
    return $t->http('POST', "/users/$user/seen",
        body => ref $body ? enc($body) : $body,
        headers => { 'Content-Type' => 'application/json',
                     %{ $o{headers} || {} } },
        $o{port} ? (port => $o{port}) : ());
}

# how many of @$ids the reader's filters hold
sub found {
    my ($user, $ids) = @_;
    return scalar keys %{ seen_held(sub { $t->redis(@_) }, $user, $ids) };
}

# nginx started: both workers' Redis connections up (a throwaway user's
# POSTs answered 204, six in a row)
sub run {
    $t->run('httpid');
    ok($t->wait_for(10, sub {
        !grep { seen("ready$RUN", ids(99, 1))->{status} != 204 } 1 .. 6 }),
        'the workers reach Redis');
}

sub keys_of { [ sort @{ rd($t, 'KEYS', "feed:sn*{$_[0]}") || [] } ] }

# ------------------------------------------------------------- adding --

$t->write_conf(conf());
run();

my $ann = "ann$RUN";
my $a1 = ids(1, 500);

my $r = seen($ann, $a1);
is($r->{status}, 204, '500 ids: 204') or diag(short($r));
is(found($ann, $a1), 500, '500 ids: each one found');
is(rd($t, 'HGET', "feed:sn:{$ann}", 'n'), 500, 'the generation took 500');
is(seen($ann, $a1)->{status}, 204, 'the same 500 again: 204');
is(rd($t, 'HGET', "feed:sn:{$ann}", 'n'), 500,
    'and the generation did not take them twice');
ok(rd($t, 'TTL', "feed:snb0:{$ann}") > 7 * 86400 - 100,
    'the filter lives feed_cache_ttl');
is(found($ann, ids(2, 500)), 0, 'ids never sent: none found (half empty)')
    or diag('a filter that holds everything');

# ---------------------------------------------------------- bad input --

my $bob = "bob$RUN";
my $big = '[' . join(', ', map { "\"$_\"" } @{ ids(3, 600) }) . ']';

for my $case (
    [ '', 'invalid_json', 'an empty body' ],
    [ '{"ids": []}', 'invalid_json', 'an object' ],
    [ '"' . ids(3, 1)->[0] . '"', 'invalid_json', 'a string' ],
    [ '[1, 2]', 'invalid_post_id', 'numbers' ],
    # (hex digits in capitals: an id of the run's may have no letter)
    [ '["ABCDEF' . substr(ids(3, 1)->[0], 6) . '"]', 'invalid_post_id',
      'uppercase' ],
    [ '["abc"]', 'invalid_post_id', 'too short' ],
    [ '[' . join(',', map { "\"$_\"" } @{ ids(3, 2) }) . ', null]',
      'invalid_post_id', 'ids then null' ],
    [ '[' . join(',', map { "\"$_\"" } @{ ids(3, 2) }) . ']]',
      'invalid_json', 'not JSON' ],
    [ enc(ids(3, 2)) . enc(ids(3, 2)), 'invalid_json', 'two arrays' ],
    [ enc(ids(3, 501)), 'too_many_ids', '501 ids' ],
    [ $big, 'request_too_large', 'over 16384 bytes' ],
    [ "[\"\xff\"]", 'invalid_utf8', 'not UTF-8' ],
) {
    is_error(seen($bob, $case->[0]), 400, $case->[1], $case->[2]);
}

# chunked: the size is known only once read
$r = $t->http('POST', "/users/$bob/seen",
    raw => "POST /users/$bob/seen HTTP/1.1\r\nHost: localhost\r\n"
    . "Connection: close\r\nContent-Type: application/json\r\n"
    . "Transfer-Encoding: chunked\r\n\r\n"
    . sprintf('%x', length $big) . "\r\n$big\r\n0\r\n\r\n");
is_error($r, 400, 'request_too_large', 'chunked, over 16384 bytes');

is_deeply(keys_of($bob), [], 'nothing written after the 400s');
is(seen($bob, [])->{status}, 204, 'an empty array: 204');
is_deeply(keys_of($bob), [], 'and nothing written');

for my $m (qw(GET PUT DELETE)) {
    $r = $t->http($m, "/users/$bob/seen");
    is_error($r, 405, 'method_not_allowed', $m);
    is($r->{headers}{allow}, 'POST', "$m: Allow");
}

# ----------------------------------------------------------- identity --

my $ids4 = ids(4, 3);
my $idp = $t->port('httpid');
is_error(seen($bob, $ids4, port => $idp, headers => { 'X-User' => $ann }),
    403, 'forbidden', 'as another user');
is_error(seen($bob, $ids4, port => $idp), 401, 'unauthorized',
    'without an identity');
is_deeply(keys_of($bob), [], 'nothing written for them');
is(seen($bob, $ids4, port => $idp, headers => { 'X-User' => $bob })
    ->{status}, 204, 'as the user: 204');
is(found($bob, $ids4), 3, 'as the user: kept');

# --------------------------------------------------------- Redis down --

$t->stop_redis;
$r = seen($bob, ids(5, 3));
is_error($r, 503, 'unavailable', 'Redis down');
is($r->{headers}{'retry-after'}, '1', 'Redis down: Retry-After');
$t->start_redis;
ok($t->wait_for(10, sub { seen($bob, ids(5, 3))->{status} == 204 }),
    'Redis back: 204');
is(found($bob, ids(5, 3)), 3, 'Redis back: kept');

$t->stop;

# --------------------------------------- false positives, memory, default --

# ids as the module makes them (docs/posts.md): 4 bytes of seconds, 10
# bits of millisecond and 14 of sequence, then 5 bytes of the node; posts
# of three nodes a few hundred ms apart, some in the same millisecond
sub module_ids {
    my ($n) = @_;
    srand(29);
    my @node = map { sprintf('%010x', int(rand(2**40))) } 1 .. 3;
    my ($sec, $ms, @seq) = (0x6b096770, 0, 0, 0, 0);
    my @out;
    for (1 .. $n) {
        my ($step, $i) = (int(rand(400)), int(rand(3)));
        if ($step) { $ms += $step; @seq = (0, 0, 0) } else { $seq[$i]++ }
        $sec += int($ms / 1000);
        $ms %= 1000;
        push @out, sprintf('%08x%06x%s', $sec, $ms << 14 | $seq[$i],
            $node[$i]);
    }
    return \@out;
}

# 10,000 ids sent in 20 requests, then the false positives among 100,000
# others, ids that are no more random than real ones (the hash is made
# of arithmetic on the id's digits, lib/seen.lua): at full capacity a
# perfect hash gives 1.00%, and 100,000 probes measure it within 0.1%
# (three standard deviations)
sub false_positives {
    my ($user, $in, $out, $what) = @_;
    my @bad = grep { seen($user, [ @$in[$_ * 500 .. $_ * 500 + 499] ])
        ->{status} != 204 } 0 .. 19;
    ok(!@bad, "$what: 10,000 ids in 20 requests, 204 each");
    is(found($user, $in), 10000, "$what: no false negative in 10,000");
    my $fp = found($user, $out) / @$out;
    note(sprintf('%s: false positive rate %.4f, configured 0.01', $what,
        $fp));
    ok($fp > 0.005 && $fp <= 0.011, sprintf('%s: false positives %.2f%% '
        . 'of 100,000 ids never sent, the configured 1%%', $what,
        $fp * 100));
}

# 10,000 ids, 1%: m = ceil(-n ln p / ln2^2) bits, k = round(m / n ln 2)
{
    my $cy = "cy$RUN";
    $t->write_conf(conf());
    run();

    my $all = ids(6, 10000);
    false_positives($cy, $all, [ map { @{ ids(7 + $_, 5000) } } 0 .. 19 ],
        'ids of one counter');

    my $m = ceil(-10000 * log(0.01) / log(2) ** 2);
    is(rd($t, 'HGET', "feed:sn:{$cy}", 'm0'), $m, "m = $m bits");
    is(rd($t, 'HGET', "feed:sn:{$cy}", 'k0'), 7, 'k = 7 hashes');
    is(rd($t, 'HGET', "feed:sn:{$cy}", 'h0'), 2, 'hash scheme 2');
    is(rd($t, 'HGET', "feed:sn:{$cy}", 'g'), 0, 'one generation');
    ok(rd($t, 'HGET', "feed:sn:{$cy}", 'n') > 9800,
        'it took about all of them (those it already held are not counted)');
    ok(rd($t, 'STRLEN', "feed:snb0:{$cy}") <= 10000 * 10 / 8,
        'its memory: at most 10 bits per id');

    # every eleventh sent, the ten between them probed: the neighbours
    my $mod = module_ids(110000);
    false_positives("cym$RUN", [ @$mod[grep { $_ % 11 == 0 } 0 .. $#$mod] ],
        [ @$mod[grep { $_ % 11 } 0 .. $#$mod] ], "the module's ids");

    # bench/seen.pl's: ids that differ in their last five digits only (a
    # prime next to a power of two made 9% of them false positives)
    my @fe = map { sprintf('%08x%016x', 0xfeed, $_) } 1 .. 110000;
    false_positives("cyb$RUN", [ @fe[0 .. 9999] ], [ @fe[10000 .. $#fe] ],
        'ids of a 64-bit counter');

    $t->stop;
}

# --------------------------------------- a filter over 64 KB: BITFIELD --

# the reads test a filter of up to 64 KB read whole, a larger one bit by
# bit with BITFIELD: 100,000 ids at 1% make 117 KB
{
    my $big = "big$RUN";
    $t->write_conf(conf("feed_seen_capacity 100000;"));
    run();

    my $in = ids(8, 1000);
    ok(!grep({ seen($big, [ @$in[$_ * 500 .. $_ * 500 + 499] ])->{status}
        != 204 } 0, 1), 'a filter of 117 KB: 1,000 ids');
    ok(rd($t, 'HGET', "feed:sn:{$big}", 'm0') > 64 * 1024 * 8,
        'a filter of 117 KB: over 64 KB');
    is(found($big, $in), 1000, 'a filter of 117 KB: each one found');
    is(found($big, ids(9, 1000)), 0,
        'a filter of 117 KB: none of 1,000 others (a hundredth full)');

    $t->stop;
}

# ----------------------------------------------------------- rotation --

{
    my $rot = "rot$RUN";
    $t->write_conf(conf("feed_seen_capacity 100;\n    feed_seen_error 2%;"));
    run();

    my @gen = map { ids(10 + $_, 100) } 0 .. 3;
    my $m = ceil(-100 * log(0.02) / log(2) ** 2);

    is(seen($rot, $gen[0])->{status}, 204, 'rotation: 100 ids');
    is(rd($t, 'HGET', "feed:sn:{$rot}", 'm0'), $m, "rotation: m = $m");
    is(seen($rot, $gen[1])->{status}, 204, 'rotation: 100 more');
    is(rd($t, 'HGET', "feed:sn:{$rot}", 'g'), 1,
        'rotation: the second generation began');
    is(found($rot, [ @{ $gen[0] }, @{ $gen[1] } ]), 200,
        'rotation: both generations found');

    # a third generation, in place of the first
    is(seen($rot, [ @{ $gen[2] }[0 .. 49] ])->{status}, 204,
        'rotation: 50 more');
    is(rd($t, 'HGET', "feed:sn:{$rot}", 'g'), 0,
        'rotation: a third generation, where the first was');
    ok(found($rot, $gen[0]) < 10,
        'rotation: the first generation dropped: its ids gone (but false '
        . 'positives)');
    is(found($rot, [ @{ $gen[1] }, @{ $gen[2] }[0 .. 49] ]), 150,
        'rotation: the two live generations found');

    # 100 at once: the third fills, a fourth starts within the same call
    is(seen($rot, [ @{ $gen[2] }[50 .. 99], @{ $gen[3] }[0 .. 49] ])
        ->{status}, 204, 'rotation: 100 more, in one call');
    is(rd($t, 'HGET', "feed:sn:{$rot}", 'g'), 1,
        'rotation: a fourth generation began within the call');
    my $n = rd($t, 'HGET', "feed:sn:{$rot}", 'n');
    ok($n >= 45 && $n <= 55, "rotation: it took about 50 ($n: the third "
        . 'took those it did not seem to hold already)');
    ok(found($rot, $gen[1]) < 10, 'rotation: the second generation dropped');
    is(found($rot, [ @{ $gen[2] }, @{ $gen[3] }[0 .. 49] ]), 150,
        'rotation: the third and fourth found');
    is_deeply(keys_of($rot), [ "feed:sn:{$rot}", "feed:snb0:{$rot}",
        "feed:snb1:{$rot}" ], 'rotation: at most two generations live');
    ok(rd($t, 'STRLEN', "feed:snb$_:{$rot}") <= ceil($m / 8),
        "rotation: generation $_ at most m bits") for 0, 1;

    $t->stop;
}

# ------------------------------------- a full generation is not asked --

# Ids sent when the current generation is full go to the next one, even
# those the full one seems to hold (its false positives): asked, they
# were left in it and lost at the rotation after, seen posts shown again
# (the rotation checks above found 149 of 150 now and then).  Then
# feed_seen_capacity lowered below what the current generation took: the
# next id still starts a new one.
{
    my $fp = "fp$RUN";
    $t->write_conf(conf("feed_seen_capacity 100;\n    feed_seen_error 2%;"));
    run();

    is(seen($fp, ids(30, 100))->{status}, 204, 'full: 100 ids');
    my $held = seen_held(sub { $t->redis(@_) }, $fp, ids(31, 3000));
    my @x = (sort keys %$held)[0 .. 4];
    is(scalar(grep { defined } @x), 5,
        'full: five ids it holds by chance among 3,000 never sent')
        or diag(scalar(keys %$held) . ' held');
    my $fresh = (grep { !$held->{$_} } @{ ids(31, 3000) })[0];

    is(seen($fp, [ @x, $fresh ])->{status}, 204, 'full: those five sent');
    is(rd($t, 'HGET', "feed:sn:{$fp}", 'g'), 1,
        'full: the next generation began');
    is(rd($t, 'HGET', "feed:sn:{$fp}", 'n'), 6, 'full: it took all six');

    # the next generation fills, the one after starts where the first was
    is(seen($fp, ids(32, 100))->{status}, 204, 'full: 100 more');
    is(rd($t, 'HGET', "feed:sn:{$fp}", 'g'), 0, 'full: the first dropped');
    is(found($fp, [ @x, $fresh ]), 6,
        'full: the five and the other still found');

    # the generation takes 60 at most (its own false positives aside),
    # then feed_seen_capacity is lowered to 50, below what it holds: the
    # next id starts a new one
    is(seen($fp, ids(33, 60 - rd($t, 'HGET', "feed:sn:{$fp}", 'n')))
        ->{status}, 204, 'capacity lowered: more ids');
    my $n = rd($t, 'HGET', "feed:sn:{$fp}", 'n');
    ok($n > 50, "capacity lowered: the generation holds $n");
    $t->stop;
    $t->write_conf(conf("feed_seen_capacity 50;\n    feed_seen_error 2%;"));
    run();
    is(seen($fp, ids(34, 1))->{status}, 204, 'capacity lowered: one more');
    is(rd($t, 'HGET', "feed:sn:{$fp}", 'g'), 1,
        'capacity lowered: the next generation began');
    is(rd($t, 'HGET', "feed:sn:{$fp}", 'n'), 1,
        'capacity lowered: the new one holds the one id');
    $t->stop;
}

# ------------------------------ a filter made before hash schemes (SHA1) --

# A generation without h<g> in feed:sn was made by a version that hashed
# ids with SHA1: it is written here as that version wrote it, and read,
# added to and rotated by this one.  The ids it holds stay seen until it
# rotates out (a post seen before an upgrade is not shown again after
# it), the ids added to it are hashed as it was made, and the next
# generation is made with the scheme of now.
{
    my $old = "old$RUN";
    $t->write_conf(conf("feed_seen_capacity 100;\n    feed_seen_error 2%;"));
    run();

    my $m = ceil(-100 * log(0.02) / log(2) ** 2);
    my @gen = map { ids(20 + $_, 60) } 0 .. 3;
    rd($t, 'EVAL', <<'EOF', 2, "feed:sn:{$old}", "feed:snb0:{$old}", $m, 6,
local m, k = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 3, #ARGV do
  local v = tonumber(string.sub(redis.sha1hex(ARGV[i]), 1, 13), 16)
  local h1 = v % 67108864
  local h2 = (v - h1) / 67108864
  if h2 % m == 0 then h2 = h2 + 1 end
  for x = 0, k - 1 do
    redis.call('setbit', KEYS[2], (h1 + x * h2) % m, 1)
  end
end
redis.call('hset', KEYS[1], 'g', 0, 'n', #ARGV - 2, 'm0', m, 'k0', k)
EOF
        @{ $gen[0] });

    is(found($old, $gen[0]), 60, 'SHA1 filter: each of its ids found');
    ok(found($old, $gen[1]) < 10, 'SHA1 filter: few others');

    is(seen($old, [ @{ $gen[1] }[0 .. 29] ])->{status}, 204,
        'SHA1 filter: 30 more');
    is(rd($t, 'HGET', "feed:sn:{$old}", 'h0'), undef,
        'SHA1 filter: the generation keeps its scheme');
    ok(rd($t, 'HGET', "feed:sn:{$old}", 'n') >= 85,
        'SHA1 filter: the generation took them');
    is(found($old, [ @{ $gen[0] }, @{ $gen[1] }[0 .. 29] ]), 90,
        'SHA1 filter: the old ids and those added to it found');

    # it fills: the next generation is made with scheme 2
    is(seen($old, [ @{ $gen[1] }[30 .. 59], @{ $gen[2] } ])->{status}, 204,
        'SHA1 filter: 90 more');
    is(rd($t, 'HGET', "feed:sn:{$old}", 'g'), 1,
        'SHA1 filter: a second generation began');
    is(rd($t, 'HGET', "feed:sn:{$old}", 'h1'), 2,
        'SHA1 filter: the second generation with scheme 2');
    is(found($old, [ map { @$_ } @gen[0 .. 2] ]), 180,
        'SHA1 filter: the ids of both generations found, each by its '
        . 'scheme');

    # and rotates out
    is(seen($old, [ @{ $gen[3] }, @{ ids(24, 60) } ])->{status}, 204,
        'SHA1 filter: 120 more');
    is(rd($t, 'HGET', "feed:sn:{$old}", 'h0'), 2,
        'SHA1 filter: rotated out, its place taken with scheme 2');
    ok(found($old, $gen[0]) < 10, 'SHA1 filter: its ids gone with it');

    $t->stop;
}

$t->done;
