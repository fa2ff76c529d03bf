#!/usr/bin/perl

# Redis Sentinel (feed_redis sentinel=<name> <sentinels>): a primary, a
# replica and three real redis-sentinel processes, two nginx workers.
#
#   - each worker asks a sentinel for the primary, and /status says it;
#   - a SENTINEL FAILOVER by hand: every worker moves to the new primary
#     (feed_redis_primary_moves_total counts a move per worker), the log
#     says from where to where, writes and hits go on there;
#   - the primary killed while a client posts and reads: hits and posts
#     resume within 5 s of the sentinels' failover, no answer says
#     READONLY, every post answered 201 reaches the reader's timeline,
#     and the timeline is exactly the author's posts (nothing stale);
#   - a sentinel down: a failover through another is followed;
#   - every sentinel down: the workers keep the last primary (posts and
#     reads go on); the sentinels back, the next failover is followed;
#   - a post the replica never got (stopped), the primary killed: the
#     outbox writes its entry again on the new primary (it waited for a
#     replica to have it: WAIT), and it reaches the timeline; the same for
#     an unfollow's cache side effect (its journal entry is applied
#     again).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use FeedTest;
use FeedTest::Util qw(statuses tl_ids tl_walk);
use FeedSentinel;

plan(skip_all => 'redis-sentinel is not installed')
    unless -x '/usr/bin/redis-sentinel';

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $sn = FeedSentinel->start($t);
my $addrs = $sn->addrs;
my $name = $sn->name;

(my $server = FeedTest::Util::server_conf())
    =~ s{^(\s*)(location = /status \{ feed_status; \})$}
        {$1$2\n$1location = /metrics { feed_metrics; }}m;

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis sentinel=$name $addrs;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;

$server
}
EOF

my $RUN = $$ . int(time);
my ($r, $a) = ("sr$RUN", "sa$RUN");

sub primary_of_workers {
    my $st = statuses($t);
    return '' unless keys %$st == 2;
    my %p = map { ($_->{redis}{sentinel}{primary} // 'none') => 1 }
        grep { ($_->{redis}{state} // '') eq 'up' } values %$st;
    return keys %p == 1 && (grep { ($_->{redis}{state} // '') eq 'up' }
        values %$st) == 2 ? (keys %p)[0] : '';
}

sub moves {
    my ($n) = $t->get('/metrics')->{body}
        =~ /^feed_redis_primary_moves_total (\d+)$/m;
    return $n // -1;
}

sub post_ok {
    my ($body) = @_;
    my $res = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    return $res->{status} == 201 ? $res->{json}{id} : undef;
}

# the reader's whole timeline, page after page
sub timeline { @{ tl_walk($t, $r, 100)->{ids} } }

sub in_timeline {
    my (@ids) = @_;
    my %have = map { $_ => 1 } timeline();
    return !grep { !$have{$_} } @ids;
}

# the author's posts, page after page
sub own_posts {
    my (@ids, $cursor);
    for (1 .. 50) {
        my $j = $t->get("/users/$a/posts?limit=100"
            . (defined $cursor ? "&max_id=$cursor" : ''))->{json} or last;
        push @ids, map { $_->{id} } @{ $j->{items} || [] };
        $cursor = $j->{next} // last;
    }
    return @ids;
}

my $P = '127.0.0.1:' . $t->port('redis');
my $N = '127.0.0.1:' . $t->port('redis2');

ok($t->wait_for(10, sub { primary_of_workers() eq $P }),
    "both workers up on the primary the sentinels tell, $P");
my $st = (values %{ statuses($t) })[0];
is($st->{redis}{sentinel}{name}, $name, 'status: the name');
is($st->{redis}{address}, "sentinel=$name", 'status: address');

is($t->http('PUT', "/users/$r/following/$a")->{status}, 204, 'follow');
my @posts = grep { defined } map { post_ok("before $_") } 1 .. 3;
is(scalar @posts, 3, 'three posts: 201');
ok($t->wait_for(5, sub { in_timeline(@posts) }), 'in the timeline');
sleep 1.5;
unlike($t->error_log, qr/outbox: enqueueing/,
    'the replica has them: the outbox let them go (nothing sent again)');

# ------------------------------------------------- a failover by hand --

my $moves0 = moves();
is($moves0, 0, 'no move yet');
my $port = $sn->failover('s1');
is($port, $t->port('redis2'), 'SENTINEL FAILOVER: redis2 is the primary');
my $t0 = time;
ok($t->wait_for(10, sub { primary_of_workers() eq $N }),
    'both workers moved to it');
note(sprintf 'moved %.1f s after the sentinels said so', time - $t0);
ok($t->wait_for(5, sub { moves() == $moves0 + 2 }), 'a move per worker')
    or diag('moves: ' . moves());
like($t->error_log, qr/redis primary "\Q$name\E" moved from \Q$P\E to \Q$N\E/,
    'the log says it');

my $id;
ok($t->wait_for(5, sub { $id = post_ok('after the failover') }),
    'a post on the new primary: 201');
push @posts, $id if $id;
ok($t->wait_for(5, sub { in_timeline(@posts) }), 'in the timeline');
is($t->redis_cmd_port($t->port('redis2'), undef, 'ROLE')->[0], 'master',
    'redis2 is the primary');

# ------------------------------------- the primary killed under load --

# a client posting and reading for $secs: each answer's time, kind,
# status, cache and id, one line each
sub load {
    my ($secs, $file) = @_;
    my $pid = fork() // die "fork: $!\n";
    return $pid if $pid;
    open my $out, '>', $file or POSIX::_exit(1);
    my $end = time + $secs;
    my $i = 0;
    while (time < $end) {
        $i++;
        my $res = $t->http('POST', "/users/$a/posts",
            headers => { 'Content-Type' => 'application/json' },
            body => qq({"body": "load $i"}), timeout => 5);
        my $bad = ($res->{body} // '') =~ /READONLY/ ? 1 : 0;
        printf $out "%.3f post %d - %s %d\n", time, $res->{status},
            ($res->{status} == 201 ? $res->{json}{id} : '-'), $bad;
        $res = $t->get("/users/$r/timeline?limit=20", timeout => 5);
        $bad = ($res->{body} // '') =~ /READONLY/ ? 1 : 0;
        printf $out "%.3f read %d %s - %d\n", time, $res->{status},
            $res->{headers}{'x-feed-cache'} // '-', $bad;
        $out->flush;
        sleep 0.02;
    }
    close $out;
    POSIX::_exit(0);
}

# The old primary is made a replica by the sentinels up to 10 s after a
# failover by hand (until then it is a primary too, alone), then loads
# redis2's data: only then is it a replica to promote.  Redis replicates
# asynchronously: what a primary killed had not sent is lost with it.
ok($sn->wait_ready(40), 'redis a replica of redis2, in sync');

my $file = $t->dir . '/load.txt';
my $lpid = load(12, $file);
sleep 2;

my $old = $t->port('redis2');
$t->stop_proc('redis2', 'KILL');
my $killed = time;
my $newport = $sn->wait_moved($old, 20);
my $switched = time;
is($newport, $t->port('redis'), 'the primary killed: redis is promoted');
note(sprintf 'the sentinels switched %.1f s after the kill',
    $switched - $killed);
waitpid($lpid, 0);

my (@lines, %first, @acked, $readonly);
open my $lf, '<', $file or die "$file: $!\n";
while (<$lf>) {
    my ($at, $kind, $status, $cache, $id, $bad) = split;
    $readonly++ if $bad;
    push @acked, $id if $kind eq 'post' && $status == 201;
    next unless $at > $switched;
    $first{post} //= $at if $kind eq 'post' && $status == 201;
    $first{hit} //= $at
        if $kind eq 'read' && $status == 200 && $cache =~ /^(HIT|LOCAL)$/;
}
close $lf;
ok(!$readonly, 'no answer said READONLY');
ok(defined $first{post} && $first{post} - $switched <= 5,
    'posts resume within 5 s of the failover')
    or diag('first post: ' . ($first{post} // 'none'));
ok(defined $first{hit} && $first{hit} - $switched <= 5,
    'hits resume within 5 s of the failover')
    or diag('first hit: ' . ($first{hit} // 'none'));
note(sprintf 'posts %.1f s, hits %.1f s after the switch',
    ($first{post} // $switched) - $switched,
    ($first{hit} // $switched) - $switched);
ok(@acked > 10, scalar(@acked) . ' posts answered 201 under load');
push @posts, @acked;

ok($t->wait_for(15, sub { in_timeline(@posts) }),
    'every post answered 201 is in the reader\'s timeline')
    or diag('missing: ' . join ' ', do {
        my %h = map { $_ => 1 } timeline();
        my @m = grep { !$h{$_} } @posts;
        scalar(@m) . " of " . scalar(@posts) . ": @m[0 .. ($#m < 9 ? $#m : 9)]"
        });

# nothing stale: the timeline is the author's posts, newest first
my @own = own_posts();
my @tl = timeline();
ok(@tl == @own && join(' ', @tl) eq join(' ', @own),
    'the timeline is exactly the author\'s posts (' . @own . ')')
    or diag('timeline ' . @tl . ', posts ' . @own);

# the killed one back, as the new primary's replica
$t->start_redis(name => 'redis2',
    args => ['--replicaof', '127.0.0.1', $t->port('redis')]);
ok($sn->wait_ready(30), 'redis2 back as a replica');
ok($t->wait_for(10, sub { primary_of_workers() eq $P }),
    'both workers on redis');

# ------------------------------------------------- a sentinel down --

$sn->stop_sentinel('s1');
$port = $sn->failover('s2');
is($port, $t->port('redis2'), 's1 down: a failover through s2');
ok($t->wait_for(10, sub { primary_of_workers() eq $N }),
    'both workers followed it');
ok($t->wait_for(5, sub { post_ok('s1 down') }), 'posts go on');

# ------------------------------------------- every sentinel down --

$sn->stop_sentinel($_) for qw(s2 s3);
my $moves1 = moves();
sleep 1.5;
my @down = grep { defined } map { post_ok("no sentinel $_") } 1 .. 5;
is(scalar @down, 5, 'every sentinel down: posts go on, on the primary known');
push @posts, @down;
ok($t->wait_for(5, sub { in_timeline(@posts) }), 'and are read');
is(primary_of_workers(), $N, 'the workers keep it');

$sn->start_sentinel($_) for qw(s1 s2 s3);
ok($sn->wait_ready(30), 'the sentinels back');
$port = $sn->failover('s3');
is($port, $t->port('redis'), 'a failover by hand again')
    or diag('primary: ' . ($port // 'none') . ', redis ' . $t->port('redis')
        . ', redis2 ' . $t->port('redis2'));
ok($t->wait_for(10, sub { primary_of_workers() eq $P }),
    'both workers followed it');
ok(moves() >= $moves1 + 2, 'each moved');
ok($t->wait_for(5, sub { my $i = post_ok('the end'); push @posts, $i if $i;
    $i }), 'posts go on');
ok($t->wait_for(5, sub { in_timeline(@posts) }), 'and are read');

# ------------------------------- a write the replica never got --

# The replica stopped (SIGSTOP) behind 32 MB the kernel's buffers cannot
# hold: the primary answers a post's XADD, the replica never gets it, and
# the primary dies.  The outbox kept the entry (its replication barrier
# timed out): it is written again on the new primary.
ok($sn->wait_ready(40), 'redis2 a replica again, in sync');
$t->signal('redis2', 'STOP');
$t->redis_cmd_port($t->port('redis'), undef, 'SET', 'filler',
    'x' x (32 << 20));
my $unreplicated = post_ok('never replicated');
ok($unreplicated, 'a post while the replica is stopped: 201');
sleep 1.2;
my $was = $sn->primary_port;
$t->stop_proc('redis', 'KILL');
$t->signal('redis2', 'CONT');
is($sn->wait_moved($was, 30), $t->port('redis2'),
    'the primary killed, the replica promoted');
ok($t->wait_for(15, sub { in_timeline($unreplicated) }),
    'the post the dead primary took with it reaches the timeline');
push @posts, $unreplicated if $unreplicated;
ok($t->wait_for(5, sub { in_timeline(@posts) }), 'with all the others');

# ------------------------ an unfollow the replica never got --

# The same for a cache side effect: the unfollow's change of the reader's
# cached timeline is answered 204 by the primary, which dies before the
# replica has it.  Its journal entry stayed (the barrier timed out): the
# sweeper applies it again on the new primary, and a's posts go.
$t->start_redis(args => ['--replicaof', '127.0.0.1', $t->port('redis2')]);
ok($sn->wait_ready(40), 'redis back, a replica of redis2, in sync');
ok(@{ tl_ids($t->get("/users/$r/timeline")) }, 'the reader\'s timeline');
$t->signal('redis', 'STOP');
$t->redis_cmd_port($t->port('redis2'), undef, 'SET', 'filler',
    'x' x (32 << 20));
is($t->http('DELETE', "/users/$r/following/$a")->{status}, 204,
    'an unfollow while the replica is stopped: 204');
is(scalar @{ tl_ids($t->get("/users/$r/timeline")) }, 0,
    'read at once: none of a\'s posts');
sleep 1.2;
$was = $sn->primary_port;
$t->stop_proc('redis2', 'KILL');
$t->signal('redis', 'CONT');
is($sn->wait_moved($was, 30), $t->port('redis'),
    'the primary killed, the replica promoted');
note('after the failover: ' . join(' ', map {
    my $res = $t->get("/users/$r/timeline");
    ($res->{headers}{'x-feed-cache'} // '-') . '/' . scalar @{ tl_ids($res) }
    } 1 .. 3));
ok($t->wait_for(15, sub {
    my $res = $t->get("/users/$r/timeline");
    $res->{status} == 200 && !@{ tl_ids($res) } }),
    'the unfollow the dead primary took with it holds: none of a\'s posts')
    or diag(scalar @{ tl_ids($t->get("/users/$r/timeline")) } . ' items');

$t->done;
