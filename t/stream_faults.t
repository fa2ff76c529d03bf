#!/usr/bin/perl

# Live timelines (feed_timeline_stream) under faults: one Redis, the
# MongoDB stand-in, link mode.  The contract checked throughout: an open
# stream stays open (heartbeats go on) whatever Redis does, and nothing
# posted is silently lost: each post reaches the stream as an update, or a
# "reset" tells the client to read its timeline again (and the post is in
# that read).
#
#   0. no fault: a post made right after a stream opened without a
#      resume point (known to fail: the reader's first read takes it as
#      what the client already has);
#   1. Redis restarted (no persistence: every list gone);
#   2. CLIENT KILL TYPE normal (the workers' command connections);
#   3. FLUSHALL;
#   4. CLIENT PAUSE 2000;
#   5. error replies: OOM (maxmemory 1, noeviction), NOSCRIPT (SCRIPT
#      FLUSH) on the reader's read and on the fanout's delivery;
#   6. a slow client (feed_stream_buffer 8k, rcvbuf 4096, on a server
#      listening with sndbuf=4k) closed, the other stream of the user and
#      timeline reads unharmed;
#  6b. a delete event that ends a user's last stream (the worker must
#      live on: a sanitizer build shows the reader freed under the
#      delete hook);
#  10. block and unfollow: the author's posts hidden in place, a delete
#      each, or a reset (changed) past 10 at once; and what a follow does;
#   9. reload: the old worker's streams end, a resume with Last-Event-ID
#      on the new worker gets what was missed, once, oldest first;
#   8. graceful stop with open streams;
#   7. feed_stream_max 2 (an nginx of its own);
#  11. two workers (reuseport), six streams of three users.
#
# Streams opened by live_stream() resume from the newest entry read
# (since_id), as a client should; section 0 shows why.

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

my $CONF = <<'EOF2';
worker_processes %%WORKERS%%;
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
    %%MAX%%

    server {
        listen 127.0.0.1:%%PORT_HTTP%%%%REUSEPORT%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)$ { feed_block $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ {
            feed_user_post $1 $2;
        }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
            subrequest_output_buffer_size 1m;
        }
        location = /status { feed_status; }
    }

    server {
        listen 127.0.0.1:%%PORT_SLOW%% sndbuf=4k;
        location ~ ^/tiny/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
            feed_stream_buffer 40;
        }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
            feed_stream_buffer 8k;
        }
    }
}
EOF2

sub conf {
    my (%o) = @_;
    my $c = $CONF;
    my $w = $o{workers} || 1;
    my $m = $o{max} ? "feed_stream_max $o{max};" : '';
    $c =~ s/%%WORKERS%%/$w/;
    $c =~ s/%%MAX%%/$m/;
    # two workers: the kernel spreads the connections over both
    my $rp = $w > 1 ? ' reuseport' : '';
    $c =~ s/%%REUSEPORT%%/$rp/;
    return $c;
}

sub up {
    return $t->wait_for(15, sub {
        my $j = $t->get('/status')->{json} or return 0;
        $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch}
            && $j->{pull}{watch}{tracking};
    });
}

$t->write_conf(conf())->run;
ok(up(), 'nginx up, the watch tracking');

my $port = $t->port('http');

# a post: its id, or undef (and the status in $LAST_STATUS)
our $LAST_STATUS;
sub try_post {
    my ($a, $body, %o) = @_;
    my $r = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}), %o);
    $LAST_STATUS = $r->{status};
    return $r->{status} == 201 ? $r->{json}{id} : undef;
}
sub post {
    my $id = try_post(@_);
    die "post $_[0] '$_[1]': $LAST_STATUS\n" unless defined $id;
    return $id;
}
sub items {
    my ($u, $n) = @_;
    my $r = $t->http_retried('GET', "/users/$u/timeline?limit=$n");
    return @{ $r->{json}{items} || [] };
}
sub ids { map { $_->{id} } items(@_) }
sub follow {
    my ($u, $f) = @_;
    my $r = $t->http('PUT', "/users/$u/following/$f");
    die "follow $u $f: $r->{status}\n" unless $r->{status} == 204;
}
sub stream {
    my ($u, %h) = @_;
    my $q = delete $h{query} // '';
    my $pre = delete $h{prefix} // '';
    my $rcv = delete $h{rcvbuf};
    return FeedTest::SSE->open(port => $port,
        path => "$pre/users/$u/timeline/stream$q", headers => \%h,
        $rcv ? (rcvbuf => $rcv) : ());
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
# events until one is an update with id $id (or a data JSON with that id)
sub until_update {
    my ($s, $id, $timeout) = @_;
    return $s->events_until(sub {
        my ($e) = @_;
        return 0 unless $e->{event} eq 'update';
        my $j = eval { FeedTest::json_decode($e->{data}) } || {};
        return ($j->{id} // '') eq $id;
    }, timeout => $timeout // 3);
}
sub upd_ids {
    map { my $j = eval { FeedTest::json_decode($_->{data}) } || {};
        $j->{id} // '?' } grep { $_->{event} eq 'update' } @_;
}
sub desc { join ', ', map { "$_->{event}:" . ($_->{event} eq 'update'
    ? (upd_ids($_))[0] : $_->{data}) } @_ }
# a stream whose reader read once (posts from now on are diffed)
sub live_stream {
    my ($u, $a, %h) = @_;
    # the list exists (a timeline read makes it): a stream of a user
    # without one is told to read it (reset, gone)
    # and the stream resumes from the newest entry read, as a client
    # does: a post landing before the reader's first read is not missed
    my ($top) = ids($u, 1);
    my $s = stream($u, $top ? (query => "?since_id=$top") : (), %h);
    return $s unless $s->status == 200;
    # a first post makes sure the reader is live
    my $p = post($a, "warm $u");
    my @e = until_update($s, $p, 3);
    diag("live_stream $u: the warm post did not come: " . desc(@e))
        unless $s->matched;
    return $s;
}
# heartbeats come for $secs: the stream is open
sub beats {
    my ($s, $secs) = @_;
    my $c0 = $s->comments;
    my $end = time + $secs;
    my @e;
    while (time < $end) {
        my $ev = $s->next_event(timeout => $end - time);
        push @e, $ev if $ev;
        last if $s->ended;
    }
    return ($s->comments - $c0, !$s->ended, @e);
}
my $T0 = time;
sub mark { note(sprintf('--- %s, at %.1fs', $_[0], time - $T0)) }

follow('ann', 'bob');
post('bob', "old $_") for 1 .. 3;

# ----------------------------------------------- 0. the first read --
mark('0. the first read');

{
    # No fault: a client reads its timeline, opens its stream with no
    # resume point (an EventSource's first connection), and a post lands
    # right after the 200.  It must come as an update: the client's read
    # did not have it.
    my $n = '0. a post right after a stream opens (no Last-Event-ID)';
    my @miss;
    for my $u (qw(ro1 ro2 ro3)) {
        follow($u, 'rob');
        post('rob', "rob before $u");
        items($u, 20);
        my $s = stream($u);
        my $p = post('rob', "rob right after $u opened");
        my @e = until_update($s, $p, 3);
        push @miss, "$u: " . (desc(@e) || 'nothing') unless $s->matched;
        $s->close;
    }
    ok(!@miss, "$n: it arrives, 3 of 3") or diag('missed: '
        . join('; ', @miss));
}

# ----------------------------------------------- 1. Redis restarted --
mark('1. Redis restarted');

{
    my $n = '1. redis restart';
    my $s = live_stream('ann', 'bob');
    is($s->status, 200, "$n: stream open");
    my $p0 = post('bob', 'before the restart');
    my @e = until_update($s, $p0);
    ok($s->matched, "$n: a post before: update");

    $t->stop_redis;
    my $down = time;
    my (@accepted, @refused);
    for my $i (1 .. 2) {
        my $id = try_post('bob', "while down $i", timeout => 8);
        if (defined $id) { push @accepted, $id } else {
            push @refused, $LAST_STATUS }
    }
    note("$n: POST while Redis is down: " . (@accepted ? scalar(@accepted)
        . ' accepted (201)' : '') . (@refused ? " refused: @refused" : ''));
    ok(@accepted || !grep({ $_ != 503 } @refused),
        "$n: POST while down: 201 or 503 (" . join(' ', (map { 201 }
        @accepted), @refused) . ')');

    my ($beats, $open, @ev) = beats($s, 2.2);
    ok($open, "$n: the stream stays open while Redis is down");
    ok($beats >= 1, "$n: heartbeats go on while down ($beats)");
    @e = (@e, @ev);

    $t->start_redis;
    ok(up(), "$n: Redis back, reconnected, tracking");

    # a reset (gone) within a few seconds: the list went with the restart
    my @r = $s->events_until(sub { $_[0]{event} eq 'reset' }, timeout => 5);
    push @ev, @r;
    ok($s->matched, "$n: reset once Redis is back (the list is gone)")
        or diag('events: ' . desc(@ev));
    is($r[-1]{data}, '{"reason":"gone"}', "$n: reason gone") if $s->matched;

    # the client reads its timeline again: what it was told to do
    my @tl = ids('ann', 20);
    my %seen = map { $_ => 1 } @tl, upd_ids(@ev);
    my @lost = grep { !$seen{$_} } @accepted;
    ok(!@lost, "$n: every post accepted while down is in the re-read or "
        . 'was sent') or diag("lost: @lost; timeline: @tl");

    my $p1 = post('bob', 'after the restart');
    my @l = until_update($s, $p1, 5);
    ok($s->matched, "$n: then a post arrives live")
        or diag('events: ' . desc(@l));
    $s->close;
}

# ----------------------------------------------- 2. CLIENT KILL -------
mark('2. CLIENT KILL');

{
    my $n = '2. CLIENT KILL TYPE normal';
    my $s = live_stream('ann', 'bob');
    my $k = $t->redis('CLIENT', 'KILL', 'TYPE', 'normal');
    note("$n: killed $k connections");
    ok($k >= 1, "$n: connections killed ($k)");
    my $p = try_post('bob', 'right after the kill');
    my $st = $LAST_STATUS;
    ok(defined $p, "$n: a post right after: 201 ($st)");
    $p //= post('bob', 'after the kill, again');
    my @e = until_update($s, $p, 4);
    ok($s->matched, "$n: it arrives") or diag('events: ' . desc(@e));
    ok(!$s->ended, "$n: the stream stays open");
    $s->close;
}

# ----------------------------------------------- 3. FLUSHALL -----------
mark('3. FLUSHALL');

{
    my $n = '3. FLUSHALL';
    my $s = live_stream('ann', 'bob');
    $t->redis('FLUSHALL');
    my @e = $s->events_until(sub { $_[0]{event} eq 'reset' }, timeout => 4);
    ok($s->matched, "$n: reset") or diag('events: ' . desc(@e));
    is($e[-1]{data}, '{"reason":"gone"}', "$n: reason gone") if $s->matched;
    ok(scalar(items('ann', 20)) > 0, "$n: the timeline read again");
    my $p = post('bob', 'after the flush');
    @e = until_update($s, $p, 4);
    ok($s->matched, "$n: then live again") or diag('events: ' . desc(@e));
    @e = events($s, 1, 1.2);
    ok(!grep({ $_->{event} eq 'reset' } @e), "$n: reset told once")
        or diag('events: ' . desc(@e));
    $s->close;
}

# ----------------------------------------------- 4. CLIENT PAUSE ------
mark('4. CLIENT PAUSE');

{
    my $n = '4. CLIENT PAUSE 2000';
    my $s = live_stream('ann', 'bob');
    $t->redis('CLIENT', 'PAUSE', 2000);
    my $t0 = time;
    my $h = $t->http_start('POST', '/users/bob/posts',
        headers => { 'Content-Type' => 'application/json' },
        body => '{"body": "during the pause"}', timeout => 8);
    my $r = $t->http_end($h);
    ok($r->{status} == 201, "$n: a post during the pause: $r->{status} "
        . sprintf('(answered after %.2fs)', time - $t0));
    my $p = $r->{json}{id} // post('bob', 'after the pause');
    my @e = until_update($s, $p, 5);
    ok($s->matched, "$n: it arrives after the pause "
        . sprintf('(%.2fs)', time - $t0)) or diag('events: ' . desc(@e));
    ok(!$s->ended, "$n: the stream stays open");
    $s->close;
}

# ----------------------------------------------- 5. error replies -----
mark('5. error replies');

my $NOSCRIPT_POST;
{
    my $n = '5. OOM';
    my $s = live_stream('ann', 'bob');
    my $policy = $t->redis('CONFIG', 'GET', 'maxmemory-policy')->[1];
    $t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    $t->redis('CONFIG', 'SET', 'maxmemory', 1);
    my $oom = try_post('bob', 'while OOM');
    ok(defined $oom || $LAST_STATUS == 503,
        "$n: a post while OOM: 201 or 503 ($LAST_STATUS)");
    my $tl = $t->get('/users/ann/timeline?limit=5');
    ok($tl->{status} == 200, "$n: timeline reads still work "
        . "($tl->{status})");
    my ($beats, $open, @ev) = beats($s, 2.2);
    ok($open && $beats >= 1, "$n: the stream stays open, heartbeats "
        . "($beats)");
    ok(!grep({ $_->{event} eq 'reset' } @ev), "$n: no reset for an error "
        . 'reply') or diag('events: ' . desc(@ev));
    $t->redis('CONFIG', 'SET', 'maxmemory', 0);
    $t->redis('CONFIG', 'SET', 'maxmemory-policy', $policy);
    my $t0 = time;
    my $p = post('bob', 'after OOM');
    my @e = until_update($s, $p, 4);
    ok($s->matched, "$n: after restoring, posts flow")
        or diag('events: ' . desc(@ev, @e));
    if (defined $oom) {
        # accepted into the outbox while XADD failed: enqueued once
        # overdue, so late, but not lost
        my %got = map { $_ => 1 } upd_ids(@ev, @e);
        my @l = $got{$oom} ? () : until_update($s, $oom, 10);
        ok($got{$oom} || $s->matched, sprintf("$n: the post accepted while "
            . 'OOM arrives (%.1fs after restoring)', time - $t0))
            or diag('events: ' . desc(@l));
    }

    # the reader's own read answered NOSCRIPT: a key of ann's that her
    # reader tracks (the list's version) touched right after the flush,
    # before any other script call, makes the reader read first
    $n = '5. NOSCRIPT, the reader';
    my $reads = $t->get('/status')->{json}{streams}{reads};
    is($t->redis('SCRIPT', 'FLUSH'), 'OK', "$n: SCRIPT FLUSH");
    my $ttl = $t->redis('PTTL', 'feed:tln:{ann}');
    $t->redis('PEXPIRE', 'feed:tln:{ann}', $ttl > 0 ? $ttl : 600000);
    ($beats, $open, @ev) = beats($s, 1.5);
    ok($t->get('/status')->{json}{streams}{reads} > $reads,
        "$n: the reader read after the flush");
    ok($open, "$n: the stream stays open");
    ok(!grep({ $_->{event} eq 'reset' } @ev), "$n: no reset")
        or diag('events: ' . desc(@ev));
    $p = post('bob', 'after the reader\'s NOSCRIPT');
    @e = until_update($s, $p, 3);
    ok($s->matched, "$n: a post after arrives")
        or diag('events: ' . desc(@ev, @e));

    # the fanout's delivery answered NOSCRIPT
    $n = '5. NOSCRIPT, the fanout';
    is($t->redis('SCRIPT', 'FLUSH'), 'OK', "$n: SCRIPT FLUSH");
    $t0 = time;
    my $p1 = post('bob', 'right after the script flush');
    @e = until_update($s, $p1, 3);
    ok($s->matched, "$n: a post right after arrives within 3 s")
        or diag('events: ' . desc(@e) . '; error.log: ' . join(' | ',
            grep { /NOSCRIPT/ } split /\n/, $t->error_log));
    $NOSCRIPT_POST = $s->matched ? undef : $p1;
    my $p2 = post('bob', 'a second after the script flush');
    @e = until_update($s, $p2, 3);
    ok($s->matched, "$n: the next post arrives (scripts loaded again)")
        or diag('events: ' . desc(@e));
    ok(!$s->ended, "$n: the stream stays open");
    $s->close;
}

# ----------------------------------------------- 6. slow client -------
mark('6. slow client');

{
    # Linux grows a loopback sender's buffer to ~3 MB for a reader with
    # rcvbuf 4096: the slow client is on a server listening with
    # sndbuf=4k, else the kernel takes all 60 KB and nginx never holds
    # more than feed_stream_buffer (8k)
    my $n = '6. slow client';
    follow('dan', 'eve');
    post('eve', "eve old $_") for 1 .. 2;
    my $fast = live_stream('dan', 'eve');
    my $slow = FeedTest::SSE->open(port => $t->port('slow'),
        path => '/users/dan/timeline/stream', rcvbuf => 4096);
    is($slow->status, 200, "$n: the slow stream open (feed_stream_buffer "
        . '8k, rcvbuf 4096, sndbuf 4k)');
    sleep 0.3;
    # 60 posts of 1 KB in six bursts of ten, each read by the normal
    # stream before the next: the slow stream must be sent them all to
    # pass its limit.  One burst of 60 could outrun the list of 40 where
    # the streams' point was, and a reset (gap) for the two streams of the
    # reader would leave the slow one too little to close it (a failure
    # of CI's run at 2e469cd)
    my $long = 'x' x 1000;
    my (@p, @e);
    my $gap = 0;
    for my $b (0 .. 5) {
        push @p, post('eve', sprintf('%02d %s', $b * 10 + $_, $long))
            for 1 .. 10;
        push @e, $fast->events_until(sub {
            my (undef, $all) = @_;
            my %got = map { $_ => 1 } upd_ids(@e, @$all);
            return !grep({ !$got{$_} } @p)
                || grep { $_->{event} eq 'reset' } @$all;
        }, timeout => 10);
        $gap = grep { $_->{event} eq 'reset' } @e;
    }

    # each post sent, or, past a reset (gap), in the timeline read then
    if ($gap) {
        sleep 1;
        push @e, $fast->pending_events;
    }
    my @got = upd_ids(@e);
    my %have = map { $_ => 1 } @got, $gap ? ids('dan', 100) : ();
    is(scalar(grep { $have{$_} } @p), 60,
        "$n: the normal stream got every post (" . scalar(@got)
        . ($gap ? ', a reset, the others read' : '') . ')')
        or diag(desc(@e));
    is(join(' ', map { "$_->{event} $_->{data}" } grep {
        $_->{event} ne 'update' && "$_->{event} $_->{data}" ne
        'reset {"reason":"gap"}' } @e), '',
        "$n: no other event than resets (gap): $gap");
    my %c;
    $c{$_}++ for @got;
    ok(!grep({ $c{$_} > 1 } keys %c), "$n: each once");
    ok($slow->closed_by_server(timeout => 5), "$n: the slow one closed by "
        . 'the server');
    ok($t->wait_for(3, sub { $t->error_log =~ /\[info\].*feed\ stream\ of
        \ "dan"\ closed:\ the\ client\ left\ \d+\ bytes\ unread/x }),
        "$n: error.log: closed, the client left ... unread (info)");
    my @el;
    for (1 .. 3) {
        my $r = $t->get('/users/dan/timeline?limit=20');
        push @el, $r->{status} == 200 ? $r->{elapsed} : 99;
    }
    @el = sort { $a <=> $b } @el;
    ok($el[1] < 0.1, sprintf("$n: a timeline read stays fast (median "
        . '%.0f ms)', $el[1] * 1000));
    ok(!$fast->ended, "$n: the normal stream stays open");
    $fast->close;
    ok($t->wait_for(3, sub {
        $t->get('/status')->{json}{streams}{streams} == 0 }),
        "$n: status: no stream left");
}

# ----------------------------------------------- 6b. a delete ends the last stream --
mark('6b. a delete ends the last stream');

{
    # A delete event that ends the user's only stream (here: an event
    # larger than feed_stream_buffer 40, the way a slow client's would)
    # from the pub/sub hook: the reader goes with its last stream, freed
    # while ngx_http_feed_stream_hook_deleted() still walks the readers.
    # A sanitizer build (FEED_TEST_ASAN=1) reports what a plain one
    # cannot show.
    my $n = '6b. a delete ends the last stream';
    follow('zed', 'yan');
    my @y = map { post('yan', "yan $_") } 1 .. 3;
    follow('zoe', 'yan');
    items($_, 20) for qw(zed zoe);
    # zed's reader first in the worker's list, zoe's after it
    my $s = FeedTest::SSE->open(port => $t->port('slow'),
        path => '/tiny/users/zed/timeline/stream');
    is($s->status, 200, "$n: a stream with feed_stream_buffer 40");
    sleep 0.2;
    my $other = stream('zoe');
    sleep 0.5;
    is($t->http('DELETE', "/users/yan/posts/$y[1]")->{status}, 204,
        "$n: a post of its window deleted");
    ok($s->wait_closed(timeout => 3), "$n: its delete (46 bytes) ends it");
    my @e = events($other, 1, 3);
    is($e[0] && "$e[0]{event} $e[0]{data}", "delete $y[1]",
        "$n: the other reader's stream got the delete");
    is($t->get('/status')->{status}, 200, "$n: the worker answers");
    my $s2 = stream('zed');
    my $p = post('yan', 'after the tiny stream');
    @e = until_update($s2, $p, 3);
    ok($s2->matched, "$n: a new stream of the user is live");
    $_->close for $s2, $other;
}

# ----------------------------------------------- 10. block, unfollow --
mark('10. block, unfollow');

# $u follows $a (n posts) and "c-$u" (2 posts, newer... older): the
# newest 20 entries hold all of $a's; $do makes them go
sub goes {
    my ($n, $u, $a, $count, $method, $path) = @_;
    my $c = "c$u";
    follow($u, $_) for $a, $c;
    post($c, "$c $_") for 1 .. 2;
    my @a = map { post($a, "$a $_") } 1 .. $count;
    ok($t->wait_for(5, sub { (ids($u, 1))[0] eq $a[-1] }),
        "$n: $u\'s timeline has $a\'s $count posts");
    my $s = live_stream($u, $c);
    my $r = $t->http($method, $path);
    is($r->{status}, 204, "$n: $method $path");
    # A block or an unfollow hides the author's posts in the cached list
    # in place (the module keeps it): the stream gets a delete for each
    # post of its window, or a reset past 10, with no timeline read
    # (docs/timeline.md#live-timelines)
    my @e = events($s, $count > 10 ? 1 : $count, 3);
    if ($count > 10) {
        is(join(' ', map { "$_->{event} $_->{data}" } @e),
            'reset {"reason":"changed"}', "$n: reset, changed");
    } else {
        is(join(' ', sort map { "$_->{event} $_->{data}" } @e),
            join(' ', sort map { "delete $_" } @a),
            "$n: a delete for each of $a\'s posts");
    }
    my @tl = ids($u, 20);
    ok(!grep({ my $i = $_; grep { $_ eq $i } @a } @tl),
        "$n: a read has none of $a\'s posts");
    my $p = post($c, "$c live");
    my @l = until_update($s, $p, 3);
    ok($s->matched, "$n: then live") or diag('events: ' . desc(@l));
    $s->close;
}

goes('10. block, 3 posts', 'fay', 'bo1', 3, 'PUT', '/users/fay/blocks/bo1');
goes('10. unfollow, 15 posts', 'gus', 'iv1', 15, 'DELETE',
    '/users/gus/following/iv1');
goes('10. unfollow, 3 posts', 'hal', 'jo1', 3, 'DELETE',
    '/users/hal/following/jo1');
goes('10. block, 15 posts', 'ida', 'ki1', 15, 'PUT',
    '/users/ida/blocks/ki1');

{
    # not a contract of its own: what a follow does to an open stream
    # (the follow drops the cached list)
    my $n = '10. a follow';
    my $s = live_stream('fay', 'cfay');
    is($t->http('PUT', '/users/fay/following/nu1')->{status}, 204,
        "$n: fay follows nu1");
    my $p = post('cfay', 'after the follow');
    my @e = events($s, 2, 2);
    note("$n: the stream got, with no timeline read: " . desc(@e));
    ok(grep({ $_->{event} eq 'reset' } @e) || grep({ $_ eq $p } upd_ids(@e)),
        "$n: a post after it arrives, or a reset says to read again");
    $s->close;
}
# ----------------------------------------------- 9. reload ------------
mark('9. reload');

{
    my $n = '9. reload';
    my $s = live_stream('ann', 'bob');
    my %old = map { $_ => 1 } $t->worker_pids;
    my $t0 = time;
    $t->signal('nginx', 'HUP');
    # posts made right after the reload: the old worker may send them yet
    my @p = map { post('bob', "reload $_") } 1 .. 2;
    ok($s->wait_closed(timeout => 4), "$n: the old worker's stream ended");
    my $took = time - $t0;
    ok($took < 2.5, sprintf("$n: within ~2 s (%.2fs)", $took));
    my @before = events($s, 10, 0.1);
    my @sent = upd_ids(@before);
    push @p, map { post('bob', "reload later $_") } 1 .. 2;
    ok($t->wait_for(10, sub {
        my @now = $t->worker_pids;
        @now && !grep { $old{$_} } @now }), "$n: new worker, old gone");
    ok($t->wait_for(5, sub { (ids('ann', 1))[0] eq $p[-1] }),
        "$n: the posts in ann's timeline");

    my $last = $s->last_id;
    my $s2 = stream('ann', 'Last-Event-ID' => $last);
    is($s2->status, 200, "$n: reconnect with Last-Event-ID");
    my %sent = map { $_ => 1 } @sent;
    my @want = grep { !$sent{$_} } @p;
    my @e = events($s2, scalar @want, 4);
    push @e, events($s2, 5, 1.2);
    is(join(' ', map { "$_->{event} " . ($_->{id} // '-') } @e),
        join(' ', map { "update $_" } @want),
        "$n: the posts made since, oldest first, no duplicates ("
        . scalar(@sent) . ' sent by the old worker, ' . scalar(@want)
        . ' on resume)');
    my $p = post('bob', 'after the reload');
    @e = until_update($s2, $p, 3);
    ok($s2->matched, "$n: then live on the new worker");
    $s2->close;

    if ($NOSCRIPT_POST) {
        # the post made right after SCRIPT FLUSH, not delivered then: is
        # it there at all, a feed_fanout_claim_idle (30 s) later?
        my $t0 = time;
        ok($t->wait_for(15, sub { grep { $_ eq $NOSCRIPT_POST }
            ids('ann', 40) }), '5. NOSCRIPT: the post made right after the '
            . 'flush is in the timeline at last ('
            . sprintf('%.1fs more', time - $t0) . ')');
    }
}

# ----------------------------------------------- 8. graceful stop -----
mark('8. graceful stop');

{
    my $n = '8. graceful stop';
    my %a = (ann => 'bob', dan => 'eve', fay => 'cfay');
    my @s = map { live_stream($_, $a{$_}) } sort keys %a;
    is(scalar(grep { $_->status == 200 && !$_->ended } @s), 3,
        "$n: 3 streams open");
    my $log0 = length $t->error_log;
    my $t0 = time;
    ok($t->stop, "$n: nginx stopped (SIGQUIT)");
    my $took = time - $t0;
    ok($took < 3, sprintf("$n: within 3 s (%.2fs)", $took));
    is(scalar(grep { $_->wait_closed(timeout => 1) } @s), 3,
        "$n: each client saw its stream end");
    my @bad = grep { /\[(alert|emerg)\]|open socket .* left/ }
        split /\n/, substr($t->error_log, $log0);
    ok(!@bad, "$n: no alert, no open socket left")
        or diag(join "\n", @bad);
}

# ----------------------------------------------- 7. feed_stream_max ---
mark('7. feed_stream_max');

{
    my $n = '7. feed_stream_max 2';
    $t->write_conf(conf(max => 2))->run;
    ok(up(), "$n: nginx up");
    my @s = map { stream('ann') } 1 .. 2;
    is(join(' ', map { $_->status } @s), '200 200', "$n: two streams");
    my $x = stream('ann');
    is($x->status, 503, "$n: the third: 503");
    my $j = eval { FeedTest::json_decode($x->body) } || {};
    is($j->{error}, 'unavailable', "$n: JSON body, error unavailable");
    like($x->header('content-type') // '', qr{^application/json},
        "$n: application/json");
    like($x->header('retry-after') // '', qr/^\d+$/, "$n: Retry-After");
    $s[0]->close;
    my $y;
    ok($t->wait_for(3, sub {
        $y = stream('ann');
        $y->status == 200 }), "$n: one closed, a new one accepted");
    $_->close for $s[1], $y;
    ok($t->stop, "$n: stopped");
}

# ----------------------------------------------- 11. two workers ------
mark('11. two workers');

{
    my $n = '11. two workers';
    $t->write_conf(conf(workers => 2))->run;
    ok(up(), "$n: nginx up");
    follow($_, 'wes') for qw(u1 u2 u3);
    post('wes', 'wes old');
    items($_, 20) for qw(u1 u2 u3);
    my @s = map { my $u = $_; map { stream($u) } 1 .. 2 } qw(u1 u2 u3);
    is(scalar(grep { $_->status == 200 } @s), 6, "$n: 6 streams open");
    my %pids;
    for (1 .. 20) {
        my $j = $t->get('/status')->{json} or next;
        $pids{$j->{pid}} = $j->{streams}{streams};
    }
    note("$n: streams per worker: " . join(', ', map { "$_: $pids{$_}" }
        sort keys %pids) . (grep({ $_ } values %pids) < 2
        ? ' (all on one worker this time)' : ''));
    my $sum = 0;
    $sum += $_ for values %pids;
    is($sum, 6, "$n: /status of the workers: 6 streams in all")
        if keys %pids == 2;
    sleep 0.5;
    my $p = post('wes', 'to all');
    my @got = map { [ events($_, 1, 3) ] } @s;
    sleep 0.5;
    push @{ $got[$_] }, $s[$_]->pending_events for 0 .. $#s;
    my $ok = 0;
    for my $e (@got) {
        if (@$e == 1 && $e->[0]{event} eq 'update'
            && ($e->[0]{id} // '') eq $p) { $ok++ }
        else { diag('events: ' . desc(@$e)) }
    }
    is($ok, 6, "$n: each stream got its update once");
    $_->close for @s;
}

$t->done;
