#!/usr/bin/perl

# Live timelines (feed_timeline_stream, Server-Sent Events), one worker, a
# single Redis, link mode: what a stream is sent as the timeline changes.
#
#   - a post of a followee: "update" with its id, and as data the post as
#     the timeline's page has it, in order, within a second;
#   - the stream's reader reads once for two streams of the same user;
#   - a delete: "delete" with the id, on every stream of the user;
#   - a block, a mute, an unfollow, a hidden post: "delete" of each post
#     that went (an unfollow, a block's too, hides the posts in place), a
#     reset past 10 at once; a follow: reset, the list dropped;
#   - resuming with Last-Event-ID (and since_id): the entries missed,
#     oldest first, then live; a point older than the list: "reset";
#   - heartbeats each feed_stream_heartbeat;
#   - bad input: 400 JSON, and 405 for other methods.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF2')->run;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;
    feed_cache_size 40;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)$ { feed_block $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/hidden/([^/]+)$ { feed_hide $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ {
            feed_user_post $1 $2;
        }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/hb/users/([^/]+)/timeline/stream$ {
            feed_stream_heartbeat 8s;
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
    }
}
EOF2

ok($t->wait_for(10, sub {
    my $j = $t->get('/status')->{json} or return 0;
    $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch}
        && $j->{pull}{watch}{tracking};
}), 'nginx up, the watch tracking');

my $port = $t->port('http');

sub post {
    my ($a, $body) = @_;
    my $r = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    die "post: $r->{status}\n" unless $r->{status} == 201;
    return $r->{json}{id};
}
sub items { return @{ $t->get("/users/$_[0]/timeline?limit=$_[1]")
    ->{json}{items} || [] } }
sub stream {
    my ($u, %h) = @_;
    my $q = delete $h{query} // '';
    return FeedTest::SSE->open(port => $port,
        path => "/users/$u/timeline/stream$q", headers => \%h);
}
# the next events that are not heartbeats, until n or the timeout
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

# the next n events are the deletes of these ids, in any order
sub deletes_are {
    my ($s, $ids, $name) = @_;
    my @e = events($s, scalar @$ids);
    is(join(' ', sort map { "$_->{event} $_->{data}" } @e),
        join(' ', sort map { "delete $_" } @$ids), $name);
}

for my $f ('bob', 'cat') {
    is($t->http('PUT', "/users/ann/following/$f")->{status}, 204,
        "ann follows $f");
}
my @old = map { post('bob', "old $_") } 1 .. 3;
ok($t->wait_for(5, sub { (items('ann', 5))[0]{id} eq $old[-1] }),
    'the old posts in ann\'s timeline');

# -------------------------------------------------------- the stream --

my $s = stream('ann');
is($s->status, 200, 'stream: 200');
like($s->header('content-type') // '', qr{^text/event-stream},
    'text/event-stream');
is($s->header('cache-control'), 'no-cache', 'Cache-Control: no-cache');
is($s->header('x-accel-buffering'), 'no', 'X-Accel-Buffering: no');
is($s->framing, 'chunked', 'chunked');

my $s2 = stream('ann');
is($s2->status, 200, 'a second stream of ann');
sleep 0.3;
my $reads = $t->get('/status')->{json}{streams}{reads};

my $t0 = time;
my $p1 = post('bob', 'live 1');
my @e = events($s, 1);
is(scalar @e, 1, 'an event for the post');
is($e[0]{event}, 'update', 'event: update');
is($e[0]{id}, $p1, 'id: the post id');
ok(time - $t0 < 1, 'within a second');
my @e2 = events($s2, 1);
is($e2[0]{id}, $p1, 'the second stream too');
sleep 0.3;
my $st = $t->get('/status')->{json}{streams};
is($st->{streams}, 2, 'status: 2 streams');
is($st->{readers}, 1, 'one reader');
ok($st->{reads} - $reads <= 2, 'the reader read once or twice for both')
    or diag("reads: $reads -> $st->{reads}");
my $m = $t->get('/metrics')->{body};
like($m, qr/^feed_streams 2$/m, 'metrics: feed_streams 2');
like($m, qr/^feed_stream_events_total\{event="update"\} [2-9]$/m,
    'metrics: the updates counted');
like($m, qr/^feed_stream_reads_total [1-9]/m, 'metrics: the reads counted');
is($t->get('/status')->{json}{node}{streams}{streams}, 2,
    'status: node streams 2');
my ($item) = grep { $_->{id} eq $p1 } items('ann', 5);
is_deeply(FeedTest::json_decode($e[0]{data}), $item,
    'data: the post as the timeline has it');

# several posts, in order
my @p = map { post($_ % 2 ? 'bob' : 'cat', "burst $_") } 1 .. 6;
@e = events($s, 6);
# (one delivered after a newer one comes without id: its JSON has it)
is(join(' ', sort map { FeedTest::json_decode($_->{data})->{id} } @e),
    join(' ', sort @p),
    'six posts of two authors: six updates (as each is delivered)');
my @q = map { post('bob', "in a row $_") } 1 .. 5;
@e = events($s, 5);
is(join(' ', map { $_->{id} } @e), "@q", 'five of one author: in order');
@e2 = events($s2, 11);

# ---------------------------------------------------------- deletes --

is($t->http('DELETE', "/users/bob/posts/$p1")->{status}, 204,
    'a post deleted');
@e = events($s, 1);
is($e[0]{event}, 'delete', 'event: delete');
is($e[0]{data}, $p1, 'data: its id');
@e2 = events($s2, 1);
is("$e2[-1]{event} $e2[-1]{data}", "delete $p1", 'on both streams');
@e = events($s, 1, 1);
is(scalar @e, 0, 'told once');

# hidden post
my $h = $p[0];
is($t->http('PUT', "/users/ann/hidden/$h")->{status}, 204, 'a post hidden');
@e = events($s, 1);
is("$e[0]{event} $e[0]{data}", "delete $h", 'hidden: delete');

# mute cat: cat's posts of the window go
my @cats = grep { $_ % 2 == 0 } 1 .. 6;
is($t->http('PUT', '/users/ann/mutes/cat')->{status}, 204, 'cat muted');
deletes_are($s, [map { $p[$_ - 1] } @cats],
    'mute: a delete per post of cat');

is($t->http('DELETE', '/users/ann/mutes/cat')->{status}, 204, 'unmuted');
my $hw = $s->last_id;
@e = events($s, 3);
is(join(' ', sort map {
        "$_->{event} " . FeedTest::json_decode($_->{data})->{id} } @e),
    join(' ', sort map { "update $p[$_ - 1]" } @cats),
    'unmute: cat\'s posts come back');
ok(!grep({ defined $_->{id} } @e),
    'without id: older than what the stream sent');
is($s->last_id, $hw, 'Last-Event-ID stays the newest sent');

# ------------------------------------------- unfollow, follow, block --

# an unfollow hides the author's posts in place: a delete each, no reset
sub misses {
    my ($n) = $t->get('/metrics')->{body}
        =~ /^feed_timeline_reads_total\{cache="MISS"\} (\d+)$/m;
    return $n // -1;
}
my $miss0 = misses();
ok($miss0 > 0, 'misses counted');
is($t->http('DELETE', '/users/ann/following/cat')->{status}, 204,
    'ann unfollows cat');
deletes_are($s, [map { $p[$_ - 1] } @cats],
    'unfollow: a delete per post of cat, no reset');
my @tl = items('ann', 40);
ok(@tl && !grep({ $_->{author} eq 'cat' } @tl),
    'cat\'s posts out of the timeline');
is(misses(), $miss0, 'and no rebuild for it');

# a follow drops the list: the stream is told to read the timeline again
is($t->http('PUT', '/users/ann/following/dan')->{status}, 204,
    'ann follows dan');
@e = events($s, 1);
is("$e[0]{event} $e[0]{data}", 'reset {"reason":"gone"}',
    'follow: reset, gone');
ok(scalar items('ann', 5), 'the timeline read: made again');
my @dans = map { post('dan', "dan $_") } 1 .. 2;
@e = events($s, 2, 5);
is(join(' ', sort map { FeedTest::json_decode($_->{data})->{id} } @e),
    join(' ', sort @dans), 'then dan\'s posts');

# a block takes its unfollow in place too: deletes, no reset
is($t->http('PUT', '/users/ann/blocks/dan')->{status}, 204,
    'ann blocks dan');
deletes_are($s, \@dans, 'block: a delete per post of dan, no reset');
is($t->http('DELETE', '/users/ann/blocks/dan')->{status}, 204,
    'unblocked');
@e = events($s, 1, 1.5);
is(scalar @e, 0, 'dan\'s posts stay out: ann does not follow dan');
@tl = items('ann', 40);
ok(@tl && !grep({ $_->{author} eq 'dan' } @tl),
    'nor in the timeline');

# ---------------------------------------------------------- heartbeat --

my $c0 = $s->comments;
@e = events($s, 1, 2.5);
is(scalar @e, 0, 'no event when nothing changes');
ok($s->comments - $c0 >= 1, 'but heartbeats')
    or diag('comments: ' . ($s->comments - $c0));

# ------------------------------------------------ heartbeats spread --

{
    # twenty streams sent the same post at once, feed_stream_heartbeat 8s:
    # each takes a period of 6 to 8 s, so they do not all beat in the same
    # tick (the worker checks them each second); they did, all at 8 s
    my @hb = map { FeedTest::SSE->open(port => $port,
        path => '/hb/users/ann/timeline/stream') } 1 .. 20;
    sleep 0.5;
    my $p = post('bob', 'the heartbeats\' mark');
    my $t0 = time;
    my $got = grep { $_->events_until(sub { $_[0]{event} eq 'update'
        && ($_[0]{id} // '') eq $p }, timeout => 5); $_->matched } @hb;
    is($got, 20, 'heartbeats spread: 20 streams sent a post');
    my @c0 = map { $_->comments } @hb;
    my %first;
    while (keys(%first) < @hb && time < $t0 + 14) {
        for my $i (0 .. $#hb) {
            next if defined $first{$i};
            $hb[$i]->pending_events;
            $first{$i} = time - $t0 if $hb[$i]->comments > $c0[$i];
        }
        sleep 0.05;
    }
    my @at = sort { $a <=> $b } values %first;
    is(scalar(@at), 20, 'heartbeats spread: each of the 20 beat after it');
    ok(@at && $at[0] >= 5.5, sprintf('heartbeats spread: none before 6 s '
        . '(first at %.1f s)', $at[0] // -1));
    ok(@at && $at[-1] - $at[0] >= 0.5, sprintf('heartbeats spread: not all '
        . 'in the same tick (%.1f to %.1f s)', $at[0] // -1, $at[-1] // -1));
    $_->close for @hb;
    # ann's first stream was sent it too
    $s->events_until(sub { ($_[0]{id} // '') eq $p }, timeout => 3);
}

# ----------------------------------------------------------- resume --

# the point: a post made after the blocks above (reconnecting at a point
# before them is told reset, changed: t/stream_resume.t)
sleep 0.2;
my $pre = post('bob', 'before the client goes away');
@e = events($s, 1);
is($e[0]{id} // '', $pre, 'a post before the client goes away');
my $last = $s->last_id;
$s->close;
$s2->close;
my @missed = map { post('bob', "missed $_") } 1 .. 3;
ok($t->wait_for(5, sub { (items('ann', 5))[0]{id} eq $missed[-1] }),
    'three posts while away');

$s = stream('ann', 'Last-Event-ID' => $last);
@e = events($s, 3);
is(join(' ', map { $_->{id} } @e), "@missed",
    'Last-Event-ID: the missed posts, oldest first');
my $p2 = post('bob', 'live again');
@e = events($s, 1);
is($e[0]{id}, $p2, 'then live');
$s->close;

$s = stream('ann', query => "?since_id=$missed[0]");
@e = events($s, 3);
is(join(' ', map { $_->{id} } @e), "$missed[1] $missed[2] $p2",
    'since_id: the same');
$s->close;

$s = stream('ann', query => "?since_id=$missed[0]",
    'Last-Event-ID' => $missed[1]);
@e = events($s, 2);
is(join(' ', map { $_->{id} } @e), "$missed[2] $p2",
    'Last-Event-ID over since_id (a browser reconnecting)');
$s->close;

my @all = map { $_->{id} } items('ann', 100);
$s = stream('ann', query => '?since_id=000000000000000000000001');
@e = events($s, scalar @all);
is(join(' ', map { $_->{id} } @e), join(' ', reverse @all),
    'a point older than all: the whole timeline, the list holding it all');
$s->close;

# the same as a Last-Event-ID: the list changed since (the blocks)
$s = stream('ann', 'Last-Event-ID' => '000000000000000000000001');
@e = events($s, 1);
is($e[0] ? "$e[0]{event} $e[0]{data}" : '', 'reset {"reason":"changed"}',
    'a reconnect at a point older than all: reset, changed');
$s->close;

my @more = map { post('bob', "more $_") } 1 .. 40;
ok($t->wait_for(5, sub { (items('ann', 5))[0]{id} eq $more[-1] }),
    '40 more posts: the list of 40 trimmed');
$s = stream('ann', 'Last-Event-ID' => $all[0]);
@e = events($s, 1);
is($e[0]{event}, 'reset', 'a point older than the list holds: reset');
is($e[0]{data}, '{"reason":"gap"}', 'data: {"reason":"gap"}');
my $p3 = post('bob', 'after the reset');
@e = events($s, 1);
is($e[0]{id}, $p3, 'then live');
$s->close;

# more than 10 posts of the window gone at once: reset
$s = stream('ann');
sleep 0.5;
is($t->http('DELETE', '/users/ann/following/bob')->{status}, 204,
    'ann unfollows bob, all the window\'s posts');
@e = events($s, 1);
is("$e[0]{event} $e[0]{data}", 'reset {"reason":"changed"}',
    'past 10 deletes: reset, changed');
is(scalar items('ann', 5), 0, 'the timeline: empty');
$s->close;

# ------------------------------------------------------- bad input --

my $r = $t->get('/users/ann/timeline/stream?since_id=xyz');
is($r->{status}, 400, 'since_id not an id: 400');
is($r->{json}{error}, 'invalid_post_id', 'invalid_post_id');
$r = $t->get('/users/ann/timeline/stream',
    headers => { 'Last-Event-ID' => 'nope' });
is($r->{status}, 400, 'Last-Event-ID not an id: 400');
is($t->get('/users/a%20b/timeline/stream')->{status}, 400,
    'a bad user id: 400');
is($t->http('POST', '/users/ann/timeline/stream')->{status}, 405,
    'POST: 405');

$t->done;
