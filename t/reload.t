#!/usr/bin/perl

# "nginx -s reload" and "nginx -s quit" with Redis and MongoDB configured,
# while requests are in flight: every request is answered, the new workers
# reconnect, and error.log has no [alert].

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; }
    }
}
EOF

sub both_up {
    my $j = $t->get('/status')->{json} or return 0;
    return $j->{redis}{up} && $j->{mongo}{up};
}

ok($t->wait_for(5, \&both_up), 'redis and mongodb up');

unless (FeedTest::real_mongo()) {
    $t->mongo_latency(300);
}

for my $round (1 .. 3) {
    my @inflight = map { $t->http_start('GET', '/status') } 1 .. 8;
    sleep 0.05;

    my @old = $t->worker_pids;
    my @cmd = $t->nginx_cmd('-s', 'reload');
    is(system(@cmd), 0, "nginx -s reload, round $round");

    ok($t->wait_for(10, sub {
        my @now = $t->worker_pids;
        my %old = map { $_ => 1 } @old;
        @now && !grep { $old{$_} } @now;
    }), "old workers gone, round $round");

    my @res = map { $t->http_end($_) } @inflight;
    is(scalar(grep { $_->{status} == 200 } @res), 8,
        "in-flight requests answered, round $round");
}

$t->mongo_latency(0) unless FeedTest::real_mongo();
ok($t->wait_for(5, \&both_up), 'new workers connected to both');

my $h = $t->http_start('GET', '/status');
sleep 0.05;
my @cmd = $t->nginx_cmd('-s', 'quit');
is(system(@cmd), 0, 'nginx -s quit');
is($t->http_end($h)->{status}, 200, 'request in flight at quit answered');

ok($t->wait_for(10, sub { !$t->alive('nginx') }), 'nginx exited');

$t->done;
