#!/usr/bin/perl

# A request terminated while its MongoDB task runs: a GET whose chunked
# body turns out malformed while the task is in a thread (nginx discards
# the body meanwhile and terminates the request on the bad chunk).  The
# task's answer, bson_malloc()ed by the thread, is freed although nobody
# reads it (it leaked: make test-asan's leak check sees it), the worker
# goes on serving, and nothing is logged as an alert.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use FeedTest;
use FeedTest::Util qw(short post);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events {
    worker_connections 256;
    debug_connection 127.0.0.1;
}
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 3s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
    }
}
EOF

my $P = 'mt' . int(rand 1e6);

is($t->http('PUT', "/users/${P}a/following/${P}b")->{status}, 204,
    'a follow to list');
my $id = post($t, "${P}b", 'to read');
ok($id, 'a post to read');

my $DONE = qr/mongodb task of a terminated request done/;

for my $uri ("/users/${P}a/following", "/users/${P}b/posts",
    "/posts/$id")
{
    $t->mongo_latency(500);
    my $before = () = $t->error_log =~ /$DONE/g;

    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
        . $t->port('http'), Proto => 'tcp', Timeout => 5) or die "$!\n";
    $s->syswrite("GET $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Transfer-Encoding: chunked\r\n\r\n");

    # the task is in a thread now; then the body goes wrong
    sleep 0.15;
    $s->syswrite("zz\r\n");

    my $ok = $t->wait_for(5, sub {
        my $n = () = $t->error_log =~ /$DONE/g;
        $n > $before;
    });
    ok($ok, "$uri: the task of the terminated request came back");
    close $s;

    $t->mongo_latency(0);
    my $r = $t->get($uri);
    is($r->{status}, 200, "$uri: served afterwards") or diag(short($r));
}

$t->done;
