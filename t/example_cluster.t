#!/usr/bin/perl

# conf/cluster.conf, the example on a Redis Cluster and a MongoDB replica
# set, on a real 3-master Redis Cluster (t/lib/FeedCluster.pm):
#
#   - nginx -t accepts it as written (its seed nodes and its replica set's
#     URI: nginx -t connects to neither), and with this test's servers;
#   - every worker maps the three masters from the seeds;
#   - follows, a post and the followers' timelines read through it, the
#     followers' timelines on all three masters: MISS, then HIT with the
#     post; a post made then is fanned out to every master's followers,
#     once, in embed mode; a delete leaves every timeline;
#   - the read state of a follower on each master: a hidden post, the
#     read marker, unread counts and X-Feed-Unread, seen posts and
#     unseen=1.
#
# No replica set runs here: feed_mongo_uri is the MongoDB stand-in's (or
# FEED_TEST_MONGO_URI's) address instead of the file's.  Only the port of
# listen changes besides.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short statuses tl_ids follow_each read_each
    none_failed post read_state_is parallel);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3);

my %ports = (ports => { 8080 => 'http' });

my $written = $t->conf_file('cluster.conf', %ports, as_written => 1);
like($written, qr/^\s*feed_mongo_uri\s+"mongodb:\/\/[^"]*,[^"]*replicaSet=/m,
    'the file names a replica set');
$t->write_conf($written, 'as-written.conf');
my ($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts conf/cluster.conf as written') or diag($out);

$t->write_conf($t->conf_file('cluster.conf', %ports,
    redis => $c->seeds(3)));
($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts it on the test cluster') or diag($out);

$t->run;

my $workers = () = $t->worker_pids;
ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), $workers, 3) }),
    "all $workers workers map the three masters");

# followers whose timelines are on every master
my @F = map { "cf$_" } 1 .. 12;
my ($node, $per) = $c->spread(@F);
is(scalar keys %$per, 3, 'the followers\' timelines on all three masters: '
    . join(' ', map { "$_=$per->{$_}" } sort keys %$per));

sub reads {
    my ($res) = read_each($t, @F);
    return map { [ $_->{status}, $_->{headers}{'x-feed-cache'} // '',
        "@{ tl_ids($_) }" ] } @$res;
}

sub summary_of {
    my %n;
    $n{"$_->[0] $_->[1] [$_->[2]]"}++ for @_;
    return join ', ', map { "$n{$_} x $_" } sort keys %n;
}

none_failed([ follow_each($t, 'cauthor', @F) ], '12 follows of cauthor');
my $p1 = post($t, 'cauthor', 'before the caches') // 'none';

my @r = reads();
is(summary_of(@r), "12 x 200 MISS [$p1]", 'first reads: MISS, the post');
@r = reads();
is(summary_of(@r), "12 x 200 HIT [$p1]", 'then HIT, on every master');

my $p2 = post($t, 'cauthor', 'fanned out') // 'none';
ok($t->wait_for(10, sub { !grep { $c->in_list($_, $p2) != 1 } @F }),
    'a new post in every follower\'s cached timeline, once')
    or diag(join ' ', map { "$_=" . $c->in_list($_, $p2) } @F);
my $e0 = $c->cmd($c->master_of("feed:tl:{$F[0]}"), 'LINDEX', "feed:tl:{$F[0]}",
    0);
ok(entry_id($e0) eq $p2 && entry_json($e0) =~ /^\{/,
    'embed mode: the entry holds the post');
@r = reads();
is(summary_of(@r), "12 x 200 HIT [$p2 $p1]", 'read: HIT, both posts');

is($t->http('DELETE', "/users/cauthor/posts/$p2")->{status}, 204,
    'a delete');
@r = reads();
is(summary_of(@r), "12 x 200 HIT [$p1]", 'no timeline shows it');

# the read state of a follower on each master (its keys there); the
# writes' burst refilled first (10 a second)
sleep 2.1;
my @ids = ((reverse map { post($t, 'cauthor', "more $_") } 1, 2), $p1);
ok($t->wait_for(10, sub { !grep { $c->in_list($_, $ids[0]) != 1 } @F }),
    'two more posts fanned out');
for my $m (sort keys %$per) {
    my ($f) = grep { $node->{$_} eq $m } @F;
    read_state_is($t, $f, \@ids, "read state of $f, on $m");
}

# this host is not rate-limited (geo): a burst of writes past the
# burst of 20, none refused
my @burst = parallel($t, 30,
    map { ['PUT', "/users/burst$_/following/cauthor"] } 1 .. 60);
is(scalar(grep { $_->{status} == 429 } @burst), 0,
    'loopback: 60 follows at once, none answered 429')
    or diag(join ' ', map { $_->{status} } @burst);

$t->done;
