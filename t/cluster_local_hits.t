#!/usr/bin/perl

# Local hits on a real Redis Cluster (three masters, each with a replica):
# first pages answered from the worker's copy without any Redis command
# while each master's watch hears what Redis tracks (issue 30).  Two nginx
# nodes of two workers: the first with the fanout consumers, the second
# without.
#
#   - warm: readers of all three masters answered LOCAL, and meanwhile no
#     node ran a command any read sends (INFO commandstats after CONFIG
#     RESETSTAT: the watches' heartbeats, the asks of the map,
#     replication's own and the fanout consumers' only); /status and
#     /metrics count those hits;
#   - /status: every worker's three watches track, the main connection to
#     each master has CLIENT TRACKING on;
#   - a post fanned out to readers of all three masters is on every first
#     page within 300 ms of its 201, on either node; a delete is never
#     shown after its 204, even while no fanout took it out of the lists
#     (the first node stopped: only each master's feed:dlc tells the
#     second node's copies); a follow, an unfollow, a mute, an unmute are
#     on the next read; a pull author's post within 300 ms;
#   - CLUSTER FAILOVER of a master: a change made at once on the promoted
#     master makes each worker ask Redis (the old master, now its replica,
#     tells of the keys it tracked), a post and a delete right after are
#     never stale, and its readers are LOCAL again, tracked on the
#     promoted master (a change there makes each worker ask Redis);
#   - the promoted master killed, the old one promoted again: a post made
#     meanwhile is on every page 300 ms after it is in the reader's list,
#     and LOCAL resumes, tracked on the old master;
#   - a reader's slot moved to another master: each worker's first read
#     after the move asks Redis, the pages stay right, and LOCAL resumes,
#     tracked on the new master (a change there makes each worker ask);
#   - a master's clients killed: once the connections are made again, a
#     change there makes each worker ask Redis;
#   - a master that refuses CLIENT TRACKING (ACL): /status says not every
#     watch tracks, its readers get round trips with the right page, the
#     others stay LOCAL; allowed again, all are LOCAL.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses follow_each parallel none_failed post
    node_counts metrics_scrape metrics_val);
use FeedCluster;

my $t = FeedTest->new;
my $t0 = time;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 1);

# the queue (one partition) and the seed on one master, the failover of
# another
my $stream = $c->master_of('feed:posts');
my $seeds = '127.0.0.1:' . $c->port($stream) . ' cluster';

# the cluster tests' server, with /metrics, mutes, and the worker that
# answered each read
my $server = FeedCluster::server_conf();
my $more = 'location = /metrics { feed_metrics; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }';
$server =~ s{^(\s*)(location = /status .*)$}{$1$2\n$1$more}m
    or die "no /status in server_conf()\n";
$server =~ s{^(\s*)(add_header X-Feed-Cache .*)$}
    {$1$2\n$1add_header X-Worker \$pid always;}m
    or die "no X-Feed-Cache in server_conf()\n";

my $mongo = $t->mongo_uri;
my $CONF = <<"EOF";
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    feed_mongo_uri "$mongo";
    feed_thread_pool feedtp;
    feed_mongo_timeout 2s;
    feed_fanout \@\@FANOUT\@\@;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;
    feed_cache_local 1m;
    feed_pull_threshold 20;

$server
}
EOF

# the node of most tests; a second one without a fanout consumer, for a
# delete nobody takes out of the lists yet
my $t2 = FeedTest->new;
$t2->port('http') == $_ and die "port taken twice\n"
    for values %{$t->{ports}};
(my $conf = $CONF) =~ s/\@\@FANOUT\@\@/on/;
$t->write_conf($conf)->run;
($conf = $CONF) =~ s/\@\@FANOUT\@\@/off/;
$t2->write_conf($conf)->run;

for my $n ([ 'first', $t ], [ 'second', $t2 ]) {
    ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($n->[1]), 2, 3) }),
        "the $n->[0] node's workers map the cluster");
}

# ------------------------------------------------------------- helpers --

my @R = map { "r$_" } 1 .. 12;
my ($node, $per) = $c->spread(@R);
my %node = %$node;
is(scalar keys %$per, 3, 'the readers\' timelines are on all three '
    . 'masters: ' . join(' ', map { "$_=$per->{$_}" } sort keys %$per));

# one reader of each master
my %one = map { $node{$_} => $_ } reverse @R;
my @ONE = map { $one{$_} } sort keys %one;

# each user's first page of 5, $n times each: [user, status, cache, ids,
# worker]
our $AT = $t;    # the node read_all() asks

sub read_all {
    my ($n, @users) = @_;
    my @u = map { my $u = $_; ($u) x $n } @users;
    my @res = parallel($AT, 48, map { [ 'GET', "/users/$_/timeline?limit=5" ] }
        @u);
    return map { [ $u[$_], $res[$_]{status},
        $res[$_]{headers}{'x-feed-cache'} // '',
        FeedTest::Util::tl_ids($res[$_]),
        $res[$_]{headers}{'x-worker'} // '' ] } 0 .. $#u;
}

sub line { my ($r) = @_; "$r->[0]: $r->[1] $r->[2] (worker $r->[4]) "
    . "@{$r->[3]}" }

# the reads of @users ($n each) that are not LOCAL, as lines
sub not_local {
    my ($n, @users) = @_;
    return map { line($_) } grep { $_->[2] ne 'LOCAL' || $_->[1] != 200 }
        read_all($n, @users);
}

# every read of @users LOCAL, over a whole round of 4 reads each
sub warm {
    my ($secs, @users) = @_;
    my @bad;
    my $ok = $t->wait_for($secs, sub { @bad = not_local(4, @users); !@bad });
    diag(scalar(@bad) . " not LOCAL, first: $bad[0]") unless $ok;
    return $ok;
}

# a master's INFO commandstats: { command => calls }
sub cmdstats {
    my ($name) = @_;
    my $info = $c->cmd($name, 'INFO', 'commandstats');
    my %s = $info =~ /^cmdstat_([^:]+):calls=(\d+)/mg;
    return \%s;
}

# the clients of a node with CLIENT TRACKING on ("t" in their flags)
sub tracking_clients {
    my ($name) = @_;
    my $list = $c->cmd($name, 'CLIENT', 'LIST');
    return scalar grep { /\bflags=\S*t/ } split /\n/, $list;
}

sub tracking_all {
    my $st = statuses($t);
    return keys %$st == 2 && !grep { my $w = $_->{pull}{watch} // {};
        !$w->{tracking} || ($w->{watches} // 0) != 3 } values %$st;
}

# ------------------------------------------------------------ the users --

none_failed([ follow_each($t, 'a', @R) ], '12 follows of a');
none_failed([ follow_each($t, 'm', @R) ], '12 follows of m');
none_failed([ follow_each($t, 'celeb', @R, map { "x$_" } 1 .. 12) ],
    '24 follows of celeb');

my @posts;    # every post on the readers' timelines, oldest first
push @posts, post($t, 'm', 'm1');
push @posts, post($t, 'a', "a$_") for 1 .. 3;

none_failed([ map { line($_) } grep { $_->[1] != 200 } read_all(1, @R) ],
    'first reads: every timeline cached');

push @posts, post($t, 'celeb', 'the turn');
ok($t->wait_for(5, sub { !grep { !$c->in_list($_, $posts[-1]) } @R }),
    'the turn: celeb\'s post in every reader\'s list');
ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
    'celeb is a pull author');
push @posts, post($t, 'celeb', 'pulled');

# the newest 5 of @posts, as a first page shows them
sub want { join ' ', grep { defined } (reverse @posts)[0 .. 4] }

# the reads of @users ($n each) not 200 with the first page of want()
sub stale {
    my ($n, @users) = @_;
    my $w = want();
    return map { line($_) } grep { $_->[1] != 200 || "@{$_->[3]}" ne $w }
        read_all($n, @users);
}

# ------------------------------------------------- 5. the watches track --

ok($t->wait_for(10, \&tracking_all), 'status: each worker\'s 3 watches '
    . 'track') or diag(explain([ map { $_->{pull}{watch} }
    values %{ statuses($t) } ]));
for my $m (sort $c->masters) {
    ok(tracking_clients($m) >= 2, "$m: the main connections of both "
        . 'workers track (CLIENT LIST: ' . tracking_clients($m) . ')');
}

# ------------------------------------------- 1. local hits, no command --

ok(warm(15, @R), 'warm: every reader\'s first page LOCAL, on three '
    . 'masters');
is(join("\n", stale(2, @R)), '', 'warm: the pages right');

my $c0 = node_counts($t);
my $scrape = metrics_scrape($t);
my $m0 = metrics_val($scrape, 'feed_local_hits_total');
my $l0 = metrics_val($scrape, 'feed_timeline_reads_total', cache => 'LOCAL');

# reads of @users for $secs (40 at a time) between CONFIG RESETSTAT and
# INFO commandstats on every node: (the reads, { node => { command =>
# calls } })
sub reads_counted {
    my ($secs, @users) = @_;
    $c->cmd($_, 'CONFIG', 'RESETSTAT') for $c->alive_names;
    my $since = time;
    my @r;
    push @r, read_all(1, (@users) x int(40 / @users + 1))
        while time - $since < $secs;
    my %s = map { $_ => cmdstats($_) } $c->alive_names;
    delete $_->{'config|resetstat'} for values %s;
    return (\@r, \%s);
}

# the commands of %$s no read sends: the watches' heartbeats (PUBLISH),
# the workers' asks of the map (CLUSTER SLOTS, every 10 s), replication's
# own (REPLCONF, PING), and on the queue's master the fanout consumers'
# (their XREADGROUP blocks feed_fanout_block)
my %FANOUT = map { $_ => 1 } qw(xreadgroup xautoclaim xinfo|consumers);

sub not_background {
    my ($s) = @_;
    return join ', ', map { my $m = $_; map { "$m $_=$s->{$m}{$_}" }
        grep { !/^(publish|cluster\|slots|replconf|ping)$/
            && !($m eq $stream && $FANOUT{$_}) } sort keys %{$s->{$m}} }
        sort keys %$s;
}

# reads of @users for 2 s that are every one LOCAL with the right page,
# and cost no node a command: up to 3 tries, as a read asks Redis when a
# heartbeat is late (a node or a worker kept off the CPU for 200 ms);
# (the reads, the commands no read sends, the tries)
sub no_command {
    my (@users) = @_;
    my ($r, $s, @bad, $cmds);
    for my $try (1 .. 3) {
        ($r, $s) = reads_counted(2, @users);
        @bad = grep { $_->[1] != 200 || $_->[2] ne 'LOCAL'
            || "@{$_->[3]}" ne want() } @$r;
        $cmds = not_background($s);
        return ($r, $s, $try) if !@bad && $cmds eq '';
        diag("try $try: " . scalar(@bad) . ' reads of ' . scalar(@$r)
            . " not LOCAL or wrong, commands: $cmds"
            . (@bad ? "\nfirst: " . line($bad[0]) : ''));
    }
    return ($r, $s, 4);
}

my ($r, $s, $tries) = no_command(@R);
my $n = @$r;
ok($tries <= 3, "no command: $n reads in 2 s on three masters, every one "
    . "LOCAL with the right page, and no node ran a command any read sends "
    . "(try $tries)");
is(scalar(grep { ($s->{$_}{publish} // 0) >= 10 } $c->masters), 3,
    'no command: each master heard the heartbeats: '
    . join(' ', map { "$_ " . ($s->{$_}{publish} // 0) } sort $c->masters));

ok(node_counts($t)->{'local_pages.answered_without_redis'}
    - ($c0->{'local_pages.answered_without_redis'} // 0) >= $n,
    'status: local_pages.answered_without_redis counts them');
$scrape = metrics_scrape($t);
ok((metrics_val($scrape, 'feed_local_hits_total') // 0) - ($m0 // 0) >= $n,
    'metrics: feed_local_hits_total counts them');
ok((metrics_val($scrape, 'feed_timeline_reads_total', cache => 'LOCAL')
    // 0) - ($l0 // 0) >= $n,
    'metrics: feed_timeline_reads_total{cache="LOCAL"} counts them');

# --------------------------------------------- 2. what changes is seen --

# reads of @users, twice each, for $secs after $at, and each round, when
# $id is given, which users' lists have it; a hash: last, the time after
# $at of the last read whose page was not right (&$right), or -1; late,
# how long after a user's list had $id a read of theirs was last sent
# that was not right, or -1; caches, the count of reads by cache status;
# wrong, the reads not right
sub wrong_reads {
    my ($at, $secs, $right, $id, @users) = @_;
    my (%listed, %caches, @wrong);
    my ($last, $late) = (-1, -1);
    while (time - $at < $secs) {
        if ($id) {
            $listed{$_} //= $c->in_list($_, $id) ? time - $at : undef
                for @users;
        }
        my $sent = time - $at;
        for my $r (read_all(2, @users)) {
            $caches{$r->[2]}++;
            next if $r->[1] == 200 && $right->($r);
            my $l = $listed{$r->[0]};
            $last = $sent;
            $late = $sent - $l if defined $l && $sent - $l > $late;
            push @wrong, sprintf('sent at %.0f ms%s: %s', $sent * 1000,
                defined $l ? sprintf(', listed at %.0f ms', $l * 1000) : '',
                line($r));
        }
    }
    return { last => $last, late => $late, wrong => \@wrong,
        caches => join ' ', map { "$_ x$caches{$_}" } sort keys %caches };
}

sub ms { $_[0] < 0 ? 'never' : sprintf '%.0f ms', $_[0] * 1000 }

# the first and last few of a list, for a diag
sub ends { @_ > 6 ? (@_[0 .. 2], '...', @_[-3 .. -1]) : @_ }

sub is_want { "@{$_[0][3]}" eq want() }

# a post by $author: on every reader's first page within $bound s of its
# 201 (0.3), and never missing from a page once it was in the reader's
# list 300 ms before
sub post_seen {
    my ($author, $what, $users, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $bound = $o{bound} // 0.3;
    my $id = post($t, $author, $what) or return;
    my $at = time;
    push @posts, $id;
    my $w = wrong_reads($at, $bound + 1, \&is_want, $id, @$users);
    ok($w->{last} < $bound && $w->{late} < 0.3, "$what: last missing "
        . 'from a first page ' . ms($w->{last}) . ' after its 201, '
        . ms($w->{late}) . " after it was listed (reads: $w->{caches})")
        or diag(join "\n", ends(@{$w->{wrong}}));
    return $id;
}

# a delete of $id, made on $node: never shown after its 204
sub delete_unseen {
    my ($node, $id, $what, $users) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $d = $node->http('DELETE', "/users/a/posts/$id");
    my $at = time;
    is($d->{status}, 204, sprintf("$what: 204 after %.0f ms",
        $d->{elapsed} * 1000));
    @posts = grep { $_ ne $id } @posts;
    my $w = wrong_reads($at, 1, sub { !grep { $_ eq $id } @{$_[0][3]} },
        undef, @$users);
    ok($w->{last} < 0, "$what: never shown after its 204 (reads: "
        . "$w->{caches})") or diag(join "\n", ends(@{$w->{wrong}}));
}

ok(warm(10, @R), 'post: every reader LOCAL before');
my $p1 = post_seen('a', 'a\'s post fanned out to three masters', \@R);

# ------------------------------------------------------------- delete --

ok(warm(10, @R), 'delete: every reader LOCAL before, with the post');
is(join("\n", stale(1, @R)), '', 'delete: the post on every page');
delete_unseen($t, $p1, 'delete', \@R);
ok(warm(10, @R), 'delete: LOCAL again');
is(join("\n", stale(1, @R)), '', 'delete: LOCAL without it');

# ------------------------------ a delete not out of the lists yet --

# the second node's copies, answered LOCAL, of a post made on the first;
# the first node (the only fanout consumer) stopped; a delete made on the
# second stays in the lists, and only what the watches heard of it (each
# master's feed:dlc) keeps the copies from showing it
{
    local $AT = $t2;
    ok(warm(10, @R), 'second node: every reader LOCAL');
    my $p = post_seen('a', 'second node: a post made on the first', \@R);
    ok($t->wait_for(5, sub { !grep { !$c->in_list($_, $p) } @R }),
        'second node: the post in every list');
    ok(warm(10, @R), 'second node: LOCAL again, with the post');

    my @first = ($t->pid('nginx'), $t->worker_pids);
    kill 'STOP', @first;
    delete_unseen($t2, $p, 'second node, the first stopped: delete', \@R);
    my $listed = grep { $c->in_list($_, $p) } @R;
    kill 'CONT', @first;
    is($listed, 12, 'second node: all the while in every list');
    ok($t->wait_for(5, sub { !grep { $c->in_list($_, $p) } @R }),
        'first node going again: out of every list');
    ok(warm(10, @R), 'second node: LOCAL again');
    is(join("\n", stale(1, @R)), '', 'second node: LOCAL without it');
}

# ------------------------------------------ follow, unfollow and mute --

# the first pages of @ONE (a reader of each master) after each change,
# read 4 times each right after its 204
my $b1 = post($t, 'b', 'b1, not followed yet');
ok(warm(10, @ONE), 'follow: LOCAL before');

sub change_seen {
    my ($method, $uri, $right, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = map { my $u = $_; my $r = $t->http($method, sprintf $uri, $u);
        $r->{status} == 204 ? () : ("$u: $r->{status} $r->{body}") } @ONE;
    push @bad, map { line($_) } grep { $_->[1] != 200 || !$right->($_) }
        read_all(4, @ONE);
    is(join("\n", @bad), '', "$name: 204, then every read of a reader of "
        . 'each master right');
}

change_seen('PUT', '/users/%s/following/b', sub { $_[0][3][0] eq $b1 },
    'follow');
ok(warm(10, @ONE), 'unfollow: LOCAL before, with b\'s post');
is(scalar(grep { $_->[3][0] ne $b1 } read_all(1, @ONE)), 0,
    'unfollow: b\'s post first');
change_seen('DELETE', '/users/%s/following/b', \&is_want, 'unfollow');

my %by_a = map { $_ => 1 } @posts[1 .. 3];
ok(warm(10, @ONE), 'mute: LOCAL before');
ok(scalar(grep { $by_a{$_} } map { @{$_->[3]} } read_all(1, @ONE)),
    'mute: a\'s posts on the pages');
change_seen('PUT', '/users/%s/mutes/a', sub { !grep { $by_a{$_} }
    @{$_[0][3]} }, 'mute');
ok(warm(10, @ONE), 'unmute: LOCAL before');
change_seen('DELETE', '/users/%s/mutes/a', \&is_want, 'unmute');

# ------------------------------------------------ a pull author's post --

ok(warm(10, @R), 'pull: every reader LOCAL before');
post_seen('celeb', 'a pull author\'s post', \@R);

# ------------------------------------------------------ 3. failover --

# each worker's first read of $u from now (reads one after another until
# both answered): { worker => [cache, ids] }
sub first_per_worker {
    my ($u) = @_;
    my %first;
    for (1 .. 60) {
        my ($r) = read_all(1, $u);
        $first{$r->[4]} //= [ $r->[2], "@{$r->[3]}", $r->[1] ];
        last if keys %first == 2;
    }
    return \%first;
}

# $u's list changed on $name (its TTL set again, as a write does): each
# worker's next read of $u asks Redis; '' or what answered LOCAL
sub touched_asks {
    my ($name, $u) = @_;
    my $key = "feed:tl:{$u}";
    my $ttl = $c->cmd($name, 'PTTL', $key);
    return "no $key on $name ($ttl)" unless $ttl > 0;
    $c->cmd($name, 'PEXPIRE', $key, $ttl);
    sleep 0.1;
    my $f = first_per_worker($u);
    return join ', ', (keys %$f == 2 ? () : 'one worker only'),
        map { "worker $_ $f->{$_}[0]" } grep { $f->{$_}[0] eq 'LOCAL' }
        sort keys %$f;
}

my ($victim) = grep { $_ ne $stream && $per->{$_} } sort $c->masters;
my $vid = $c->node_id($victim);
my ($promoted) = grep { $c->cmd($_, 'CLUSTER', 'NODES')
    =~ /^\S+ \S+ myself,slave $vid /m } $c->names;
my @theirs = grep { $node{$_} eq $victim } @R;
ok($promoted && @theirs, "failover: $victim, of " . scalar(@theirs)
    . " readers, to its replica $promoted");

ok(warm(10, @R), 'failover: every reader LOCAL before');
is(touched_asks($victim, $theirs[0]), '', "failover: before, a change of "
    . "$theirs[0]\'s list on $victim makes each worker ask Redis");
ok(warm(10, @R), 'failover: LOCAL again');

$c->cmd($promoted, 'CLUSTER', 'FAILOVER');
ok($t->wait_for(10, sub { $c->cmd($promoted, 'INFO', 'replication')
    =~ /role:master/ }), "failover: $promoted took over");

# at once, before any command of the workers met the new map: a change
# made on the promoted master reaches the old one as its replica, which
# still tracks the keys read there
is(touched_asks($promoted, $theirs[0]), '', "failover: at once, a change "
    . "of $theirs[0]\'s list on $promoted makes each worker ask Redis");

# and a post, fanned out whatever the workers' maps say yet
my $p2 = post_seen('a', 'failover: a post as the replica took over', \@R,
    bound => 3);

ok(warm(10, @R), 'failover: every reader LOCAL again');
delete_unseen($t, $p2, 'failover: delete', \@R);

ok($c->wait_ok(10), 'failover: the cluster ok');
ok(warm(10, @R), "failover: LOCAL again, $victim\'s readers too");
ok($t->wait_for(5, \&tracking_all), 'failover: each worker\'s 3 watches '
    . 'track');
ok(tracking_clients($promoted) >= 2, "failover: both workers track on "
    . "$promoted (CLIENT LIST: " . tracking_clients($promoted) . ')');
($r, $s, $tries) = no_command(@theirs);
ok($tries <= 3, "failover: $victim\'s readers LOCAL, no command on any "
    . "node (try $tries)");
is(touched_asks($promoted, $theirs[0]), '', "failover: a change of "
    . "$theirs[0]\'s list on $promoted makes each worker ask Redis");

# ------------------------------------- 3b. the new master killed --

# $promoted killed: $victim, its replica now, promoted again after the
# cluster's node timeout; a post made meanwhile reaches its readers' lists
# once it is; no page lacks it 300 ms after it is listed, and its readers
# are LOCAL again, tracked on $victim
ok(warm(10, @R), 'kill: every reader LOCAL before');
$t->stop_proc($promoted, 'KILL');
my $killed = time;
my $p3 = post($t, 'a', 'while a master is down');
push @posts, $p3;
my $w = wrong_reads($killed, 6, \&is_want, $p3, @R);
ok($w->{late} < 0.3, 'kill: no page lacks the post 300 ms after it is in '
    . "the reader's list (reads: $w->{caches})")
    or diag(join "\n", ends(@{$w->{wrong}}));
ok($c->wait_ok(10) && $c->master_of("feed:tl:{$theirs[0]}") eq $victim,
    "kill: $victim master again");
ok($t->wait_for(10, sub { !grep { !$c->in_list($_, $p3) } @R }),
    'kill: the post in every list');
is(join("\n", stale(2, @R)), '', 'kill: every page right');
ok(warm(15, @R), "kill: every reader LOCAL again, $victim\'s too");
is(touched_asks($victim, $theirs[0]), '', "kill: a change of "
    . "$theirs[0]\'s list on $victim makes each worker ask Redis");

# ---------------------------------------------------- 4. a slot moved --

my $u = (grep { $node{$_} ne $victim } @R)[0];
my $from = $c->master_of("feed:tl:{$u}");
my ($to) = grep { $_ ne $from } sort $c->masters;
my $slot = $c->cmd($from, 'CLUSTER', 'KEYSLOT', "feed:tl:{$u}");

ok(warm(10, @R), "moved: every reader LOCAL before");
$c->move_slot($slot, $from, $to);
ok($c->wait_ok(10) && $c->master_of("feed:tl:{$u}") eq $to, "moved: "
    . "$u\'s slot $slot from $from to $to");

my $f = first_per_worker($u);
is(join(', ', map { "worker $_: $f->{$_}[2] $f->{$_}[0]" }
    grep { $f->{$_}[0] eq 'LOCAL' || $f->{$_}[1] ne want() } sort keys %$f),
    '', "moved: each worker's first read of $u asks Redis, the page right");
is(join("\n", stale(4, @R)), '', 'moved: every reader\'s pages right');
ok(warm(10, @R), "moved: LOCAL again, $u too");
is(touched_asks($to, $u), '', "moved: a change of $u\'s list on $to makes "
    . 'each worker ask Redis: its copies tracked there');
ok(warm(10, @R), 'moved: LOCAL again');
post_seen('a', 'moved: a post after the move', \@R);

unlike($t->error_log, qr/CROSSSLOT|refused CLIENT TRACKING/,
    'no command across slots, no tracking refused');

# ------------------------------------ 5. a master refuses tracking --

# its main connections killed, the workers turn tracking on again on
# every master: on one it is refused (ACL), so its readers are answered
# with a round trip, /status says not every watch tracks, and the workers
# ask it again once a second; allowed again, it tracks within a second and
# its readers are LOCAL again
my ($deaf) = sort $c->masters;
my @deafs = grep { $c->master_of("feed:tl:{$_}") eq $deaf } @R;
my @hear = grep { $c->master_of("feed:tl:{$_}") ne $deaf } @R;
# first, its clients killed: tracking ends with its connections, Redis
# forgets what they tracked, and no copy read before is answered LOCAL
ok(warm(10, @R), 'reconnect: every reader LOCAL before');
$c->cmd($deaf, 'CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
sleep 0.5;
is(touched_asks($deaf, $deafs[0]), '', "reconnect: the connections to "
    . "$deaf made again, a change of $deafs[0]\'s list there makes each "
    . 'worker ask Redis');
ok(warm(10, @R), 'reconnect: every reader LOCAL again');

$c->cmd($deaf, 'ACL', 'SETUSER', 'default', '-client|tracking');
$c->cmd($deaf, 'CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');

ok($t->wait_for(5, sub { my $st = statuses($t);
    keys %$st == 2 && !grep { $_->{pull}{watch}{tracking} } values %$st }),
    "refused: status: not every watch tracks, in each worker, once $deaf "
    . 'refuses CLIENT TRACKING');
ok(warm(10, @hear), 'refused: the other masters\' readers LOCAL again');
my @seen = map { @{[ read_all(4, @deafs) ]} } 1 .. 5;
is(join("\n", map { line($_) } grep { $_->[2] eq 'LOCAL' || $_->[1] != 200
    || !is_want($_) } @seen), '', "refused: $deaf\'s readers answered with "
    . 'a round trip, the page right: ' . scalar(@seen) . ' reads');
like($t->error_log, qr/feed watch: redis refused CLIENT TRACKING/,
    'refused: told in the log');
# asked again once a second, not at each heartbeat (every 100 ms): two
# CLIENT TRACKING a try (off, on), 4 workers, about 3 tries in 2 s
$c->cmd($deaf, 'CONFIG', 'RESETSTAT');
sleep 2;
my ($calls, $rejected) = ($c->cmd($deaf, 'INFO', 'commandstats') // '')
    =~ /cmdstat_client\|tracking:calls=(\d+),.*?rejected_calls=(\d+)/;
$tries = ($calls // 0) + ($rejected // 0);
ok($tries > 0 && $tries <= 40, "refused: CLIENT TRACKING asked again "
    . "about once a second per worker ($tries in 2 s)");

$c->cmd($deaf, 'ACL', 'SETUSER', 'default', '+client|tracking');
ok($t->wait_for(5, \&tracking_all), 'allowed again: status: each '
    . 'worker\'s 3 watches track');
ok(warm(10, @R), "allowed again: every reader LOCAL, $deaf\'s too");

diag(sprintf 'run time %.1f s', time - $t0);

$t2->finish;
$t->done;
