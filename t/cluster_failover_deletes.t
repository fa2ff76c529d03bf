#!/usr/bin/perl

# A master that comes back on older data, on a real Redis Cluster (three
# masters, no replica, so that the master comes back as itself):
#
#   - its data saved (the dump.rdb a replica's full sync or a DEBUG
#     RELOAD leaves, even without persistence), then posts deleted (204),
#     fanned out of every list; the master killed and started again at
#     once, on that file: its lists hold the deleted posts again, and its
#     copy of feed:deleting, marked whole, lacks them;
#   - no read of its users shows a deleted post: its copy, made for
#     another run of the node, is not trusted (NOCOPY: answered from the
#     fallback, the copy made for the new run), nor are its lists (made
#     again from MongoDB at the next read: MISS);
#   - then they hit again, still without the deleted posts, and the other
#     masters' users hit all along.
#
# This is what tools/chaos's master_kill did for want of a failover (the
# killed master back a second later on its old file): reads answered HIT
# with posts deleted minutes before.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses tl_ids follow_each read_each none_failed
    post);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my @F = map { "f$_" } 1 .. 12;
my ($node, $per) = $c->spread(@F);
my %node = %$node;

# the victim: a master of some readers, not the seed
my ($victim) = grep { $per->{$_} } sort keys %$per;
my ($seed) = grep { $_ ne $victim } $c->masters;
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
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;
    feed_cache_local 1m;

@{[ FeedCluster::server_conf() ]}
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

my @theirs = grep { $node{$_} eq $victim } @F;
my @others = grep { $node{$_} ne $victim } @F;
ok(@theirs && @others, scalar(@theirs) . " readers on $victim, "
    . scalar(@others) . ' on the others');

# each read: [status, cache status, ids]
sub read_all {
    my (@users) = @_;
    my ($res) = read_each($t, @users);
    return map { [ $_->{status}, $_->{headers}{'x-feed-cache'} // '',
        tl_ids($_) ] } @$res;
}

# the reads among @r that show one of the posts of %gone
sub showing {
    my ($gone, @r) = @_;
    return grep { my $r = $_; grep { $gone->{$_} } @{$r->[2]} } @r;
}

# ------------------------------------------------------------ the cache --

none_failed([ follow_each($t, 'author', @F) ], '12 follows of author');

my @p = map { post($t, 'author', "post $_") } 1 .. 6;
is(scalar(grep { defined } @p), 6, 'six posts');

my @r = read_all(@F);
is(scalar(grep { $_->[0] == 200 } @r), 12, 'first reads: 200');
ok($t->wait_for(5, sub {
    !grep { $_->[1] !~ /^(HIT|LOCAL)$/ || @{$_->[2]} != 6 } read_all(@F) }),
    'then every read a HIT with the six posts');

# ------------------------------------- saved, then posts deleted (204) --

# the file a node starts on: what it holds now
$c->cmd($victim, 'SAVE');
ok(-s $t->dir . "/$victim/dump.rdb", "$victim saved to its dump.rdb");

my %gone = map { $_ => 1 } @p[1, 3, 5];
for my $id (sort keys %gone) {
    is($t->http('DELETE', "/users/author/posts/$id")->{status}, 204,
        "post $id deleted");
}
ok($t->wait_for(5, sub {
    !grep { my $u = $_; grep { $c->in_list($u, $_) } keys %gone } @F }),
    'fanout takes them out of every list');

@r = read_all(@F);
is(scalar(grep { $_->[0] == 200 } @r) - showing(\%gone, @r), 12,
    'no read shows them');

# ------------------------------------- the master back on its old file --

$t->stop_proc($victim, 'KILL');
$c->start_node($victim);
ok($c->wait_ok(20), "$victim back, the cluster ok");
ok($c->in_list($theirs[0], $p[1]),
    "$victim\'s lists hold a deleted post again (its old file)");

my (%seen, @bad, $others_bad);
my $end = time + 4;
while (time < $end) {
    for my $r (read_all(@theirs)) {
        $seen{"$r->[0] $r->[1]"}++;
        push @bad, $r if showing(\%gone, $r);
    }
    for my $r (read_all(@others)) {
        $others_bad++ if $r->[1] !~ /^(HIT|LOCAL)$/ || showing(\%gone, $r);
    }
}
ok(!@bad, "$victim\'s users never shown a deleted post: "
    . join(', ', map { "$_ x$seen{$_}" } sort keys %seen))
    or diag(scalar(@bad) . ' reads showed one, first: '
        . "$bad[0][0] $bad[0][1] @{$bad[0][2]}");
ok(!$others_bad, 'the other masters\' users hit all along');

ok($t->wait_for(5, sub {
    !grep { $_->[1] !~ /^(HIT|LOCAL)$/ || @{$_->[2]} != 3
            || showing(\%gone, $_) }
        read_all(@theirs) }),
    "$victim\'s users hit again, the three posts left");
ok(!$c->in_list($theirs[0], $p[1]),
    'their lists made again, without the deleted post');

my ($run) = ($c->cmd($victim, 'INFO', 'server') =~ /run_id:(\w{16})/);
my ($copy) = @{ $c->cmd($victim, 'KEYS', 'feed:deleting{*}') };
ok($copy && defined $c->cmd($victim, 'ZSCORE', $copy, "~$run"),
    "$victim\'s copy marked whole for its new run");
like($t->error_log, qr/feed deleted posts: NOCOPY/,
    'the copy of another run logged as missing');

$t->done;
