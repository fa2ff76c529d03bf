#!/usr/bin/perl

# The fanout's client on a Redis Cluster is ready again each time one of
# its masters comes back (its connection made again), while its blocked
# read of the stream, on the stream's master, is still in flight: it must
# not send a second read, which would wait behind the first and hold up
# what follows it past its timeout (block 3 s + timeout 1 s).  Claims are far apart here, so that what the
# client does when ready is a read.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses post);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my $stream = $c->master_of('feed:posts');
my $seeds = '127.0.0.1:' . $c->port($stream) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 1;
thread_pool feedtp threads=2;
events { worker_connections 128; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_fanout on;
    feed_fanout_block 3s;
    feed_fanout_claim_idle 120s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location = /status { feed_status; }
    }
}
EOF

ok($t->wait_for(10, sub {
    my ($j) = values %{ statuses($t) };
    $j && ($j->{redis}{cluster}{masters_up} // 0) == 3
        && $j->{fanout}{reading};
}), 'the worker maps the cluster and reads the stream');

# the group exists, the first claim is done: from here on, reads only
ok(post($t, 'author', 'makes the group'), 'a post');
sleep 1;

my ($other) = grep { $_ ne $stream } $c->masters;
for my $round (1 .. 2) {
    ok($c->cmd($other, 'CLIENT', 'KILL', 'TYPE', 'normal') > 0,
        "round $round: the worker's connections to $other killed");
    sleep 4.5;
}

sleep 4;
# a second read would hold up whatever follows it on the connection too
# (an XACK, the next read) past its timeout
my @out = grep { /timed out/ } split /\n/, $t->error_log;
is(scalar @out, 0, 'no read of the stream sent twice (no command timed '
    . 'out)') or diag($out[0]);

$t->done;
