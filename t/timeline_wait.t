#!/usr/bin/perl

# Long polling: GET /users/{uid}/timeline?since_id=X&wait=N answers at
# once when posts newer than X are there, else holds the request until one
# comes (answered within a second of its post) or N passes (an empty page).
# Two workers: the wait is woken whichever worker fanned the post out.  A
# wait past 60, or without since_id, is 400 invalid_wait; a client that
# leaves while waiting leaves nothing behind (/status streams.readers back
# to 0); a graceful stop answers the waits at once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use FeedTest;

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF2')->run;
worker_processes 2;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
    }
}
EOF2

ok($t->wait_for(10, sub {
    my $j = $t->get('/status')->{json} or return 0;
    $j->{redis}{up} && $j->{mongo}{up};
}), 'nginx up');

sub post {
    my ($a, $body) = @_;
    my $r = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    die "post: $r->{status}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}
sub ids { return map { $_->{id} } @{ $_[0]{json}{items} || [] } }

is($t->http('PUT', '/users/ann/following/bob')->{status}, 204, 'follow');
my $p0 = post('bob', 'first');
ok($t->wait_for(5, sub {
    ((ids($t->get('/users/ann/timeline')))[0] // '') eq $p0 }),
    'in ann\'s timeline');

# ------------------------------------------------------- at once --

my $t0 = time;
my $r = $t->get("/users/ann/timeline?since_id=" . ('0' x 24) . "&wait=10");
is($r->{status}, 200, 'newer posts there: 200');
is((ids($r))[0], $p0, 'with them');
ok(time - $t0 < 1, 'at once');

# ------------------------------------------- a post wakes the wait --

for my $round (1 .. 4) {
    my $h = $t->http_start('GET', "/users/ann/timeline?since_id=$p0&wait=20",
        timeout => 30);
    sleep 0.5;
    my $t1 = time;
    my $p = post('bob', "wake $round");
    $r = $t->http_end($h);
    my $took = time - $t1;
    is($r->{status}, 200, "round $round: 200");
    is(join(' ', ids($r)), $p, "round $round: the new post");
    ok($took < 2, "round $round: within 2 s of the post")
        or diag("took $took");
    $p0 = $p;
}

# ------------------------------------------------- N passes, empty --

$t0 = time;
$r = $t->get("/users/ann/timeline?since_id=$p0&wait=2");
my $took = time - $t0;
is($r->{status}, 200, 'nothing newer: 200 after the wait');
is(scalar(ids($r)), 0, 'an empty page');
is($r->{json}{next}, undef, 'next: null');
ok($took >= 1.9 && $took < 4, 'after 2 s') or diag("took $took");

$r = $t->get("/users/ann/timeline?since_id=$p0&wait=0");
is(scalar(ids($r)), 0, 'wait=0: at once, empty');

# ------------------------------------------------------ bad input --

for my $q ('wait=61', 'wait=-1', 'wait=abc', 'wait=', 'wait=100') {
    $r = $t->get("/users/ann/timeline?since_id=$p0&$q");
    is($r->{status}, 400, "$q: 400");
    is($r->{json}{error}, 'invalid_wait', "$q: invalid_wait");
}
$r = $t->get('/users/ann/timeline?wait=5');
is($r->{status}, 400, 'wait without since_id: 400');

# ------------------------------------------- a client that leaves --

my $h = $t->http_start('GET', "/users/ann/timeline?since_id=$p0&wait=30",
    timeout => 40);
sleep 0.5;
close($h->{sock});
ok($t->wait_for(5, sub {
    my @r = map { $t->get('/status')->{json}{streams}{readers} } 1 .. 4;
    !grep { $_ } @r;
}), 'a client gone while waiting: no reader left in either worker');

# ---------------------------------------------------- graceful stop --

$h = $t->http_start('GET', "/users/ann/timeline?since_id=$p0&wait=30",
    timeout => 40);
sleep 0.5;
$t0 = time;
$t->stop;
$r = $t->http_end($h);
ok(time - $t0 < 5, 'a graceful stop ends the wait') or diag(time - $t0);
is($r->{status}, 200, 'answered 200');

$t->done;
