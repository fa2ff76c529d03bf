#!/usr/bin/perl

# Timelines, fanout and deletes on a real Redis Cluster (three masters):
#
#   - reads are served from the cache (MISS once, then HIT, then a hit
#     from Redis or the worker's copy: HIT or LOCAL) for users of every
#     master: the read script checks the copy of the deleted posts
#     on its own node (feed:deleting{<tag>}), not feed:deleting;
#   - a post is delivered to the cached timelines of followers of all
#     three masters, once, in batches of one node each (no CROSSSLOT),
#     with feed_fanout_deliver_batch smaller than a node's share; the
#     queue in 4 partitions, on more than one master;
#   - a delete is never shown by any read, on any node, and each master's
#     copy holds it; its write of feed:deleting follows a MOVED (a write
#     nobody waits for is redirected too);
#   - a copy lost (deleted by hand): reads of that node's users do not
#     show a deleted post still in their lists, the copy is made again
#     from feed:deleting, and reads hit again;
#   - the master of the author's partition of the queue killed (its
#     replica promoted): the other masters' users hit all along, its users
#     are answered from the fallback (or 503) until the promotion, then
#     from lists made again (of the old master's run: MISS), then hit
#     again; a post made meanwhile (its entry not added: the outbox keeps
#     it) reaches every follower once after the promotion.
#
# Link mode is refused with a cluster (t/config.t); pull authors on a
# cluster: t/cluster_pull.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use Compress::Zlib ();
use FeedTest;
use FeedTest::Util qw(short statuses fsum tl_ids follow_each read_each
    none_failed post is_hit);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 1);

# the master of author's partition of the queue is killed below: the
# seed is another
my @S = ('feed:posts', map { "feed:posts:$_" } 1 .. 3);
my $apart = $S[ Compress::Zlib::crc32('author') % 4 ];
my $victim = $c->master_of($apart);
my ($seed) = grep { $_ ne $victim } $c->masters;
my $seeds = '127.0.0.1:' . $c->port($seed) . ' cluster';

my $CONF = <<"EOF";
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_stream feed:posts partitions=4;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;
    feed_fanout_deliver_batch 4;
    \@\@EXTRA\@\@

@{[ FeedCluster::server_conf() ]}
}
EOF

(my $conf = $CONF) =~ s/\@\@EXTRA\@\@/feed_cache_local 1m;/;
$t->write_conf($conf)->run;

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

# the queue's four partitions: on more than one master
my %smaster = map { $c->master_of($_) => 1 } @S;
ok(keys %smaster >= 2, 'the four partitions of the queue on '
    . join(' ', sort keys %smaster));

# ------------------------------------------------------------- helpers --

my @F = map { "f$_" } 1 .. 30;
my ($node, $per) = $c->spread(@F);
my %node = %$node;
my %per = %$per;
is(scalar keys %per, 3, 'the followers\' timelines are on all three '
    . 'masters: ' . join(' ', map { "$_=$per{$_}" } sort keys %per));

sub cache_of {
    my ($r) = @_;
    return $r->{headers}{'x-feed-cache'} // '';
}

# each user's read: [status, cache status, ids]
sub read_all {
    my (@users) = @_;
    my ($res) = read_each($t, @users);
    return map { [ $_->{status}, cache_of($_), tl_ids($_) ] } @$res;
}

sub in_list { $c->in_list(@_) }

sub copy_of {
    my ($name) = @_;
    my $keys = $c->cmd($name, 'KEYS', 'feed:deleting{*}');
    return @$keys ? $keys->[0] : undef;
}

# a copy marked whole for the data its node serves now: the mark of its
# run ("~" and the first 16 digits of its run id)
sub marked {
    my ($name, $copy) = @_;
    my ($run) = ($c->cmd($name, 'INFO', 'server') =~ /run_id:(\w{16})/);
    return $run && defined $c->cmd($name, 'ZSCORE', $copy, "~$run");
}

# ------------------------------------------------------------ timelines --

none_failed([ follow_each($t, 'author', @F) ], '30 follows of author');

my $p1 = post($t, 'author', 'before the caches');

my @r = read_all(@F);
is(scalar(grep { $_->[0] == 200 && $_->[1] eq 'MISS' } @r), 30,
    'first reads: 30 MISS (rebuilt)');
is(scalar(grep { $_->[2][0] && $_->[2][0] eq $p1 } @r), 30,
    'first reads: the post of before');

@r = read_all(@F);
is(scalar(grep { $_->[0] == 200 && $_->[1] eq 'HIT' } @r), 30,
    'second reads: 30 HIT, on all three masters')
    or diag(join ' ', map { "$_->[0]/$_->[1]" } @r);

for my $m ($c->masters) {
    my $copy = copy_of($m);
    ok($copy && $c->master_of($copy) eq $m
        && marked($m, $copy),
        "$m: its copy of the deleted posts, marked whole");
}

# --------------------------------------------------------------- fanout --

my $d0 = fsum(statuses($t), "deliveries");
my $p2 = post($t, 'author', 'to every node');

ok($t->wait_for(5, sub { !grep { !in_list($_, $p2) } @F }),
    'fanout: the post in all 30 cached timelines');
is(scalar(grep { in_list($_, $p2) == 1 } @F), 30, 'fanout: once in each');
ok($t->wait_for(3, sub {
    fsum(statuses($t), "deliveries") - $d0 == 30 }),
    'fanout: 30 deliveries counted (the author has no cached timeline)')
    or diag('deliveries: ' . (fsum(statuses($t), "deliveries") - $d0));

@r = read_all(@F);
is(scalar(grep { is_hit($_->[1]) && $_->[2][0] eq $p2 } @r), 30,
    'fanout: every read a hit with the new post first');

# ---------------------------------------------------------------- delete --

my $del = $t->http('DELETE', "/users/author/posts/$p2");
is($del->{status}, 204, 'delete: 204');

@r = read_all(@F);
is(scalar(grep { $_->[0] == 200 && !grep { $_ eq $p2 } @{$_->[2]} } @r),
    30, 'delete: no read shows it, on any node');
for my $m ($c->masters) {
    my $copy = copy_of($m);
    ok($copy && defined $c->cmd($m, 'ZSCORE', $copy, $p2),
        "delete: in $m\'s copy");
}
ok($t->wait_for(5, sub { !grep { in_list($_, $p2) } @F }),
    'delete: fanout takes it out of every list');

# -------------------------------------- a write nobody waits for, moved --

# feed:deleting's slot moved behind the workers' backs: a delete's write of
# it (sent and forgotten) is answered MOVED, and must follow it
my $dslot = $c->cmd($c->master_of('feed:deleting'), 'CLUSTER', 'KEYSLOT',
    'feed:deleting');
my $dfrom = $c->master_of('feed:deleting');
my ($dto) = grep { $_ ne $dfrom } $c->masters;
$c->move_slot($dslot, $dfrom, $dto);

my $p5 = post($t, 'author', 'deleted after its set moved');
is($t->http('DELETE', "/users/author/posts/$p5")->{status}, 204,
    'moved: post deleted');
ok($t->wait_for(3, sub {
    defined $c->cmd($dto, 'ZSCORE', 'feed:deleting', $p5) }),
    "moved: the delete's write followed feed:deleting to $dto");

# ----------------------------------------------------------- copy lost --

# a post deleted while it stays in the lists: its id put back by hand
# after the delete's fanout, as a list made before it would hold it
my $p3 = post($t, 'author', 'deleted, still listed');
ok($t->wait_for(5, sub { !grep { !in_list($_, $p3) } @F }),
    'copy lost: the post in every list');
my $entries = { map { $_ => $c->key_cmd("feed:tl:{$_}", 'LINDEX',
    "feed:tl:{$_}", 0) } @F };
is($t->http('DELETE', "/users/author/posts/$p3")->{status}, 204,
    'copy lost: post deleted');
ok($t->wait_for(5, sub { !grep { in_list($_, $p3) } @F }),
    'copy lost: out of every list');
$c->key_cmd("feed:tl:{$_}", 'LPUSH', "feed:tl:{$_}", $entries->{$_})
    for @F;

my @theirs = grep { $node{$_} eq $victim } @F;
$c->cmd($victim, 'DEL', copy_of($victim));

@r = read_all(@theirs);
is(scalar(grep { $_->[0] == 200 && !grep { $_ eq $p3 } @{$_->[2]} } @r),
    scalar @theirs, "copy lost: $victim\'s users never see the deleted "
    . 'post');
ok($t->wait_for(3, sub {
    my $copy = copy_of($victim);
    $copy && marked($victim, $copy)
        && defined $c->cmd($victim, 'ZSCORE', $copy, $p3) }),
    'copy lost: made again, with the deleted post');
@r = read_all(@theirs);
is(scalar(grep { is_hit($_->[1]) && !grep { $_ eq $p3 } @{$_->[2]} } @r),
    scalar @theirs, 'copy lost: reads hit again, without it');
like($t->error_log, qr/feed deleted posts: NOCOPY/,
    'copy lost: the missing copy logged');

# ------------------------------------------------------------- failover --

my @others = grep { $node{$_} ne $victim } @F;
$t->stop_proc($victim, 'KILL');
my $killed = time;

my $p4 = post($t, 'author', 'while a master is down');

my (%seen, $bad);
while (time - $killed < 1) {
    for my $r (read_all(@others)) {
        $bad++ unless $r->[0] == 200 && is_hit($r->[1]);
    }
    for my $r (read_all(@theirs)) {
        $seen{"$r->[0] $r->[1]"}++;
    }
}
ok(!$bad, 'failover: the other masters\' users hit all along');
ok(!grep({ !/^(200 BYPASS|503 .*)$/ } keys %seen),
    "failover: $victim\'s users answered from the fallback or 503 until "
    . 'the promotion: ' . join(', ', map { "$_ x$seen{$_}" } sort keys %seen));

ok($t->wait_for(15, sub {
    my $st = statuses($t);
    return 0 unless keys %$st == 2;
    !grep { ($_->{redis}{cluster}{masters_up} // 0) != 3 } values %$st;
}), 'failover: the promoted replica found');
diag(sprintf 'failover: %.1f s from the kill', time - $killed);

ok($t->wait_for(15, sub { !grep { !in_list($_, $p4) } @F }),
    'failover: the post made meanwhile in all 30 timelines');
is(scalar(grep { in_list($_, $p4) == 1 } @F), 30, 'failover: once in each');
# the replica's lists are of its old master's run: made again once, as
# after any data that may be behind (lib/deleted.lua)
@r = read_all(@theirs);
is(scalar(grep { $_->[0] == 200 && ($_->[1] eq 'MISS' || is_hit($_->[1]))
    && $_->[2][0] eq $p4 } @r), scalar @theirs,
    "failover: $victim\'s users answered from the cache, the post first");
@r = read_all(@theirs);
is(scalar(grep { is_hit($_->[1]) && $_->[2][0] eq $p4 } @r),
    scalar @theirs, "failover: $victim\'s users hit again, the post first");

# ------------------------------------------------------------------ end --

unlike($t->error_log, qr/CROSSSLOT|non local key/,
    'no command across nodes');

$t->done;
