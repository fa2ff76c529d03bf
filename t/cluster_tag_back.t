#!/usr/bin/perl

# A tag moved away and back.  On a Redis Cluster each master
# has copies of the posts being deleted and of the pull authors' lists,
# named with the hash tag of its last slot (docs/cluster.md).  When that
# slot is no master's last any more, the workers write those copies no
# more; when it is a master's last again, its readers must not trust what
# the copies held before: a pull author's post deleted meanwhile must not
# show.  On a real cluster of three masters, slots moved with their keys
# (CLUSTER SETSLOT, MIGRATE), the workers told at once (their connections
# to a master dropped: they read the map again):
#
#   - back to the same master: a master takes the last slot of another,
#     so that its own last slot is not its last any more; a pulled post
#     is deleted; the slot goes back, and the first master's tag with it;
#   - to another master: a master's last slot moves to a master with
#     higher slots, a pulled post is deleted, then the slot moves on to a
#     fourth master, new and empty, whose last slot it becomes.
#
# Each time the deleted post shows in no read, and every reader hits
# again, with the other posts.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(statuses follow_each read_each none_failed post
    node_counts tl_ids);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my ($seed) = $c->masters;
my $seeds = '127.0.0.1:' . $c->port($seed) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_cache_size 10;
    feed_cache_local 1m;
    feed_pull_threshold 5;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 1s;
    feed_cache_lock_timeout 500ms;

@{[ FeedCluster::server_conf() ]}
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

# ------------------------------------------------------------- helpers --

# the masters by their slots, lowest first, and each one's last slot
sub layout {
    my %last;
    for my $r (@{ $c->cmd($seed, 'CLUSTER', 'SLOTS') }) {
        my ($name) = grep { $c->port($_) == $r->[2][1] } $c->names;
        $last{$name} = $r->[1] if ($last{$name} // -1) < $r->[1];
    }
    return (\%last, sort { $last{$a} <=> $last{$b} } keys %last);
}

# a key's hash slot, as Redis Cluster has it (CRC16 XMODEM; no {} here)
sub slot_of {
    my $crc = 0;
    for my $b (unpack 'C*', $_[0]) {
        $crc ^= $b << 8;
        $crc = $crc & 0x8000 ? (($crc << 1) ^ 0x1021) & 0xffff
                             : ($crc << 1) & 0xffff for 1 .. 8;
    }
    return $crc % 16384;
}

# the smallest decimal number whose hash slot is $slot: the tag of the
# copies of the master whose last slot it is
sub tag_of {
    my ($slot) = @_;
    my $n = 0;
    $n++ while slot_of($n) != $slot;
    return $n;
}

# every worker reads the map again now: their connections to a master
# are dropped, and any answers again once it is read
sub remap {
    my ($m) = $c->masters;
    $c->cmd($m, 'CLUSTER', 'SLOTS');
    $c->cmd($m, 'CLIENT', 'KILL', 'TYPE', 'normal');
    $t->wait_for(5, sub { FeedCluster::mapped(statuses($t), 2,
        scalar $c->masters) });
}

# reads of a user's first page until one hits (at most 10 s): the pages
# answered 200 that show $gone, and the last answer's cache status and ids
sub read_until_hit {
    my ($u, $gone) = @_;
    my ($shown, $last, @ids) = (0, '');
    $t->wait_for(10, sub {
        my $r = $t->get("/users/$u/timeline?limit=5");
        @ids = @{ tl_ids($r) };
        $last = "$r->{status} " . ($r->{headers}{'x-feed-cache'} // '-');
        $shown++ if $r->{status} == 200 && grep { $_ eq $gone } @ids;
        $last eq '200 HIT';
    });
    return ($shown, $last, @ids);
}

# whether a post is out of the copies of celeb's list under the masters'
# tags now (fanout took it out of every copy it writes), and fanout is done
# with its delete
sub taken_out {
    my ($id) = @_;
    my ($l) = layout();
    for my $m (keys %$l) {
        my $k = 'feed:pl{' . tag_of($l->{$m}) . '}:{celeb}';
        return 0 if grep { entry_id($_) eq $id }
            @{ $c->cmd($m, 'LRANGE', $k, 0, -1) };
    }
    my $score = $c->key_cmd('feed:deleting', 'ZSCORE', 'feed:deleting', $id);
    return defined $score && $score ne 'inf';
}

# the grace of a deleted post in feed:deleting over (twice
# feed_cache_lock_timeout after fanout took it out), and the set trimmed
# by a later delete: a copy made from it now does not hold the post
sub forgotten {
    my ($id) = @_;
    return $t->wait_for(10, sub {
        my $p = post($t, 'other', 'to trim feed:deleting') or return 0;
        $t->http('DELETE', "/users/other/posts/$p");
        !defined $c->key_cmd('feed:deleting', 'ZSCORE', 'feed:deleting',
                             $id);
    });
}

# ------------------------------------------------------------- the setup --

my ($last, $A, $X, $C) = layout();
my $SA = $last->{$A};
my $TA = tag_of($SA);

# a reader whose timeline is on A, and one whose timeline is in A's last
# slot (the tag itself as a user id), which moves with it
my @F = map { "f$_" } 1 .. 8;
my ($ra) = grep { $c->master_of("feed:tl:{$_}") eq $A } @F;
ok($ra, "a follower on $A, whose last slot $SA is tag $TA: $ra");
my $rt = $TA;
push @F, $rt;

none_failed([ follow_each($t, 'celeb', @F) ], scalar(@F) . ' follows of '
    . 'celeb');
my (undef, @bad) = read_each($t, @F);
none_failed(\@bad, 'every follower\'s timeline cached');

my @posts = (post($t, 'celeb', 'the turn'));
ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
    'celeb is a pull author');
push @posts, post($t, 'celeb', "pulled $_") for 1 .. 3;

# every reader's page has the pulled posts, merged from A's copies
my %want = map { $_ => 1 } @posts;
ok($t->wait_for(5, sub {
    !grep { my @ids = @{ tl_ids($t->get("/users/$_/timeline?limit=5")) };
        grep({ !$want{$_} } @ids) || @ids != 4 } $ra, $rt
}), 'both readers see the four posts');
ok(scalar @{ $c->cmd($A, 'KEYS', "feed:pl{$TA}:{celeb}") },
    "$A has its copy of celeb's list, feed:pl{$TA}:{celeb}");

# ------------------------------------------- back to the same master --

# A takes X's last slot: A's last slot is not SA any more, tag TA is no
# master's
my $SX = $last->{$X};
$c->move_slot($SX, $X, $A);
remap();

my $gone = $posts[1];
is($t->http('DELETE', "/users/celeb/posts/$gone")->{status}, 204,
    "same master: slot $SX moved $X -> $A, tag $TA no master's; a pulled "
    . 'post deleted');
ok($t->wait_for(5, sub { taken_out($gone) }), 'same master: fanout took it '
    . 'out of every copy under the masters\' tags');
ok(forgotten($gone), 'same master: out of feed:deleting after its grace');

# X's slot goes back: A's last slot is SA again, its copies tag TA's
$c->move_slot($SX, $A, $X);
remap();

my ($shown, $end, @ids) = read_until_hit($ra, $gone);
is($shown, 0, "same master: tag $TA back on $A, $ra\'s reads never show "
    . 'the deleted post');
is($end, '200 HIT', "same master: $ra hits again");
is(join(' ', @ids), join(' ', reverse grep { $_ ne $gone } @posts),
    "same master: $ra sees the other posts");

# ------------------------------------------------------ another master --

# SA moves to C, whose slots are higher: tag TA no master's; a pulled
# post deleted; then SA moves on to D, a new master without slots, whose
# last slot it becomes: tag TA names D's copies
ok($c->add_node('c4'), 'another master: a fourth master joins, no slots');

$c->move_slot($SA, $A, $C);
remap();

@posts = grep { $_ ne $gone } @posts;
$gone = $posts[1];
is($t->http('DELETE', "/users/celeb/posts/$gone")->{status}, 204,
    "another master: slot $SA moved $A -> $C, a pulled post deleted");
ok($t->wait_for(5, sub { taken_out($gone) }), 'another master: fanout '
    . 'took it out of every copy under the masters\' tags');
ok(forgotten($gone), 'another master: out of feed:deleting after its '
    . 'grace');

$c->move_slot($SA, $C, 'c4');
remap();
is($c->master_of("feed:tl:{$rt}"), 'c4', "another master: $rt\'s "
    . 'timeline on c4, whose last slot is ' . $SA);

($shown, $end, @ids) = read_until_hit($rt, $gone);
is($shown, 0, "another master: tag $TA names c4's copies, $rt\'s reads "
    . 'never show the deleted post');
is($end, '200 HIT', "another master: $rt hits again");
is(join(' ', @ids), join(' ', reverse grep { $_ ne $gone } @posts),
    "another master: $rt sees the other posts");

$t->done;
