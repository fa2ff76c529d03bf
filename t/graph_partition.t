#!/usr/bin/perl

# Redis cut off while it keeps running (a network partition, no restart):
# a follow made meanwhile cannot drop the cached counts, so the worker
# remembers them and drops them as soon as Redis is reachable again.  The
# counts cached before the cut would otherwise still be trusted: same
# redis-server, same run_id.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep);
use FeedTest;

my $t = FeedTest->new;

$t->start_backends;
$t->start_proxy('redisproxy', $t->port('redis'));

$t->write_conf(<<'EOF')->run;
worker_processes 1;
events { worker_connections 128; }
http {
    feed_redis 127.0.0.1:%%PORT_REDISPROXY%%;
    feed_redis_timeout 500ms;
    feed_mongo_uri "%%MONGO_URI%%";
    feed_mongo_timeout 800ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/followers$ { feed_followers $1; }
        location = /status { feed_status; }
    }
}
EOF

sub redis_up {
    my $j = $t->get('/status')->{json} or return 0;
    return $j->{redis}{up};
}

sub followers_count {
    my $r = $t->get('/users/pbob/followers');
    return $r->{status} == 200 ? $r->{json}{count} : "status $r->{status}";
}

sub cached {
    return $t->redis('HGET', 'feed:cnt:pbob', 'followers') // 'none';
}

ok($t->wait_for(5, \&redis_up), 'redis up through the proxy');

is($t->http('PUT', '/users/pann/following/pbob')->{status}, 204,
    'pann follows pbob');
is(followers_count(), 1, 'count read from MongoDB');
ok($t->wait_for(3, sub { cached() eq '1' }), 'and cached in Redis');
is(followers_count(), 1, 'then served from the cache');

# cut Redis off: it keeps running with the cached count

$t->stop_proc('redisproxy', 'TERM');
ok($t->wait_for(5, sub { !redis_up() }), 'redis unreachable');

my $r = $t->http('PUT', '/users/pcat/following/pbob');
is($r->{status}, 503, 'pcat follows pbob while redis is unreachable: 503');
is($r->{headers}{'retry-after'}, '1', 'with Retry-After');
is(followers_count(), 2, 'the follow is stored: count served from MongoDB');
is(cached(), '1', 'the count cached in Redis is now stale');

# reachable again: the sweeper applies the invalidation left over

$t->start_proxy('redisproxy', $t->port('redis'));
ok($t->wait_for(8, \&redis_up), 'redis reachable again');

ok($t->wait_for(2, sub { cached() ne '1' }),
    'the stale count is gone from Redis within 2 s');
is(followers_count(), 2, 'no stale count after the partition');
like(cached(), qr/^(none|2)$/, 'nor in Redis');
is($t->http('PUT', '/users/pcat/following/pbob')->{status}, 204,
    'the follow retried: 204');

$t->stop_proc('redisproxy', 'TERM');
$t->done;
