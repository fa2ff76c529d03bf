#!/usr/bin/perl

# The rebuild lock (feed:lock:{uid}) is released only by the rebuild that
# holds it.  A rebuild that outlives feed_cache_lock_timeout may find the
# lock taken by another rebuild (another worker or node) meanwhile; here
# the test takes it over in Redis while a rebuild waits on a slow MongoDB:
#
#   - the rebuild that succeeds warms the cache and leaves the other
#     rebuild's lock alone;
#   - the rebuild that fails (MongoDB slower than feed_mongo_timeout)
#     answers 503 and does not mark the other rebuild's lock "failed";
#   - undisturbed, a rebuild releases its own lock, and a failed one
#     leaves "failed" for a moment;
#   - a post fanned out while a follower's timeline is being rebuilt (its
#     lock held, no list yet) is queued for that rebuild (feed:tlq:{uid},
#     for at most feed_cache_lock_timeout), not written into a list of its
#     own; the rebuild's warm takes the queue in and deletes it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short);

my $t = FeedTest->new;

plan(skip_all => 'slows the MongoDB stand-in down') if $t->real_mongo;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF');
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_mongo_timeout 1s;
    feed_cache_lock_timeout 5s;
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

sub lock_of { $t->redis('GET', "feed:lock:{$_[0]}") }

# a cold read of $uid while MongoDB answers in $ms; $during runs once the
# rebuild holds the lock; the response and the lock afterwards
sub rebuild {
    my ($uid, $ms, $during) = @_;
    $t->mongo_latency($ms);
    my $h = $t->http_start('GET', "/users/$uid/timeline", timeout => 10);
    my $held = $t->wait_for(3, sub { defined lock_of($uid) });
    $during->() if $during && $held;
    my $r = $t->http_end($h);
    $t->mongo_latency(0);
    return ($r, $held);
}

is($t->http('PUT', "/users/lu$RUN$_/following/la$RUN")->{status}, 204,
    "follow $_") for 1 .. 4;

# ------------------------------------------------------- undisturbed --

my ($r, $held) = rebuild("lu${RUN}1", 300);
ok($held, 'a rebuild holds the lock');
is($r->{status}, 200, 'it answers 200') or diag(short($r));
is(lock_of("lu${RUN}1"), undef, 'and releases its lock');

($r, $held) = rebuild("lu${RUN}2", 3000);
is($r->{status}, 503, 'a rebuild slower than feed_mongo_timeout: 503')
    or diag(short($r));
is(lock_of("lu${RUN}2"), 'failed', 'its lock says "failed" for a moment');

# ------------------------------------------------- the lock taken over --

($r, $held) = rebuild("lu${RUN}3", 600, sub {
    $t->redis('SET', "feed:lock:{lu${RUN}3}", 'another', 'PX', 10000);
});
ok($held, 'a rebuild holds the lock; another one takes it over');
is($r->{status}, 200, 'the first answers 200') or diag(short($r));
ok($t->redis('EXISTS', "feed:tl:{lu${RUN}3}"), 'and warms the cache');
is(lock_of("lu${RUN}3"), 'another', 'the other rebuild\'s lock stays');

($r, $held) = rebuild("lu${RUN}4", 3000, sub {
    $t->redis('SET', "feed:lock:{lu${RUN}4}", 'another', 'PX', 10000);
});
ok($held, 'a failing rebuild holds the lock; another one takes it over');
is($r->{status}, 503, 'the first fails: 503') or diag(short($r));
is(lock_of("lu${RUN}4"), 'another',
    'the other rebuild\'s lock is not marked "failed"');

# ------------------------------------------- fanout during a rebuild --

my ($qu, $qa) = ("qu$RUN", "qa$RUN");
is($t->http('PUT', "/users/$qu/following/$qa")->{status}, 204, 'follow');
$t->redis('SET', "feed:lock:{$qu}", 'elsewhere', 'PX', 10000);

$r = $t->http('POST', "/users/$qa/posts", body => '{"body": "queued"}',
    headers => { 'Content-Type' => 'application/json' });
is($r->{status}, 201, 'a post while the follower is being rebuilt')
    or diag(short($r));
my $id = ref $r->{json} eq 'HASH' ? $r->{json}{id} // '' : '';

ok($t->wait_for(5, sub {
    grep { entry_id($_) eq $id }
        @{ $t->redis('LRANGE', "feed:tlq:{$qu}", 0, -1) || [] }
}), 'fanout queued it for the rebuild');
my $pttl = $t->redis('PTTL', "feed:tlq:{$qu}");
ok($pttl > 0 && $pttl <= 5000, "the queue expires ($pttl ms)");
is($t->redis('EXISTS', "feed:tl:{$qu}"), 0, 'no list made by fanout');

$t->redis('DEL', "feed:lock:{$qu}");
$r = $t->get("/users/$qu/timeline");
is($r->{status}, 200, 'the rebuild answers') or diag(short($r));
is(ref $r->{json} eq 'HASH' ? $r->{json}{items}[0]{id} : undef, $id,
    'with the post');
is($t->redis('EXISTS', "feed:tlq:{$qu}"), 0, 'the warm took the queue in');

$t->done;
