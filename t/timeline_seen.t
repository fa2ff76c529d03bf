#!/usr/bin/perl

# Reads with ?unseen=1 leave out the posts the reader saw (POST
# /users/{uid}/seen, t/seen.t), on every read path, and pages stay full
# with exact cursors.  With 2 workers, feed_cache_local, a cache of 24
# posts (pages past it are DEEP), a pull author (celeb, turned after the
# reader's timeline was cached: its later posts are in its list only,
# merged by every read), in link and embed mode:
#
#   - the first page kept in Redis and in both workers' copies: unseen
#     first pages are read from the list (HIT: never a worker's copy, what
#     the reader saw is in Redis only), without the posts seen, full;
#     plain first pages are still the kept one (HIT, or LOCAL: a worker's
#     copy); an unseen page is never kept;
#   - cursor walks (limit 7, then 5) with unseen=1, following Link: every
#     unseen post exactly once across the cache's end (HIT, then DEEP),
#     the pull author's posts merged, the seen ones interleaved;
#   - a miss (MISS) and readers waiting for one rebuild: filtered;
#   - a rebuild not cached (the follows changed meanwhile): filtered;
#   - Redis down: unseen=1 is 503 with Retry-After (what the reader saw
#     is in Redis only), a plain read BYPASS;
#   - unseen other than 0 or 1: 400; with feed_identity, unseen=1 is the
#     reader's own (401, 403).
# Then rotation through reads (feed_seen_capacity 10): the ids of the
# dropped generation are shown again.  Then each MongoDB timeline model
# (feed_timeline_store): a walk after the cache is dropped leaves the
# seen posts out, past the store's end too.  Then a Redis Cluster (three
# masters, embed mode): readers of every master, their seen filters on
# their timelines' node, walks with unseen=1 (limits 7 and 4) over two
# pushed authors and a pull author merged from each master's copy of its
# list, the seen posts of each among them, a miss.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedCluster;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(rd post enc server_conf tl_walk_is tl_firsts
    tl_firsts_are tl_ids is_error seen_held node_counts statuses
    workers_up $HIT);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $SEEN = <<'EOF';
        location ~ ^/users/([^/]+)/seen$ { feed_seen $1; }
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
    @@MORE@@

@@SERVER@@
    server {
        listen 127.0.0.1:%%PORT_HTTPID%%;
        feed_identity $http_x_user;
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
    }
}
EOF

my $RUN = $$ . int(time);
my $N = 0;

sub conf {
    my (%o) = @_;
    my $c = $CONF;
    my $server = server_conf();
    $server =~ s/^(\s*location = \/status)/$SEEN$1/m;
    $c =~ s/\@\@SERVER\@\@\n/$server/;
    $c =~ s/\@\@MODE\@\@/$o{mode} || 'link'/e;
    $c =~ s/\@\@PULL\@\@/$o{pull} || 'off'/e;
    $c =~ s/\@\@MORE\@\@/$o{more} || ''/e;
    return $c;
}

sub put { $t->http('PUT', $_[0])->{status} }

sub seen {
    my ($uid, $ids) = @_;
    return $t->http('POST', "/users/$uid/seen", body => enc($ids),
        headers => { 'Content-Type' => 'application/json' })->{status};
}

# the Redis that holds a user's keys: the single one, or a cluster's node
my $redis_of = sub { my ($uid, @cmd) = @_; $t->redis(@cmd) };

# which of @$ids the reader's filters hold
sub held {
    my ($uid, $ids) = @_;
    return seen_held(sub { $redis_of->($uid, @_) }, $uid, $ids);
}

# the posts a read with unseen=1 shows, newest first: @$posts (ids, oldest
# first) but those the reader's filters hold.  Each of @$seen must be
# held (no false negative), and few of the others (false positives, which
# the pages leave out too, at most the configured rate)
sub unseen {
    my ($uid, $posts, $seen, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $h = held($uid, $posts);
    my %s = map { $_ => 1 } @$seen;
    my @missed = grep { !$h->{$_} } @$seen;
    my @fp = grep { $h->{$_} && !$s{$_} } @$posts;
    ok(!@missed && @fp <= 2, "$name: the filters hold the "
        . scalar(@$seen) . ' seen posts, and ' . scalar(@fp)
        . ' false positives of ' . (@$posts - @$seen))
        or diag('not held: ' . join(' ', @missed));
    return [ grep { !$h->{$_} } reverse @$posts ];
}

# all of them, newest first
sub all_of { [ reverse @{ $_[0] } ] }

sub walk_is { tl_walk_is($t, @_, unseen => 1) }

# the first page, $n times, plain or unseen: [status, cache, ids, body]
sub firsts { tl_firsts($t, $_[0], $_[1], 10, $_[2] ? '&unseen=1' : '') }

sub firsts_are {
    my ($uid, $unseen, @rest) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    tl_firsts_are($t, $uid, @rest, $unseen ? '&unseen=1' : '');
}

# ------------------------------------------------------------ each mode --

for my $mode (qw(link embed)) {
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, $celeb) = ($u->('r'), $u->('celeb'));
    my @a = map { $u->("a$_") } 1 .. 3;

    $t->write_conf(conf(mode => $mode, pull => 3));
    $t->run('httpid');

    my @bad = grep { put("/users/$_->[0]/following/$_->[1]") != 204 }
        (map({ [$r, $_] } @a, $celeb),
         map({ [$u->("p$_"), $celeb] } 1 .. 3));
    ok(!@bad, "$mode: follows") or diag("@{ $bad[0] }");

    # 50 posts, the authors interleaved (the reader's own among them);
    # the reader's timeline cached (empty) before celeb's first post, which
    # turns celeb to pull: celeb's later posts are in celeb's list only,
    # merged by the reader's reads
    tl_firsts($t, $r, 1, 10, '');
    my (@posts, %pulled);
    for my $i (1 .. 10) {
        for my $w (@a, $celeb, $r) {
            my $id = post($t, $w, "$w $i") or next;
            push @posts, $id;
            $pulled{$id} = 1 if $w eq $celeb && $i > 1;
        }
        next if $i > 1;
        ok($t->wait_for(5, sub {
            (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
            "$mode: celeb is a pull author");
    }
    is(scalar @posts, 50, "$mode: 50 posts");
    my $in = join(' ', map { entry_id($_) }
        @{ rd($t, 'LRANGE', "feed:tl:{$r}", 0, -1) || [] });
    ok(!grep({ index($in, $_) >= 0 } keys %pulled),
        "$mode: celeb's later posts not pushed to the reader");

    # the first page kept, in Redis and in both workers' copies, once the
    # fanout delivered its ten posts: posts made one after another are
    # fanned out concurrently, the newest may land first (a full run at
    # abb141d: a3's last post missing from a page that had the reader's)
    my $ten = join ' ', @{ all_of(\@posts) }[0 .. 9];
    ok($t->wait_for(5, sub { (firsts($r, 1))[0][2] eq $ten }),
        "$mode: fanned out");
    firsts_are($r, 0, all_of(\@posts), '', "$mode: before");
    ok($t->wait_for(5, sub {
        (rd($t, 'SISMEMBER', "feed:tla:{$r}", $celeb) // 0) == 1 }),
        "$mode: celeb is a pull author the reader merges");
    firsts($r, 20);
    ok(rd($t, 'EXISTS', "feed:tlp:{$r}"), "$mode: the first page kept");

    # the newest 4, and every third: the pull author's among them
    my @seen = (@posts[46 .. 49], map { $posts[3 * $_] } 0 .. 15);
    is(seen($r, \@seen), 204, "$mode: seen, " . scalar(@seen) . ' posts');
    my $want = unseen($r, \@posts, \@seen, $mode);

    # unseen: a round trip each (HIT, never LOCAL); plain: hits
    firsts_are($r, 1, $want, 'HIT',
        "$mode: unseen, with a kept page and workers' copies");
    firsts_are($r, 0, all_of(\@posts), $HIT,
        "$mode: plain reads still the kept page");

    # an unseen page is not kept: the kept page is made by plain reads
    rd($t, 'DEL', "feed:tlp:{$r}");
    firsts($r, 8, 1);
    ok(!rd($t, 'EXISTS', "feed:tlp:{$r}"), "$mode: an unseen page not kept");
    firsts_are($r, 0, all_of(\@posts), $HIT,
        "$mode: plain reads after unseen ones: all posts");
    ok(rd($t, 'EXISTS', "feed:tlp:{$r}"), "$mode: a plain page kept");

    my $c = walk_is($r, 7, $want, "$mode: walk 7");
    ok($c->{HIT} && $c->{DEEP}, "$mode: walk 7: HIT, then DEEP past the "
        . 'cache: ' . join(', ', map { "$_ x$c->{$_}" } sort keys %$c));
    walk_is($r, 5, $want, "$mode: walk 5");

    # ------------------------------------------- more seen, deep ones --

    # the oldest posts, past the cache: the deep pages leave them out
    push @seen, @posts[0 .. 9];
    is(seen($r, [ @posts[0 .. 9] ]), 204, "$mode: 10 old posts seen");
    $want = unseen($r, \@posts, \@seen, "$mode: deep ones seen");
    $c = walk_is($r, 4, $want, "$mode: deep ones seen: walk 4");
    ok($c->{DEEP}, "$mode: deep ones seen: walk 4 went DEEP");

    # ------------------------------------------------------ miss, wait --

    rd($t, 'DEL', "feed:tl:{$r}");
    my @f = firsts($r, 1, 1);
    is($f[0][1], 'MISS', "$mode: a miss");
    is($f[0][2], join(' ', @$want[0 .. 9]), "$mode: a miss: unseen, full");

    rd($t, 'DEL', "feed:tl:{$r}");
    my @w = firsts($r, 8, 1);
    ok(!grep({ $_->[0] != 200 || $_->[2] ne join(' ', @$want[0 .. 9]) }
        @w), "$mode: 8 readers behind one rebuild: unseen, full")
        or diag(join "\n", map { "$_->[0] $_->[1] $_->[2]" } @w);

    # ------------------------------------------------- bad, identity --

    for my $v ('2', 'yes', '', '01') {
        is_error($t->get("/users/$r/timeline?unseen=$v"), 400,
            'invalid_unseen', "$mode: unseen=$v");
    }
    is($t->get("/users/$r/timeline?limit=10&unseen=0")->{status}, 200,
        "$mode: unseen=0: a plain read");
    is(join(' ', @{ tl_ids($t->get("/users/$r/timeline?limit=10&unseen=0")) }),
        join(' ', @{ all_of(\@posts) }[0 .. 9]),
        "$mode: unseen=0: all posts");

    my $idp = $t->port('httpid');
    is_error($t->get("/users/$r/timeline?unseen=1", port => $idp), 401,
        'unauthorized', "$mode: unseen=1 without an identity");
    is_error($t->get("/users/$r/timeline?unseen=1", port => $idp,
        headers => { 'X-User' => $a[0] }), 403, 'forbidden',
        "$mode: unseen=1 as another user");
    is(join(' ', @{ tl_ids($t->get("/users/$r/timeline?limit=10&unseen=1",
        port => $idp, headers => { 'X-User' => $r })) }),
        join(' ', @$want[0 .. 9]), "$mode: unseen=1 as the reader");
    is($t->get("/users/$r/timeline", port => $idp)->{status}, 200,
        "$mode: a plain read needs no identity");

    # ------------------------------------------------------ Redis down --

    $t->stop_redis;
    my $res = $t->get("/users/$r/timeline?limit=10&unseen=1");
    is_error($res, 503, 'unavailable', "$mode: Redis down: unseen");
    is($res->{headers}{'retry-after'}, '1', "$mode: Redis down: Retry-After");
    $res = $t->get("/users/$r/timeline?limit=10");
    is("$res->{status} " . ($res->{headers}{'x-feed-cache'} // ''),
        '200 BYPASS', "$mode: Redis down: a plain read");
    $t->start_redis;

    # a Redis started again empty: the filters went with it.  Both
    # workers connected again first: the POST below may reach either
    ok($t->wait_for(15, sub { workers_up($t, 2) }),
        "$mode: Redis back: both workers connected again");
    ok($t->wait_for(10, sub {
        $t->get("/users/$r/timeline?limit=10&unseen=1")->{status} == 200 }),
        "$mode: Redis back: unseen reads answered");
    is(seen($r, \@seen), 204, "$mode: Redis back: seen again");
    is(join(' ', @{ tl_ids($t->get("/users/$r/timeline?limit=10&unseen=1"))
        }), join(' ', @$want[0 .. 9]), "$mode: Redis back: unseen");

    $t->stop;
}

# ------------------------------------ a rebuild answered but not cached --

{
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, @a) = ($u->('r'), map { $u->("a$_") } 1 .. 2);

    $t->write_conf(conf());
    $t->run('httpid');

    put("/users/$r/following/$_") for @a;
    my @posts;
    for my $i (1 .. 8) {
        push @posts, map { post($t, $_, "$_ $i") } @a;
    }
    my @seen = map { $posts[2 * $_ + 1] } 0 .. 7;
    is(seen($r, \@seen), 204, 'rebuilt: seen');

    $t->mongo_latency(400);
    my $h = $t->http_start('GET', "/users/$r/timeline?limit=5&unseen=1",
        timeout => 15);
    sleep 0.2;
    rd($t, 'INCR', "feed:tlv:{$r}");
    my $res = $t->http_end($h);
    $t->mongo_latency(0);

    is($res->{headers}{'x-feed-cache'}, 'MISS', 'rebuilt: a MISS');
    ok(!rd($t, 'EXISTS', "feed:tl:{$r}"),
        'rebuilt: not cached (the follows changed meanwhile)');
    is(join(' ', @{ tl_ids($res) }),
        join(' ', @{ unseen($r, \@posts, \@seen, 'rebuilt') }[0 .. 4]),
        'rebuilt: the seen posts left out, the page full');
    like($res->{headers}{link} // '', qr/unseen=1/, 'rebuilt: Link');

    $t->stop;
}

# ---------------------------------------------- rotation, through reads --

{
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, $a) = ($u->('r'), $u->('a'));

    $t->write_conf(conf(more => 'feed_seen_capacity 10;'));
    $t->run('httpid');

    put("/users/$r/following/$a");
    my @posts = map { post($t, $a, "a $_") } 1 .. 30;

    is(seen($r, [ @posts[0 .. 9] ]), 204, 'rotation: 10 seen');
    walk_is($r, 6, unseen($r, \@posts, [ @posts[0 .. 9] ], 'rotation: one'),
        'rotation: one generation');
    is(seen($r, [ @posts[10 .. 19] ]), 204, 'rotation: 10 more');
    walk_is($r, 6, unseen($r, \@posts, [ @posts[0 .. 19] ], 'rotation: two'),
        'rotation: two generations');
    is(seen($r, [ @posts[20 .. 29] ]), 204, 'rotation: 10 more');
    my $h = held($r, [ @posts[0 .. 9] ]);
    ok(keys %$h <= 2, 'rotation: the first generation dropped: its posts '
        . 'no longer held (but false positives: ' . scalar(keys %$h) . ')');
    walk_is($r, 6, [ grep { !$h->{$_} } reverse @posts[0 .. 9] ],
        'rotation: the first generation dropped, its posts shown again');
    is(rd($t, 'EXISTS', map { "feed:snb$_:{$r}" } 0 .. 2), 2,
        'rotation: two generations live');

    $t->stop;
}

# ------------------------------------------- the MongoDB timeline models --

for my $store (qw(cache time_buckets size_buckets capped)) {
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my $r = $u->('r');
    my @a = map { $u->("a$_") } 1 .. 3;

    $t->write_conf(conf(more => "feed_timeline_store $store;"));
    $t->run('httpid');

    put("/users/$r/following/$_") for @a;
    firsts($r, 1);    # the "cache" model keeps active readers only

    my @posts;
    for my $i (1 .. 14) {
        for my $w (@a) {
            my $id = post($t, $w, "$w $i") or next;
            push @posts, $id;
        }
    }
    ok($t->wait_for(10, sub { (firsts($r, 1))[0][2] =~ /^\Q$posts[-1]\E/ }),
        "$store: fanned out");
    my @seen = (@posts[0 .. 5], map { $posts[4 * $_ + 1] } 2 .. 10);
    is(seen($r, \@seen), 204, "$store: seen");

    # the cache dropped, the seen filters kept
    rd($t, 'DEL', @{ rd($t, 'KEYS', "feed:tl*{$r}") || [] });
    my $c = walk_is($r, 6, unseen($r, \@posts, \@seen, $store),
        "$store: after the cache is dropped: walk 6");
    ok($c->{MISS}, "$store: the walk began with a rebuild from the store");

    $t->stop;
}

# ------------------------------------------------------ a Redis Cluster --

# two pushed authors and a pull author (celeb, 15 followers past
# feed_pull_threshold 12), whose posts each master merges from its own
# copy of celeb's list: the seen ones among them are left out too

{
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my $c = FeedCluster->start($t, masters => 3);
    my $seeds = '127.0.0.1:' . $c->port(($c->masters)[0]) . ' cluster';
    $redis_of = sub {
        my ($uid, @cmd) = @_;
        return $c->cmd($c->master_of("feed:tl:{$uid}"), @cmd);
    };

    # readers on every master, three each: the first three of each among
    # names made until there are (nine names picked at random missed a
    # master in one run of 13)
    my (%pick, $i);
    while (grep({ @{ $pick{$_} || [] } < 3 } $c->masters) && ++$i < 1000) {
        my $m = $c->master_of('feed:tl:{' . $u->("r$i") . '}');
        push @{ $pick{$m} }, $i if @{ $pick{$m} || [] } < 3;
    }
    my @R = map { $u->("r$_") } sort { $a <=> $b } map { @$_ } values %pick;
    my ($node, $per) = $c->spread(@R);
    is(scalar keys %$per, 3, 'cluster: readers on all three masters');
    my @a = map { $u->("a$_") } 1 .. 2;
    my $celeb = $u->('celeb');

    (my $conf = conf(mode => 'embed', pull => 12)) =~
        s/%%FEED_BACKENDS%%/feed_redis $seeds;\n    %%FEED_MONGO%%/;
    $t->write_conf($conf)->run('httpid');
    ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
        'cluster: every worker maps the cluster');

    my @bad = grep { put("/users/$_->[0]/following/$_->[1]") != 204 }
        (map({ my $r = $_; map { [$r, $_] } @a, $celeb } @R),
         map({ [$u->("x$_"), $celeb] } 1 .. 6));
    ok(!@bad, 'cluster: follows') or diag("@{ $bad[0] }");
    # the readers' timelines cached (empty) before celeb's first post,
    # which turns celeb to pull: each reader merges celeb's list from then
    # on, and celeb's later posts are listed only, in no reader's list
    firsts($_, 1) for @R;
    my @posts = map { post($t, $_, "$_ 1") } @a, $celeb;
    ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
        'cluster: celeb is a pull author');
    my %pulled;
    for my $i (2 .. 20) {
        push @posts, map { post($t, $_, "$_ $i") } @a, $celeb;
        $pulled{ $posts[-1] } = 1;
    }
    ok($t->wait_for(10, sub { !grep { (firsts($_, 1))[0][2]
        !~ /^\Q$posts[-1]\E/ } @R }), 'cluster: fanned out to all');
    firsts($_, 6) for @R;
    ok(!grep({ my $r = $_; !$c->cmd($node->{$r}, 'SISMEMBER',
        "feed:tla:{$r}", $celeb) || grep { $c->in_list($r, $_) } keys %pulled
        } @R),
        'cluster: celeb merged by every reader, its posts not pushed');

    for my $i (0 .. $#R) {
        my $r = $R[$i];
        # every fourth post: each author's, celeb's listed posts among them
        my @seen = @posts[grep { ($_ + $i) % 4 == 0 } 0 .. $#posts];
        is(seen($r, \@seen), 204, "cluster: $r seen");
        ok($c->cmd($node->{$r}, 'EXISTS', "feed:sn:{$r}", "feed:snb0:{$r}")
            == 2, "cluster: $r: the filters on its timeline's node");
        ok(scalar(grep { $pulled{$_} } @seen) >= 4,
            "cluster: $r: pulled posts among those seen");
        my $want = unseen($r, \@posts, \@seen, "cluster: $r");
        firsts_are($r, 1, $want, 'HIT', "cluster: $r: first pages");
        my $w = walk_is($r, 7, $want, "cluster: $r: walk 7");
        ok($w->{DEEP}, "cluster: $r: past the cache's end");
        if ($i < 3) {
            walk_is($r, 4, $want, "cluster: $r: walk 4");
            $c->cmd($node->{$r}, 'DEL', "feed:tl:{$r}");
            my @f = firsts($r, 1, 1);
            is("$f[0][1] $f[0][2]", 'MISS ' . join(' ', @$want[0 .. 9]),
                "cluster: $r: a miss");
        }
    }

    $t->stop;
}

$t->done;
