#!/usr/bin/perl

# The fanout's group asked again after an error reply on a live
# connection.  Each worker's fanout connection, once made, creates the
# group (XGROUP CREATE ... MKSTREAM; BUSYGROUP when it is there) before
# it reads.  Redis refusing writes (OOM under maxmemory with noeviction:
# XGROUP CREATE is a write) answers that with an error while the
# connection stays up; no connection comes back to start it over, so the
# group is asked again on a timer:
#
#   - the fanout connections are cut while Redis refuses writes: each
#     worker's fanout reconnects, its group is refused, it is not
#     reading and says why (status: fanout.reading, fanout.last_error);
#   - Redis takes writes again: within a few seconds every worker reads
#     again, on the same connection, and a post reaches a follower's
#     cached timeline.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(post statuses);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF');
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 200ms;

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

# pid => [reading, last error] of every worker
sub fanouts {
    my $st = statuses($t);
    return { map { $_ => [ $st->{$_}{fanout}{reading} ? 1 : 0,
        $st->{$_}{fanout}{last_error} // '' ] } keys %$st };
}

sub all_reading {
    my $f = fanouts();
    return keys %$f == 2 && !grep { !$_->[0] } values %$f;
}

sub show {
    my $f = fanouts();
    return join '; ', map { "$_: " . ($f->{$_}[0] ? 'reading' : 'not')
        . " ($f->{$_}[1])" } sort keys %$f;
}

ok($t->wait_for(10, \&all_reading), 'both workers read the stream');

my ($author, $reader) = ("ga$$", "gr$$");
is($t->http('PUT', "/users/$reader/following/$author")->{status}, 204,
    'follow');
is($t->get("/users/$reader/timeline")->{status}, 200, 'reader has a cache');

# the connections of the blocked reads (XREADGROUP) are the fanout's
sub fanout_clients {
    my $list = $t->redis('CLIENT', 'LIST') // '';
    return map { /\bid=(\d+)/ ? $1 : () }
        grep { /\bcmd=(?:xreadgroup|xautoclaim|xgroup|client)\b/ }
        split /\n/, $list;
}

$t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$t->redis('CONFIG', 'SET', 'maxmemory', 1);

my @ids = fanout_clients();
ok(@ids >= 2, 'the fanout connections: ' . scalar(@ids));
$t->redis('CLIENT', 'KILL', 'ID', $_) for @ids;

ok($t->wait_for(10, sub {
    my $f = fanouts();
    keys %$f == 2 && !grep { $_->[0] || $_->[1] !~ /^OOM/ } values %$f
}), 'writes refused: the group is refused, no worker reads')
    or diag(show());

# still refused a second later: the workers keep asking, and say so
sleep 1;
my $f = fanouts();
ok(!grep({ $_->[0] } values %$f), 'a second later, still not reading')
    or diag(show());

$t->redis('CONFIG', 'SET', 'maxmemory', 0);
my $t0 = time;
ok($t->wait_for(10, \&all_reading), 'writes taken again: both workers '
    . sprintf('read again (%.1f s)', time - $t0)) or diag(show());

my $id = post($t, $author, 'after the group came back');
ok($id && $t->wait_for(5, sub {
    my $r = $t->get("/users/$reader/timeline");
    grep { $_->{id} eq $id } @{ $r->{json}{items} || [] };
}), 'the post reached the follower\'s cached timeline');

$t->done;
