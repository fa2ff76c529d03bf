#!/usr/bin/perl

# feed_status's "node": the counters of all the workers of this nginx
# together, in shared memory, whichever worker answers.  With 3 workers,
# after follows, posts fanned out and timeline reads:
#
#   - every worker's answer has "node", and it is the sum of the workers'
#     own counters (requests, MongoDB tasks, fanout consumed / deliveries /
#     acknowledged, reads answered from the workers' page copies);
#   - a reload starts the workers' own counters again; the node's go on.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use FeedTest;
use FeedTest::Util qw(short);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF');
worker_processes 3;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 200ms;

    server {
        # reuseport: connections spread over the workers
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

$t->run;

my $JSON = JSON::PP->new->utf8->canonical;
my $RUN = $$ . int(time);

# the latest answer of each worker, until every worker answered
sub snapshots {
    my ($n) = @_;
    my (%by, $last);
    for (1 .. 100) {
        my $r = $t->get('/status');
        next unless $r->{status} == 200 && ref $r->{json} eq 'HASH';
        $last = $r->{json};
        $by{ $last->{pid} } = $last;
        last if keys %by == $n;
    }
    return (\%by, $last);
}

my %FIELDS = (
    requests => sub { $_[0]{requests} },
    'mongo tasks' => sub { $_[0]{mongo}{tasks} },
    'fanout consumed' => sub { $_[0]{fanout}{consumed} },
    'fanout deliveries' => sub { $_[0]{fanout}{deliveries} },
    'fanout acked' => sub { $_[0]{fanout}{acked} },
    'local pages answered' => sub { $_[0]{local_pages}{answered} },
);

# ------------------------------------------------------------- traffic --

my @readers = map { "sr$RUN$_" } 1 .. 6;
my $author = "sa$RUN";
my @bad;
for my $u (@readers) {
    my $r = $t->http('PUT', "/users/$u/following/$author");
    push @bad, "follow $u: " . short($r) if $r->{status} != 204;
    $r = $t->get("/users/$u/timeline");
    push @bad, "read $u: " . short($r) if $r->{status} != 200;
}
for my $i (1 .. 5) {
    my $r = $t->http('POST', "/users/$author/posts",
        body => $JSON->encode({ body => "post $i" }),
        headers => { 'Content-Type' => 'application/json' });
    push @bad, "post $i: " . short($r) if $r->{status} != 201;
}
ok(!@bad, '6 follows and reads, 5 posts') or diag($bad[0]);

# every post in every reader's cache (5 x 6 deliveries: the author has no
# cached timeline), then reads
ok($t->wait_for(10, sub {
    !grep {
        my $l = $t->redis('LLEN', "feed:tl:{$_}") // 0;
        $l < 6
    } @readers
}), 'every post delivered');

for (1 .. 4) {
    $t->get("/users/$_/timeline") for @readers;
}
sleep 0.5;

# --------------------------------------------------- the node's counts --

my ($by, $last) = snapshots(3);
is(scalar(keys %$by), 3, 'all 3 workers answered /status');
ok(!grep({ ref $_->{node} ne 'HASH' } values %$by),
    'every answer has "node"');

# the sweepers of the outbox and of the cache effects ask MongoDB every
# 500 ms on their own: between the first worker's answer and the last
# one's, the node's tasks may have gone on by a few
for my $f (sort keys %FIELDS) {
    my $get = $FIELDS{$f};
    my $sum = 0;
    $sum += $get->($_) // 0 for values %$by;
    if ($f eq 'mongo tasks') {
        my $n = $get->($last->{node});
        ok($n >= $sum && $n <= $sum + 4,
            "node $f is the workers' sum ($n, $sum), or the sweepers' "
            . 'tasks more');
        next;
    }
    is($get->($last->{node}), $sum, "node $f is the workers' sum ($sum)");
}

is($last->{node}{fanout}{deliveries}, 30, 'node: 30 deliveries');
ok($last->{node}{local_pages}{answered} > 0,
    'node: reads answered from the workers\' copies');

# ------------------------------------------------------------- reload --

my $before = $last->{node}{requests};
$t->reload;
my @old = keys %$by;
ok($t->wait_for(10, sub {
    my @now = $t->worker_pids;
    @now == 3 && !grep { my $p = $_; grep { $_ == $p } @old } @now
}), 'reloaded');

($by, $last) = snapshots(3);
my $own = 0;
$own += $_->{requests} for values %$by;
ok($own <= 100, "the new workers' own requests start again ($own)");
ok($last->{node}{requests} > $before + $own - 1,
    "node requests go on: $before before, $last->{node}{requests} after");

$t->done;
