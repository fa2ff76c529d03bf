#!/usr/bin/perl

# Live timelines (feed_timeline_stream) on two nginx nodes of two workers
# each, one Redis, one MongoDB stand-in, link mode: streams of readers on
# node A (and some on node B), the changes made through the other node.
#
#   - posts of pushed authors made through node B: every stream of a
#     follower, on either node, gets each post once as an update (its data
#     the post's JSON), those of one author in id order, and no other;
#   - a delete made through node B: "delete" with the id on the streams on
#     node A (and B) of the readers that had it, at once;
#   - a mute made through node A: a delete of each of the muted author's
#     posts on the reader's streams of both nodes;
#   - a pull author (feed_pull_threshold 3, 4 followers) posting: an update
#     within 2 s on the streams of its followers, both nodes;
#   - a pull author's post deleted through node B: "delete" on every
#     stream; an unmute through node B: the author's posts back on the
#     reader's streams of both nodes, as updates without an id;
#   - a stream of node A resumed on node B with its Last-Event-ID: the
#     posts it missed, oldest first, then live;
#   - the watches' subscriptions killed: a post made right after, of the
#     pull author and of a pushed one, on the followers' streams within
#     2 s; Redis restarted (every list gone): every stream told reset, and
#     once the timelines are read, posts live again on both nodes;
#   - node A reaches Redis through t/lib/tcp_proxy.pl in "hold" mode: its
#     watches stalled, posts made through node B reach its streams all the
#     same, within 2.5 s;
#   - the plain reads are unaffected: a first page read after the streams'
#     events, on either node, is HIT or LOCAL, and as the model has it;
#   - neither node logs an [alert] (FeedTest::finish).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(post statuses summary tl_ids);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $T0 = time;

my $A = FeedTest->new;      # node A: most streams
my $B = FeedTest->new;      # node B: the posts, some streams

$A->start_redis;
$A->start_mongo;
my $PROXY = 'redishold';
$A->start_proxy($PROXY, $A->port('redis'), 0, 'hold');
$A->port('http');
$B->set_port($_, $A->port($_)) for qw(redis mongo);
$B->port('http') == $_ and die "port taken twice\n" for values %{$A->{ports}};

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS_NODE%%;
    feed_redis_timeout 3s;
    %%FEED_MONGO%%
    feed_mongo_timeout 3s;
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_fanout_claim_idle 2s;
    feed_pull_threshold 3;
    feed_stream_heartbeat 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache $feed_cache_status always;
            add_header X-Worker $pid always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

# node A through the proxy in "hold" mode, node B straight
(my $conf = $CONF) =~ s/%%PORT_REDIS_NODE%%/%%PORT_REDISHOLD%%/;
$A->write_conf($conf)->run;
($conf = $CONF) =~ s/%%PORT_REDIS_NODE%%/%%PORT_REDIS%%/;
$B->write_conf($conf)->run;

sub up {
    my ($n) = @_;
    my $st = statuses($n);
    return keys %$st == 2 && !grep {
        !($_->{redis}{up} && $_->{mongo}{up} && $_->{pull}{watch}
            && $_->{pull}{watch}{tracking})
    } values %$st;
}
ok($A->wait_for(15, sub { up($A) && up($B) }),
    'both nodes\' workers up, their watches tracking');

# ----------------------------------------------------------------- model --

my $LIMIT = 20;
my %FOL = (
    r1 => [qw(a1 a2 celeb)],
    r2 => [qw(a1 a3 celeb)],
    r3 => [qw(a2 a3 celeb)],
    r4 => [qw(a4 celeb)],
);
my %BY;          # author => [ids]
my %DEL;         # id => 1
my %MUTED;       # reader => { author => 1 }
my %AUTHOR;      # id => author

sub visible {
    my ($r) = @_;
    return sort { $b cmp $a } grep { !$DEL{$_} }
        map { @{ $BY{$_} || [] } } grep { !$MUTED{$r}{$_} } @{ $FOL{$r} };
}

sub want_ids {
    my @v = visible($_[0]);
    splice(@v, $LIMIT) if @v > $LIMIT;
    return join ' ', @v;
}

sub mypost {
    my ($node, $au, $body) = @_;
    my $id = post($node, $au, $body) or return;
    push @{ $BY{$au} }, $id;
    $AUTHOR{$id} = $au;
    return $id;
}

for my $r (sort keys %FOL) {
    for my $f (@{ $FOL{$r} }) {
        is($A->http('PUT', "/users/$r/following/$f")->{status}, 204,
            "$r follows $f") or BAIL_OUT('follow failed');
    }
}

# celeb, 4 followers, a pull author from its first post on; the others
# pushed (2 followers at most)
my $c0 = mypost($B, 'celeb', 'celeb 0');
ok($A->wait_for(5, sub {
    my $l = eval { $A->redis('LRANGE', 'feed:pl:{celeb}', 0, -1) } || [];
    grep { entry_id($_) eq $c0 } @$l }),
    'celeb: a pull author, its post in its own list (feed:pl:{celeb})');

# a post of each pushed author before the streams, and every first page
# holding what it should
mypost($B, $_, "$_ before") for qw(a1 a2 a3 a4);
sub page_ids {
    my ($n, $r) = @_;
    my $res = $n->get("/users/$r/timeline?limit=$LIMIT");
    return (join(' ', @{ tl_ids($res) }), $res);
}
ok($A->wait_for(10, sub {
    !grep { (page_ids($A, $_))[0] ne want_ids($_) } keys %FOL }),
    'the first pages as the model has them before the streams')
    or diag(join "\n", map { "$_: " . summary([ split / /,
        (page_ids($A, $_))[0] ], [ split / /, want_ids($_) ]) } sort keys %FOL);

# -------------------------------------------------------- the streams --

# name => { node, reader, sse }
my %S;
sub open_stream {
    my ($name, $node, $r) = @_;
    my $s = FeedTest::SSE->open(port => $node->port('http'),
        path => "/users/$r/timeline/stream", timeout => 10);
    $S{$name} = { node => $node, reader => $r, sse => $s, events => [] };
    return $s;
}

# r1 twice on A (two connections: reuseport may give them to either
# worker, or both), r2 and r3 on A, r3 and r4 on B
my @ON_A = ([ 'A:r1', 'r1' ], [ 'A:r1b', 'r1' ], [ 'A:r2', 'r2' ],
    [ 'A:r3', 'r3' ]);
my @ON_B = ([ 'B:r3', 'r3' ], [ 'B:r4', 'r4' ]);
open_stream($_->[0], $A, $_->[1]) for @ON_A;
open_stream($_->[0], $B, $_->[1]) for @ON_B;

is(join(' ', map { "$_=" . $S{$_}{sse}->status } sort keys %S),
    join(' ', map { "$_=200" } sort keys %S), 'every stream: 200');

# the readers read once (live) before anything happens
sleep 1;
ok($A->wait_for(5, sub {
    my $st = statuses($A);
    my $n = 0;
    $n += $_->{streams}{streams} // 0 for values %$st;
    $n == 4 }), 'node A: 4 streams in its workers\' /status');
ok($B->wait_for(5, sub {
    my $st = statuses($B);
    my $n = 0;
    $n += $_->{streams}{streams} // 0 for values %$st;
    $n == 2 }), 'node B: 2 streams in its workers\' /status');

# what every stream received since the last call, polled until $done->()
# is true of the events of each (or $timeout); events kept per stream
sub collect {
    my ($timeout, $done) = @_;
    my $end = time + $timeout;
    my %new = map { $_ => [] } keys %S;
    while (1) {
        for my $k (keys %S) {
            my @e = $S{$k}{sse}->pending_events;
            push @{ $new{$k} }, @e;
            push @{ $S{$k}{events} }, @e;
        }
        last if !grep { !$done->($_, $new{$_}) } keys %S;
        last if time > $end;
        sleep 0.05;
    }
    return \%new;
}

sub ev_str {
    my ($e) = @_;
    return "$e->{event} $e->{data}" unless $e->{event} eq 'update';
    my $j = eval { FeedTest::json_decode($e->{data}) } || {};
    return "update " . ($j->{id} // '?') . ' id:' . ($e->{id} // '-');
}

sub update_ids {
    return map { my $j = eval { FeedTest::json_decode($_->{data}) } || {};
        $j->{id} // 'bad' } grep { $_->{event} eq 'update' } @{ $_[0] };
}

# --------------------------------------- posts made through node B --

my @made;
for my $i (1 .. 3) {
    for my $au (qw(a1 a2 a3 a4)) {
        next if $au eq 'a4' && $i == 3;
        push @made, mypost($B, $au, "$au post $i");
    }
}
is(scalar @made, 11, '11 posts of 4 pushed authors made through node B');

# the posts each reader should get
sub wanted_posts {
    my ($r) = @_;
    my %f = map { $_ => 1 } @{ $FOL{$r} };
    return grep { $f{ $AUTHOR{$_} } } @made;
}

my $got = collect(10, sub {
    my ($k, $ev) = @_;
    return update_ids($ev) >= wanted_posts($S{$k}{reader});
});
sleep 0.5;
my $late = collect(0, sub { 1 });
push @{ $got->{$_} }, @{ $late->{$_} } for keys %$late;

for my $k (sort keys %S) {
    my $r = $S{$k}{reader};
    my @want = sort(wanted_posts($r));
    my @ids = update_ids($got->{$k});
    my @other = grep { $_->{event} ne 'update' } @{ $got->{$k} };
    is(join(' ', sort @ids), "@want", "$k ($r): each post of its followees "
        . 'once, no other') or diag(summary([ sort @ids ], \@want)
            . "\nevents: " . join(', ', map { ev_str($_) } @{ $got->{$k} }));
    ok(!@other, "$k: nothing but updates")
        or diag(join ', ', map { ev_str($_) } @other);

    my %per;
    push @{ $per{ $AUTHOR{$_} // '?' } }, $_ for @ids;
    my @disorder = grep { join(' ', @{ $per{$_} })
        ne join(' ', sort @{ $per{$_} }) } sort keys %per;
    ok(!@disorder, "$k: the posts of each author in id order")
        or diag(join "\n", map { "$_: @{ $per{$_} }" } @disorder);
}

# the data: the post as the timeline page has it
{
    my ($ids, $res) = page_ids($A, 'r1');
    my %item = map { $_->{id} => $_ } @{ $res->{json}{items} || [] };
    my ($ev) = grep { $_->{event} eq 'update' } @{ $got->{'A:r1'} };
    my $j = $ev && eval { FeedTest::json_decode($ev->{data}) };
    ok($j && $item{ $j->{id} }, 'A:r1: an update\'s post is on r1\'s page');
    is_deeply($j, $item{ $j->{id} // '' },
        'its data: the post as the page has it') if $j;
}

# --------------------------------- plain reads: local hits unaffected --

sub reads_right {
    my ($name, $r, $n) = @_;
    my (@bad, %cache, %workers);
    for (1 .. ($n || 6)) {
        for my $node ([ 'A', $A ], [ 'B', $B ]) {
            my ($ids, $res) = page_ids($node->[1], $r);
            my $c = $res->{headers}{'x-feed-cache'} // '(none)';
            $cache{"$node->[0] $c"}++;
            push @bad, "$node->[0] $c status $res->{status}: "
                . summary([ split / /, $ids ], [ split / /, want_ids($r) ])
                if $res->{status} != 200 || $ids ne want_ids($r)
                    || $c !~ /^(?:HIT|LOCAL)\z/;
        }
    }
    ok(!@bad, "$name: $r\'s first pages on both nodes HIT or LOCAL, as the "
        . 'model has them (' . join(', ', map { "$_ $cache{$_}" }
        sort keys %cache) . ')')
        or diag(join "\n", @bad[0 .. ($#bad > 4 ? 4 : $#bad)]);
}

reads_right('after the posts', $_) for qw(r1 r3 r4);

# ------------------------------------------ a delete through node B --

my $del = $BY{a1}[1];
my $t0 = time;
is($B->http('DELETE', "/users/a1/posts/$del")->{status}, 204,
    'a post of a1 deleted through node B');
$DEL{$del} = 1;
my @hold = grep { grep { $_ eq 'a1' } @{ $FOL{ $S{$_}{reader} } } } keys %S;
$got = collect(5, sub {
    my ($k, $ev) = @_;
    return 1 unless grep { $_ eq $k } @hold;
    return grep { $_->{event} eq 'delete' } @$ev;
});
my $took = time - $t0;
for my $k (sort @hold) {
    is(join(', ', map { ev_str($_) } @{ $got->{$k} }), "delete $del",
        "$k: event: delete, data: its id");
}
ok($took < 2, sprintf('the deletes within 2 s (%.3fs)', $took));
for my $k (sort grep { my $k = $_; !grep { $_ eq $k } @hold } keys %S) {
    is(scalar @{ $got->{$k} }, 0, "$k: not told (never had it)")
        or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
}
reads_right('after the delete', 'r2');

# ---------------------------------------------- a mute through node A --

my @a2 = grep { !$DEL{$_} } @{ $BY{a2} };
is($A->http('PUT', '/users/r3/mutes/a2')->{status}, 204,
    'r3 mutes a2 through node A');
$MUTED{r3}{a2} = 1;
$got = collect(5, sub {
    my ($k, $ev) = @_;
    return 1 unless $S{$k}{reader} eq 'r3';
    return grep({ $_->{event} eq 'delete' } @$ev) >= @a2;
});
for my $k (qw(A:r3 B:r3)) {
    is(join(' ', sort map { ev_str($_) } @{ $got->{$k} }),
        join(' ', sort map { "delete $_" } @a2),
        "$k: a delete of each of a2's " . scalar(@a2) . ' posts');
}
for my $k (sort grep { $S{$_}{reader} ne 'r3' } keys %S) {
    is(scalar @{ $got->{$k} }, 0, "$k: not told")
        or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
}
reads_right('after the mute', 'r3');

# ------------------------------------------------- a pull author posts --

for my $i (1 .. 2) {
    my $cp = mypost($B, 'celeb', "celeb live $i");
    $t0 = time;
    my %at;
    $got = collect(5, sub {
        my ($k, $ev) = @_;
        $at{$k} //= time - $t0 if grep { $_ eq $cp } update_ids($ev);
        return defined $at{$k};
    });
    for my $k (sort keys %S) {
        ok(defined $at{$k} && $at{$k} < 2, "celeb's post $i: an update on "
            . "$k within 2 s (" . (defined $at{$k}
            ? sprintf('%.3fs', $at{$k}) : 'never') . ')')
            or diag('events: ' . join(', ', map { ev_str($_) }
                @{ $got->{$k} }));
        my @n = grep { $_ eq $cp } update_ids($got->{$k});
        ok(@n <= 1, "$k: once") or diag("@n");
    }
}
sleep 0.5;
my $rest = collect(0, sub { 1 });
is(join('; ', map { my $k = $_; map { "$k " . ev_str($_) }
    @{ $rest->{$k} } } sort keys %$rest), '', 'nothing more on any stream');

reads_right('after the pull posts', $_) for qw(r1 r2 r4);

# a post through node A of a pushed author: the streams on node B too
my $pa = mypost($A, 'a4', 'a4 through A');
$got = collect(5, sub { my ($k, $ev) = @_;
    $S{$k}{reader} ne 'r4' || grep { $_ eq $pa } update_ids($ev) });
is(join(' ', update_ids($got->{'B:r4'})), $pa,
    'a post made through node A: on node B\'s stream');

# a pull author's post deleted through node B: every stream told
my $cdel = $BY{celeb}[-1];
is($B->http('DELETE', "/users/celeb/posts/$cdel")->{status}, 204,
    'a pull author\'s post deleted through node B');
$DEL{$cdel} = 1;
$got = collect(5, sub { grep { $_->{event} eq 'delete' } @{ $_[1] } });
for my $k (sort keys %S) {
    is(join(', ', map { ev_str($_) } @{ $got->{$k} }), "delete $cdel",
        "$k: the pull author's post: delete");
}

# unmuted through node B: a2's posts back on r3's streams of both nodes,
# as updates without an id (older than what the streams sent)
@a2 = grep { !$DEL{$_} } @{ $BY{a2} };
is($B->http('DELETE', '/users/r3/mutes/a2')->{status}, 204,
    'r3 unmutes a2 through node B');
delete $MUTED{r3}{a2};
$got = collect(5, sub {
    my ($k, $ev) = @_;
    return 1 unless $S{$k}{reader} eq 'r3';
    return update_ids($ev) >= @a2;
});
for my $k (qw(A:r3 B:r3)) {
    is(join(' ', sort(update_ids($got->{$k}))), join(' ', sort @a2),
        "$k: an update of each of a2's " . scalar(@a2) . ' posts')
        or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
    ok(!grep({ defined $_->{id} } @{ $got->{$k} }), "$k: without an id "
        . '(older than what the stream sent)');
}
for my $k (sort grep { $S{$_}{reader} ne 'r3' } keys %S) {
    is(scalar @{ $got->{$k} }, 0, "$k: not told")
        or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
}
reads_right('after the unmute', 'r3');

# a stream of node A closed, resumed on node B with its Last-Event-ID:
# first a post it gets a while after the changes above (a reconnect at a
# point before them is told reset, t/stream_resume.t)
sleep 0.2;
my $pre = mypost($A, 'a1', 'a1 before r2 goes away');
push @made, $pre;
$got = collect(5, sub { my ($k, $ev) = @_;
    $k ne 'A:r2' || grep { $_ eq $pre } update_ids($ev) });
ok(grep({ $_ eq $pre } update_ids($got->{'A:r2'})),
    'A:r2 got a post before going away');
my $leid = $S{'A:r2'}{sse}->last_id;
ok($leid, "A:r2's Last-Event-ID: $leid");
$S{'A:r2'}{sse}->close;
delete $S{'A:r2'};
my @away = map { mypost($A, 'a1', "a1 while r2 away $_") } 1 .. 2;
push @made, @away;
ok($A->wait_for(5, sub { (page_ids($A, 'r2'))[0] eq want_ids('r2') }),
    'two posts of a1 made through node A while r2 was away');
$got = collect(3, sub { my ($k, $ev) = @_; $S{$k}{reader} ne 'r1'
    || update_ids($ev) >= 2 });
my $rs = FeedTest::SSE->open(port => $B->port('http'),
    path => '/users/r2/timeline/stream', timeout => 10,
    headers => { 'Last-Event-ID' => $leid });
is($rs->status, 200, 'r2 resumes on node B with it');
my @back;
while (my $e = $rs->next_event(timeout => 3)) {
    push @back, $e;
    last if @back == 2;
}
is(join(' ', map { "$_->{event} " . ($_->{id} // '-') } @back),
    join(' ', map { "update $_" } @away),
    'node B: the two posts it missed, oldest first, with their ids');
my $l2 = mypost($A, 'a3', 'a3 live for r2');
my $e = $rs->next_event(timeout => 3);
is($e && "$e->{event} " . ($e->{id} // '-'), "update $l2",
    'then live: a post made through node A');
$rs->close;

# within $secs, each stream of the followers of $au (all: celeb) that got
# $id as an update: name => seconds
sub arrival {
    my ($id, $au, $secs) = @_;
    my $t0 = time;
    my %at;
    my @want = grep { my $r = $S{$_}{reader};
        grep { $_ eq $au } @{ $FOL{$r} } } keys %S;
    my $got = collect($secs, sub {
        my ($k, $ev) = @_;
        $at{$k} //= time - $t0 if grep { $_ eq $id } update_ids($ev);
        return defined $at{$k} || !grep { $_ eq $k } @want;
    });
    return (\%at, [ sort @want ], $got);
}

sub arrived_ok {
    my ($name, $id, $au, $secs, $within) = @_;
    my ($at, $want, $got) = arrival($id, $au, $secs);
    for my $k (@$want) {
        ok(defined $at->{$k} && $at->{$k} < $within, "$name: on $k within "
            . "$within s (" . (defined $at->{$k}
            ? sprintf('%.2fs', $at->{$k}) : 'never') . ')')
            or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
    }
}

# the watches' connections killed (both nodes'): a post made right after,
# of a pull author (its wake-up comes through the watch's channel) and of
# a pushed one, reaches the streams of their followers within 2 s
my $killed = eval { $A->redis('CLIENT', 'KILL', 'TYPE', 'pubsub') } // 0;
ok($killed >= 4, "the watches' subscriptions killed ($killed)");
arrived_ok('killed watches, a pull author\'s post',
    mypost($B, 'celeb', 'right after the kill'), 'celeb', 5, 2);
arrived_ok('killed watches, a pushed author\'s post',
    mypost($B, 'a3', 'right after the kill'), 'a3', 5, 2);
ok($A->wait_for(10, sub { up($A) && up($B) }), 'the watches track again');

# node A's watches stalled (the proxy holds Redis's bytes to their
# subscriptions): its workers hear of no change, and cannot vouch for
# their readers' last reads once 300 ms pass without a heartbeat: they
# read each second; posts made through node B right after the stall
# reach node A's streams all the same, within 2.5 s
my $pg = $A->pid($PROXY);
kill 'USR1', -$pg;
arrived_ok('node A\'s watches stalled, a pull author\'s post',
    mypost($B, 'celeb', 'while stalled'), 'celeb', 5, 2.5);
arrived_ok('node A\'s watches stalled, a pushed author\'s post',
    mypost($B, 'a1', 'while stalled'), 'a1', 5, 2.5);
kill 'USR2', -$pg;
ok($A->wait_for(10, sub { up($A) }), 'relayed again: node A\'s watches '
    . 'track');
reads_right('after the stall', $_) for qw(r1 r3);

# Redis restarted (no persistence: every list gone): every stream told
# reset; each reader's timeline read (as a client told so does) on node A:
# then live again, both nodes
$A->stop_redis;
$A->start_redis;
$got = collect(10, sub { grep { $_->{event} eq 'reset' } @{ $_[1] } });
for my $k (sort keys %S) {
    my @r = grep { $_->{event} eq 'reset' } @{ $got->{$k} };
    is(@r ? $r[0]{data} : '', '{"reason":"gone"}',
        "Redis restarted: $k told reset (gone)")
        or diag(join ', ', map { ev_str($_) } @{ $got->{$k} });
}
ok($A->wait_for(15, sub { up($A) && up($B) }),
    'Redis restarted: both nodes\' workers up, their watches tracking');
for my $r (sort keys %FOL) {
    ok($A->wait_for(10, sub { (page_ids($A, $r))[0] eq want_ids($r) }),
        "Redis restarted: $r\'s timeline read, as the model has it");
}
sleep 1.5;
collect(0, sub { 1 });
arrived_ok('Redis restarted, a pull author\'s post',
    mypost($B, 'celeb', 'after the restart'), 'celeb', 8, 3);
arrived_ok('Redis restarted, a pushed author\'s post',
    mypost($B, 'a2', 'after the restart'), 'a2', 8, 3);
reads_right('after the restart', $_) for qw(r1 r3 r4);

# every stream still open: heartbeats
my @ended = grep { $S{$_}{sse}->ended } sort keys %S;
is("@ended", '', 'every stream still open');

$_->{sse}->close for values %S;
ok(time - $T0 < 90, sprintf('under 90 s (%.1fs)', time - $T0));

$B->finish;
$A->done;
