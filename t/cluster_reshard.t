#!/usr/bin/perl

# Resharding under load: redis-cli --cluster reshard moves every slot of
# one master to another (keys and all) while timelines are read and posts
# fanned out on a 3-master cluster.  No request fails (200 each: a read
# may be answered from the fallback while its slot moves), no delivery is
# lost or made twice (each post once in every follower's list), and once
# the slots have moved every read hits again, on the new master.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use FeedTest;
use FeedTest::Util qw(short statuses follow_each read_each none_failed
    post_start post_end);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my $stream = $c->master_of('feed:posts');
my $seeds = '127.0.0.1:' . $c->port($stream) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 512; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 1s;
    feed_fanout_deliver_batch 5;
    feed_cache_local 1m;

@{[ FeedCluster::server_conf() ]}
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

# the master that gives its slots away: not the stream's
my ($from) = grep { $_ ne $stream } $c->masters;
my ($to) = grep { $_ ne $stream && $_ ne $from } $c->masters;

my @F = map { "f$_" } 1 .. 40;
my @moving = grep { $c->master_of("feed:tl:{$_}") eq $from } @F;
ok(@moving >= 5, scalar(@moving) . " of the 40 followers' timelines on "
    . "$from, which gives its slots to $to");

none_failed([ follow_each($t, 'author', @F) ], '40 follows of author');
my (undef, @bad) = read_each($t, @F);
none_failed(\@bad, 'every follower\'s timeline cached');

sub in_list { $c->in_list(@_) }

# ------------------------------------------------------- under load --

my $log = $t->dir . '/reshard.log';
my $from_id = $c->node_id($from);
my $to_id = $c->node_id($to);

my $pid = fork() // die "fork: $!";
if ($pid == 0) {
    open STDOUT, '>', $log;
    open STDERR, '>&', \*STDOUT;
    { exec('redis-cli', '--cluster', 'reshard',
        '127.0.0.1:' . $c->port($stream), '--cluster-from', $from_id,
        '--cluster-to', $to_id, '--cluster-slots', 16384,
        '--cluster-yes', '--cluster-pipeline', 20) };
    POSIX::_exit(127);
}

my $t0 = time;
my (%status, %cache, @posts, $rounds);
while (!waitpid($pid, POSIX::WNOHANG())) {
    $rounds++;
    my ($res) = read_each($t, @moving, @F[0 .. 9]);
    for my $r (@$res) {
        $status{$r->{status}}++;
        $cache{$r->{headers}{'x-feed-cache'} // '-'}++;
    }
    if (@posts < 20) {
        my $id = post_end($t, post_start($t, 'author', 'during the '
            . 'reshard ' . scalar @posts), 'post during the reshard');
        push @posts, $id if $id;
    }
    last if time - $t0 > 120;
}
my $reshard_rc = $? >> 8;
my $took = time - $t0;

is($reshard_rc, 0, sprintf('reshard: redis-cli moved every slot of %s in '
    . '%.1f s', $from, $took)) or diag(`tail -5 $log`);
is($c->master_of("feed:tl:{$moving[0]}"), $to, "reshard: $moving[0]\'s "
    . "timeline on $to now");
is(join(' ', map { "$_ x$status{$_}" } sort keys %status),
    "200 x$status{200}", "reshard: $rounds rounds of reads, every one 200 "
    . '(' . join(', ', map { "$_ $cache{$_}" } sort keys %cache) . ')');

# a map that went stale is asked again as soon as a script meets a key
# that moved, and a master's deleted posts' copy stays where it is while
# redis-cli takes its slots from the lowest up: most reads hit all along
my $reads = 0;
$reads += $_ for values %cache;
ok(($cache{BYPASS} // 0) < $reads / 10, sprintf('reshard: %d of %d reads '
    . 'answered from the fallback (under 10%%)', $cache{BYPASS} // 0,
    $reads));

# the last posts made once the reshard is done
while (@posts < 20) {
    my $id = post_end($t, post_start($t, 'author', 'after the reshard '
        . scalar @posts), 'post after the reshard');
    push @posts, $id if $id;
}
is(scalar @posts, 20, 'reshard: 20 posts made');

ok($t->wait_for(20, sub {
    for my $u (@F) { for my $p (@posts) { return 0 unless in_list($u, $p) } }
    return 1;
}), 'reshard: every post in every follower\'s list');
my @twice = grep { my $u = $_; grep { in_list($u, $_) != 1 } @posts } @F;
is(scalar @twice, 0, 'reshard: each once') or diag("@twice[0 .. 2]");

my ($res) = read_each($t, @F);
# a hit from Redis, or from the worker's copy it vouches for
is(scalar(grep { ($_->{headers}{'x-feed-cache'} // '') =~ /^(HIT|LOCAL)$/ }
          @$res),
    40, 'reshard: every read hits again');

$t->done;
