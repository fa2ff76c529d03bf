#!/usr/bin/perl

# Live timelines (feed_timeline_stream): what a stream that resumes
# (Last-Event-ID) is sent of the changes made while its client was away.
# One worker, one Redis, link mode.
#
# Both checks are TODO: a resume sends the entries newer than its point,
# without gaps, and nothing of the older ones that went or came back
# meanwhile (docs/timeline.md#live-timelines says so).  What would do it:
# a reader that outlives its last stream for a while and keeps what came
# and went meanwhile, for a resume to replay.
#
#   - an author unmuted while the client was away: their posts are back in
#     the timeline, older than the client's Last-Event-ID; a stream that
#     stays connected is sent them (updates without an id, t/stream.t),
#     and one that resumes must be too, or be told reset; the module sends
#     neither (the since_id read of ngx_http_feed_stream_read.c only has
#     entries newer than the point): they are lost without a word, though
#     the module says a resume "neither skips nor repeats one"
#     (ngx_http_feed_stream.c, ngx_http_feed_stream_update);
#   - a post the client was sent, deleted while it was away: a resumed
#     stream must say "delete" (or reset); the module sends nothing, the
#     client shows the deleted post on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(post);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $T0 = time;
my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    feed_redis_timeout 5s;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
    }
}
EOF

ok($t->wait_for(15, sub {
    my $j = $t->get('/status')->{json} or return 0;
    $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch};
}), 'nginx up');

my $port = $t->port('http');

sub stream {
    my ($u, %h) = @_;
    return FeedTest::SSE->open(port => $port,
        path => "/users/$u/timeline/stream", headers => \%h, timeout => 10);
}
sub items { @{ $t->get("/users/$_[0]/timeline?limit=$_[1]")->{json}{items}
    || [] } }
sub events {
    my ($s, $n, $timeout) = @_;
    my @e;
    my $end = time + ($timeout // 3);
    while (@e < $n && time < $end) {
        my $ev = $s->next_event(timeout => $end - time) or last;
        push @e, $ev;
    }
    return @e;
}
sub brief { join ', ', map { "$_->{event} " . ($_->{id} // $_->{data}) } @_ }

# ------------------------------------------------ unmuted while away --

for my $f (qw(bob cat)) {
    is($t->http('PUT', "/users/gus/following/$f")->{status}, 204,
        "gus follows $f");
}
my @c = map { post($t, 'cat', "cat $_") } 1 .. 2;
my @b = map { post($t, 'bob', "bob $_") } 1 .. 2;
ok($t->wait_for(10, sub { ((items('gus', 5))[0] // {})->{id} // ''
    eq $b[-1] }), 'gus\'s timeline has them');
is($t->http('PUT', '/users/gus/mutes/cat')->{status}, 204, 'cat muted');
ok($t->wait_for(5, sub { !grep { $_->{id} eq $c[0] } items('gus', 5) }),
    'cat\'s posts gone from gus\'s timeline');

# connected through the unmute: sent them
my $s = stream('gus');
sleep 0.5;
my $b3 = post($t, 'bob', 'bob 3');
my @e = events($s, 1, 5);
is(brief(@e), "update $b3", 'a live stream of gus: a post');
is($t->http('DELETE', '/users/gus/mutes/cat')->{status}, 204, 'unmuted');
@e = events($s, 2, 5);
is(join(' ', sort map { FeedTest::json_decode($_->{data})->{id} } @e),
    join(' ', sort @c), 'connected: cat\'s posts back, as updates');
my $last = $s->last_id;
is($last, $b3, 'its Last-Event-ID: the newest post');
$s->close;

# away through the mute and the unmute
is($t->http('PUT', '/users/gus/mutes/cat')->{status}, 204, 'cat muted again');
ok($t->wait_for(5, sub { !grep { $_->{id} eq $c[0] } items('gus', 5) }),
    'cat\'s posts gone again');
$s = stream('gus');
sleep 0.5;
my $b4 = post($t, 'bob', 'bob 4');
@e = events($s, 1, 5);
is(brief(@e), "update $b4", 'a new stream of gus: a post');
$last = $s->last_id;
$s->close;

is($t->http('DELETE', '/users/gus/mutes/cat')->{status}, 204,
    'unmuted while the client was away');
ok($t->wait_for(5, sub { grep { $_->{id} eq $c[0] } items('gus', 10) }),
    'cat\'s posts back in gus\'s timeline');
$s = stream('gus', 'Last-Event-ID' => $last);
@e = events($s, 3, 3);
my %sent = map { $_->{event} eq 'update'
    ? (FeedTest::json_decode($_->{data})->{id} => 1) : () } @e;
TODO: {
    local $TODO = 'a resume is not told of older entries back meanwhile';
    ok((grep { $_->{event} eq 'reset' } @e) || (!grep { !$sent{$_} } @c),
        'resumed with Last-Event-ID: cat\'s posts back sent, or a reset')
        or diag('got: ' . (brief(@e) || 'nothing'));
}
$s->close;

# a post the client was sent, deleted while it was away
$s = stream('gus');
sleep 0.5;
my $b5 = post($t, 'bob', 'bob 5, to be deleted');
my $b6 = post($t, 'bob', 'bob 6');
@e = events($s, 2, 5);
is(brief(@e), "update $b5, update $b6", 'a stream of gus: two posts');
$last = $s->last_id;
$s->close;
is($t->http('DELETE', "/users/bob/posts/$b5")->{status}, 204,
    'the first deleted while the client was away');
ok($t->wait_for(5, sub { !grep { $_->{id} eq $b5 } items('gus', 10) }),
    'gone from gus\'s timeline');
$s = stream('gus', 'Last-Event-ID' => $last);
@e = events($s, 1, 3);
TODO: {
    local $TODO = 'a resume is not told of deletes meanwhile';
    ok(grep({ $_->{event} eq 'reset'
        || ($_->{event} eq 'delete' && $_->{data} eq $b5) } @e),
        'resumed with Last-Event-ID: a delete of the post it was sent, or a '
        . 'reset') or diag('got: ' . (brief(@e) || 'nothing'));
}
$s->close;

ok(time - $T0 < 90, sprintf('under 90 s (%.1fs)', time - $T0));
$t->done;
