#!/usr/bin/perl

# An entry whose fanout takes longer than feed_fanout_claim_idle is kept
# by the worker that reads it.  Other workers claim (XAUTOCLAIM) entries
# idle longer than feed_fanout_claim_idle, which is how the entries of a
# worker that died are finished; an entry being fanned out is idle in
# Redis's eyes however busy its worker is, so the worker renews its hold
# (XCLAIM ... JUSTID) while it works.  Otherwise a slow MongoDB makes
# every worker fan out the same post again, the load doubling when it is
# least welcome.
#
#   - MongoDB at 300 ms a command, pages of 10 followers, 60 followers:
#     the post's fanout takes about 3 s, feed_fanout_claim_idle is 1 s;
#   - no other worker claims the entry, it is acknowledged once, and
#     every follower with a cached timeline has the post once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(post statuses fsum follow_each read_each
    none_failed);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF');
worker_processes 3;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 5s;
    feed_fanout on;
    feed_fanout_block 100ms;
    feed_fanout_page 10;
    feed_fanout_claim_idle 1s;

    server {
        # reuseport: connections spread over the workers, so that /status
        # reaches each of them
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

$t->run;

my $RUN = $$ . int(time);
my $author = "la$RUN";
my @F = map { "lf$RUN-$_" } 1 .. 60;

none_failed([ follow_each($t, $author, @F) ], '60 follows');
my (undef, @bad) = read_each($t, @F);
none_failed(\@bad, '60 cached timelines');

my $c0 = fsum(statuses($t), 'claims');
$t->mongo_latency(300);
my $t0 = time;
my $id = post($t, $author, 'a slow fanout');
ok($id, 'the post');

sub copies {
    my $n = 0;
    for my $u (@F) {
        my $l = $t->redis('LRANGE', "feed:tl:{$u}", 0, -1) || [];
        $n++ if grep { entry_id($_) eq $id } @$l;
    }
    return $n;
}

my $done = $t->wait_for(30, sub {
    my $g = $t->redis('XINFO', 'GROUPS', 'feed:posts') || [];
    my %g = @{ $g->[0] || [] };
    ($g{pending} // 1) == 0 && copies() == @F;
});
my $took = time - $t0;
$t->mongo_latency(0);

ok($done, sprintf('the post in all 60 timelines, nothing pending '
    . '(%.1f s)', $took));
ok($took > 2, 'the fanout took longer than feed_fanout_claim_idle twice '
    . '(or this test shows nothing)');
is(fsum(statuses($t), 'claims') - $c0, 0,
    'no other worker claimed the entry');
is(fsum(statuses($t), 'acked'), 1, 'acknowledged once');

$t->done;
