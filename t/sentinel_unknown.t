#!/usr/bin/perl

# feed_redis sentinel=<a name no sentinel monitors>: each sentinel asked
# answers nil; the worker logs it, tries the next one, and keeps asking;
# /status says no primary is known and Redis is not up; reads answer
# from MongoDB (BYPASS), nothing crashes.  The error path of
# ngx_http_feed_redis_sentinel.c's "does not know the primary".

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(statuses);
use FeedSentinel;

plan(skip_all => 'redis-sentinel is not installed')
    unless -x '/usr/bin/redis-sentinel';

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $sn = FeedSentinel->start($t);
my $addrs = $sn->addrs;

$t->write_conf(<<"EOF2")->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 64; }
http {
    feed_redis sentinel=nosuchname $addrs;
    %%FEED_MONGO%%

@{[ FeedTest::Util::server_conf() ]}
}
EOF2

ok($t->wait_for(10, sub { $t->error_log
    =~ /redis sentinel 127\.0\.0\.1:\d+ does not know the primary "nosuchname": nil/ }),
    'the log: the sentinel does not know the name');
ok($t->wait_for(10, sub { my %p = map { $_ => 1 } $t->error_log
    =~ /redis sentinel (127\.0\.0\.1:\d+) does not know/g; keys %p >= 2 }),
    'the next sentinel is asked too');

my $st = (values %{ statuses($t) })[0];
is($st->{redis}{sentinel}{name}, 'nosuchname', 'status: the name');
ok(!defined $st->{redis}{sentinel}{primary}, 'status: no primary known');
isnt($st->{redis}{state}, 'up', 'status: redis not up');

my $r = $t->get('/users/nobody/timeline');
is($r->{status}, 200, 'a read: 200');
is($r->{headers}{'x-feed-cache'}, 'BYPASS', 'from MongoDB (BYPASS)');

$t->done;
