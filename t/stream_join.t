#!/usr/bin/perl

# Live timelines (feed_timeline_stream): a stream that joins its user's
# reader in the worker while that reader is not at rest.  One worker (so
# that every stream of a user shares one reader), Redis reached through
# t/lib/tcp_proxy.pl with 100 ms each way (a round trip of the reader
# takes 200 ms or more: wide enough to join during one), link mode.
#
#   - a stream that resumes (Last-Event-ID) and joins while the reader's
#     read is under way: the posts after its point, oldest first, as when
#     it joins a reader at rest; not a reset "gap" (its point is in the
#     list).  Fails: its backlog is asked only by a read that starts with
#     it (ngx_http_feed_stream_read.c, ngx_http_feed_stream_user_read), but
#     the read under way goes on to ngx_http_feed_stream_user_diff, which
#     makes every stream not live resume, this one without a backlog:
#     ngx_http_feed_stream_user_resume answers "gap";
#   - a user without a list (never read): the first stream is told reset
#     ("gone"); a second stream that joins the same reader afterwards must
#     be told too: a post made before the timeline is read is then neither
#     sent to it nor covered by a reset, lost without a word.  Fails:
#     ngx_http_feed_stream_user_replied tells the streams only when the
#     reader was not broken yet ("once").

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
$t->start_proxy('redisslow', $t->port('redis'), 100);

$t->write_conf(<<'EOF')->run;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDISSLOW%%;
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

# ------------------------------------- resuming while the reader reads --

is($t->http('PUT', '/users/fay/following/bob')->{status}, 204,
    'fay follows bob');
my @p = map { post($t, 'bob', "p$_") } 1 .. 2;
ok($t->wait_for(10, sub { (((items('fay', 5))[0] // {})->{id} // '')
    eq $p[-1] }), 'two posts in fay\'s timeline');

# three more, once the list was made, each in it before the next is made:
# a resume at a point the list changed after otherwise than by newer posts
# (the rebuild, or a post delivered after a newer one) is told reset
# instead (t/stream_resume.t)
sleep 0.3;
for my $i (3 .. 5) {
    push @p, post($t, 'bob', "p$i");
    $t->wait_for(10, sub { (((items('fay', 5))[0] // {})->{id} // '')
        eq $p[-1] });
}
is(join(' ', map { $_->{id} } items('fay', 5)), join(' ', reverse @p),
    'five posts in fay\'s timeline');

# at rest first: a stream resuming at p3 gets p4 p5
my $s = stream('fay', 'Last-Event-ID' => $p[2]);
my @e = events($s, 2, 5);
is(brief(@e), "update $p[3], update $p[4]",
    'a stream resuming at p3, the reader at rest: p4, p5');
$s->close;
ok($t->wait_for(5, sub { !$t->get('/status')->{json}{streams}{readers} }),
    'its reader gone with it');

# the first stream makes the reader, which reads 50 ms later, for 200 ms
# or more; the second, resuming at p3, joins meanwhile
my @bad;
for my $try (1 .. 3) {
    my $s1 = stream('fay');
    sleep 0.12;
    my $s2 = stream('fay', 'Last-Event-ID' => $p[2]);
    my @e2 = events($s2, 2, 5);
    push @bad, "try $try: " . brief(@e2)
        unless brief(@e2) eq "update $p[3], update $p[4]";
    $s1->close;
    $s2->close;
    $t->wait_for(5, sub { !$t->get('/status')->{json}{streams}{readers} });
}
is(join("\n", @bad), '', 'a stream resuming at p3 that joined while the '
    . 'reader read: p4, p5 (3 tries)');

# ----------------------------------------- a reader without a list --

is($t->http('PUT', '/users/eve/following/dan')->{status}, 204,
    'eve follows dan (eve\'s timeline never read: no list)');
my $s1 = stream('eve');
@e = events($s1, 1, 5);
is(brief(@e), 'reset {"reason":"gone"}', 'the first stream of eve: reset '
    . '(gone)');
# a client whose read failed (or that did not read) is told again, a
# second later, while the list is still missing: its stream stayed silent
@e = events($s1, 1, 4);
is(brief(@e), 'reset {"reason":"gone"}', 'the first stream of eve: told '
    . 'again while the list is missing');
my $s2 = stream('eve');
my @e2 = events($s2, 1, 3);
my $d = post($t, 'dan', 'while eve has no list');
sleep 1;
my @items = items('eve', 5);
is($items[0]{id}, $d, 'eve\'s timeline read: it has dan\'s post');
push @e2, events($s2, 1, 3);
ok(grep({ $_->{event} eq 'reset' || ($_->{id} // '') eq $d } @e2),
    'the second stream of eve: told reset, or sent the post')
    or diag('the second stream got: ' . (brief(@e2) || 'nothing'));
my $d2 = post($t, 'dan', 'live for eve');
my @e3 = events($s2, 1, 3);
is(brief(@e3), "update $d2", 'then live');

$_->close for $s1, $s2;
ok(time - $T0 < 90, sprintf('under 90 s (%.1fs)', time - $T0));
$t->done;
