#!/usr/bin/perl

# Read filters: a home timeline never shows posts by authors the
# reader blocked or muted, nor by authors who blocked the reader, on every
# read path, and pages stay full.  With 2 workers, feed_cache_local, a
# cache of 24 posts (pages past it are DEEP), a pull author (celeb), in
# link and embed mode:
#
#   - a mute added while the timeline is cached and its first page is kept
#     in Redis and in both workers' copies: the next reads are hits (HIT,
#     or LOCAL: a worker's copy; no rebuild) without the muted author, full;
#   - cursor walks (limit 7, then 5) visit every visible post exactly once
#     across the cache's end (hits, then DEEP), the muted author's posts
#     interleaved with the others';
#   - a muted pull author is not merged;
#   - a block (its follows go): the rebuild (MISS) leaves the blocked out;
#   - an author who blocked the reader: a post of theirs that reached the
#     reader's list anyway (a delivery racing the block, put there by hand)
#     is not shown;
#   - an unmute: the author's posts are back at the next read, a hit;
#   - the filters lost from Redis while the list is not: the list is made
#     again, with them; a rebuild, a wait (readers of one worker behind one
#     rebuild);
#   - Redis down (BYPASS): the filters come from MongoDB, pages are full
#     and walk every visible post once;
#   - a rebuild not cached (the follows changed meanwhile): its answer
#     leaves the muted author out.
# Then each MongoDB timeline model (feed_timeline_store): a walk after a
# Redis flush leaves the muted author out, past the store's end too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short rd post server_conf tl_walk tl_walk_is tl_firsts
    tl_firsts_are tl_ids parallel
    first_diff $HIT);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

# the graph's filter locations, as in conf/nginx.conf, and a post's
my $FILTERS = <<'EOF';
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)$ { feed_block $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
EOF

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 2s;
    feed_cache_mode @@MODE@@;
    feed_cache_size 24;
    feed_cache_local 1m;
    feed_fanout on;
    feed_fanout_block 100ms;
    feed_pull_threshold @@PULL@@;
    @@STORE@@

@@SERVER@@
}
EOF

my $RUN = $$ . int(time);
my $N = 0;

sub conf {
    my (%o) = @_;
    my $c = $CONF;
    my $server = server_conf();
    $server =~ s/^(\s*location = \/status)/$FILTERS$1/m;
    $c =~ s/\@\@SERVER\@\@\n/$server/;
    $c =~ s/\@\@MODE\@\@/$o{mode} || 'link'/e;
    $c =~ s/\@\@PULL\@\@/$o{pull} || 'off'/e;
    $c =~ s/\@\@STORE\@\@/$o{store} ? "feed_timeline_store $o{store};" : ''/e;
    return $c;
}

sub put { $t->http('PUT', $_[0])->{status} }
sub del { $t->http('DELETE', $_[0])->{status} }

# the posts a reader may see, newest first: @$posts ([id, author], oldest
# first) but those of the authors in @hidden
sub visible {
    my ($posts, @hidden) = @_;
    my %h = map { $_ => 1 } @hidden;
    return [ map { $_->[0] } grep { !$h{ $_->[1] } } reverse @$posts ];
}


sub walk_is { tl_walk_is($t, @_) }
sub firsts { tl_firsts($t, @_) }
sub firsts_are { tl_firsts_are($t, @_) }

# the ids of one first page
sub first_ids { (firsts($_[0], 1))[0][2] }


# ------------------------------------------------------------ each mode --

for my $mode (qw(link embed)) {
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, $celeb, $x) = ($u->('r'), $u->('celeb'), $u->('x'));
    my @a = map { $u->("a$_") } 1 .. 4;

    $t->write_conf(conf(mode => $mode, pull => 3));
    $t->run;

    my @bad = grep { put("/users/$_->[0]/following/$_->[1]") != 204 }
        (map({ [$r, $_] } @a, $celeb, $x),
         map({ [$u->("p$_"), $celeb] } 1 .. 3));
    ok(!@bad, "$mode: follows") or diag("@{ $bad[0] }");

    # 60 posts, the authors interleaved (the reader's own among them)
    my @posts;
    for my $i (1 .. 10) {
        for my $w (@a, $celeb, $r) {
            my $id = post($t, $w, "$w $i") or next;
            push @posts, [$id, $w];
        }
    }
    is(scalar @posts, 60, "$mode: 60 posts");

    my $all = visible(\@posts);
    firsts_are($r, $all, '', "$mode: before any filter");
    ok((rd($t, 'HLEN', "feed:tlf:{$r}") // 0) == 1,
        "$mode: the rebuild loaded an empty filter set");

    # kept in Redis and in both workers' copies
    firsts($r, 20);
    ok(rd($t, 'EXISTS', "feed:tlp:{$r}"), "$mode: the first page kept");

    # ---------------------------------------------------------- mute --

    is(put("/users/$r/mutes/$a[1]"), 204, "$mode: mute");
    is(rd($t, 'HGET', "feed:tlf:{$r}", $a[1]), 2,
        "$mode: mute: in the cached filter set");
    firsts_are($r, visible(\@posts, $a[1]), $HIT,
        "$mode: mute, at the next reads, no rebuild");

    my $c = walk_is($r, 7, visible(\@posts, $a[1]), "$mode: mute: walk 7");
    ok(($c->{HIT} || $c->{LOCAL}) && $c->{DEEP}, "$mode: mute: walk: hits, "
        . 'then DEEP past the cache: '
        . join(', ', map { "$_ x$c->{$_}" } sort keys %$c));

    # --------------------------------------------- a muted pull author --

    ok($t->wait_for(5, sub {
        (rd($t, 'SISMEMBER', "feed:tla:{$r}", $celeb) // 0) == 1 }),
        "$mode: celeb is a pull author the reader merges");
    is(put("/users/$r/mutes/$celeb"), 204, "$mode: mute celeb");
    firsts_are($r, visible(\@posts, $a[1], $celeb), $HIT,
        "$mode: muted pull author");
    walk_is($r, 5, visible(\@posts, $a[1], $celeb),
        "$mode: muted pull author: walk 5");

    # ---------------------------------------------------------- block --

    is(put("/users/$r/blocks/$a[2]"), 204, "$mode: block");
    my @f = firsts($r, 1);
    like($f[0][1], $HIT, "$mode: block: its unfollow applied in place too");
    firsts_are($r, visible(\@posts, $a[1], $celeb, $a[2]), $HIT,
        "$mode: block");
    is(rd($t, 'HGET', "feed:tlf:{$r}", $a[2]), 1 + 16,
        "$mode: block: reasons 'b' and 'u' (unfollowed) in the filter set");

    # made again: without the author's posts, and 'u' not loaded
    rd($t, 'DEL', "feed:tl:{$r}");
    ok($t->wait_for(5, sub { (firsts($r, 1))[0][1] eq 'MISS' }),
        "$mode: block: the list dropped, rebuilt");
    firsts_are($r, visible(\@posts, $a[1], $celeb, $a[2]), $HIT,
        "$mode: block: rebuilt");
    is(rd($t, 'HGET', "feed:tlf:{$r}", $a[2]), 1,
        "$mode: block: loaded with the rebuild, 'b' only");

    # ---------------------------------------------- blocked by an author --

    my $xid = post($t, $x, "x's post");
    ok($t->wait_for(5, sub { first_ids($r) =~ /^\Q$xid\E/ }),
        "$mode: x's post delivered");
    is(put("/users/$x/blocks/$r"), 204, "$mode: x blocks the reader");
    firsts($r, 1);
    is(rd($t, 'HGET', "feed:tlf:{$r}", $x), 4 + 16,
        "$mode: blocked by x: in the reader's filter set, with its unfollow");

    # a delivery that raced the block: x's post in the list after all
    my $json = $t->get("/posts/$xid")->{body};
    like($json, qr/^\{.*"author"/, "$mode: x's post");
    if ($mode eq 'embed') {
        rd($t, 'LPUSH', "feed:tl:{$r}", entry_of($xid, $json));
    } else {
        rd($t, 'SET', post_key($xid), $json);
        rd($t, 'LPUSH', "feed:tl:{$r}", entry_of($xid));
    }
    rd($t, 'DEL', "feed:tlp:{$r}");
    firsts_are($r, visible(\@posts, $a[1], $celeb, $a[2]), $HIT,
        "$mode: blocked by x: x's post in the list, not shown");

    # ---------------------------------------------------------- unmute --

    is(del("/users/$r/mutes/$a[1]"), 204, "$mode: unmute");
    firsts_are($r, visible(\@posts, $celeb, $a[2]), $HIT,
        "$mode: unmute: back at the next reads, no rebuild");

    # ------------------------------------------ filters lost, list kept --

    # (a first page may still be answered by a worker's copy, made with
    # them: a second page reads the list)
    rd($t, 'DEL', "feed:tlf:{$r}");
    my $second = $t->get("/users/$r/timeline?limit=10&max_id=$posts[-1][0]");
    is($second->{headers}{'x-feed-cache'}, 'MISS',
        "$mode: filters lost: the list is made again");
    firsts_are($r, visible(\@posts, $celeb, $a[2]), $HIT,
        "$mode: filters lost: made again with them");

    # readers waiting for one rebuild
    rd($t, 'DEL', "feed:tl:{$r}");
    my @w = firsts($r, 8);
    ok(!grep({ $_->[0] != 200 || $_->[2] ne join(' ',
        @{ visible(\@posts, $celeb, $a[2]) }[0 .. 9]) } @w),
        "$mode: 8 readers behind one rebuild: filtered");

    # --------------------------------------------------------- bypass --

    $t->stop_redis;
    @f = firsts($r, 4);
    ok(!grep({ $_->[1] ne 'BYPASS' } @f), "$mode: Redis down: BYPASS");
    firsts_are($r, visible(\@posts, $celeb, $a[2]), 'BYPASS',
        "$mode: Redis down");
    walk_is($r, 7, visible(\@posts, $celeb, $a[2]),
        "$mode: Redis down: walk 7");
    $t->start_redis;

    $t->stop;
}

# ------------------------------------ a rebuild answered but not cached --

# the reader's follows version moves while the rebuild runs (MongoDB
# slowed):
# its answer is made from the rebuild's posts, not the cache, and leaves
# out what the filters it loaded say

{
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, @a) = ($u->('r'), map { $u->("a$_") } 1 .. 2);

    $t->write_conf(conf());
    $t->run;

    put("/users/$r/following/$_") for @a;
    my @posts;
    for my $i (1 .. 8) {
        push @posts, map { [ post($t, $_, "$_ $i"), $_ ] } @a;
    }
    is(put("/users/$r/mutes/$a[0]"), 204, 'rebuilt: mute');

    $t->mongo_latency(400);
    my $h = $t->http_start('GET', "/users/$r/timeline?limit=5",
        timeout => 15);
    sleep 0.2;
    # what a follow or a filter does to a rebuild under way (its own
    # MongoDB writes would take longer than the rebuild here)
    rd($t, 'INCR', "feed:tlv:{$r}");
    my $res = $t->http_end($h);
    $t->mongo_latency(0);

    is($res->{headers}{'x-feed-cache'}, 'MISS', 'rebuilt: a MISS');
    ok(!rd($t, 'EXISTS', "feed:tl:{$r}"),
        'rebuilt: not cached (the follows changed meanwhile)');
    is(join(' ', @{ tl_ids($res) }),
        join(' ', @{ visible(\@posts, $a[0]) }[0 .. 4]),
        'rebuilt: the muted author left out, the page full');

    $t->stop;
}

# ------------------------------------------- the MongoDB timeline models --

for my $store (qw(cache time_buckets size_buckets capped)) {
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my $r = $u->('r');
    my @a = map { $u->("a$_") } 1 .. 3;

    $t->write_conf(conf(store => $store));
    $t->run;

    put("/users/$r/following/$_") for @a;
    firsts($r, 1);    # the "cache" model keeps active readers only

    my @posts;
    for my $i (1 .. 14) {
        for my $w (@a) {
            my $id = post($t, $w, "$w $i") or next;
            push @posts, [$id, $w];
        }
    }
    ok($t->wait_for(10, sub {
        first_ids($r) =~ /^\Q$posts[-1][0]\E/ }),
        "$store: fanned out");
    is(put("/users/$r/mutes/$a[0]"), 204, "$store: mute");

    rd($t, 'DEL', @{ rd($t, 'KEYS', "feed:*{$r}") || [] });
    my $c = walk_is($r, 6, visible(\@posts, $a[0]),
        "$store: after a Redis flush: walk 6");
    ok($c->{MISS}, "$store: the walk began with a rebuild from the store");

    $t->stop;
}

$t->done;
