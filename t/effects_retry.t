#!/usr/bin/perl

# A retried write completes the cache side effects of a first try that
# wrote MongoDB and then failed.  MongoDB's failCommand fail
# point (docs/mongo-standin.md) drops the connection at one named command
# of the first try, after the write that changes what timelines show:
#
#   - an unfollow whose counter update fails: the edge is gone, the try is
#     503; the retry finds the edge gone already, and must still drop the
#     reader's cached timeline (the author's posts vanish) and counts;
#   - a follow whose counter update fails: the retry shows the new
#     author's posts in a timeline that was cached before;
#   - a mute whose count check after the write fails;
#   - a block whose clean-up (the unfollow of the blocked reader) fails;
#   - a follow whose effects are applied, and their entry's clear fails:
#     204, and the sweeper clears it.
#
# Each first try is a 5xx and each retry 204, and right after the retry's
# 204 the reader's timeline is what the graph says, read from the cache.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post server_conf tl_walk node_counts $HIT);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $server = server_conf();
$server =~ s{(location = /status)}{location ~ ^/users/([^/]+)/followers\$ { feed_followers \$1; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)\$ { feed_block \$1 \$2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)\$ { feed_mute \$1 \$2; }
        $1};

$t->write_conf(<<"EOF");
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 2s;
    feed_cache_local 1m;
    feed_fanout on;
    feed_fanout_block 100ms;

$server
}
EOF

$t->run;

my $RUN = $$ . int(time);
my ($DB) = ($t->mongo_uri =~ m{/([^/?]+)(?:\?|$)});
$DB //= 'feed';

# the authors of the posts the reader's whole timeline shows, and how
# its first page was answered
sub shown {
    my ($reader) = @_;
    my $w = tl_walk($t, $reader, 20);
    return ([], "@{$w->{problems}}") if @{$w->{problems}};
    return ([ map { ($_->{author} // '') =~ s/^str://r } @{$w->{items}} ],
        $w->{caches}[0] // '');
}

sub count_of {
    my ($reader, $author) = @_;
    my ($shown) = shown($reader);
    return scalar grep { $_ eq $author } @$shown;
}

sub put { $t->http('PUT', $_[0]) }

# the fail point: the connection dropped at the command's first match
# (after skip others), as a MongoDB gone between two writes; a read the
# driver would try again on a new connection (retryable reads) gets an
# error that is not retried instead
sub fail_once {
    my ($cmd, $coll, $skip) = @_;
    $t->mongo_fail_point(mode => { times => 1, skip => $skip // 0 },
        failCommands => [$cmd], namespace => "$DB.$coll",
        $cmd eq 'aggregate' ? (errorCode => 96) : (closeConnection => 1));
}

# the first try: 503 (the connection lost) or 500 (an error from MongoDB)
sub first_try_fails {
    my ($name, $method, $uri) = @_;
    my $r = $t->http($method, $uri);
    like($r->{status}, qr/^50[03]$/, "$name: the first try fails after its "
        . "write") or diag(short($r));
    $t->mongo_fail_point_off;
}

# a reader whose timeline, cached, shows these authors' posts
sub reader_of {
    my ($name, @authors) = @_;
    my $r = "$name$RUN";
    for my $a (@authors) {
        is(put("/users/$r/following/$a")->{status}, 204,
            "$name: $r follows $a");
    }
    return $r;
}

sub posts_by {
    my ($a, $n) = @_;
    post($t, $a, "by $a $_") for 1 .. $n;
}

sub cached_with {
    my ($name, $r, %want) = @_;
    my $ok = $t->wait_for(5, sub {
        !grep { count_of($r, $_) != $want{$_} } keys %want
    });
    ok($ok, "$name: the reader's timeline shows "
        . join(', ', map { "$want{$_} of $_" } sort keys %want));
    my (undef, $first) = shown($r);
    # a hit, from Redis or from the worker's copy
    like($first, $HIT, "$name: read from the cache ($first)");
}

# right after the retry: what the graph says, from the cache (a drop made
# it a MISS, then hits: HIT, or LOCAL from the worker's copy)
sub right_away {
    my ($name, $r, %want) = @_;
    for my $a (sort keys %want) {
        is(count_of($r, $a), $want{$a}, "$name: right after the retry, "
            . "$want{$a} posts of $a");
    }
}

# --------------------------------------------------------------- unfollow --

{
    my ($a, $b) = ("ua$RUN", "ub$RUN");
    my $r = reader_of('unfollow', $a, $b);
    posts_by($a, 3);
    posts_by($b, 2);
    cached_with('unfollow', $r, $a => 3, $b => 2);

    fail_once('update', 'follow_counts');
    first_try_fails('unfollow', 'DELETE', "/users/$r/following/$a");

    is($t->http('DELETE', "/users/$r/following/$a")->{status}, 204,
        'unfollow: the retry is 204');
    right_away('unfollow', $r, $a => 0, $b => 2);
    is($t->get("/users/$a/followers")->{json}{count}, 0,
        'unfollow: the followers count is right');
}

# ----------------------------------------------------------------- follow --

{
    my ($a, $b) = ("fa$RUN", "fb$RUN");
    my $r = reader_of('follow', $b);
    posts_by($a, 3);
    posts_by($b, 2);
    cached_with('follow', $r, $a => 0, $b => 2);

    fail_once('update', 'follow_counts');
    first_try_fails('follow', 'PUT', "/users/$r/following/$a");

    is(put("/users/$r/following/$a")->{status}, 204,
        'follow: the retry is 204');
    right_away('follow', $r, $a => 3, $b => 2);
    is($t->get("/users/$a/followers")->{json}{count}, 1,
        'follow: the followers count is right');
}

# ------------------------------------------------------------------- mute --

{
    my ($a, $b) = ("ma$RUN", "mb$RUN");
    my $r = reader_of('mute', $a, $b);
    posts_by($a, 3);
    posts_by($b, 2);
    cached_with('mute', $r, $a => 3, $b => 2);

    # the count before the write passes, the one after fails
    fail_once('aggregate', 'filters', 1);
    first_try_fails('mute', 'PUT', "/users/$r/mutes/$a");

    is(put("/users/$r/mutes/$a")->{status}, 204, 'mute: the retry is 204');
    right_away('mute', $r, $a => 0, $b => 2);
}

# ------------------------------------------------------------------ block --

{
    my ($a, $b) = ("ba$RUN", "bb$RUN");
    my $r = reader_of('block', $a, $b);
    posts_by($a, 3);
    posts_by($b, 2);
    cached_with('block', $r, $a => 3, $b => 2);

    # the block is written, then its clean-up's unfollow fails at the
    # counters
    fail_once('update', 'follow_counts');
    first_try_fails('block', 'PUT', "/users/$a/blocks/$r");

    is(put("/users/$a/blocks/$r")->{status}, 204, 'block: the retry is 204');
    right_away('block', $r, $a => 0, $b => 2);
    is($t->get("/users/$a/followers")->{json}{count}, 0,
        'block: the follow is gone from the counts');
}

# ------------------------------------------------- the clear that fails --

# the effects applied, their entries not cleared (the connection lost at
# the clear): the write is done and says so (204), and the sweeper, which
# takes an entry once its lease ends, applies them again (no harm: a
# rebuild) and clears them
{
    my ($a, $b) = ("ca$RUN", "cb$RUN");
    my $r = reader_of('clear', $b);
    posts_by($a, 3);
    posts_by($b, 2);
    cached_with('clear', $r, $a => 0, $b => 2);

    my $swept = node_counts($t)->{'effects.swept'} // 0;

    fail_once('delete', 'cache_effects');
    is(put("/users/$r/following/$a")->{status}, 204,
        'clear: the follow is 204, its effects applied');
    $t->mongo_fail_point_off;

    # left for the sweeper: still there, or already swept (its lease is a
    # second, which a busy machine spends before the look)
    ok(scalar($t->mongo_find('cache_effects', qq({"_id": "$r"})))
        || node_counts($t)->{'effects.swept'} > $swept,
        'clear: the entry is left');
    like($t->error_log, qr/applied, not cleared, the sweeper applies them/,
        'clear: and the error log says so');
    right_away('clear', $r, $a => 3, $b => 2);

    ok($t->wait_for(5, sub {
        !$t->mongo_find('cache_effects', qq({"_id": "$r"}))
            && node_counts($t)->{'effects.swept'} > $swept
    }), 'clear: the sweeper clears it once its lease ends');
    cached_with('clear', $r, $a => 3, $b => 2);
}

$t->done;
