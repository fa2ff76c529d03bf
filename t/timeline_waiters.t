#!/usr/bin/perl

# Readers waiting for a rebuild in their worker when Redis goes away under
# it: once the leader is done, each waiter reads on its own, finds no
# Redis and answers from the fallback (BYPASS).  They were woken inside the
# leader's event, so their fallback subrequests were posted on their own
# connections and never run: they hung until the client went away.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 500ms;
    feed_mongo_timeout 3s;
    # 800 ms a query: not a page cut short at the deadline (2 s)
    feed_timeline_rebuild_deadline 0;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 1m;
            feed_timeline_source;
        }
    }
}
EOF

my $P = 'tw' . int(rand 1e6);

is($t->http('PUT', "/users/${P}reader/following/${P}author")->{status}, 204,
    'the reader follows the author');
my $id = post($t, "${P}author", 'waited for');
ok($id, 'the author posts');

# the leader's rebuild takes 800 ms; three more readers wait for it

$t->mongo_latency(800);

my $leader = $t->http_start('GET', "/users/${P}reader/timeline",
    timeout => 15);
sleep 0.2;
my @waiters = map { $t->http_start('GET', "/users/${P}reader/timeline",
    timeout => 15) } 1 .. 3;
sleep 0.2;

$t->stop_redis;

my $t0 = time;
my @res = map { $t->http_end($_) } $leader, @waiters;
my $took = time - $t0;

for my $i (0 .. $#res) {
    my $r = $res[$i];
    my $who = $i ? "waiter $i" : 'leader';
    is($r->{status}, 200, "$who: 200 with Redis gone") or diag(short($r));
    is_deeply([ map { $_->{id} } @{$r->{json}{items} || []} ], [ $id ],
        "$who: the author's post");
}

is($res[$_]{headers}{'x-feed-cache'}, 'BYPASS', "waiter $_: BYPASS")
    for 1 .. 3;
# the leader: the reader's filters (2 queries) and the fallback (2), then
# the waiters' fallbacks (2, side by side): 6 round trips of 800 ms; a
# waiter that hangs waits for the client's 15 s
ok($took < 7, sprintf('every reader answered within the timeouts (%.1fs)',
    $took));

$t->mongo_latency(0);

$t->done;
