#!/usr/bin/perl

# conf/sentinel.conf, the example on Redis Sentinel and a MongoDB replica
# set, on a real primary, replica and three redis-sentinel processes
# (t/lib/FeedSentinel.pm):
#
#   - nginx -t accepts it as written (its sentinels and its replica set's
#     URI: nginx -t connects to neither), and with this test's sentinels;
#   - every worker asks the sentinels and is up on the primary;
#   - follows, a post and the followers' timelines read through it: MISS,
#     then HIT with the post; a post made then is fanned out into every
#     follower's cached timeline, once;
#   - a SENTINEL FAILOVER by hand: every worker moves to the new primary,
#     and a post made there reaches every follower's timeline (fanned
#     out on the new primary, read as a HIT).
#
# No replica set runs here: feed_mongo_uri is the MongoDB stand-in's (or
# FEED_TEST_MONGO_URI's) address instead of the file's.  feed_redis gets
# this test's master name and sentinels, and only the port of listen
# changes besides.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(statuses tl_ids follow_each read_each none_failed
    post);
use FeedSentinel;

plan(skip_all => 'redis-sentinel is not installed')
    unless -x '/usr/bin/redis-sentinel';

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $sn = FeedSentinel->start($t);

my %ports = (ports => { 8080 => 'http' });

my $written = $t->conf_file('sentinel.conf', %ports, as_written => 1);
like($written, qr/^\s*feed_redis\s+sentinel=\S+(?:\s+[\d.]+:\d+){3};/m,
    'the file names a master and three sentinels');
like($written, qr/^\s*feed_mongo_uri\s+"mongodb:\/\/[^"]*,[^"]*replicaSet=/m,
    'the file names a replica set');
like($written, qr/^\s*feed_cache_mode\s+link;/m, 'link mode stays');
$t->write_conf($written, 'as-written.conf');
my ($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts conf/sentinel.conf as written') or diag($out);

$t->write_conf($t->conf_file('sentinel.conf', %ports,
    redis => 'sentinel=' . $sn->name . ' ' . $sn->addrs));
($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts it with the test\'s sentinels') or diag($out);

$t->run;

my $workers = () = $t->worker_pids;

# every worker up, on the primary $addr
sub all_on {
    my ($addr) = @_;
    my $st = statuses($t);
    return keys %$st == $workers && !grep {
        ($_->{redis}{state} // '') ne 'up'
            || ($_->{redis}{sentinel}{primary} // '') ne $addr
    } values %$st;
}

my $P = '127.0.0.1:' . $t->port('redis');
my $N = '127.0.0.1:' . $t->port('redis2');

ok($t->wait_for(10, sub { all_on($P) }),
    "all $workers workers up on the primary the sentinels tell, $P");

my @F = map { "sf$_" } 1 .. 6;

sub reads {
    my ($res) = read_each($t, @F);
    my %n;
    $n{ "$_->{status} " . ($_->{headers}{'x-feed-cache'} // '')
        . ' [' . "@{ tl_ids($_) }" . ']' }++ for @$res;
    return join ', ', map { "$n{$_} x $_" } sort keys %n;
}

# how many times the cached timeline of $user on the Redis of $port holds
# the post $id
sub in_list {
    my ($port, $user, $id) = @_;
    my $l = eval { $t->redis_cmd_port($port, undef, 'LRANGE',
        "feed:tl:{$user}", 0, -1) } || [];
    return scalar grep { entry_id($_) eq $id } @$l;
}

sub fanned_out {
    my ($port, $id) = @_;
    return $t->wait_for(10, sub { !grep { in_list($port, $_, $id) != 1 } @F });
}

none_failed([ follow_each($t, 'sauthor', @F) ], '6 follows of sauthor');
my $p1 = post($t, 'sauthor', 'before the caches') // 'none';

is(reads(), "6 x 200 MISS [$p1]", 'first reads: MISS, the post');
is(reads(), "6 x 200 HIT [$p1]", 'then HIT');

my $p2 = post($t, 'sauthor', 'fanned out') // 'none';
ok(fanned_out($t->port('redis'), $p2),
    'a new post in every follower\'s cached timeline, once');
like(reads(), qr/^6 x 200 (?:HIT|LOCAL) \[\Q$p2 $p1\E\]$/,
    'read: a hit, both posts');

# ---------------------------------------------- a failover by hand --

is($sn->failover('s1'), $t->port('redis2'),
    'SENTINEL FAILOVER: redis2 is the primary');
ok($t->wait_for(10, sub { all_on($N) }),
    "all $workers workers moved to it, $N");

# a write the switch cuts is answered 503: the post is tried again until
# one is answered 201
my $p3;
ok($t->wait_for(10, sub { $p3 = post($t, 'sauthor', 'after the failover',
    quiet => 1) }), 'a post on the new primary: 201');
$p3 //= 'none';
ok(fanned_out($t->port('redis2'), $p3),
    'in every follower\'s cached timeline there, once');
like(reads(), qr/^6 x 200 (?:HIT|LOCAL) \[\Q$p3 $p2 $p1\E\]$/,
    'read: a hit, the three posts');

$t->done;
