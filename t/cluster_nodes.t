#!/usr/bin/perl

# Two nginx nodes (two workers each) in front of one Redis Cluster and one
# MongoDB: stateless nodes, the state in the stores.
#
#   - both nodes' workers are consumers of the one fanout group: four;
#   - follows made on one node, timelines read on the other (MISS, then
#     HIT from the cache the first one did not make);
#   - posts made on both nodes alternately reach every follower's list
#     once, whichever node's worker delivered them;
#   - a delete made on one node is never shown by a read on the other;
#   - neither node logs an [alert] (FeedTest::finish for the first).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short statuses follow_each read_each none_failed
    post $STREAM $GROUP);
use FeedCluster;

my $t = FeedTest->new;
my $u = FeedTest->new;

# the second node's port, none of the first's
$u->port('http') == $_ and die "port taken twice\n" for values %{$t->{ports}};

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);
my $seeds = join ' ', map { '127.0.0.1:' . $c->port($_) } $c->masters;
my $mongo = $t->mongo_uri;

my $CONF = <<"EOF";
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    feed_mongo_uri "$mongo";
    feed_mongo_timeout 2s;
    feed_thread_pool feedtp;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;
    feed_fanout_deliver_batch 7;
    feed_cache_local 1m;

@{[ FeedCluster::server_conf() ]}
}
EOF

$_->write_conf($CONF)->run for $t, $u;

for my $n ([ 'first', $t ], [ 'second', $u ]) {
    ok($n->[1]->wait_for(10, sub {
        my $st = statuses($n->[1]);
        keys %$st == 2 && !grep { ($_->{redis}{cluster}{masters_up} // 0)
            != 3 } values %$st;
    }), "the $n->[0] node's workers map the cluster");
}

# ------------------------------------------------------------ timelines --

my @F = map { "f$_" } 1 .. 24;
none_failed([ follow_each($t, 'author', @F) ], 'first node: 24 follows');

my $p0 = post($t, 'author', 'before the caches');

my ($res, @bad) = read_each($u, @F);
none_failed(\@bad, 'second node: 24 timelines read');
is(scalar(grep { ($_->{headers}{'x-feed-cache'} // '') eq 'MISS'
    && ($_->{json}{items}[0]{id} // '') eq $p0 } @$res), 24,
    'second node: each a MISS with the post');

($res) = read_each($t, @F);
is(scalar(grep { ($_->{headers}{'x-feed-cache'} // '') eq 'HIT' } @$res),
    24, 'first node: each a HIT of the cache the second made');

# ---------------------------------------------------------------- posts --

sub in_list { $c->in_list(@_) }

my @posts = map { post($_ % 2 ? $u : $t, 'author', "post $_") } 1 .. 10;
is(scalar(grep { defined } @posts), 10, 'posts made on both nodes');

ok($t->wait_for(10, sub {
    for my $f (@F) { for my $p (@posts) { return 0 unless in_list($f, $p) } }
    1;
}), 'every post in every follower\'s list');
is(scalar(grep { my $f = $_; grep { in_list($f, $_) != 1 } @posts } @F), 0,
    'each once');

ok($t->wait_for(10, sub {
    my $r = eval { $c->key_cmd($STREAM, 'XINFO', 'CONSUMERS', $STREAM,
        $GROUP) } or return 0;
    @$r == 4;
}), 'four consumers in the fanout group, two a node')
    or diag(explain(eval { $c->key_cmd($STREAM, 'XINFO', 'CONSUMERS',
        $STREAM, $GROUP) } // $@));

my %by;
for my $n ([ 'first', $t ], [ 'second', $u ]) {
    my $st = statuses($n->[1]);
    $by{$n->[0]} += $_->{fanout}{consumed} // 0 for values %$st;
}
diag("entries consumed: first node $by{first}, second $by{second}");

($res) = read_each($u, @F);
is(scalar(grep { ($_->{headers}{'x-feed-cache'} // '') eq 'HIT'
    && ($_->{json}{items}[0]{id} // '') eq $posts[-1] } @$res), 24,
    'second node: each a HIT with the last post first');

# --------------------------------------------------------------- delete --

is($t->http('DELETE', "/users/author/posts/$posts[-1]")->{status}, 204,
    'first node: the last post deleted');
($res) = read_each($u, @F);
is(scalar(grep { $_->{status} == 200 && !grep { $_->{id} eq $posts[-1] }
    @{ $_->{json}{items} // [] } } @$res), 24,
    'second node: no read shows it');

$u->finish;
$t->done;
