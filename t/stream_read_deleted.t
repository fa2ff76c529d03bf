#!/usr/bin/perl

# A live timeline's read out while one of its posts is deleted: node A
# reaches Redis through t/lib/tcp_proxy.pl in "hold-replies" mode, node B
# straight; the reader streams on node A, the changes are made through
# node B.
#
#   - node A's command replies held, a mute through node B makes its
#     reader read (the filters moved): the read runs in Redis, its reply
#     held; a post of the stream deleted through node B meanwhile: the
#     stream told "delete" at once (node A's watch hears it);
#   - the replies let through: the read, made before the delete, still has
#     the post; another mute, another read, without it: the stream must
#     not be told "delete" a second time (the read out was kept whole, the
#     post among the reader's ids again: stream_nodes.t failed so, 1 run
#     in 10 under load);
#   - a post made after it reaches the stream as an update.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(post statuses);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $A = FeedTest->new;
my $B = FeedTest->new;

$A->start_redis;
$A->start_mongo;
my $PROXY = 'redishold';
$A->start_proxy($PROXY, $A->port('redis'), 0, 'hold-replies');
$A->port('http');
$B->set_port($_, $A->port($_)) for qw(redis mongo);
$B->port('http') == $_ and die "port taken twice\n" for values %{$A->{ports}};

my $CONF = <<'EOF';
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS_NODE%%;
    feed_redis_timeout 10s;
    %%FEED_MONGO%%
    feed_mongo_timeout 3s;
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

(my $conf = $CONF) =~ s/%%PORT_REDIS_NODE%%/%%PORT_REDISHOLD%%/;
$A->write_conf($conf)->run;
($conf = $CONF) =~ s/%%PORT_REDIS_NODE%%/%%PORT_REDIS%%/;
$B->write_conf($conf)->run;

sub up {
    my ($n) = @_;
    my $st = statuses($n);
    return keys %$st == 1 && !grep {
        !($_->{redis}{up} && $_->{mongo}{up} && $_->{pull}{watch}
            && $_->{pull}{watch}{tracking})
    } values %$st;
}
ok($A->wait_for(15, sub { up($A) && up($B) }),
    'both nodes up, their watches tracking');

my $P = 'sd' . int(rand 1e6);
my ($R, $AU) = ("${P}r", "${P}a");

is($B->http('PUT', "/users/$R/following/$AU")->{status}, 204,
    'the reader follows the author');
my @p = map { post($B, $AU, "post $_") } 1 .. 2;
ok($B->wait_for(10, sub {
    my $r = $B->get("/users/$R/timeline");
    $r->{status} == 200 && ($r->{json}{items}[0]{id} // '') eq $p[1] }),
    'both posts in the reader\'s timeline');

my $s = FeedTest::SSE->open(port => $A->port('http'),
    path => "/users/$R/timeline/stream", timeout => 10);
is($s->status, 200, 'the reader streams on node A');

my @ev;
sub events {
    my ($secs, $until) = @_;
    my $end = time + $secs;
    while (time < $end) {
        push @ev, $s->pending_events;
        return 1 if $until && $until->();
        sleep 0.05;
    }
    return 0;
}
sub deletes { scalar grep { $_->{event} eq 'delete' && $_->{data} eq $_[0] }
    @ev }

events(1.5);

# node A's replies held; a mute makes its reader read: the read runs in
# Redis (before the delete), its reply held

my $pg = $A->pid($PROXY);
kill 'USR1', -$pg;
is($B->http('PUT', "/users/$R/mutes/${P}x1")->{status}, 204,
    'a mute through node B (the reader\'s filters move)');
sleep 1;

is($B->http('DELETE', "/users/$AU/posts/$p[0]")->{status}, 204,
    'a post deleted through node B, the read\'s reply held');
ok(events(5, sub { deletes($p[0]) }), 'the stream told "delete" at once');

kill 'USR2', -$pg;
sleep 1;

# the read let through had the post; the next one has it no more

is($B->http('PUT', "/users/$R/mutes/${P}x2")->{status}, 204,
    'another mute: another read');
events(2.5);
is(deletes($p[0]), 1, 'told "delete" once, not again at the next read')
    or diag(join ', ', map { "$_->{event} $_->{data}" } @ev);

my $p3 = post($B, $AU, 'post 3');
ok(events(5, sub { grep { $_->{event} eq 'update'
    && index($_->{data}, $p3) >= 0 } @ev }), 'a post after it: an update');

$s->close;
$B->finish;
$A->done;
