#!/usr/bin/perl

# Redis Cluster: feed_redis with the seed nodes of a real cluster (three
# masters, each with a replica).  Every worker maps the slots and keeps a
# connection per master; commands go to their key's master (keys spread
# over all three); a slot moved away is followed (MOVED), a slot being
# moved is asked of its importing node (ASK); a master killed: its replica
# is promoted and found, the other masters' keys answer all along; no
# [alert] in the end.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short statuses);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 1);

# one seed and the word "cluster": the stream's master, so that it is the
# first node of every worker's routers (their map asked of it first)
my $seeds = '127.0.0.1:' . $c->port($c->master_of('feed:posts'))
    . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 500ms;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)\$ { feed_follow \$1 \$2; }
        location ~ ^/users/([^/]+)/followers\$ { feed_followers \$1; }
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location = /status { feed_status; }
    }
}
EOF

# every worker sees the cluster: n masters, all up
sub cluster_seen {
    my ($n) = @_;
    my $st = statuses($t);
    return 0 unless keys %$st == 2;
    for my $j (values %$st) {
        my $cl = $j->{redis}{cluster} or return 0;
        return 0 unless $j->{redis}{up} && $cl->{masters} == $n
            && $cl->{masters_up} == $n;
    }
    return 1;
}

ok($t->wait_for(10, sub { cluster_seen(3) }),
    'every worker maps the cluster: 3 masters, all up');

# a cached count: the count's key on its master, read with HMGET there
sub hmgets {
    my ($name) = @_;
    my $info = $c->cmd($name, 'INFO', 'commandstats');
    return $info =~ /cmdstat_hmget:calls=(\d+)/ ? $1 : 0;
}

sub followers {
    my ($user) = @_;
    my $r = $t->get("/users/$user/followers?limit=1");
    return $r->{status} == 200 ? $r->{json}{count} : 'status ' . short($r);
}

sub errors {
    my $n = 0;
    $n += $_->{redis}{errors} for values %{statuses($t)};
    return $n;
}

# redirections the workers followed: node-wide counters
sub redirects {
    my $j = $t->get('/status')->{json};
    return ($j->{node}{redis}{moved}, $j->{node}{redis}{asked});
}

# ------------------------------------------------------------ routing --

my @users = map { "user$_" } 1 .. 30;

my $bad = 0;
for my $u (@users) {
    my $r = $t->http('PUT', "/users/fan/following/$u");
    $bad++ unless $r->{status} == 204;
}
is($bad, 0, 'routing: 30 follows answered 204');

is(followers($_), 1, "routing: $_ has 1 follower") for @users[0 .. 2];
followers($_) for @users;

my %on;
for my $u (@users) {
    my $m = $c->master_of("feed:cnt:$u");
    my $keys = $c->cmd($m, 'EXISTS', "feed:cnt:$u");
    $on{$m}++ if $keys;
}
is(scalar(keys %on), 3, 'routing: the cached counts are on all 3 masters, '
    . 'each on its own slot\'s')
    or diag(explain \%on);

my $before = hmgets($c->master_of('feed:cnt:user1'));
is(followers('user1'), 1, 'routing: a count read again');
ok(hmgets($c->master_of('feed:cnt:user1')) > $before,
    'routing: ... from the master of its slot');

my $r = $t->http('POST', '/users/user1/posts', body => '{"body":"hi"}',
    headers => { 'Content-Type' => 'application/json' });
is($r->{status}, 201, 'routing: a post created');
is($c->key_cmd('feed:posts', 'XLEN', 'feed:posts'), 1,
    'routing: its fanout entry in the stream, on the stream\'s master');
is(join(' ', redirects()), '0 0', 'routing: every command went to its '
    . 'slot\'s master at once: no MOVED, no ASK');

# ------------------------------------------------------------- MOVED --

# the workers ask the map again every 250 ms until their connections to
# all masters are up, then every 10 s: past those first asks, only a MOVED
# tells them of the slot moved below
sleep 1;

my $key = 'feed:cnt:user2';
my $slot = $c->cmd('c1', 'CLUSTER', 'KEYSLOT', $key);
my $from = $c->master_of($key);
my ($to) = grep { $_ ne $from } $c->masters;

$c->move_slot($slot, $from, $to);
is($c->master_of($key), $to, "moved: slot $slot moved from $from to $to");
ok($c->cmd($to, 'EXISTS', $key), 'moved: with the count\'s key');

my $errors = errors();
$before = hmgets($to);
is(followers('user2'), 1, "moved: user2's count read $_") for 1 .. 6;
ok(hmgets($to) - $before >= 6, 'moved: each read on the new master, '
    . 'the old one\'s MOVED followed');
is(errors(), $errors, 'moved: no command failed');
my ($moved, $asked) = redirects();
ok($moved >= 1 && $moved <= 2, "moved: $moved MOVED followed (at most one "
    . 'per worker: the map is asked again)');

# -------------------------------------------------------------- ASK --

$key = 'feed:cnt:user3';
$slot = $c->cmd('c1', 'CLUSTER', 'KEYSLOT', $key);
$from = $c->master_of($key);
($to) = grep { $_ ne $from } $c->masters;

# the slot half moved: its key already on the importing node
$c->cmd($to, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $c->node_id($from));
$c->cmd($from, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $c->node_id($to));
$c->cmd($from, 'MIGRATE', '127.0.0.1', $c->port($to), $key, 0, 5000);
is($c->cmd($from, 'CLUSTER', 'COUNTKEYSINSLOT', $slot), 0,
    "ask: $key gone from $from");

$errors = errors();
$before = hmgets($to);
is(followers('user3'), 1, "ask: user3's count read $_") for 1 .. 4;
ok(hmgets($to) - $before >= 4, 'ask: each read asked of the importing '
    . 'node');
is(errors(), $errors, 'ask: no command failed');
is((redirects())[1], 4, 'ask: each of the 4 reads asked (an ASK moves '
    . 'nothing for good)');

$c->cmd($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $c->node_id($to))
    for $to, $from, grep { $_ ne $to && $_ ne $from } $c->masters;
ok($c->wait_ok(10), 'ask: the slot moved for good');

# --------------------------------------------------------- failover --

# a master without the stream: the fanout keeps its own
my ($victim) = grep { $_ ne $c->master_of('feed:posts') } $c->masters;
my @theirs = grep { $c->master_of("feed:cnt:$_") eq $victim } @users;
my @others = grep { $c->master_of("feed:cnt:$_") ne $victim } @users;

$t->stop_proc($victim, 'KILL');
my $killed = time;

# while the replica is not yet promoted: the others' keys answer
my $fails = 0;
my $reads = 0;
while (time - $killed < 0.8) {
    for my $u (@others[0 .. 5]) {
        $reads++;
        $fails++ unless followers($u) eq 1;
    }
}
is($fails, 0, "failover: $reads reads of other masters' users right while "
    . "$victim is down");

ok($t->wait_for(15, sub { cluster_seen(3) }),
    'failover: every worker found the promoted replica: 3 masters up');
diag(sprintf 'failover: %.1f s from the kill', time - $killed);

my $new = $c->master_of("feed:cnt:$theirs[0]");
isnt($new, $victim, "failover: $theirs[0]'s slot has a new master ($new)");

$before = hmgets($new);
is(followers($_), 1, "failover: the count of $_ read again") for @theirs[0 .. 1];
ok(hmgets($new) > $before, 'failover: from the promoted replica');

# the fanout's own connections: one waits in a blocked read of the stream,
# and the map is never asked of it (it would wait behind the read)
my @timeouts = grep { /timed out/ } split /\n/, $t->error_log;
is(scalar(@timeouts), 0, 'no command timed out, the map asked of idle '
    . 'nodes only') or diag(join "\n", @timeouts[0 .. 4]);

$t->done;
