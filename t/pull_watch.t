#!/usr/bin/perl

# The pull watch: a worker vouches for its own copy of a first
# page merged from pull authors' lists while it hears every change of
# those lists (channel feed:pvc) and its heartbeats come back within
# 300 ms; the read script then checks the user's own keys only.  One
# worker (its /status counters are the worker's), feed_pull_threshold 50,
# Redis reached through t/lib/tcp_proxy.pl in "hold" mode; the reader
# follows three pull authors (51 followers each, switched by a post) and
# one pushed author:
#
#   - repeated reads of the reader's first page are vouched for: pull.vouched
#     one more per read, and 50 of them run no SMEMBERS and no MGET in
#     Redis (INFO commandstats); pull.watch subscribed, heard_ms_ago within
#     0..300, authors >= 3; CLIENT LIST has the worker's subscription
#     (sub=5: the lists, its own, invalidations, deletes, deliveries
#     told), one;
#   - 10 posts of the pull authors: each first on the reader's page within
#     1 s of its 201, every page read before it the page before the post,
#     every page after it as the model has it; the same for a post of the
#     pushed author;
#   - a pulled post deleted: gone from the very next read;
#   - a pull author unfollowed: their posts gone from the next read;
#     followed again: back at the next read;
#   - the subscription killed (CLIENT KILL TYPE pubsub): watch.subscribed
#     false, then true again within ~1 s; a pull post made right after the
#     kill on the page within 1 s; vouching resumes;
#   - the subscription stalled (the proxy holds Redis's bytes to it): a pull
#     post made right after the stall on the page within 1 s of its 201,
#     no read vouched for once 300 ms passed without a heartbeat heard
#     (full reads: SMEMBERS runs again), no page stale once it showed;
#     relayed again: vouching resumes, no page wrong;
#   - a reload (SIGHUP): the new worker subscribes (CLIENT LIST: one
#     subscription), vouches, pages right;
#   - a Redis restart (no persistence): pages rebuilt right, the worker
#     subscribes again and vouches.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use FeedTest;
use FeedTest::Util qw(short summary tl_uri tl_page_problems tl_ids
    post_start post_end follow_each read_each none_failed node_counts
    node_acked wait_settled workers_up json_int);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
my $T0 = time;

$t->start_redis;
$t->start_mongo;
my $PROXY = 'redishold';
$t->start_proxy($PROXY, $t->port('redis'), 0, 'hold');

my $CONF = <<'EOF';
worker_processes 1;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDISHOLD%%;
    feed_redis_timeout 2s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_cache_size 100;
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_claim_idle 2s;
    feed_fanout_block 200ms;
    feed_pull_threshold 50;
    # the round trips the watch vouches for (t/local_hits.t: none)
    feed_cache_tracking off;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

my $JSON = JSON::PP->new->utf8->canonical;

my @PULL = qw(pa1 pa2 pa3);
my ($PLAIN, $R) = qw(plain reader);
my @F = map { sprintf 'f%02d', $_ } 1 .. 50;
my $LIMIT = 10;

# ----------------------------------------------------------------- model --

my %FOL;    # user => { followee => 1 }
my %BY;     # author => [ post ids, oldest first ]
my %DEL;    # post id => 1 once deleted

# $u's first page as the model has it: ids, newest first
sub want {
    my ($u) = @_;
    my @all = sort { $b cmp $a } grep { !$DEL{$_} }
        map { @{ $BY{$_} || [] } } $u, keys %{ $FOL{$u} || {} };
    return [ @all[0 .. ($LIMIT > @all ? @all : $LIMIT) - 1] ];
}

sub mypost {
    my ($au, $body) = @_;
    my $id = post_end($t, post_start($t, $au, $body), "post by $au")
        or return;
    push @{ $BY{$au} }, $id;
    return $id;
}

# ------------------------------------------------------------- helpers --

# the worker's /status (one worker: its counters)
sub st { my $j = $t->get('/status', timeout => 5)->{json}; ref $j eq 'HASH'
    ? $j : {} }
sub vouched { st()->{pull}{vouched} // -1 }
sub watch { st()->{pull}{watch} // {} }

# calls of each Redis command so far (INFO commandstats, scripts' calls
# counted too)
sub calls {
    my %c;
    for (split /\r?\n/, $t->redis('INFO', 'commandstats')) {
        $c{$1} = $2 if /^cmdstat_(\w+):calls=(\d+)/;
    }
    return \%c;
}

# the Redis clients subscribed to 5 channels (CLIENT LIST sub=5)
sub subscribed_clients {
    return scalar grep { /\bsub=5\b/ }
        split /\n/, $t->redis('CLIENT', 'LIST');
}

# one read of the reader's first page: its ids, or its problems
sub read_page {
    my $r = $t->get(tl_uri($R, limit => $LIMIT));
    my @p = tl_page_problems($r, $R, $LIMIT);
    return (undef, join '; ', @p) if @p;
    return (tl_ids($r), '', $r);
}

# a problem with the reader's next first page, '' without one
sub page_problem {
    my ($ids, $p) = read_page();
    return $p if $p;
    my $want = want($R);
    return "@$ids" eq "@$want" ? '' : summary($ids, $want);
}

# a test: $n reads in a row each as the model has it
sub pages_ok {
    my ($name, $n) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = grep { $_ } map { page_problem() } 1 .. ($n || 1);
    ok(!@bad, "$name: " . ($n || 1) . ' first page(s) of the reader as the '
        . 'model has them') or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

# reads (right ones) until one is vouched for, within $secs; a test
sub vouching_ok {
    my ($name, $secs) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my ($reads, @bad) = (0);
    my $ok = $t->wait_for($secs || 3, sub {
        my $v0 = vouched();
        my $p = page_problem();
        $reads++;
        push @bad, $p if $p;
        return vouched() == $v0 + 1;
    });
    ok($ok && !@bad, "$name: a read vouched for again ($reads reads, each "
        . 'right)') or diag(@bad ? "wrong: $bad[0]" : 'none vouched for: '
            . $JSON->encode(st()->{pull}));
}

# a post by $au: a test that the reader's first page has it first within
# 1 s of its 201, every page read before the previous page; then that
# the page after is right.  $during: run between reads while polling
sub post_seen {
    my ($name, $au, $body, $during) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $before = want($R);
    my $id = mypost($au, $body) or return;
    my $t201 = time;
    my $after = want($R);
    my ($when, @bad, $reads);
    while (1) {
        my ($ids, $p) = read_page();
        my $at = time - $t201;
        $reads++;
        if ($p) {
            push @bad, $p;
        } elsif ("@$ids" eq "@$after") {
            $when = $at;
            last;
        } elsif ("@$ids" ne "@$before") {
            push @bad, sprintf('at %.3fs neither the page before nor the '
                . 'one after: %s', $at, summary($ids, $after));
        }
        last if $at > 1.5;
        $during->() if $during;
        sleep 0.01;
    }
    ok(defined $when && $when <= 1 && !@bad, sprintf('%s: %s\'s post first '
        . 'on the reader\'s page within 1 s of its 201 (%s, %d reads, '
        . 'the page before it until then)', $name, $au,
        defined $when ? sprintf('%.3fs', $when) : 'not seen', $reads))
        or diag(join "\n", @bad[0 .. ($#bad > 4 ? 4 : $#bad)]);
    return ($id, $when);
}

sub start_nginx {
    $t->write_conf($CONF)->run;
    ok($t->wait_for(10, sub { workers_up($t, 1) }),
        'a worker up, redis and mongodb up, reading');
}

# ------------------------------------------ the authors and the switch --

start_nginx();

for my $a (@PULL) {
    none_failed([ follow_each($t, $a, @F, $R) ], "setup: 51 follow $a");
    $FOL{$_}{$a} = 1 for @F, $R;
}
none_failed([ follow_each($t, $PLAIN, $R) ], "setup: the reader follows "
    . $PLAIN);
$FOL{$R}{$PLAIN} = 1;
my (undef, @bad) = read_each($t, $R);
none_failed(\@bad, 'setup: the reader\'s timeline read');

{
    my $c0 = node_counts($t);
    mypost($_, "$_ switches") for @PULL, $PLAIN;
    node_acked($t, $c0, 4, 'switch');
    my $p = st()->{pull} // {};
    ok(($p->{authors} // 0) == 3 && ($p->{to_pull} // 0) == 3,
        'switch: pull.authors 3, pull.to_pull 3')
        or diag($JSON->encode($p));
    my $c1 = node_counts($t);
    for my $i (1 .. 3) {
        mypost($_, "$_ $i") for @PULL, $PLAIN;
    }
    node_acked($t, $c1, 12, 'more posts');
    pages_ok('setup', 3);
}

# ------------------------------------------------- reads vouched for --

{
    vouching_ok('hot');

    my $w = watch();
    ok(JSON::PP::is_bool($w->{subscribed}) && $w->{subscribed}
        && json_int($w->{heard_ms_ago}) && $w->{heard_ms_ago} >= 0
        && $w->{heard_ms_ago} <= 300 && json_int($w->{authors})
        && $w->{authors} >= 3, 'hot: watch subscribed, heard_ms_ago within '
        . '0..300, authors >= 3') or diag($JSON->encode($w));
    is(subscribed_clients(), 1, 'hot: CLIENT LIST: one client subscribed '
        . 'to 4 channels (the worker\'s)');

    # feed_cache_tracking off: no connection tracks keys (flag t)
    my @tracking = grep { /\bflags=\S*t/ }
        split /\n/, $t->redis('CLIENT', 'LIST');
    is(scalar @tracking, 0, 'hot: CLIENT LIST: no client tracking keys')
        or diag("@tracking");
    ok(JSON::PP::is_bool($w->{tracking}) && !$w->{tracking},
        'hot: watch.tracking false');

    my $c0 = calls();
    my ($v, @bad) = (vouched());
    for my $i (1 .. 50) {
        my $p = page_problem();
        my $v1 = vouched();
        push @bad, "read $i: $p" if $p;
        push @bad, "read $i: vouched $v -> $v1" if $v1 != $v + 1;
        $v = $v1;
    }
    ok(!@bad, 'hot: 50 reads, each right, each vouched for (pull.vouched '
        . '+1 each)') or diag(scalar(@bad) . " wrong, first: $bad[0]");
    my $c1 = calls();
    my %d = map { $_ => ($c1->{$_} // 0) - ($c0->{$_} // 0) }
        qw(smembers mget evalsha);
    ok($d{smembers} == 0 && $d{mget} == 0 && $d{evalsha} + ($c1->{eval}
        // 0) - ($c0->{eval} // 0) >= 50, 'hot: the 50 reads ran no '
        . 'SMEMBERS and no MGET in Redis (but their scripts)')
        or diag($JSON->encode(\%d));
}

# ------------------------------------------------ posts of pull authors --

{
    for my $i (1 .. 10) {
        post_seen("post $i", $PULL[$i % 3], "watched $i");
        pages_ok("post $i");
    }
    vouching_ok('10 posts');
    post_seen('pushed', $PLAIN, 'a pushed post');
    pages_ok('pushed', 3);
    vouching_ok('pushed');
}

# ----------------------------------------------------------- delete --

{
    my $gone = $BY{ $PULL[1] }[-1];
    ok(grep({ $_ eq $gone } @{ want($R) }), 'delete: the post on the page');
    vouching_ok('delete');
    my $r = $t->http('DELETE', "/users/$PULL[1]/posts/$gone");
    is($r->{status}, 204, 'delete: 204') or diag(short($r));
    $DEL{$gone} = 1;
    my ($ids, $p) = read_page();
    ok(!$p && !grep({ $_ eq $gone } @$ids) && "@$ids" eq "@{ want($R) }",
        'delete: gone from the very next read, the page right')
        or diag($p || summary($ids, want($R)));
    pages_ok('delete', 5);
    wait_settled($t, 'delete');
    pages_ok('delete, fanned out', 3);
    vouching_ok('delete, fanned out');
}

# ------------------------------------------------- unfollow, follow --

{
    my $a = $PULL[2];
    ok(grep({ my $id = $_; grep { $_ eq $id } @{ $BY{$a} } }
        @{ want($R) }), "unfollow: $a\'s posts on the page");
    vouching_ok('unfollow');
    my $r = $t->http('DELETE', "/users/$R/following/$a");
    is($r->{status}, 204, "unfollow: the reader unfollows $a")
        or diag(short($r));
    delete $FOL{$R}{$a};
    my $p = page_problem();
    ok(!$p, "unfollow: $a\'s posts gone from the next read") or diag($p);
    pages_ok('unfollow', 3);

    $r = $t->http('PUT', "/users/$R/following/$a");
    is($r->{status}, 204, "follow again: the reader follows $a")
        or diag(short($r));
    $FOL{$R}{$a} = 1;
    $p = page_problem();
    ok(!$p, "follow again: $a\'s posts back at the next read") or diag($p);
    pages_ok('follow again', 3);
    vouching_ok('follow again');
    post_seen('follow again', $a, "$a followed again");
}

# ---------------------------------------------- subscription killed --

{
    vouching_ok('killed');
    my $killed = $t->redis('CLIENT', 'KILL', 'TYPE', 'pubsub');
    my $h = post_start($t, $PULL[0], 'right after the kill');
    my ($down, $end) = (0, time + 1);
    while (!$down && time < $end) {
        $down = 1 unless watch()->{subscribed};
    }
    my $id = post_end($t, $h, 'killed: post');
    my $t201 = time;
    ok($killed == 1 && $down, "killed: CLIENT KILL TYPE pubsub killed "
        . "$killed, watch.subscribed false");
    push @{ $BY{ $PULL[0] } }, $id if $id;

    my ($when, @bad);
    while (!defined $when && time - $t201 <= 1.5) {
        my ($ids, $p) = read_page();
        if ($p) {
            push @bad, $p;
        } elsif (@$ids && $ids->[0] eq ($id // '')) {
            $when = time - $t201;
            push @bad, summary($ids, want($R)) if "@$ids" ne "@{ want($R) }";
        }
        sleep 0.01 unless defined $when;
    }
    ok(defined $when && $when <= 1 && !@bad, 'killed: the post made right '
        . 'after the kill on the page within 1 s of its 201 ('
        . (defined $when ? sprintf('%.3fs', $when) : 'not seen') . ')')
        or diag(join "\n", @bad);
    my $t0 = time;
    ok($t->wait_for(1.5, sub { watch()->{subscribed} }), sprintf('killed: '
        . 'subscribed again (%.2fs)', time - $t0));
    is(subscribed_clients(), 1, 'killed: CLIENT LIST: one subscription');
    pages_ok('killed', 3);
    vouching_ok('killed, subscribed again', 3);
}

# -------------------------------------------- subscription stalled --

{
    vouching_ok('stalled');
    my $pgid = $t->pid($PROXY);
    my $c0 = calls();
    kill 'USR1', -$pgid;
    my $t0 = time;
    my ($id, $when) = post_seen('stalled', $PULL[1],
        'right after the stall');
    ok(time - $t0 < 3, 'stalled: within 3 s of the stall');
    sleep 0.35 - (time - $t0) if time - $t0 < 0.35;

    my $w = watch();
    ok($w->{subscribed} && $w->{heard_ms_ago} > 300, 'stalled: subscribed, '
        . 'no heartbeat heard for more than 300 ms')
        or diag($JSON->encode($w));
    my $v0 = vouched();
    my $c1 = calls();
    pages_ok('stalled', 10);
    my $v1 = vouched();
    my $c2 = calls();
    is($v1 - $v0, 0, 'stalled: no read vouched for (pull.vouched)');
    ok(($c2->{smembers} // 0) - ($c1->{smembers} // 0) >= 10,
        'stalled: each read ran SMEMBERS (the full check)')
        or diag($JSON->encode([ $c1, $c2 ]));

    # two more posts while stalled, then relayed again
    post_seen('stalled, again', $_, "$_ while stalled") for @PULL[0, 2];
    is(vouched() - $v0, 0, 'stalled: still none vouched for');
    kill 'USR2', -$pgid;
    pages_ok('relayed again', 5);
    vouching_ok('relayed again', 3);
    my $w2 = watch();
    ok($w2->{heard_ms_ago} >= 0 && $w2->{heard_ms_ago} <= 300,
        'relayed again: heard_ms_ago within 0..300')
        or diag($JSON->encode($w2));
    post_seen('relayed again', $PULL[0], 'after the stall');
    pages_ok('relayed again', 5);
}

# ------------------------------ a version from before a clock step --

# The worker heard of a version from the future (a clock that stepped
# back since, or another server); the list's version expires, and the
# next post's is older than the one heard: not newer, the worker must
# stop vouching for copies made with the old one, not ignore the message.

{
    my $au = $PULL[0];
    my $future = '8999999999999999.test';
    $t->redis('SET', "feed:pv:{$au}", $future);
    $t->redis('PUBLISH', 'feed:pvc', "$au $future");
    pages_ok('clock', 2);
    vouching_ok('clock: the version from the future learned');
    $t->redis('DEL', "feed:pv:{$au}");
    post_seen('clock', $au, "$au after the clock stepped back");
    pages_ok('clock', 3);
    vouching_ok('clock, a post');
}

# ------------------------------ a delete while the author's list is gone --

# The pull author's list and version expired (or were evicted) and a post
# of theirs is deleted: nothing is taken out of a list, yet the copies
# made from it show the post.  Once the delete's grace period in
# feed:deleting is over (ZREM here), no read may show it.  No read between
# the delete and then: a read would see the post in feed:deleting.

{
    my $au = $PULL[1];
    my $c0 = node_counts($t);
    my $gone = mypost($au, "$au, soon deleted");
    node_acked($t, $c0, 1, 'list gone, a post');
    pages_ok('list gone', 2);
    vouching_ok('list gone');
    ok(grep({ $_ eq $gone } @{ want($R) }), 'list gone: the post on the '
        . 'page');
    $t->redis('DEL', "feed:pl:{$au}", "feed:pv:{$au}");
    my $c1 = node_counts($t);
    my $r = $t->http('DELETE', "/users/$au/posts/$gone");
    is($r->{status}, 204, 'list gone: the post deleted (204)')
        or diag(short($r));
    $DEL{$gone} = 1;
    node_acked($t, $c1, 1, 'list gone, the delete');
    $t->redis('ZREM', 'feed:deleting', $gone);
    pages_ok('list gone: past the delete\'s grace period', 5);
    vouching_ok('list gone');
}

# --------------------------------- a turn after the set of pull authors --

# An author turns to pull while the reader's set of pull authors was lost
# (evicted) and their list kept: a set of the new author alone would hide
# the others' posts; the list is made again instead.

{
    my $x = 'turner';
    none_failed([ follow_each($t, $x, @F[0 .. 48], $R) ], 'turn: 50 follow '
        . $x);
    $FOL{$_}{$x} = 1 for @F[0 .. 48], $R;
    pages_ok('turn: followed', 2);
    $t->redis('DEL', "feed:tla:{$R}");
    my $c0 = node_counts($t);
    mypost($x, "$x turns");
    node_acked($t, $c0, 1, 'turn');
    pages_ok('turn: every pull author\'s posts', 3);
    vouching_ok('turn');
    post_seen('turn', $x, "$x, pulled");
    post_seen('turn', $PULL[2], "$PULL[2] after the turn");
}

# ---------------------------------------------------------- reload --

{
    vouching_ok('reload');
    my ($old) = $t->worker_pids;
    ok($t->reload(15), 'reload: a new worker, the old one gone');
    ok($t->wait_for(10, sub { workers_up($t, 1) }), 'reload: reading');
    ok($t->wait_for(5, sub { subscribed_clients() == 1
        && watch()->{subscribed} }), 'reload: CLIENT LIST: one '
        . 'subscription, the new worker subscribed')
        or diag($t->redis('CLIENT', 'LIST'));
    is(st()->{pid}, ($t->worker_pids)[0], 'reload: /status of the new '
        . 'worker');
    pages_ok('reload', 3);
    vouching_ok('reload, new worker', 3);
    post_seen('reload', $PULL[2], 'after the reload');
    vouching_ok('reload, a post');
}

# --------------------------------------------------- Redis restart --

{
    vouching_ok('redis restart');
    $t->stop_redis;
    $t->start_redis;
    ok($t->wait_for(10, sub { workers_up($t, 1) && watch()->{subscribed} }),
        'redis restart: reconnected, subscribed');
    is(subscribed_clients(), 1, 'redis restart: CLIENT LIST: one '
        . 'subscription');
    my $p = page_problem();
    ok(!$p, 'redis restart: the reader\'s first page rebuilt, right')
        or diag($p);
    pages_ok('redis restart', 3);
    vouching_ok('redis restart', 3);
    my $c0 = node_counts($t);
    post_seen('redis restart', $PULL[0], 'after the redis restart');
    node_acked($t, $c0, 1, 'redis restart');
    pages_ok('redis restart, a post', 3);
    vouching_ok('redis restart, a post');
}

ok(1, sprintf('total %.1fs', time - $T0));

$t->done;
