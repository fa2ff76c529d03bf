#!/usr/bin/perl
# Post ids in Redis lists as the ObjectId's 12 bytes (issue 33), with
# redis-server in a locale whose collation is not byte order
# (en_US.UTF-8: Lua's "<" on strings follows it; every test's Redis runs
# in it, t/lib/FeedTest.pm), in link and embed mode:
#
#   - the locale is in effect: Lua's "<" says 'a' < 'B', bytes say not;
#   - a list of ids that differ in bytes whose collation and numbers
#     disagree: first pages, walks by max_id and reads by since_id come
#     out newest first, exact (each compare of ids is of numbers);
#   - a post whose id falls inside the list is inserted in its place by
#     fanout, and a delete takes it out;
#   - lists written by the version before (24 hex digits an entry, the
#     post's JSON under feed:p:<hex> in link mode, spaces in the JSON):
#     a user's list is dropped at the first read and made again (MISS,
#     then HIT, the posts all there), and its feed:p:<hex> keys go with
#     it; a delivery to such a list drops it, and the next read has the
#     post; a pull author's list is loaded again; an entry queued during
#     a rebuild by the version before goes in its place.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(rd post entry_id entry_json entry_of post_key
    server_conf wait_settled);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

# redis-server runs in en_US.UTF-8, as every test's (FeedTest::spawn)
my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF' . server_conf() . "}\n";
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    feed_redis_timeout 5s;
    %%FEED_MONGO%%
    feed_cache_mode @@MODE@@;
    feed_cache_size 40;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_pull_threshold 3;
    feed_cache_tracking off;
EOF

is(rd($t, 'EVAL', "return ('a' < 'B') and 1 or 0", 0), 1,
    'redis-server collates: Lua says a < B (bytes say B < a)');

sub ids { [ map { $_->{id} } @{ $_[0]{json}{items} || [] } ] }
sub tl { $t->get("/users/$_[0]/timeline" . ($_[1] ? "?$_[1]" : '')) }
sub cache { $_[0]{headers}{'x-feed-cache'} // '' }
sub list { [ map { entry_id($_) } @{ rd($t, 'LRANGE', $_[0], 0, -1) || [] } ] }

# every page of a walk by max_id, limit $n: the ids, and the pages' causes
sub walk {
    my ($u, $n) = @_;
    my (@ids, @c);
    my $q = "limit=$n";
    for (1 .. 50) {
        my $r = tl($u, $q);
        return ([ "status $r->{status}" ], []) if $r->{status} != 200;
        push @ids, @{ ids($r) };
        push @c, cache($r);
        my $next = $r->{json}{next} or last;
        $q = "limit=$n&max_id=$next";
    }
    return (\@ids, \@c);
}

for my $mode (qw(link embed)) {
    (my $conf = $CONF) =~ s/\@\@MODE\@\@/$mode/g;
    $t->write_conf($conf)->run;
    ok($t->wait_for(15, sub {
        my $j = $t->get('/status')->{json} or return 0;
        $j->{redis}{up} && $j->{mongo}{up};
    }), "$mode: nginx up");

    # ------------------------------------------- ids whose bytes collate --

    # 12 posts by a real author, then their ids in the list replaced by
    # ids that differ in one byte, 'B' (0x42) against 'a' (0x61) and
    # 0x7f against 0x80: their order by numbers is not Lua's by strcoll
    my ($au, $r) = ("ida$mode", "idr$mode");
    is($t->http('PUT', "/users/$r/following/$au")->{status}, 204,
        "$mode: follow");
    my @real = map { post($t, $au, "post $_", quiet => 1) } 1 .. 12;
    is(tl($r)->{status}, 200, "$mode: list made");
    # no delivery of those posts may come after the list is replaced
    wait_settled($t, "$mode: the posts fanned out");
    my @bytes = (0x42, 0x61, 0x7f, 0x80, 0x41, 0x62, 0x5a, 0x7a, 0x30,
                 0xe9, 0x45, 0x65);
    my $sec = hex(substr($real[0], 0, 8));
    # ascending: byte 5 grows with each post, as a counter would
    my @craft = map { sprintf('%08x00%02x%012x', $sec, $_, 0) }
        sort { $a <=> $b } @bytes;
    my $key = "feed:tl:{$r}";
    rd($t, 'DEL', $key, "feed:tlp:{$r}");
    for my $i (0 .. $#craft) {
        my $json = qq({"id":"$craft[$i]","author":"$au","body":"c $i",)
            . qq("ts":${sec}000});
        rd($t, 'SET', post_key($craft[$i]), $json, 'EX', 600)
            if $mode eq 'link';
        rd($t, 'LPUSH', $key,
            entry_of($craft[$i], $mode eq 'embed' ? $json : ''));
    }
    rd($t, 'RPUSH', $key, "\0" x 12);
    my @want = reverse @craft;
    my $p = tl($r, 'limit=20');
    is(cache($p), 'HIT', "$mode: crafted list read from Redis");
    is_deeply(ids($p), \@want, "$mode: first page newest first, by numbers");
    my ($w, $c) = walk($r, 5);
    is_deeply($w, \@want, "$mode: walk by max_id, 5 a page: exact");
    is("@$c", 'HIT HIT HIT', "$mode: the walk from the list");
    is_deeply(ids(tl($r, "since_id=$craft[5]")), [ @want[0 .. 5] ],
        "$mode: since_id: the newer six");
    is_deeply(ids(tl($r, "limit=3&max_id=$craft[7]&since_id=$craft[2]")),
        [ @want[5 .. 7] ], "$mode: max_id and since_id together");

    # fanout puts a post whose id falls between them in its place (its
    # stream entry told by hand, the post in MongoDB), a delete takes it
    # out
    my $mid = sprintf('%08x00%02x%012x', $sec, 0x70, 1);
    $t->mongo_insert('posts', qq({"_id": {"\$oid": "$mid"}, "author": )
        . qq("$au", "body": "mid", "ts": ${sec}000}));
    rd($t, 'XADD', 'feed:posts', '*', 'type', 'post', 'id', $mid,
        'author', $au, 'ts', "${sec}000");
    my @with = sort { $b cmp $a } (@craft, $mid);
    ok($t->wait_for(5, sub { "@{ list($key) }" eq "@with " . '0' x 24 }),
        "$mode: fanout inserts a post in its place by numbers")
        or diag("@{ list($key) }");
    is_deeply(ids(tl($r, 'limit=20')), \@with, "$mode: and reads show it");
    is($t->http('DELETE', "/users/$au/posts/$mid")->{status}, 204,
        "$mode: the post deleted");
    ok($t->wait_for(5, sub { "@{ list($key) }" eq "@want " . '0' x 24 }),
        "$mode: its delete takes it out of the list")
        or diag("@{ list($key) }");
    is_deeply(\@want, [ sort { $b cmp $a } @craft ],
        "$mode: the crafted ids newest first are in byte order");

    # ---------------------------------------- lists of the version before --

    my ($oa, $or) = ("olda$mode", "oldr$mode");
    is($t->http('PUT', "/users/$or/following/$oa")->{status}, 204,
        "$mode: old: follow");
    my @op = map { post($t, $oa, "old $_", quiet => 1) } 1 .. 6;
    my $o1 = tl($or);
    is_deeply(ids($o1), [ reverse @op ], "$mode: old: read");
    # the list as the version before wrote it: hex ids, spaced JSON
    my $ok = "feed:tl:{$or}";
    my @entries = @{ rd($t, 'LRANGE', $ok, 0, -1) || [] };
    rd($t, 'DEL', $ok, "feed:tlp:{$or}");
    for my $e (@entries) {
        my $id = entry_id($e);
        my $json = $mode eq 'embed' ? entry_json($e)
                                    : rd($t, 'GET', post_key($id)) // '';
        $json =~ s/":/" : /g;
        $json =~ s/,"/, "/g;
        if ($id eq '0' x 24) {
            rd($t, 'RPUSH', $ok, $id);
        } elsif ($mode eq 'embed') {
            rd($t, 'RPUSH', $ok, $id . $json);
        } else {
            rd($t, 'RPUSH', $ok, $id);
            rd($t, 'SET', "feed:p:$id", $json, 'EX', 600);
        }
    }
    my $first = rd($t, 'LINDEX', $ok, 0);
    is(length($first), $mode eq 'link' ? 24 : length($first),
        "$mode: old: the list holds hex ids");
    my $o2 = tl($or);
    is(cache($o2), 'MISS', "$mode: old: dropped at the first read, made "
        . 'again');
    is_deeply(ids($o2), [ reverse @op ], "$mode: old: the posts all there");
    my $head = rd($t, 'LINDEX', $ok, 0) // '';
    is(entry_id($head), $op[-1], "$mode: old: made again with bytes");
    ok($mode eq 'embed' ? entry_json($head) =~ /^\{/ : length($head) == 12,
        "$mode: old: an entry is the id's 12 bytes"
        . ($mode eq 'embed' ? ', then the JSON' : ''));
    is(rd($t, 'EXISTS', map { "feed:p:$_" } @op), 0,
        "$mode: old: the posts' feed:p:<hex> keys gone with it");
    is(cache(tl($or)), 'HIT', "$mode: old: then a hit");

    # a delivery into a list of the version before drops it
    rd($t, 'DEL', $ok, "feed:tlp:{$or}");
    rd($t, 'RPUSH', $ok, (map { $_ } reverse @op), '0' x 24)
        if $mode eq 'link';
    rd($t, 'RPUSH', $ok, (map { $_ . qq({"id":"$_"}) } reverse @op),
        '0' x 24) if $mode eq 'embed';
    my $np = post($t, $oa, 'new', quiet => 1);
    ok($t->wait_for(5, sub { !rd($t, 'EXISTS', $ok) }),
        "$mode: old: a delivery drops the list");
    my $o3 = tl($or);
    is(cache($o3), 'MISS', "$mode: old: made again at the next read");
    is_deeply(ids($o3), [ $np, reverse @op ], "$mode: old: with the post");

    # ----------------------------------------------- a pull author's list --

    my $star = "star$mode";
    my @fans = map { "fan$mode$_" } 1 .. 3;
    is($t->http('PUT', "/users/$_/following/$star")->{status}, 204,
        "$mode: pull: $_ follows") for @fans;
    my @sp = map { post($t, $star, "star $_", quiet => 1) } 1 .. 4;
    ok($t->wait_for(5, sub { rd($t, 'EXISTS', "feed:pl:{$star}") }),
        "$mode: pull: the star's list");
    is_deeply(ids(tl($fans[0])), [ reverse @sp ], "$mode: pull: read");
    my @pl = @{ rd($t, 'LRANGE', "feed:pl:{$star}", 0, -1) || [] };
    rd($t, 'DEL', "feed:pl:{$star}");
    rd($t, 'RPUSH', "feed:pl:{$star}",
        map { entry_id($_) . entry_json($_) } @pl);
    is(length(rd($t, 'LINDEX', "feed:pl:{$star}", 0) // ''),
        24 + length(entry_json($pl[0])), "$mode: pull: the list in hex");
    is_deeply(ids(tl($fans[1])), [ reverse @sp ],
        "$mode: pull: a merge of the list in hex: the posts all there");
    ok($t->wait_for(5, sub {
        length(rd($t, 'LINDEX', "feed:pl:{$star}", 0) // '')
            == 12 + length(entry_json($pl[0]));
    }), "$mode: pull: the list loaded again, with bytes");

    $t->stop;
}

$t->done;
