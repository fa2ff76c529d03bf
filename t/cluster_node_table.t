#!/usr/bin/perl

# A worker's table of a Redis Cluster's nodes over many address changes:
# the three masters of a real cluster are served on new ports
# again and again, one after the other, as when their pods restart with
# new addresses, 30 times each (90 addresses, the table holds 64).  After
# each move, once the workers have followed, every follower's timeline
# hits in Redis, on every master (no BYPASS: every slot has its master;
# feed_cache_tracking off, so that no read is a local hit); after each
# round of three:
#
#   - a post is made and deleted: 201, then 204;
#   - a worker knows no more nodes than the masters and its seed: those
#     the map no longer names are forgotten, their connections closed;
#   - the pull watches follow their masters to the new addresses.
#
# The harness's end checks that nginx stops gracefully, with no alert and
# no socket left open.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use FeedTest;
use FeedTest::Util qw(statuses follow_each read_each none_failed post
    post_start post_end);
use FeedCluster;

my $ROUNDS = 30;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my @M = $c->masters;
my $seeds = '127.0.0.1:' . $c->port($M[0]) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 512; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 1s;
    feed_cache_local 1m;
    # every read a round trip: a hit shows the worker reached the master
    # at its new address (a local hit answers from the copy, and one right
    # after a move may come before the worker heard its connection close)
    feed_cache_tracking off;
    feed_pull_threshold 100;

@{[ FeedCluster::server_conf() ]}
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

my @F = map { "f$_" } 1 .. 24;
my (undef, $per) = $c->spread(@F);
is(scalar keys %$per, 3, 'the followers\' timelines are on all three '
    . 'masters: ' . join(' ', map { "$_=$per->{$_}" } sort keys %$per));

none_failed([ follow_each($t, 'author', @F) ], '24 follows of author');
post($t, 'author', 'before the moves');
my (undef, @bad) = read_each($t, @F);
none_failed(\@bad, 'every follower\'s timeline cached');

# '' when every follower's read answers 200 HIT, else the first that does
# not
sub not_hit {
    my ($res) = read_each($t, @F);
    my @no = grep { $_->{status} != 200
        || ($_->{headers}{'x-feed-cache'} // '') ne 'HIT' } @$res;
    return @no ? "$no[0]{status} " . ($no[0]{headers}{'x-feed-cache'} // '-')
        : '';
}

# the cluster's nodes all name these ports for the masters
sub agreed {
    my (@ports) = @_;
    my %maps = map { ($c->slots_text($_) // 'none') => 1 } $c->alive_names;
    return 0 unless keys %maps == 1;
    my ($text) = keys %maps;
    return !grep { $text !~ /:$_\b/ } @ports;
}

# ------------------------------------------------------------ the moves --

my (%failed, @nodes, %watch);
my $t0 = time;

for my $round (1 .. $ROUNDS) {
    for my $m (@M) {
        my $old = $c->port($m);
        my $new = $c->move_port($m, "${m}_r$round");

        unless ($t->wait_for(10, sub { agreed($new) })) {
            $failed{agreed}{$round} = "$m: the cluster did not agree";
            next;
        }

        # one at a time, as pods restart: the workers hear of the new
        # address from the masters they still reach
        $c->drop_clients($m, $old);

        my $why = '';
        $t->wait_for(10, sub { !($why = not_hit()) });
        $failed{hit}{$round} = "$m: $why" if $why;
    }

    my $h = post_start($t, 'author', "round $round");
    my $id = post_end($t, $h, "round $round", quiet => 1);
    my $del = $id ? $t->http('DELETE', "/users/author/posts/$id")->{status}
                  : 'no post';
    $failed{delete}{$round} = $del unless $del eq '204';

    my $st = statuses($t);
    push @nodes, map { $_->{redis}{cluster}{nodes} // -1 } values %$st;
    $watch{$round} = join ' ', map {
        my $w = $_->{pull}{watch} // {};
        ($w->{subscribed} ? 'subscribed' : 'not subscribed') . ' '
            . ($w->{watches} // 0) } values %$st;
}

my $took = time - $t0;

sub rounds_ok {
    my ($kind, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $f = $failed{$kind} // {};
    ok(!keys %$f, sprintf('%s, %d rounds of 3 new addresses (%.0f s)',
        $name, $ROUNDS, $took))
        or diag(scalar(keys %$f) . ' rounds failed, first '
            . join(', ', map { "$_: $f->{$_}" }
                (sort { $a <=> $b } keys %$f)[0 .. 2]));
}

rounds_ok('agreed', 'moves: the cluster named the new ports each round');
rounds_ok('hit', 'reads: every follower\'s timeline hits after each round');
rounds_ok('delete', 'deletes: a post made and deleted each round, 204');

my ($least, $most) = (sort { $a <=> $b } @nodes)[0, -1];
ok(@nodes && $least >= 3 && $most <= 4, 'node table: a worker knows the '
    . 'three masters and at most its seed besides (' . ($least // '-')
    . ' to ' . ($most // '-') . ' nodes after each round)');

my $st = statuses($t);
ok((!grep { ($_->{redis}{cluster}{forgotten} // 0) < 3 * ($ROUNDS - 1) }
    values %$st), 'node table: each worker forgot the old addresses: '
    . join(' ', map { $_->{redis}{cluster}{forgotten} // '-' }
        values %$st));

ok($t->wait_for(5, sub {
    !grep { my $w = $_->{pull}{watch} // {};
        !$w->{subscribed} || ($w->{watches} // 0) != 3 }
        values %{ statuses($t) }
}), 'watches: each worker watches the three masters at their new '
    . 'addresses') or diag("last round: $watch{$ROUNDS}");

is(not_hit(), '', 'reads: every follower hits at the end');

# ------------------------------------------------- a node only ASK names --

# A fourth node joins, a master without slots: no map names it.  A
# follower's slot is half moved there (its keys moved, the slot importing),
# so that the follower's reads are asked there.  While one waits there
# (the node busy in a script), the workers read the map again (their
# connections to another master dropped): the node no map names is kept
# until its command is answered, then forgotten at the next map.

ok($c->add_node('c4'), 'ask: a fourth node joins, without slots');

my $u = $F[0];
my $from = $c->master_of("feed:tl:{$u}");
my ($other) = grep { $_ ne $from } @M;
my $slot = $c->cmd($from, 'CLUSTER', 'KEYSLOT', "feed:tl:{$u}");
$c->open_slot($slot, $from, 'c4',
    @{ $c->cmd($from, 'CLUSTER', 'GETKEYSINSLOT', $slot, 1000) });

my $asked = sub { my $n = 0;
    $n += $_->{redis}{cluster}{asked} // 0 for values %{ statuses($t) };
    $n };
my $asked0 = $asked->();

my $busy = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
    . $c->port('c4'), Proto => 'tcp', Timeout => 5) or die "c4: $!\n";
my $lua = 'local t = redis.call("time") local e = t[1] * 1e6 + t[2] '
    . '+ 400000 while true do t = redis.call("time") '
    . 'if t[1] * 1e6 + t[2] > e then break end end return 1';
print $busy "*3\r\n\$4\r\nEVAL\r\n\$" . length($lua) . "\r\n$lua\r\n"
    . "\$1\r\n0\r\n";
sleep 0.05;

my $h = $t->http_start('GET', "/users/$u/timeline");
sleep 0.1;
$c->cmd($other, 'CLIENT', 'KILL', 'TYPE', 'normal');
my $r = $t->http_end($h);
<$busy>;
close $busy;

is($r->{status}, 200, 'ask: a read asked to the node no map names, while '
    . 'the workers read the map again, answered ('
    . ($r->{headers}{'x-feed-cache'} // '-') . ')');
ok($asked->() > $asked0, 'ask: the read was asked there');

$c->cmd($other, 'CLIENT', 'KILL', 'TYPE', 'normal');
ok($t->wait_for(15, sub {
    !grep { ($_->{redis}{cluster}{nodes} // 99) > 4 } values %{ statuses($t) }
}), 'ask: once answered, the node no map names is forgotten');

$t->done;
