#!/usr/bin/perl

# Redis Cluster: a command answered TRYAGAIN or CLUSTERDOWN is sent again
# after a pause, a few times, within its timeout (three masters, no
# replicas, cluster-require-full-coverage yes, as Redis has it):
#
#   - tryagain: a reader's slot half moved by hand (its list on the
#     target, its other keys on the source): the source answers its
#     scripts TRYAGAIN.  Left so, a read is tried 5 times more, then
#     answers from the fallback (BYPASS); the move ended while a follow's
#     drop of the reader's timeline waits to be sent again: it lands, and
#     the next read is rebuilt with the new followee's post;
#   - clusterdown: a reader's slot taken from its master (CLUSTER
#     DELSLOTS): the master answers CLUSTERDOWN.  Left so, a read answers
#     BYPASS after its tries; the slot given back while a read waits: HIT;
#   - the tries counted in feed_status and feed_metrics, by reason;
#   - a graceful reload while a read waits to be sent again: the read is
#     answered, the old worker leaves; a fast stop meanwhile: the waiting
#     command is freed with its timer (no sanitizer report under
#     FEED_TEST_ASAN=1); no [alert] in the end.
#
# The test waits for a command's first TRYAGAIN or CLUSTERDOWN by polling
# the node's counter of them (counted as the pause begins): its tries
# last 190 ms (TRYAGAIN) or 450 ms (CLUSTERDOWN), and the test ends the
# move or gives the slot back within them.  A test that came too late (a
# busy machine) sees the command spend its tries, and sets it up again,
# up to three times.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short statuses follow_each none_failed post tl_ids);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my $seeds = $c->seeds . ' cluster';

# FeedCluster's server, and feed_metrics
(my $server = FeedCluster::server_conf())
    =~ s{^(\s*)(location = /status \{ feed_status; \})$}
        {$1$2\n$1location = /metrics { feed_metrics; }}m;

# feed_redis_timeout: long enough for every try, so that the tries, not
# the timeout, end them
my $CONF = <<"EOF";
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 3s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;

$server
}
EOF

$t->write_conf($CONF)->run;

sub all_up {
    my $st = statuses($t);
    return FeedCluster::mapped($st, 2, 3)
        && !grep { ($_->{redis}{state} // '') ne 'up' } values %$st;
}

ok($t->wait_for(10, \&all_up), 'every worker maps the cluster');

# ------------------------------------------------------------- helpers --

sub cache_of { $_[0]{headers}{'x-feed-cache'} // '' }

sub answer { my ($r) = @_; return "$r->{status} " . cache_of($r) }

sub read_tl { answer($t->get("/users/$_[0]/timeline")) }

# the node's tries by reason (feed_status), -1 when not counted
sub retried {
    my ($why) = @_;
    my $j = $t->get('/status')->{json} or return -1;
    return $j->{node}{redis}{retried}{$why} // -1;
}

# polled closely: the test must act within the read's tries
sub wait_retried {
    my ($why, $before) = @_;
    my $end = time + 3;
    while (time < $end) {
        return 1 if retried($why) > $before;
        sleep 0.005;
    }
    return 0;
}

# two readers whose timelines are on different masters
my @U = map { "r$_" } 1 .. 20;
my ($node) = $c->spread(@U);
my $r1 = $U[0];
my ($r2) = grep { $node->{$_} ne $node->{$r1} } @U;

none_failed([ follow_each($t, 'author', $r1, $r2) ], 'two follows');
ok(post($t, 'author', 'a post'), 'a post');

is(read_tl($_), '200 MISS', "$_: first read rebuilt") for $r1, $r2;
is(read_tl($_), '200 HIT', "$_: then a hit") for $r1, $r2;

# ------------------------------------------------------------ TRYAGAIN --

my $k1 = "feed:tl:{$r1}";
my $s1 = $c->cmd($node->{$r1}, 'CLUSTER', 'KEYSLOT', $k1);
my $from = $node->{$r1};
my ($to) = grep { $_ ne $from } $c->masters;

$c->open_slot($s1, $from, $to, $k1);
like((eval { $c->cmd($from, 'EVAL', 'return 1', 2, $k1, "feed:tln:{$r1}") }
    // '') . $@, qr/TRYAGAIN/, "tryagain: slot $s1 half moved, $from "
    . 'answers a script of its keys TRYAGAIN');

my $n = retried('tryagain');
my $r = $t->get("/users/$r1/timeline");
is(answer($r), '200 BYPASS', 'tryagain, the move left half done: the read '
    . 'answered from the fallback');
ok($r->{elapsed} < 5, sprintf 'tryagain: in %.2f s', $r->{elapsed});
is(retried('tryagain') - $n, 5, 'tryagain: after 5 tries more');

$c->end_move($s1, $from, $to);

# A follow drops its reader's cached timeline (a script of 4 of the
# reader's keys) before it answers: answered TRYAGAIN, the drop is sent
# again until the move ends, then lands on the new master.  (A read could
# not: its script names the copy of the deleted posts of the master it was
# made for, which the new one cannot reach, as after a MOVED.)
my (@seen, $dropped, $followee, $pid);

for my $attempt (1 .. 3) {
    $followee = "a$attempt";
    $pid = post($t, $followee, "a post of $followee");

    # the reader's list cached (the first read of a worker whose map is
    # old is answered from the fallback), then half moved
    $t->wait_for(10, sub { read_tl($r1) =~ /^200 (HIT|MISS)$/ });
    $from = $c->master_of($k1);
    ($to) = grep { $_ ne $from } $c->masters;
    $c->open_slot($s1, $from, $to, $k1);

    $n = retried('tryagain');
    my $h = $t->http_start('PUT', "/users/$r1/following/$followee");
    my $waited = wait_retried('tryagain', $n);

    $c->end_move($s1, $from, $to);

    $r = $t->http_end($h);
    my $tries = retried('tryagain') - $n;
    my $gone = !$c->cmd($to, 'EXISTS', $k1);
    push @seen, "$r->{status} after $tries tries, "
        . ($gone ? 'dropped' : 'not dropped');

    if ($waited && $r->{status} == 204 && $gone) {
        $dropped = 1;
        last;
    }
}

ok($dropped, 'tryagain: the move ended while a follow\'s drop of the '
    . 'reader\'s timeline waited to be sent again: dropped, on the new '
    . 'master') or diag(join ', ', @seen);
ok(!grep({ !/^204 after (?:[1-5] tries, dropped|5 tries, not dropped)$/ }
    @seen), 'tryagain: each drop landed within its tries, or spent them: '
    . join(', ', @seen));

my $first;
ok($t->wait_for(10, sub {
    my $r = $t->get("/users/$r1/timeline");
    $first = answer($r) . ' ' . (tl_ids($r)->[0] // '-');
    $first eq "200 MISS $pid" }),
    "tryagain: $r1\'s next read rebuilt on $to, the new followee\'s "
    . 'post first') or diag($first);
ok($t->wait_for(10, sub { read_tl($r1) eq '200 HIT' }),
    'tryagain: then hits');

# --------------------------------------------------------- CLUSTERDOWN --

my $m2 = $node->{$r2};
my $s2 = $c->cmd($m2, 'CLUSTER', 'KEYSLOT', "feed:tl:{$r2}");

$c->cmd($m2, 'CLUSTER', 'DELSLOTS', $s2);
like((eval { $c->cmd($m2, 'LLEN', "feed:tl:{$r2}") } // '') . $@,
    qr/CLUSTERDOWN/, "clusterdown: slot $s2 taken from $m2, which answers "
    . 'CLUSTERDOWN');

$n = retried('clusterdown');
$r = $t->get("/users/$r2/timeline");
is(answer($r), '200 BYPASS', 'clusterdown, the slot left without a '
    . 'master: the read answered from the fallback');
ok($r->{elapsed} < 5, sprintf 'clusterdown: in %.2f s', $r->{elapsed});
# counted: the read's tries (3 at most, fewer when the map asked again
# had no master for the slot), and those of any other command sent to
# that master meanwhile: it refuses every key while the cluster is down
# in its eyes
ok(retried('clusterdown') > $n, 'clusterdown: the read tried again');

$c->cmd($m2, 'CLUSTER', 'ADDSLOTS', $s2);
ok($c->wait_ok(10) && $t->wait_for(10, \&all_up),
    'clusterdown: the slot given back, every worker maps it');

@seen = ();
my $hit;

for my $attempt (1 .. 3) {
    $c->cmd($m2, 'CLUSTER', 'DELSLOTS', $s2);

    $n = retried('clusterdown');
    my $h = $t->http_start('GET', "/users/$r2/timeline");
    my $waited = wait_retried('clusterdown', $n);

    $c->cmd($m2, 'CLUSTER', 'ADDSLOTS', $s2);

    $r = $t->http_end($h);
    push @seen, answer($r) . ($waited ? ', retried' : ', not retried');

    if ($waited && answer($r) eq '200 HIT') {
        $hit = 1;
        last;
    }

    $t->wait_for(10, \&all_up);
}

ok($hit, 'clusterdown: the slot given back while the read waited to be '
    . 'sent again: a hit') or diag(join ', ', @seen);
ok($t->wait_for(10, \&all_up) && read_tl($r2) eq '200 HIT',
    "clusterdown: $r2 hits");

# ------------------------------------------------------------- counted --

my $st = $t->get('/status')->{json};
ok($st->{redis}{cluster}{retried}
    && defined $st->{redis}{cluster}{retried}{tryagain}
    && defined $st->{redis}{cluster}{retried}{clusterdown},
    'status: the worker\'s tries by reason, redis.cluster.retried')
    or diag(explain $st->{redis}{cluster});

my $m = $t->get('/metrics')->{body};
my %fam = $m =~ /^feed_redis_cluster_retries_total\{reason="(\w+)"\} (\d+)$/mg;
ok(($fam{tryagain} // 0) >= 6 && ($fam{clusterdown} // 0) >= 2,
    'metrics: feed_redis_cluster_retries_total by reason')
    or diag(explain \%fam);
like($m, qr/^# TYPE feed_redis_cluster_retries_total counter$/m,
    'metrics: a counter');

# ------------------------------------------------- reload, fast stop --

# the slot half moved again, and left so
$from = $c->master_of($k1);
($to) = grep { $_ ne $from } $c->masters;
$c->open_slot($s1, $from, $to, $k1);

$n = retried('tryagain');
my $h = $t->http_start('GET', "/users/$r1/timeline");
ok(wait_retried('tryagain', $n), 'reload: a read waits to be sent again');
ok($t->reload, 'reload: the old workers left');
is(answer($t->http_end($h)), '200 BYPASS', 'reload: the read answered');
ok($t->wait_for(10, \&all_up), 'reload: the new workers map the cluster');

$n = retried('tryagain');
$h = $t->http_start('GET', "/users/$r1/timeline");
ok(wait_retried('tryagain', $n), 'fast stop: a read waits to be sent again');
ok($t->stop_proc('nginx', 'TERM'), 'fast stop: nginx stopped');
$t->http_end($h);

$c->end_move($s1, $from, $to);

$t->run;
ok($t->wait_for(10, \&all_up), 'started again');
# its list moved with the slot: of another node's run, made again once
like(read_tl($r1), qr/^200 (MISS|HIT)$/, "$r1 answered from the cache");
is(read_tl($r1), '200 HIT', "$r1 hits");

my @timeouts = grep { /timed out/ } split /\n/, $t->error_log;
is(scalar(@timeouts), 0, 'no command timed out')
    or diag(join "\n", @timeouts[0 .. 4]);

$t->done;
