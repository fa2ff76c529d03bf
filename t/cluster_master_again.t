#!/usr/bin/perl

# A node that becomes a master while the worker's connection to it stays
# up: the fanout reads again.  The queue's master M is killed while the
# fanout's read blocks there (the read is lost with the connection); its
# replica R, which is the seed of feed_redis (so the worker keeps its
# connection while it is a replica), is promoted.  No connection comes
# back to say a master is back, yet the fanout must ask for its group
# again and read: a post made after the promotion reaches the follower's
# cached timeline, and /status says the fanout reads.  (Found by
# make chaos on a cluster: after many failovers the nodes' roles had
# turned, and every worker's fanout stayed idle.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses tl_ids post);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 1);

my $M = $c->master_of('feed:posts');
my $mport = $c->port($M);
my ($R) = grep {
    (eval { $c->cmd($_, 'INFO', 'replication') } // '')
        =~ /role:slave.*master_port:$mport\b/s
} $c->names;
ok($R, "the queue's master $M has a replica, " . ($R // 'none'));

my $seed = '127.0.0.1:' . $c->port($R) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seed;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;

@{[ FeedCluster::server_conf() ]}
}
EOF

sub reading {
    my $st = statuses($t);
    return keys %$st == 1
        && !grep { !$_->{fanout}{reading} } values %$st;
}

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 1, 3) }),
    'the worker maps the cluster');
ok($t->wait_for(10, \&reading), 'the fanout reads');

is($t->http('PUT', '/users/f/following/author')->{status}, 204, 'a follow');
is($t->get('/users/f/timeline')->{status}, 200, 'the timeline cached');

my $p1 = post($t, 'author', 'before');
ok($t->wait_for(10, sub { $c->in_list('f', $p1) }),
    'a post before: delivered');

# the read blocks on M: killed, its replica (the seed) promoted
sleep 0.3;
$t->stop_proc($M, 'KILL');
my $killed = time;
ok($t->wait_for(20, sub { ($c->master_of('feed:posts') // '') eq $R }),
    "$R promoted");
ok($c->wait_ok(20), 'the cluster is ok again');
diag(sprintf 'promoted %.1f s after the kill', time - $killed);

my $p2;
ok($t->wait_for(10, sub {
    my $r = $t->http('POST', '/users/author/posts',
        body => '{"body": "after"}',
        headers => { 'Content-Type' => 'application/json' });
    $p2 = $r->{json}{id} if $r->{status} == 201;
    return $p2;
}), 'a post after the promotion');
ok($t->wait_for(10, sub { $c->in_list('f', $p2) }),
    'a post after the promotion: delivered to the cached timeline');
ok($t->wait_for(5, \&reading), 'the fanout reads again')
    or diag(join ' ', map { $_->{fanout}{last_error} // '' }
        values %{ statuses($t) });
my $r = $t->get('/users/f/timeline?limit=2');
is(join(' ', @{ tl_ids($r) }), "$p2 $p1", 'the timeline: both posts');

$t->done;
