#!/usr/bin/perl

# What fanout queued for a rebuild does not outlive a change of follows.
# Posts delivered while a user's timeline is being rebuilt wait in the
# rebuild's queue (feed:tlq:{user}), merged by its warm.  An unfollow in
# the meantime drops that queue with the timeline: its posts were
# delivered for the follows of before, and the next rebuild would merge
# them, showing the unfollowed author's post to the reader (seen by
# make chaos as stale-unfollowed, after Redis faults had delayed fanout).
# An unfollow moves the follows version even when its reason is in the
# filter set already (a follow since left it there).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(post tl_ids);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF');
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_cache_lock_timeout 20s;
    feed_fanout on;
    feed_fanout_block 200ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
        }
    }
}
EOF

$t->run;

my $RUN = $$ . int(time);
my ($r, $a, $b) = ("qr$RUN", "qa$RUN", "qb$RUN");

is($t->http('PUT', "/users/$r/following/$_")->{status}, 204, "follows $_")
    for $a, $b;

my ($kept) = post($t, $b, 'from the one still followed');

# a rebuild of the reader under way elsewhere: its lock is held, so the
# fanout of a's post queues it for that rebuild
$t->redis('SET', "feed:lock:{$r}", 'elsewhere', 'PX', 20000);

my ($gone) = post($t, $a, 'from the one about to be unfollowed');

ok($t->wait_for(10, sub { $t->redis('LLEN', "feed:tlq:{$r}") >= 1 }),
    'the post is queued for the rebuild');

is($t->http('DELETE', "/users/$r/following/$a")->{status}, 204,
    'unfollow: 204');
is($t->redis('EXISTS', "feed:tlq:{$r}"), 0,
    'the unfollow dropped the queue');

# the other rebuild gave up; the reader's next read rebuilds
$t->redis('DEL', "feed:lock:{$r}");

my $first = $t->get("/users/$r/timeline");
note("first read: " . ($first->{headers}{"x-feed-cache"} // "?") . " list: " . join(" ", map { entry_id($_) } @{ $t->redis("LRANGE", "feed:tl:{$r}", 0, -1) || [] }));
my $ids = tl_ids($first);
ok((grep { $_ eq $kept } @$ids), 'the followed author\'s post is there');
ok(!(grep { $_ eq $gone } @$ids), 'the unfollowed author\'s post is not')
    or diag("ids: @$ids");

$ids = tl_ids($t->get("/users/$r/timeline"));
ok(!(grep { $_ eq $gone } @$ids), 'nor in the cache the read warmed');

# An unfollow hides the author in place (the filter set's reason 'u'); a
# follow drops the list but leaves that hash as it was.  Unfollowed again,
# the reason is there already: the follows version must move all the
# same, or a rebuild begun after the follow (with the author followed)
# would be cached.
my $tlf = "feed:tlf:{$r}";
is($t->http('PUT', "/users/$r/following/$a")->{status}, 204, 'follow');
ok(scalar @{ tl_ids($t->get("/users/$r/timeline")) }, 'rebuilt');
is($t->http('DELETE', "/users/$r/following/$a")->{status}, 204,
    'unfollow');
is($t->redis('HGET', $tlf, $a), 16, 'the unfollow: reason u in place');
is($t->http('PUT', "/users/$r/following/$a")->{status}, 204,
    'followed again: 204');
is($t->redis('EXISTS', "feed:tl:{$r}"), 0, 'the follow dropped the list');
is($t->redis('HGET', $tlf, $a), 16, 'not the filter set');
my $v = $t->redis('GET', "feed:tlv:{$r}");
is($t->http('DELETE', "/users/$r/following/$a")->{status}, 204,
    'unfollowed again: 204');
ok($t->redis('GET', "feed:tlv:{$r}") > $v,
    'the follows version moved, the reason set already');

$t->done;
