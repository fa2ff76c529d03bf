#!/usr/bin/perl

# Fanout when the thread pool's queue is full: with one thread, a queue of
# one, follower pages of one and cold reads hammering the pool, the task
# for an author's next page often cannot be posted while the batches of
# the page before are still in Redis.  The entry must then wait for those
# batches before it is let go (it freed itself under them: a use after
# free, a double free, the worker's in-flight count off by one), and be
# delivered in full, once, when it is claimed again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use FeedTest;
use FeedTest::Util qw(short copies copies_summary all_n wait_settled);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
thread_pool feedtp threads=1 max_queue=1;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 2s;
    # the fans' timelines are empty until the first post: cached as such
    # for 30 s by default, which a slow run (ASan at abb141d) outlived,
    # and a list gone gets no delivery ("no list")
    feed_cache_empty_ttl 10m;
    feed_fanout on;
    feed_fanout_page 1;
    feed_fanout_claim_idle 1s;
    feed_fanout_block 100ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 1m;
            feed_timeline_source;
        }
    }
}
EOF

my $P = 'qf' . int(rand 1e6);
my $AUTHOR = "${P}author";
my @FANS = map { "${P}fan$_" } 1 .. 12;

# one request at a time: the queue holds one task, more would be refused
sub until_ok {
    my ($method, $uri, $want, %o) = @_;
    my $r;
    for (1 .. 200) {
        $r = $t->http($method, $uri, %o);
        return $r if $r->{status} == $want;
        sleep 0.02;
    }
    return $r;
}

my @bad = grep { until_ok('PUT', "/users/$_/following/$AUTHOR", 204)
    ->{status} != 204 } @FANS;
ok(!@bad, 'twelve fans follow the author') or diag("failed: @bad");

# cached, not only answered: with the queue full, a read may answer from
# MongoDB without making the list (its members' task refused: BYPASS)
sub cached {
    my ($u) = @_;
    for (1 .. 50) {
        return 1 if until_ok('GET', "/users/$u/timeline", 200)->{status}
            == 200 && $t->redis('EXISTS', "feed:tl:{$u}");
        sleep 0.05;
    }
    return 0;
}

@bad = grep { !cached($_) } @FANS, $AUTHOR;
ok(!@bad, 'their timelines and the author\'s are cached') or diag("failed: @bad");

# cold reads, eight at a time, until told to stop: each a rebuild task

$t->mongo_latency(3);

my $stop = $t->dir . '/stop-load';
my $load = fork() // die "fork: $!\n";

if ($load == 0) {
    my $end = time + 40;
    my $n = 0;
    while (time < $end && !-e $stop) {
        my @h = map { $t->http_start('GET', "/users/${P}cold" . $n++
            . '/timeline', timeout => 5) } 1 .. 8;
        $t->http_end($_) for @h;
    }
    POSIX::_exit(0);
}

# posts until one's fanout failed past its first page, as the bug needs

my (@ids, $hit);
my $end = time + 30;

while (time < $end && !$hit) {
    my $r = until_ok('POST', "/users/$AUTHOR/posts", 201,
        body => '{"body": "under load"}',
        headers => { 'Content-Type' => 'application/json' });
    push @ids, $r->{json}{id} if $r->{status} == 201;
    sleep 0.3;
    $hit = grep { $1 >= 2 }
        $t->error_log =~ /failed at page (\d+) after \d+ deliveries/g;
}

open my $fh, '>', $stop;
close $fh;
waitpid($load, 0);
$t->mongo_latency(0);

ok(scalar @ids, scalar(@ids) . ' posts made under load');
ok($hit, 'a fanout failed on a later page with batches in flight');

wait_settled($t, 'after the load', 30);

for my $id (@ids) {
    my $c = copies($t, $id, @FANS, $AUTHOR);
    ok(all_n($c, 1), "post $id: once in every timeline")
        or diag(copies_summary($c));
}

$t->done;
