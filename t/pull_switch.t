#!/usr/bin/perl

# Pull authors: an author switching between push and pull as
# their follower count crosses feed_pull_threshold (50 here), while they
# post.  With 2 workers, link mode, the author "sw" and a push author "pa"
# followed by the same readers:
#
#   - 49 followers: pushed;
#   - up, 49 -> 51, with posts just before the follows, during them and
#     right after (two at once: the second fanned out while the first,
#     the switching post, may not be acknowledged yet): the switch happens
#     once (pull.to_pull), later posts reach no cached list;
#   - down, 51 -> 48, the same way: switched back once (pull.to_push),
#     later posts pushed again;
#   - up again, its turning post fanned out while 4 timelines are being
#     rebuilt; another author's turning post deleted while it is fanned
#     out; a third's while Redis restarts (a post takes the turn over
#     once it is left alone long enough); status pull.authors after each;
#   - feed_pull_threshold off (a reload): the pull author's next posts
#     pushed; an author with 60 followers pushed, nothing listed, no pull
#     list;
#   - after each step every follower (those with a cached timeline and one
#     reading for the first time) has every post once, newest first, each
#     as its 201, on one page and following next; those who unfollowed
#     have none of sw's posts.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use List::Util qw(max);
use Time::HiRes qw(time sleep);
use JSON::PP ();
use FeedTest;
use FeedTest::Util qw(short tag summary tl_uri tl_page_problems post_start
    post_end_tagged parallel none_failed copies copies_summary all_n tl_walk
    tl_ids node_counts node_moved_is node_acked workers_up server_conf);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database, slowed '
    . 'down, its command log') if FeedTest::real_mongo();

my $t = FeedTest->new;
my $T0 = time;

$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_claim_idle 5s;
    feed_fanout_block 200ms;
    feed_pull_threshold @@THRESHOLD@@;

@@SERVER@@
}
EOF
$CONF =~ s/\@\@SERVER\@\@\n/server_conf()/e;

my $JSON = JSON::PP->new->utf8->canonical;

my ($SW, $PA) = qw(sw pa);
my @C = map { sprintf 'c%02d', $_ } 1 .. 45;    # cached from the start
my @U = map { "u$_" } 1 .. 4;                   # each first read in a step
my @X = map { "x$_" } 1 .. 3;                   # come and go

# ----------------------------------------------------------------- model --

my %FOL;    # user => { followee => 1 }
my %BY;     # author => [ post ids, oldest first ]
my %TAG;    # post id => its 201, tag()ged
my %CACHED; # user => 1 while their timeline is cached
my %DEL;    # post id => 1 once deleted

# a post in none of the lists (some users may have none: a rebuild the
# turn met starts over, and is made at their next read)
sub in_none {
    my ($c) = @_;
    return $c && !grep { $_ > 0 } values %$c;
}

sub want {
    my ($u) = @_;
    return [ sort { $b cmp $a } grep { !$DEL{$_} }
        map { @{ $BY{$_} || [] } } $u, keys %{ $FOL{$u} || {} } ];
}

# follows (PUT) or unfollows (DELETE) of $target, all at once; a follow or
# an unfollow drops the user's cached timeline
sub graph {
    my ($name, $method, $target, @users) = @_;
    my @res = parallel($t, 50,
        map { [ $method, "/users/$_/following/$target" ] } @users);
    my @bad = map { "$users[$_]: " . short($res[$_]) }
        grep { $res[$_]{status} != 204 } 0 .. $#users;
    none_failed(\@bad, "$name: " . scalar(@users) . ' '
        . ($method eq 'PUT' ? 'follow' : 'unfollow') . " $target");
    for my $u (@users) {
        delete $CACHED{$u};
        $method eq 'PUT' ? ($FOL{$u}{$target} = 1)
            : delete $FOL{$u}{$target};
    }
}

sub followers {
    my ($au) = @_;
    return sort grep { $FOL{$_}{$au} } keys %FOL;
}

# a post started by post_start(), in the model once answered; its id
sub keep_post {
    my ($au, $h, $name) = @_;
    my ($id, $tag) = post_end_tagged($t, $h, $name) or return;
    $TAG{$id} = $tag;
    push @{ $BY{$au} }, $id;
    return $id;
}

sub mypost {
    my ($au, $body) = @_;
    return keep_post($au, post_start($t, $au, $body), "post by $au");
}

# a test: status pull.authors (MongoDB's count of authors turning or
# pull) is $n
sub authors_are {
    my ($n, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $j = $t->get('/status')->{json} // {};
    is(ref $j->{pull} eq 'HASH' ? $j->{pull}{authors} : 'none', $n,
        "$name: status pull.authors $n");
}

# a post by $au, fanned out and acknowledged: its id, and the node's
# counters before it
sub post_acked {
    my ($name, $au, $body) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $c = node_counts($t);
    my $id = mypost($au, $body);
    node_acked($t, $c, 1, $name);
    return ($id, $c);
}

# every user's timeline on one page (limit 100) and, for @walk, page by
# page (limit 2): every post once, newest first, as created
sub all_see {
    my ($name, $users, $walk) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @res = parallel($t, 50,
        map { [ 'GET', tl_uri($_, limit => 100) ] } @$users);
    my (@bad, %how);
    for my $i (0 .. $#$users) {
        my ($u, $r) = ($users->[$i], $res[$i]);
        my $want = want($u);
        my @p = tl_page_problems($r, $u, 100);
        push @p, summary(tl_ids($r), $want)
            if !@p && "@{ tl_ids($r) }" ne "@$want";
        push @p, 'items not identical to their 201s'
            if !@p && $JSON->encode(tag($r->{json})->{items})
                ne $JSON->encode([ map { $TAG{$_} } @$want ]);
        push @p, "next $r->{json}{next}" if !@p && defined $r->{json}{next};
        push @bad, "$u: @p" if @p;
        $how{ ($CACHED{$u} ? 'cached ' : 'first read ')
            . ($r->{headers}{'x-feed-cache'} // '-') }++;
        $CACHED{$u} = 1;
    }
    for my $u (@{ $walk || [] }) {
        my $w = tl_walk($t, $u, 2);
        my @p = @{ $w->{problems} };
        push @p, summary($w->{ids}, want($u))
            if "@{ $w->{ids} }" ne "@{ want($u) }";
        push @bad, "$u, limit 2: @p" if @p;
    }
    ok(!@bad, "$name: " . scalar(@$users) . ' timelines ('
        . join(', ', map { "$how{$_} $_" } sort keys %how)
        . (@{ $walk || [] } ? ', ' . scalar(@$walk) . ' walked' : '')
        . '): every post once, newest first, as created')
        or diag(scalar(@bad) . " wrong:\n" . join("\n", @bad[0 ..
            ($#bad > 4 ? 4 : $#bad)]));
}

# the order of things in the MongoDB stand-in's command log past byte $off,
# in seconds from the fanout's read of sw's followers: when sw's mode was
# written, when the rebuilds asked which followees are pull authors, and
# when they asked for the posts (the warm comes after that)
sub race {
    my ($off) = @_;
    open my $fh, '<', $t->dir . '/mongo-commands.log' or return '';
    seek $fh, $off, 0;
    my ($fan, @mode, @members, @posts);
    while (<$fh>) {
        my $c = eval { FeedTest::json_decode($_) } or next;
        my $f = ref $c->{filter} eq 'HASH' ? $c->{filter} : {};
        my $coll = $c->{coll} // '';
        $fan //= $c->{ts} if $coll eq 'follows' && ($f->{dst} // '') eq $SW;
        push @mode, $c->{ts} if $coll eq 'follow_counts'
            && $c->{cmd} eq 'update' && ($f->{_id} // '') eq $SW;
        push @members, $c->{ts} if $coll eq 'follow_counts'
            && $c->{cmd} eq 'find' && ref $f->{pull} eq 'HASH';
        push @posts, $c->{ts} if $coll eq 'posts'
            && ref $f->{author} eq 'HASH';
    }
    return 'no read of sw\'s followers' unless defined $fan;
    my $at = sub { join ' ', map { sprintf '%+.2f', $_ - $fan } @_ };
    return sprintf('from the fanout\'s read of sw\'s followers: sw\'s mode '
        . 'written at %s s; the rebuilds asked for pull authors at %s s, '
        . 'for posts at %s s', map { $at->(@$_) } \@mode, \@members, \@posts);
}

# the cached followers of $au (and $au if cached), as the model has them
sub cached_of {
    my ($au) = @_;
    return grep { $CACHED{$_} } followers($au), $au;
}

sub conf {
    my ($threshold) = @_;
    (my $c = $CONF) =~ s/\@\@THRESHOLD\@\@/$threshold/;
    $t->write_conf($c);
}

# ---------------------------------------------------- 49 followers: push --

conf(50)->run;
ok($t->wait_for(10, sub { workers_up($t, 2) }),
    '2 workers up, redis and mongodb up, each reading');

graph('setup', 'PUT', $SW, @C, @U);
graph('setup', 'PUT', $PA, @C, @U);
all_see('setup', [ @C ]);

{
    my $c0 = node_counts($t);
    my @p = (mypost($SW, 's1'), mypost($PA, 'a1'), mypost($SW, 's2'));
    node_acked($t, $c0, 3, '49 followers');
    all_see('49 followers', [ @C, $U[0] ], [ $C[0], $U[0] ]);
    node_moved_is($t, $c0, { 'pull.to_pull' => 0, 'pull.listed' => 0 },
        '49 followers');
    authors_are(0, '49 followers');
    my $c = copies($t, $p[2], grep { $_ ne $U[0] } cached_of($SW));
    ok(all_n($c, 1), '49 followers: sw\'s post pushed to the 45 cached')
        or diag(copies_summary($c));
}

# ----------------------------------------------------- up: 49 -> 51 --

{
    my $c0 = node_counts($t);
    my @cached = cached_of($SW);

    # a post just before the follows, one during them, two at once after
    my $s3 = mypost($SW, 's3: just before the follows');
    my $h4 = post_start($t, $SW, 's4: during the follows');
    graph('up', 'PUT', $SW, @X[0, 1]);
    keep_post($SW, $h4, 's4');
    my @h = map { post_start($t, $SW, "s$_: right after the follows") } 5, 6;
    keep_post($SW, $_, 'a post right after the follows') for @h;
    mypost($PA, 'a2');
    node_acked($t, $c0, 5, 'up');
    my $c1 = node_counts($t);
    my $s7 = mypost($SW, 's7: in pull mode');
    mypost($PA, 'a3');
    node_acked($t, $c1, 2, 'up, then');

    node_moved_is($t, $c0, { 'pull.to_pull' => 1, 'pull.to_push' => 0 },
        'up');
    authors_are(1, 'up');

    # the post after: listed, not delivered (pa's is)
    node_moved_is($t, $c1, { 'pull.listed' => 1,
        'fanout.deliveries' => scalar(cached_of($PA)) }, 'up, then');
    my $c = copies($t, $s7, @cached);
    ok(all_n($c, 0), 'up: the next post in no cached list')
        or diag(copies_summary($c));
    $c = copies($t, $s3, @cached);
    ok(all_n($c, 1), 'up: the post made just before the follows pushed '
        . 'once') or diag(copies_summary($c));
    all_see('up', [ @C, @U[0, 1], @X[0, 1] ], [ $C[0], $U[0], $U[1] ]);
}

# --------------------------------------------------- down: 51 -> 48 --

{
    my $c0 = node_counts($t);
    mypost($SW, 's8: in pull mode');
    my @h = (post_start($t, $SW, 's9: during the unfollows'),
        post_start($t, $PA, 'a4: during the unfollows'));
    graph('down', 'DELETE', $SW, @X[0, 1], $C[-1]);
    keep_post($SW, $h[0], 's9');
    keep_post($PA, $h[1], 'a4');
    @h = map { post_start($t, $SW, "s$_: right after the unfollows") }
        10, 11;
    keep_post($SW, $_, 'a post right after the unfollows') for @h;
    node_acked($t, $c0, 5, 'down');
    my @cached = cached_of($SW);
    my ($s12, $c1) = post_acked('down, then', $SW, 's12: pushed again');

    node_moved_is($t, $c0, { 'pull.to_pull' => 0, 'pull.to_push' => 1 },
        'down');
    authors_are(0, 'down');

    # the post after: delivered to the cached followers
    node_moved_is($t, $c1, { 'fanout.deliveries' => scalar(@cached) },
        'down, then');
    my $c = copies($t, $s12, @cached);
    ok(all_n($c, 1), 'down: the next post in their lists, once')
        or diag(copies_summary($c));
    all_see('down', [ @C, @U[0 .. 2], @X[0, 1] ],
        [ $C[0], $U[2], $C[-1] ]);
}

# ------------------------------------------------------ up again: 48 -> 51 --

{
    my $c0 = node_counts($t);
    graph('up again', 'PUT', $SW, @X);
    my @cached = cached_of($SW);

    # the turning post fanned out while the timelines of the 3 new
    # followers and u4 are being rebuilt: MongoDB at 300 ms a command, a
    # rebuild asks it 4 times, the post's fanout 2 times after its insert
    my $log = -s ($t->dir . '/mongo-commands.log');
    $t->mongo_latency(300);
    my @new = (@X, $U[3]);
    my $hp = post_start($t, $SW, 's13: turns sw, while timelines are '
        . 'rebuilt');
    sleep 0.75;
    my @h = map { $t->http_start('GET', tl_uri($_, limit => 100)) } @new;
    my $s13 = keep_post($SW, $hp, 's13');
    my @res = map { $t->http_end($_) } @h;
    $t->mongo_latency(0);
    my @bad = map { "$new[$_]: " . short($res[$_]) }
        grep { ($res[$_]{headers}{'x-feed-cache'} // '') ne 'MISS' } 0 .. 3;
    ok(!@bad, 'up again: 4 timelines rebuilt (MISS) meanwhile')
        or diag(join "\n", @bad);
    $CACHED{$_} = 1 for @new;
    node_acked($t, $c0, 1, 'up again');
    ok(1, 'up again: ' . race($log));
    my ($s14, $c1) = post_acked('up again, then', $SW, 's14: in pull mode');
    node_moved_is($t, $c0, { 'pull.to_pull' => 1, 'pull.to_push' => 0 },
        'up again');
    authors_are(1, 'up again');
    node_moved_is($t, $c1, { 'fanout.deliveries' => 0, 'pull.listed' => 1 },
        'up again, then');
    my $c = copies($t, $s13, @cached);
    ok(all_n($c, 1), 'up again: the turning post once in each cached list')
        or diag(copies_summary($c));

    # a rebuild that the turn met is not warmed (it may have asked for the
    # pull authors before the turn): answered, and made again at the next
    # read, or warmed once with the post when the turn came after it
    $c = copies($t, $s13, @new);
    ok($c && !grep({ $_ != -1 && $_ != 1 } values %$c),
        'up again: those rebuilt meanwhile: no list (started over) or the '
        . 'post once') or diag(copies_summary($c));
    $c = copies($t, $s14, @cached, @new);
    ok(in_none($c), 'up again: the next one in no cached list')
        or diag(copies_summary($c));
    all_see('up again', [ @C, @U, @X ], [ $X[2], $U[3] ]);
}

# ------------------------------------------- the turning post deleted --

# tw reaches 50 followers; its first post, which turns it, is deleted while
# it is being fanned out (MongoDB at 300 ms a command): whether that post
# finished the turn or the next one takes it over, tw turns once and every
# follower has every other post once
{
    my $tw = 'tw';
    my $c0 = node_counts($t);
    graph('turn deleted', 'PUT', $tw, @C[0 .. 40], @U, @X, $PA, $SW);
    all_see('turn deleted, followed', [ @C, @U, @X, $PA, $SW ]);
    my @cached = cached_of($tw);
    $t->mongo_latency(300);
    my $t1 = mypost($tw, 't1: turns tw, deleted at once');
    my $r = $t->http('DELETE', "/users/$tw/posts/$t1");
    $t->mongo_latency(0);
    is($r->{status}, 204, 'turn deleted: t1 deleted') or diag(short($r));
    $DEL{$t1} = 1;
    node_acked($t, $c0, 2, 'turn deleted');
    post_acked('turn deleted, t2', $tw, 't2: after the deleted turning post');
    my ($t3, $c2) = post_acked('turn deleted, t3', $tw, 't3: pulled');

    node_moved_is($t, $c0, { 'pull.to_pull' => 1, 'pull.to_push' => 0 },
        'turn deleted');
    authors_are(2, 'turn deleted');
    node_moved_is($t, $c2, { 'fanout.deliveries' => 0, 'pull.listed' => 1 },
        'turn deleted, t3');
    my $c = copies($t, $t1, @cached);
    ok(all_n($c, 0), 'turn deleted: t1 in no cached list')
        or diag(copies_summary($c));
    all_see('turn deleted', [ @C, @U, @X, $PA, $SW ], [ $U[0], $SW ]);
}

# -------------------------------------- Redis restarted during a turn --

# tr reaches 50 followers; Redis restarts (no persistence) while its
# turning post is being fanned out (MongoDB at 300 ms a command): the
# caches are gone, the turn may not have finished; once it is left alone
# long enough, the next post takes it over, the one after is listed only
{
    my $tr = 'tr';
    my @all = (@C, @U, @X, $PA, $SW);
    graph('redis restart', 'PUT', $tr, @C[0 .. 40], @U, @X, $PA, $SW);
    all_see('redis restart, followed', [ @all ]);
    my $c0 = node_counts($t);
    $t->mongo_latency(300);
    my $tr1 = time;
    mypost($tr, 'r1: turns tr, Redis restarts meanwhile');
    ok($t->wait_for(3, sub {
        @{ $t->redis('XPENDING', 'feed:posts', 'feed', '-', '+', 10) };
    }), 'redis restart: the turning post being fanned out');
    $t->stop_redis;
    $t->mongo_latency(0);
    %CACHED = ();
    $t->start_redis;
    ok($t->wait_for(10, sub { workers_up($t, 2) }),
        'redis restart: every worker reconnected and reading');
    all_see('redis restart', [ @all ]);

    # a turn cut by the restart is left to finish for 4 times
    # feed_fanout_claim_idle (20 s here), posts meanwhile pushed and
    # listed; then the next post takes it over
    post_acked('redis restart, r2', $tr, 'r2: after the restart');
    sleep(max(0, $tr1 + 21 - time));
    post_acked('redis restart, r3', $tr, 'r3: the turn is taken over');
    my ($r3, $c2) = post_acked('redis restart, r4', $tr, 'r4: pulled');
    node_moved_is($t, $c0, { 'pull.to_pull' => 1, 'pull.to_push' => 0 },
        'redis restart');
    authors_are(3, 'redis restart');
    node_moved_is($t, $c2, { 'fanout.deliveries' => 0, 'pull.listed' => 1 },
        'redis restart, r4');
    my $c = copies($t, $r3, cached_of($tr));
    ok(in_none($c), 'redis restart: r4 in no cached list')
        or diag(copies_summary($c));
    all_see('redis restart, r4', [ @all ], [ $C[1], $SW ]);
}

# ---------------------------------------------- feed_pull_threshold off --

{
    conf('off');
    ok($t->reload, 'off: reloaded');
    ok($t->wait_for(10, sub { workers_up($t, 2) }),
        'off: each worker reading');

    my $j = $t->get('/status')->{json} // {};
    ok(ref $j->{pull} eq 'HASH' && exists $j->{pull}{threshold}
        && !defined $j->{pull}{threshold}, 'off: status pull.threshold null')
        or diag($JSON->encode($j->{pull}));

    my $c0 = node_counts($t);
    my @cached = cached_of($SW);
    my $s15 = mypost($SW, 's15: threshold off');
    node_acked($t, $c0, 1, 'off');
    # delivered to every cached follower
    node_moved_is($t, $c0, { 'fanout.deliveries' => scalar(@cached) },
        'off');
    my $c = copies($t, $s15, @cached);
    ok(all_n($c, 1), 'off: in their lists, once') or diag(copies_summary($c));
    all_see('off', [ @C, @U, @X ], [ $C[0], $X[0] ]);

    # an author with 60 followers, 59 of them cached
    my $big = 'offa';
    my @o = map { sprintf 'o%02d', $_ } 1 .. 60;
    graph('off', 'PUT', $big, @o);
    all_see('off', [ @o[0 .. 58] ]);
    my $c1 = node_counts($t);
    mypost($big, "offa $_") for 1 .. 2;
    node_acked($t, $c1, 2, 'off, 60 followers');
    node_moved_is($t, $c1, { 'fanout.deliveries' => 2 * 59,
        'pull.listed' => 0, 'pull.to_pull' => 0 }, 'off, 60 followers');
    is($t->redis('EXISTS', "feed:pl:{$big}"), 0,
        'off, 60 followers: no pull list');
    all_see('off, 60 followers', [ @o ], [ $o[59] ]);
}

ok(1, sprintf('total %.1fs', time - $T0));

$t->done;
