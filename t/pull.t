#!/usr/bin/perl

# Pull authors: an author with feed_pull_threshold (50 here)
# followers or more is not fanned out; their posts are kept in a list of
# their own (feed:pl:{author}) and merged into their followers' pages at
# read time.  With 2 workers, feed_cache_size 10 (so that pages past the
# cache's end come from the fallback: DEEP), link mode, then embed mode,
# then 800:
#
#   - pbig (201 followers) and pfifty (50, exactly the threshold) switch to
#     pull mode with their first post (pushed to every cached follower);
#     small1 (3 followers) and small2 (1) stay pushed; the reader follows
#     all four and posts too: every walk of its pages following next, for
#     limits 1 to 7, 20 and 100, visits every post once, newest first,
#     each identical to its 201, a hit first (HIT, or LOCAL: the worker's
#     copy) and DEEP past the cache;
#     later posts of pbig and pfifty reach no cached list (0 deliveries);
#   - a post by pbig is on the first page of its 200 cached followers
#     within 1 s of its 201, with no fanout delivery, listed once;
#   - since_id pages and first pages read again and again (kept pages, the
#     workers' own copies) show a new pulled post as soon as it is listed;
#   - a pulled post deleted: in no follower's next read;
#   - MongoDB down: cached first pages (hits) still right, pull.authors null;
#   - unfollow of a pull author: their posts gone from the reader's next
#     read; follow again: back, and new ones too;
#   - a reload (SIGHUP) while posting, then a Redis restart (no
#     persistence: caches and pull lists gone, rebuilt; pull.loads);
#   - embed mode gives the same answers as link mode;
#   - with feed_cache_size 800 every list is whole: every page of every
#     walk is a hit (HIT, or LOCAL for a first page), merged; an old
#     pulled post, also in rebuilt lists, deleted; pbig's list expired, or
#     evicted alone: loaded again; the reader's own list expired; 250 more
#     pulled posts and 100 pushed: long walks, pages between max_id and
#     since_id; 30 posts while first pages are read: none stale once they
#     are listed.
#
# The switches (crossing the threshold up and down, feed_pull_threshold
# off) are in t/pull_switch.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short summary tl_uri tl_page_problems post_start
    post_end_tagged parallel follow_each read_each none_failed copies
    copies_summary all_n wait_settled tl_walk tl_ids node_counts node_moved
    node_moved_is node_acked workers_up statuses json_int server_conf
    is_hit $HIT);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database, its '
    . 'command log') if FeedTest::real_mongo();

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
    feed_cache_size @@SIZE@@;
    feed_cache_mode @@MODE@@;
    feed_fanout on;
    feed_fanout_claim_idle 2s;
    feed_fanout_block 200ms;
    feed_pull_threshold 50;

@@SERVER@@
}
EOF
$CONF =~ s/\@\@SERVER\@\@\n/server_conf()/e;

my $JSON = JSON::PP->new->utf8->canonical;

my ($PA, $PB, $S1, $S2, $R) = qw(pbig pfifty small1 small2 reader);
my @F = map { sprintf 'f%03d', $_ } 1 .. 200;

# ----------------------------------------------------------------- model --

my %FOL;    # user => { followee => 1 }
my %BY;     # author => [ post ids, oldest first ]
my %TAG;    # post id => its 201, tag()ged
my %DEL;    # post id => 1 once deleted

# $u's home timeline as the model has it: ids, newest first
sub want {
    my ($u) = @_;
    return [ sort { $b cmp $a } grep { !$DEL{$_} }
        map { @{ $BY{$_} || [] } } $u, keys %{ $FOL{$u} || {} } ];
}

sub follow {
    my ($name, $target, @users) = @_;
    my $t0 = time;
    none_failed([ follow_each($t, $target, @users) ],
        sprintf('%s: %d follow %s (%.1fs)', $name, scalar @users, $target,
            time - $t0));
    $FOL{$_}{$target} = 1 for @users;
}

sub unfollow {
    my ($name, $u, $target) = @_;
    my $r = $t->http('DELETE', "/users/$u/following/$target");
    is($r->{status}, 204, "$name: $u unfollows $target") or diag(short($r));
    delete $FOL{$u}{$target};
}

sub read_all {
    my ($name, @users) = @_;
    my $t0 = time;
    my ($res, @bad) = read_each($t, @users);
    none_failed(\@bad, sprintf('%s: %d timelines read (%.1fs)', $name,
        scalar @users, time - $t0));
    return @$res;
}

# a post by $au, in the model; its id
sub mypost {
    my ($au, $body, $data) = @_;
    return (posts_at_once([ $au, $body, $data ]))[0];
}

# posts by several authors at once, [author, body, data] each, in the
# model; their ids
sub posts_at_once { return posts_end(posts_start(@_)) }

sub posts_start { return map { [ $_->[0], post_start($t, @$_) ] } @_ }

sub posts_end {
    my @ids;
    for my $h (@_) {
        my ($id, $tag) = post_end_tagged($t, $h->[1], "post by $h->[0]")
            or next;
        $TAG{$id} = $tag;
        push @{ $BY{ $h->[0] } }, $id;
        push @ids, $id;
    }
    return @ids;
}

sub remove {
    my ($name, $au, $id) = @_;
    my $r = $t->http('DELETE', "/users/$au/posts/$id");
    is($r->{status}, 204, "$name: deleted") or diag(short($r));
    $DEL{$id} = 1;
}

# the first $n of a list
sub head_of { my ($l, $n) = @_; [ @$l[0 .. ($n > @$l ? @$l : $n) - 1] ] }

# the users whose follows the MongoDB stand-in was asked for past byte
# $off of its command log: $side src, whom they follow; dst, who follows
# them
sub follows_asked {
    my ($off, $side) = @_;
    open my $fh, '<', $t->dir . '/mongo-commands.log' or return ();
    seek $fh, $off, 0;
    my @users;
    while (<$fh>) {
        my $c = eval { FeedTest::json_decode($_) } or next;
        push @users, $c->{filter}{$side} if ($c->{coll} // '') eq 'follows'
            && ref $c->{filter} eq 'HASH' && defined $c->{filter}{$side};
    }
    return @users;
}

# X-Feed-Cache of consecutive pages: [status, how many] for each run
sub runs {
    my @r;
    for my $c (map { $_ // '-' } @{ $_[0] }) {
        @r && $r[-1][0] eq $c ? $r[-1][1]++ : push @r, [ $c, 1 ];
    }
    return @r;
}

# $u's pages, limit $limit, following next: every post once, in order,
# each as its 201; o{deep} => some page DEEP; o{first}, o{all} => a
# pattern the X-Feed-Cache of the first page, of every page matches
# ($HIT: a hit, from Redis or the worker's copy).  Returns the walk
sub walk_ok {
    my ($name, $u, $limit, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $w = tl_walk($t, $u, $limit);
    my $want = want($u);
    my @p = @{ $w->{problems} };
    push @p, summary($w->{ids}, $want) if "@{$w->{ids}}" ne "@$want";
    push @p, 'items not identical to their 201s'
        if !@p && $JSON->encode($w->{items})
            ne $JSON->encode([ map { $TAG{$_} } @$want ]);
    my $caches = join ', ', map { "$_->[0] x$_->[1]" } runs($w->{caches});
    push @p, "first page " . ($w->{caches}[0] // '-') . ", want $o{first}"
        if $o{first} && ($w->{caches}[0] // '') !~ $o{first};
    push @p, 'no page DEEP' if $o{deep} && $caches !~ /DEEP/;
    push @p, "not every page $o{all}: $caches"
        if $o{all} && grep { ($_ // '') !~ $o{all} } @{ $w->{caches} };
    # a worker answers only first pages from its copy
    push @p, "a page past the first LOCAL: $caches"
        if grep { ($_ // '') eq 'LOCAL' }
            @{ $w->{caches} }[1 .. $#{ $w->{caches} }];
    ok(!@p, "$name: $u, limit $limit: " . scalar(@$want) . ' posts once, '
        . 'newest first, as created (' . scalar(@{ $w->{caches} })
        . " pages: $caches)") or diag(join "\n", @p);
    return $w;
}

# first pages (limit 20) of @users as the model has them; the failures
sub first_pages_bad {
    my (@users) = @_;
    return pages_bad(20, undef, @users);
}

# the same for pages of $limit, each with an X-Feed-Cache that matches
# $cache unless undef
sub pages_bad {
    my ($limit, $cache, @users) = @_;
    my @res = parallel($t, 50,
        map { [ 'GET', tl_uri($_, limit => $limit) ] } @users);
    my @bad;
    for my $i (0 .. $#users) {
        my $r = $res[$i];
        my @p = tl_page_problems($r, $users[$i], $limit);
        my $want = head_of(want($users[$i]), $limit);
        push @p, summary(tl_ids($r), $want)
            if !@p && "@{ tl_ids($r) }" ne "@$want";
        push @p, "X-Feed-Cache $r->{headers}{'x-feed-cache'}"
            if !@p && defined $cache
                && $r->{headers}{'x-feed-cache'} !~ $cache;
        push @bad, "$users[$i]: @p" if @p;
    }
    return @bad;
}

# a test: $u's first page ($limit) has $id first within 1 s of $t201,
# the time of its 201 (polled)
sub first_within_1s {
    my ($name, $u, $id, $t201, $limit) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $when;
    while (!defined $when) {
        my $r = $t->get(tl_uri($u, limit => $limit));
        my $at = time - $t201;
        $when = $at if (tl_ids($r)->[0] // '') eq $id;
        last if $at > 1;
        sleep 0.02 unless defined $when;
    }
    ok(defined $when && $when <= 1, sprintf('%s: the new post first on %s\'s'
        . ' page within 1 s of its 201 (%s)', $name, $u,
        defined $when ? sprintf('%.3fs', $when) : 'not seen'));
}

sub start_nginx {
    my ($mode, $size) = @_;
    (my $c = $CONF) =~ s/\@\@MODE\@\@/$mode/;
    $c =~ s/\@\@SIZE\@\@/$size/;
    $t->write_conf($c)->run;
    ok($t->wait_for(10, sub { workers_up($t, 2) }),
        "$mode, cache $size: 2 workers up, redis and mongodb up, each "
        . 'reading');
}

# ------------------------------------------ the authors and the switch --

start_nginx('link', 10);

follow('setup', $PA, $R, @F);
follow('setup', $PB, $R, @F[0 .. 48]);
follow('setup', $S1, $R, @F[0, 1]);
follow('setup', $S2, $R);
read_all('setup', $R, @F);

{
    my $c0 = node_counts($t);
    my $sa = mypost($PA, 'pbig switches');
    my $sb = mypost($PB, 'pfifty switches');
    node_acked($t, $c0, 2, 'switch');

    my $c = copies($t, $sa, $R, @F);
    ok(all_n($c, 1), 'switch: pbig\'s first post pushed to its 201 cached '
        . 'followers') or diag(copies_summary($c));
    $c = copies($t, $sb, $R, @F[0 .. 48]);
    ok(all_n($c, 1), 'switch: pfifty\'s to its 50')
        or diag(copies_summary($c));
    node_moved_is($t, $c0, { 'pull.to_pull' => 2 }, 'switch');

    my $j = $t->get('/status')->{json} // {};
    is($JSON->encode([ @{ $j->{pull} // {} }{qw(threshold authors)} ]),
        '[50,2]', 'status: pull.threshold 50, pull.authors 2')
        or diag($JSON->encode($j->{pull}));
}

# ----------------------------------------- posts of every kind, paged --

{
    my $c0 = node_counts($t);
    my @pulled;
    for my $i (1 .. 8) {
        push @pulled, mypost($PA, "pbig $i: h\x{e9}llo \"q\" \\ \n\t\x{0}"
            . " \x{1f600}", { lang => 'fr', n => [ $i, 2.5, JSON::PP::true,
            undef ], deep => { a => { b => "\x{2713}" } } });
        mypost($S1, "small1 $i");
        push @pulled, mypost($PB, "pfifty $i");
        mypost($R, "reader $i");
        mypost($S2, "small2 $i");
    }
    node_acked($t, $c0, 40, '40 posts');

    # small1: 3 cached followers, small2: 1, the reader: its own list
    # deliveries: none for the 16 posts of the pull authors, listed instead
    node_moved_is($t, $c0, { 'fanout.deliveries' => 8 * 5,
        'pull.listed' => 16 }, '40 posts');
    my @in = grep { !all_n(copies($t, $_, $R, @F), 0) } @pulled;
    ok(!@in, '40 posts: no pulled post in a cached list')
        or diag("$in[0]: " . copies_summary(copies($t, $in[0], $R, @F)));

    for my $limit (1 .. 7) {
        walk_ok('paged', $R, $limit, first => $HIT, deep => 1);
    }
    walk_ok('paged', $R, $_) for 20, 100;
    walk_ok('paged', $F[0], 3, first => $HIT, deep => 1);
    walk_ok('paged', $F[1], 5);
    walk_ok('paged', $F[99], 2, first => $HIT);

    my $d = node_moved($t, $c0);
    ok($d->{'pull.reads'} > 0 && $d->{'pull.pulled'} > 0
        && $d->{'pull.merge_us'} > 0, 'paged: node pull.reads, pull.pulled '
        . "and pull.merge_us moved (+$d->{'pull.reads'}, "
        . "+$d->{'pull.pulled'}, +$d->{'pull.merge_us'})");

    # at rest: each worker's pull counters, JSON integers, and the node's,
    # their sums
    my $st = statuses($t);
    my @k = qw(listed reads pulled merge_us loads to_pull to_push);
    my (%sum, @bad, $node);
    for my $pid (sort keys %$st) {
        my $p = $st->{$pid}{pull};
        $node = $st->{$pid}{node}{pull};
        for my $k (@k, 'threshold', 'authors') {
            push @bad, "$pid: pull.$k " . $JSON->encode($p->{$k} // 'absent')
                unless ref $p eq 'HASH' && json_int($p->{$k});
        }
        $sum{$_} += ref $p eq 'HASH' ? $p->{$_} // 0 : 0 for @k;
    }
    push @bad, 'node.pull: ' . $JSON->encode($node) . ', the workers\' '
        . 'sums: ' . $JSON->encode(\%sum) unless ref $node eq 'HASH'
        && !grep { ($node->{$_} // -1) != $sum{$_} } @k;
    push @bad, 'node.pull has threshold or authors'
        if ref $node eq 'HASH' && grep { exists $node->{$_} }
            qw(threshold authors);
    ok(keys %$st == 2 && !@bad, 'status: pull of both workers, integers; '
        . 'node.pull their sums') or diag(join "\n", @bad);
}

# ------------------------------ 200 cached followers, within 1 s, no push --

{
    my @res = parallel($t, 50, map { [ 'GET', tl_uri($_, limit => 5) ] } @F);
    is(scalar(grep { $_->{status} == 200 } @res), 200,
        '200 followers: a page of 5 read by each');
    is($t->redis('EXISTS', map { "feed:tl:{$_}" } @F), 200,
        '200 followers: each has a cached timeline');
    my $log = -s ($t->dir . '/mongo-commands.log');
    my $c0 = node_counts($t);
    my $id = mypost($PA, 'seen by 200');
    my $t201 = time;

    # every follower's first page until it shows the post, 50 at a time;
    # pages of 5, inside every cache (those of 20 go past some: DEEP)
    # a pass over the 200 takes longer than 1 s in the sanitizer's build
    my $within = $FeedTest::ASAN ? 3 : 1;
    my (%seen, $last, %how);
    while (keys %seen < @F && time - $t201 <= $within) {
        my @todo = grep { !$seen{$_} } @F;
        while (my @b = splice(@todo, 0, 50)) {
            my @h = map { $t->http_start('GET', tl_uri($_, limit => 5)) } @b;
            for my $u (@b) {
                my $r = $t->http_end(shift @h);
                $how{ $r->{headers}{'x-feed-cache'} // "$r->{status}" }++;
                next unless (tl_ids($r)->[0] // '') eq $id;
                $seen{$u} = 1;
                $last = time;
            }
        }
    }
    ok(keys %seen == @F && $last - $t201 <= $within, sprintf('200 '
        . 'followers: the post first on every cached follower\'s page '
        . 'within %d s of its 201 (%d of 200, the last after %.3fs)',
        $within, scalar(keys %seen), ($last // time) - $t201));
    # hits, from Redis or the worker's copy
    ok(!grep({ !is_hit($_) } keys %how), '200 followers: every read a hit: '
        . join(', ', map { "$_ x$how{$_}" } sort keys %how));

    node_acked($t, $c0, 1, '200 followers');
    node_moved_is($t, $c0, { 'fanout.deliveries' => 0, 'pull.listed' => 1 },
        '200 followers');

    # each follower's first read that showed it merged the lists
    my $d = node_moved($t, $c0);
    ok($d->{'pull.reads'} >= 200 && $d->{'pull.pulled'} >= 200,
        '200 followers: pull.reads and pull.pulled moved by 200 or more '
        . "(+$d->{'pull.reads'}, +$d->{'pull.pulled'})");
    my @asked = follows_asked($log, 'src');
    ok(!@asked, '200 followers: their reads asked MongoDB whom they follow '
        . 'for none of them') or diag(scalar(@asked) . " asked: @asked");
    @asked = follows_asked($log, 'dst');
    ok(!@asked, '200 followers: the post\'s fanout did not ask MongoDB '
        . 'for pbig\'s followers') or diag("asked for: @asked");
    my $c = copies($t, $id, @F);
    ok(all_n($c, 0), '200 followers: in none of their cached lists')
        or diag(copies_summary($c));
    is($t->redis('EXISTS', "feed:tl:{$PA}"), 0,
        '200 followers: pbig\'s own timeline not cached');
    my @bad = first_pages_bad(@F, $R);
    ok(!@bad, '200 followers: every first page as the model has it')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

# --------------------- since_id and first pages read again: no stale page --

{
    # the first pages kept (feed:tlp) and copied by both workers
    for (1 .. 6) {
        $t->get(tl_uri($R, limit => 5));
        $t->get("/users/$R/timeline");
    }
    my $head = want($R)->[0];
    my $id = mypost($PA, 'after kept pages');
    my $t201 = time;
    first_within_1s('kept pages', $R, $id, $t201, 5);

    my @bad;
    for my $i (1 .. 12) {
        my $limit = $i % 2 ? 5 : 20;
        my $r = $t->get(tl_uri($R, limit => $limit));
        my $want = head_of(want($R), $limit);
        push @bad, "read $i: " . summary(tl_ids($r), $want)
            . ' ' . short($r) if "@{ tl_ids($r) }" ne "@$want";
    }
    ok(!@bad, 'kept pages: 12 first pages after it (limits 5, 20), each '
        . 'with it') or diag(join "\n", @bad);

    my $all = want($R);
    for my $q ([ 'the head before it', $head, 20, [ $id ] ],
        [ 'the 6th', $all->[5], 3, head_of($all, 3) ],
        [ 'the 6th', $all->[5], 100, head_of($all, 5) ],
        [ 'it', $id, 20, [] ])
    {
        my ($what, $since, $limit, $want) = @$q;
        my $r = $t->get(tl_uri($R, limit => $limit, since_id => $since));
        my @p = tl_page_problems($r, $R, $limit);
        ok(!@p && "@{ tl_ids($r) }" eq "@$want", "since_id: limit $limit, "
            . "since $what: " . scalar(@$want) . ' posts')
            or diag(join "\n", @p, summary(tl_ids($r), $want));
    }

    # pfifty, exactly at the threshold: the same for a follower of it;
    # its own timeline cached: the one delivery of its post
    $t->get(tl_uri($F[0], limit => 4)) for 1 .. 4;
    is($t->get("/users/$PB/timeline")->{status}, 200,
        'kept pages: pfifty reads its own timeline');
    my $c0 = node_counts($t);
    my $id2 = mypost($PB, 'pfifty after kept pages');
    first_within_1s('kept pages, pfifty', $F[0], $id2, time, 4);
    my $r = $t->get(tl_uri($F[0], limit => 4));
    is("@{ tl_ids($r) }", "@{ head_of(want($F[0]), 4) }",
        'kept pages: f001\'s next first page too');
    node_acked($t, $c0, 1, 'pfifty\'s own');
    node_moved_is($t, $c0, { 'fanout.deliveries' => 1, 'pull.listed' => 1 },
        'pfifty\'s own: delivered to its own list only');
    walk_ok('pfifty\'s own', $PB, 20);
}

# ----------------------------------------------------------- delete --

{
    my $gone = $BY{$PA}[-1];
    remove('delete newest', $PA, $gone);
    my ($res) = read_each($t, $R, @F);
    my @shown = grep { $_->{status} != 200
        || index($_->{body}, $gone) >= 0 } @$res;
    ok(!@shown, 'delete newest: in no read of the 201 followers right after '
        . 'the 204') or diag(scalar(@shown) . ' wrong, first: '
            . short($shown[0]));

    my $old = (grep { !$DEL{$_} } @{ $BY{$PA} })[1];
    remove('delete old', $PA, $old);
    walk_ok('delete old', $R, 7, deep => 1);
    wait_settled($t, 'delete');
    my @left = grep { my $e = $_; grep { $e eq $_ } $gone, $old }
        map { entry_id($_) } @{ $t->redis('LRANGE', "feed:pl:{$PA}", 0, -1) };
    ok(!@left, 'delete: both out of pbig\'s list once fanned out')
        or diag("@left");
    my @bad = first_pages_bad(@F, $R);
    ok(!@bad, 'delete: every first page as the model has it')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

# ---------------------------------------------------- MongoDB down --

# cached timelines need no MongoDB, pull authors or not
{
    $t->stop_mongo;
    my @bad = pages_bad(5, $HIT, $R, @F);
    ok(!@bad, 'mongodb down: the first pages of 5 of the reader and the 200 '
        . 'followers, hits, as the model has them')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
    my $j = $t->get('/status')->{json} // {};
    ok(ref $j->{pull} eq 'HASH' && exists $j->{pull}{authors}
        && !defined $j->{pull}{authors} && !$j->{mongo}{up},
        'mongodb down: status mongo.up false, pull.authors null')
        or diag($JSON->encode($j));
    $t->start_mongo;
    ok($t->wait_for(10, sub { workers_up($t, 2) }), 'mongodb up again');
}

# ------------------------------------------------- unfollow, follow --

{
    unfollow('unfollow', $R, $PA);
    walk_ok('unfollow', $R, 7);
    my $c0 = node_counts($t);
    my $id = mypost($PA, 'while the reader does not follow');
    node_acked($t, $c0, 1, 'unfollow');
    walk_ok('unfollow, pbig posted', $R, 7);

    follow('follow again', $PA, $R);
    walk_ok('follow again', $R, 6, deep => 1);
    $id = mypost($PA, 'after the reader followed again');
    first_within_1s('follow again', $R, $id, time, 5);
    walk_ok('follow again', $R, 4, first => $HIT);
}

# ---------------------------------------------- reload while posting --

{
    my $c0 = node_counts($t);
    my @old = $t->worker_pids;
    my $id = mypost($PA, 'right before the reload');
    $t->signal('nginx', 'HUP');
    posts_at_once(map { [ $_, "during the reload by $_" ] } $PA, $S1, $PB,
        $R);
    ok($t->wait_for(15, sub {
        my %now = map { $_ => 1 } $t->worker_pids;
        keys %now == 2 && !grep { $now{$_} } @old;
    }), 'reload: 2 new workers, the old ones gone');
    ok($t->wait_for(10, sub { workers_up($t, 2) }), 'reload: each reading');
    my $id2 = mypost($PA, 'after the reload');
    node_acked($t, $c0, 6, 'reload');

    walk_ok('reload', $R, 5, first => $HIT, deep => 1);
    walk_ok('reload', $F[0], 7);
    my @bad = first_pages_bad(@F, $R);
    ok(!@bad, 'reload: every first page as the model has it')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
    my @in = grep { !all_n(copies($t, $_, $R, @F), 0) }
        $id, $id2, $BY{$PA}[-2];
    ok(!@in, 'reload: pbig\'s posts in no cached list') or diag("@in");
}

# ---------------------------------------------------- Redis restart --

my %LINK;   # limit => the reader's walk in link mode

{
    my $c0 = node_counts($t);
    $t->stop_redis;
    $t->start_redis;
    ok($t->wait_for(10, sub { workers_up($t, 2) }),
        'redis restart: every worker reconnected and reading');

    # a post before any read: no list of pbig's to add it to yet
    my $cp = node_counts($t);
    mypost($PA, 'right after the redis restart');
    node_acked($t, $cp, 1, 'redis restart, a post');

    my $w = walk_ok('redis restart', $R, 5, first => 'MISS', deep => 1);
    my $loads = node_moved($t, $c0)->{'pull.loads'};
    ok($loads > 0, "redis restart: node pull.loads moved (+$loads): the "
        . 'pull lists rebuilt');
    my @bad = first_pages_bad(@F);
    ok(!@bad, 'redis restart: every follower\'s first page (rebuilt) as '
        . 'the model has it') or diag(scalar(@bad) . " wrong, first: $bad[0]");

    my $c1 = node_counts($t);
    my $id = mypost($PA, 'after the redis restart');
    first_within_1s('redis restart', $R, $id, time, 5);
    node_acked($t, $c1, 1, 'redis restart');
    @bad = first_pages_bad(@F, $R);
    ok(!@bad, 'redis restart: every first page with it')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
    my $c = copies($t, $id, $R, @F);
    ok(all_n($c, 0), 'redis restart: pbig still pulled (in no cached list)')
        or diag(copies_summary($c));

    for my $limit (1, 3, 7, 20) {
        $LINK{$limit} = walk_ok('link', $R, $limit);
    }
    $LINK{f001} = walk_ok('link', $F[0], 4);
}

# ------------------------------------------------------------- embed --

$t->stop;
$t->stop_redis;
$t->start_redis;
start_nginx('embed', 10);
read_all('embed', $R, @F);

{
    for my $limit (1, 3, 7, 20) {
        my $w = walk_ok('embed', $R, $limit, $limit < 20 ? (deep => 1) : ());
        is($JSON->encode($w->{items}), $JSON->encode($LINK{$limit}{items}),
            "embed: limit $limit: the same posts as in link mode");
    }
    my $w = walk_ok('embed', $F[0], 4, first => $HIT);
    is($JSON->encode($w->{items}), $JSON->encode($LINK{f001}{items}),
        'embed: f001: the same posts as in link mode');

    my $c0 = node_counts($t);
    my $id = mypost($PA, 'in embed mode');
    first_within_1s('embed', $R, $id, time, 3);
    node_acked($t, $c0, 1, 'embed');
    node_moved_is($t, $c0, { 'fanout.deliveries' => 0, 'pull.listed' => 1 },
        'embed');
    my @bad = first_pages_bad(@F, $R);
    ok(!@bad, 'embed: every first page with it')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
    walk_ok('embed', $R, 3, first => $HIT, deep => 1);

    remove('embed', $PA, $id);
    my ($res) = read_each($t, $R, @F);
    my @shown = grep { $_->{status} != 200
        || index($_->{body}, $id) >= 0 } @$res;
    ok(!@shown, 'embed: the deleted post in no next read')
        or diag(scalar(@shown) . ' wrong, first: ' . short($shown[0]));
}

# ------------------------------------- a cache that holds everything --

# feed_cache_size 800: every list whole (the reader's, the pull authors'),
# every page a merge of them, none from the fallback
$t->stop;
$t->stop_redis;
$t->start_redis;
start_nginx('link', 800);
read_all('cache 800', $R, @F[0, 1, 99]);

{
    walk_ok('cache 800', $R, $_, all => $HIT) for 1 .. 7, 20, 100;
    walk_ok('cache 800', $_, 3, all => $HIT) for @F[0, 1, 99];
    my $c0 = node_counts($t);
    mypost($_, "cache 800: by $_") for $PA, $S1, $PB, $R, $PA;
    node_acked($t, $c0, 5, 'cache 800');
    node_moved_is($t, $c0, { 'fanout.deliveries' => 3 + 1,
        'pull.listed' => 3 }, 'cache 800');
    walk_ok('cache 800, 5 more posts', $R, $_, all => $HIT) for 2, 7;
    walk_ok('cache 800, 5 more posts', $F[0], 4, all => $HIT);

    # an old post of pbig's, in the reader's rebuilt list and in pbig's
    my $old = (grep { !$DEL{$_} } @{ $BY{$PA} })[3];
    my $c = copies($t, $old, $R, @F[0, 99]);
    ok(all_n($c, 1), 'cache 800: an old post of pbig\'s in the rebuilt '
        . 'lists') or diag(copies_summary($c));
    remove('cache 800', $PA, $old);
    walk_ok('cache 800, deleted', $_, 5, all => $HIT) for $R, @F[0, 99];
    wait_settled($t, 'cache 800, deleted');
    $c = copies($t, $old, $R, @F[0, 99]);
    ok(all_n($c, 0), 'cache 800: the deleted post gone from those lists')
        or diag(copies_summary($c));
    ok(!grep({ entry_id($_) eq $old }
        @{ $t->redis('LRANGE', "feed:pl:{$PA}", 0, -1) }),
        'cache 800: and from pbig\'s');

    # pbig's list and its version expired: loaded again at the next read
    $c0 = node_counts($t);
    $t->redis('DEL', "feed:pl:{$PA}", "feed:pv:{$PA}");
    walk_ok('cache 800, pbig\'s list expired', $R, 6, all => $HIT);
    node_moved_is($t, $c0, { 'pull.loads' => 1 },
        'cache 800, pbig\'s list expired');
    walk_ok('cache 800, pbig\'s list expired', $F[99], 3, all => $HIT);

    # the list alone gone (evicted under maxmemory), its version left
    $c0 = node_counts($t);
    $t->redis('DEL', "feed:pl:{$PA}");
    walk_ok('cache 800, pbig\'s list evicted', $_, 6) for $R, @F[0, 99];
    node_moved_is($t, $c0, { 'pull.loads' => 1 },
        'cache 800, pbig\'s list evicted');

    # the reader's own list expired (its pull authors' set outlives it)
    $t->redis('DEL', "feed:tl:{$R}");
    walk_ok('cache 800, the reader\'s list expired', $R, 7, first => 'MISS');
    walk_ok('cache 800, the reader\'s list expired', $R, 5, all => $HIT);
}

# ------------------------------------------------ long lists, merged --

# 250 more posts of pfifty's (pulled) and 100 of small2's (pushed), 25 at
# a time: pages deep in the lists, read in growing chunks by the script
{
    my $t0 = time;
    my $c0 = node_counts($t);
    my @spec = map { $_ % 7 == 3 || $_ % 7 == 6 ? $S2 : $PB } 1 .. 350;
    while (my @b = splice(@spec, 0, 25)) {
        posts_at_once(map { [ $_, "long lists: by $_" ] } @b);
    }
    node_acked($t, $c0, 350, 'long lists');
    ok(1, sprintf('long lists: 350 posts (%.1fs)', time - $t0));
    node_moved_is($t, $c0, { 'fanout.deliveries' => 100,
        'pull.listed' => 250 }, 'long lists');

    walk_ok('long lists', $R, $_, all => $HIT) for 7, 33, 100;
    walk_ok('long lists', $F[0], 50, all => $HIT);

    # pages between max_id and since_id, anywhere in the reader's timeline
    my $all = want($R);
    my @bad;
    for my $q ([ 0, 400, 20 ], [ 10, 300, 100 ], [ 150, 160, 5 ],
        [ 290, 420, 100 ], [ 5, 9, 1 ], [ 200, 201, 7 ], [ 77, 390, 64 ])
    {
        my ($hi, $lo, $limit) = @$q;
        my @in = @$all[$hi + 1 .. $lo - 1];
        my $want = [ @in[0 .. ($limit > @in ? @in : $limit) - 1] ];
        my $r = $t->get(tl_uri($R, limit => $limit, max_id => $all->[$hi],
            since_id => $all->[$lo]));
        my @p = tl_page_problems($r, $R, $limit);
        push @p, summary(tl_ids($r), $want)
            if !@p && "@{ tl_ids($r) }" ne "@$want";
        push @bad, "max_id the ${hi}th, since_id the ${lo}th, limit $limit: "
            . join('; ', @p) if @p;
    }
    ok(!@bad, 'long lists: 7 pages between a max_id and a since_id, as '
        . 'the model has them') or diag(join "\n", @bad);
}

# ------------------------------------------- posts while pages are read --

# 30 posts of pbig's and pfifty's, 3 at a time, while first pages of the
# reader and f001 are read 8 at a time (kept pages and the workers' copies
# made and replaced all along): once every post is listed, no read answers
# a page without them
{
    my $c0 = node_counts($t);
    my ($reads, @bad) = (0);
    for my $i (1 .. 10) {
        my @h = posts_start(map { [ $_, "storm $i by $_" ] } $PA, $PB, $PA);
        my @r = map { $t->http_start('GET', tl_uri($_, limit => 5)) }
            ($R, $F[0]) x 4;
        $t->http_end($_) for @r;
        $reads += @r;
        posts_end(@h);
    }
    node_acked($t, $c0, 30, 'storm');
    for my $i (1 .. 10) {
        push @bad, map { "read $i: $_" } pages_bad(5, $HIT, ($R, $F[0]) x 4);
    }
    ok(!@bad, "storm: after $reads reads meanwhile, 80 first pages, each "
        . 'with every post') or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

ok(1, sprintf('total %.1fs', time - $T0));

$t->done;
