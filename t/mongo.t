#!/usr/bin/perl

# MongoDB plumbing as seen through feed_status: reachable through the
# thread pool; stopped, hung or slow, reported down within its timeout
# while other locations keep answering at once; back without a reload; a
# reload with tasks in flight finishes cleanly.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(status_all);

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();

$t->write_conf(<<'EOF')->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 128; }
http {
    %%FEED_MONGO%%
    feed_mongo_timeout 800ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; }
        location = /plain { return 200 "plain\n"; }
    }
}
EOF

sub status {
    my $r = $t->get('/status', timeout => 5);
    return $r->{json} || {};
}

# every worker agrees: asks a few times (requests spread over workers)
sub all_say {
    my ($up) = @_;
    return status_all($t, 'mongo', up => $up, tries => 4);
}

my $s = status();
ok($s->{mongo}{configured}, 'mongo configured');
ok($t->wait_for(5, sub { all_say(1) }), 'mongo up through the thread pool');
is(status()->{mongo}{database}, 'feed', 'default database');
ok(status()->{mongo}{tasks} >= 1, 'tasks counted');
ok(!defined status()->{mongo}{redis}, 'no redis section inside mongo');
ok(!status()->{redis}{configured}, 'redis not configured here');

if (FeedTest::real_mongo()) {
    $t->done;
    exit;
}

my @pings = grep { $_->{cmd} eq 'ping' } $t->mongo_commands;
ok(@pings >= 1, 'the stand-in saw the ping');

# while a status request waits on a dead MongoDB, the event loop is free

sub check_down_without_stall {
    my ($what) = @_;

    my @pending = map { $t->http_start('GET', '/status') } 1 .. 4;
    sleep 0.1;

    my @plain = map { $t->get('/plain') } 1 .. 10;
    ok(!grep({ $_->{status} != 200 || $_->{elapsed} > 0.3 } @plain),
        "$what: other locations answer at once")
        or diag(join ' ', map { "$_->{status}/$_->{elapsed}" } @plain);

    my @res = map { $t->http_end($_) } @pending;
    ok(!grep({ $_->{status} != 200 || $_->{json}{mongo}{up} } @res),
        "$what: status says down")
        or diag(join "\n", map { "$_->{status} $_->{elapsed}s $_->{body}" }
            @res);
    ok(!grep({ $_->{elapsed} > 2.5 } @res), "$what: within the timeout")
        or diag(join ' ', map { $_->{elapsed} } @res);
}

# hung: connections stay open but nothing answers

$t->signal('mongo', 'STOP');
sleep 0.2;
check_down_without_stall('hung');
$t->signal('mongo', 'CONT');
ok($t->wait_for(6, sub { all_say(1) }), 'up again after SIGCONT');

# slow: every command takes longer than the timeout

$t->mongo_latency(1500);
check_down_without_stall('slow');
like(status()->{mongo}{last_error} // '', qr/time|socket|fail/i,
    'last_error says why');

$t->mongo_latency(200);
ok($t->wait_for(6, sub { all_say(1) }), 'slow but within the timeout: up');
$t->mongo_latency(0);

# stopped: connections refused

$t->stop_mongo;
check_down_without_stall('stopped');

$t->start_mongo;
ok($t->wait_for(8, sub { all_say(1) }), 'up again after restart, no reload');

# a reload with slow tasks in flight finishes, no request is lost

$t->mongo_latency(600);
my @inflight = map { $t->http_start('GET', '/status') } 1 .. 6;
sleep 0.1;

my $start = time;
ok($t->reload(15), 'reload with tasks in flight');
ok(time - $start < 5, 'reload did not wait on MongoDB for long');

my @res = map { $t->http_end($_) } @inflight;
ok(!grep({ $_->{status} != 200 } @res), 'in-flight requests answered')
    or diag(join ' ', map { $_->{status} } @res);

$t->mongo_latency(0);
ok($t->wait_for(6, sub { all_say(1) }), 'up after reload');

# graceful stop while a request waits on a hung MongoDB

$t->signal('mongo', 'STOP');
my $h = $t->http_start('GET', '/status');
sleep 0.2;
$start = time;
ok($t->stop, 'graceful stop with a task in flight');
ok(time - $start < 5, 'stop bounded by the MongoDB timeout');
is($t->http_end($h)->{status}, 200, 'the waiting request was answered');
$t->signal('mongo', 'CONT');

$t->done;
