#!/usr/bin/perl

# Live timelines (feed_timeline_stream): what a stream that resumes
# (Last-Event-ID) is sent of the changes made while its client was away.
# One worker, one Redis, link mode.
#
# A resume sends the entries newer than its point, and those only when
# the list did not change otherwise since (a version says when it was
# made, ngx_http_feed_timeline_cache_nonce): else, or when it cannot tell
# (a version of the older form), it says reset ("changed"), and the
# client reads its timeline again.
#
#   - an author unmuted while the client was away: their posts are back in
#     the timeline, older than the client's Last-Event-ID; a stream that
#     stays connected is sent them (updates without an id, t/stream.t),
#     one that resumes is told reset (before, it was sent neither: they
#     were lost without a word);
#   - a post the client was sent, deleted while it was away: reset
#     (before, nothing: the client showed the deleted post on);
#   - a resume when the list only had newer posts since the point: those,
#     and no reset (the mute a second before the point was sent live);
#   - a list whose version is of the older form, without a time: reset.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
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

# a stream of gus sent a post of bob's, then closed: the post, and the
# stream's Last-Event-ID
sub streamed {
    my ($body, $name) = @_;
    my $s = stream('gus');
    sleep 0.5;
    my $id = post($t, 'bob', $body);
    is(brief(events($s, 1, 5)), "update $id", $name);
    my $last = $s->last_id;
    $s->close;
    return ($id, $last);
}

# ------------------------------------------------ unmuted while away --

for my $f (qw(bob cat)) {
    is($t->http('PUT', "/users/gus/following/$f")->{status}, 204,
        "gus follows $f");
}
my @c = map { post($t, 'cat', "cat $_") } 1 .. 2;
my @b = map { post($t, 'bob', "bob $_") } 1 .. 2;
ok($t->wait_for(10, sub { (((items('gus', 5))[0] // {})->{id} // '')
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
(undef, $last) = streamed('bob 4', 'a new stream of gus: a post');

is($t->http('DELETE', '/users/gus/mutes/cat')->{status}, 204,
    'unmuted while the client was away');
ok($t->wait_for(5, sub { grep { $_->{id} eq $c[0] } items('gus', 10) }),
    'cat\'s posts back in gus\'s timeline');
$s = stream('gus', 'Last-Event-ID' => $last);
@e = events($s, 3, 3);
my %sent = map { $_->{event} eq 'update'
    ? (FeedTest::json_decode($_->{data})->{id} => 1) : () } @e;
is(brief(@e), 'reset {"reason":"changed"}',
    'resumed with Last-Event-ID: cat\'s posts back: reset, changed');
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
is(brief(@e), 'reset {"reason":"changed"}',
    'resumed with Last-Event-ID: a post it was sent deleted: reset');
$s->close;

# only newer posts since the point, which came a while after the last
# change (the delete): those, no reset
sleep 0.3;
(undef, $last) = streamed('bob 7', 'a stream of gus: a post, a while after');
my $b8 = post($t, 'bob', 'bob 8, while away');
ok($t->wait_for(5, sub {
    (((items('gus', 1))[0] // {})->{id} // '') eq $b8 }),
    'in gus\'s timeline');
$s = stream('gus', 'Last-Event-ID' => $last);
@e = events($s, 2, 2);
is(brief(@e), "update $b8", 'resumed: the post made while away, no reset');
$s->close;

# a version made before versions had a time (before an upgrade): taken
# for a change made long ago, no reset (every client would be told to
# read again at each reconnect, all at once after a reload, until the
# list changed)
my $v = $t->redis('GET', 'feed:tln:{gus}') // '';
like($v, qr/^[0-9a-f]+-\d+-\d{13}[PN]$/, "the list's version has a time ($v)");
(my $old = $v) =~ s/-\d{13}([PN])$/$1/;
my $ttl = $t->redis('PTTL', 'feed:tln:{gus}');
$t->redis('SET', 'feed:tln:{gus}', $old, 'PX', $ttl > 0 ? $ttl : 600000);
$s = stream('gus', 'Last-Event-ID' => $b8);
@e = events($s, 1, 1.5);
is(brief(@e), '', "a version of the older form ($old): no reset");
my $b9 = post($t, 'bob', 'bob 9');
@e = events($s, 1, 5);
is(brief(@e), "update $b9", 'then live');
$s->close;

# a burst past what a reader is told (8) and past its window (20): 25
# entries come between two of its reads (written here straight into the
# list, as the fanout writes them, then the version moved, so that the
# reader reads): the stream catches up from what it was sent last, as a
# resume does, and is sent all 25, oldest first; before, it was sent the
# newest 20, the others lost without a word (t/stream_faults.t's normal
# stream, 60 posts in a burst, missed some); 120, past what a resume
# sends (100): reset (gap)
{
    my $s = stream('gus');
    sleep 0.5;
    my $b = post($t, 'bob', 'before the burst');
    is(brief(events($s, 1, 5)), "update $b", 'burst: the stream live');
    my $head = $t->redis('LINDEX', 'feed:tl:{gus}', 0) // '';
    is(entry_id($head), $b, 'burst: a list entry is the post id (link mode)');
    is(length($head), 12, 'burst: its 12 bytes');
    # ids of the second of the post $after, after it (its 12 bits after
    # the seconds are milliseconds, below 0xfa0), before the posts of the
    # next seconds
    my $burst = sub {
        my ($after, $from, $n) = @_;
        my $sec = hex(substr($after, 0, 8));
        my @ids = map { sprintf('%08xfff%013x', $sec, $_) }
            $from .. $from + $n - 1;
        for my $id (@ids) {
            $t->redis('SET', post_key($id), qq({"id":"$id","author":)
                . qq("bob","body":"burst","ts":${sec}999}), 'EX', 600);
            $t->redis('LPUSH', 'feed:tl:{gus}', entry_of($id));
        }
        $t->redis('SET', 'feed:tln:{gus}', "b0057-$from-0N", 'EX', 600);
        return @ids;
    };
    my @ids = $burst->($b, 1, 25);
    is(brief(events($s, 25, 5)), join(', ', map { "update $_" } @ids),
        'burst: 25 entries between two reads: all sent, oldest first');
    sleep 1;
    my $b2 = post($t, 'bob', 'after the burst');
    is(brief(events($s, 1, 5)), "update $b2", 'burst: then live');
    # a stream sent nothing yet has no point to catch up from: told to
    # read its timeline (reset, gap), while the other catches up
    my $fresh = stream('gus');
    sleep 0.5;
    @ids = $burst->($b2, 50, 25);
    is(brief(events($s, 25, 5)), join(', ', map { "update $_" } @ids),
        'burst: the stream sent before catches up');
    is(brief(events($fresh, 1, 3)), 'reset {"reason":"gap"}',
        'burst: a stream sent nothing yet: reset, gap');
    $fresh->close;
    $burst->($b2, 100, 120);
    is(brief(events($s, 1, 3)), 'reset {"reason":"gap"}',
        'burst: 120 entries between two reads: reset, gap');
    $s->close;
}

# a post delivered after a newer one (the fanout's batches land in any
# order) moves the version, and keeps its time: newer than a resume
# point, it is sent with the others, no reset; scripts/lib/changed.lua
# run as the delivery runs it
{
    open my $fh, '<', FeedTest->root . '/ngx_feed_module/scripts/lib/changed.lua'
        or die "changed.lua: $!\n";
    my $lua = do { local $/; <$fh> } . "changed(KEYS[1], 60, ARGV[2], "
        . "ARGV[3] == '1')\nreturn redis.call('get', KEYS[1])\n";
    my $ch = sub {
        my ($was, $nonce, $keep) = @_;
        $t->redis('SET', 'feed:tln:{lua}', $was) if defined $was;
        $t->redis('DEL', 'feed:tln:{lua}') unless defined $was;
        return $t->redis('EVAL', $lua, 1, 'feed:tln:{lua}', '', $nonce,
            $keep ? 1 : 0);
    };
    is($ch->('ab12-3-1795000000000N', 'cd34-9-1796000000000', 1),
        'cd34-9-1795000000000N', 'a late delivery: the time of before');
    is($ch->('r7/ab12-3-1795000000000P', 'cd34-9-1796000000000', 1),
        'r7/cd34-9-1795000000000P', 'on a cluster\'s run, pull mark kept');
    is($ch->('ab12-3-1795000000000N', 'cd34-9-1796000000000', 0),
        'cd34-9-1796000000000N', 'any other change: its own time');
    is($ch->('ab12-3N', 'cd34-9-1796000000000', 1), 'cd34-9N',
        'a late delivery to a version of the older form: still no time');
    is($ch->(undef, 'cd34-9-1796000000000', 1), 'cd34-9',
        'a late delivery to a list without a version: no time');
}

ok(time - $T0 < 90, sprintf('under 90 s (%.1fs)', time - $T0));
$t->done;
