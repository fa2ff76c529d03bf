#!/usr/bin/perl

# Hidden posts on a real Redis Cluster (three masters, embed mode): each
# reader's filter set lives on the master of the reader's timeline, in the
# reader's hash tag, and every read path leaves the reader's hidden posts
# out.  Readers on all three masters follow a pushed author (small) and a
# pull author (celeb, merged from each master's copy of its list);
# feed_cache_size 10, so walks go past the cache (DEEP):
#
#   - first pages read again and again (kept pages, workers' copies) are
#     HITs without the hidden posts, at once after the 204, on every
#     master;
#   - walks of every reader visit every other post once, newest first,
#     across the cache's end;
#   - a hidden post shown again (DELETE) is back at the next read;
#   - a reader's filter set lost: the rebuild loads the hidden posts again.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses tl_ids follow_each parallel none_failed
    post tl_walk first_diff);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my ($seed) = $c->masters;
my $seeds = '127.0.0.1:' . $c->port($seed) . ' cluster';

my $server = FeedCluster::server_conf();
$server =~ s/^(\s*location = \/status)/        location ~ ^\/users\/([^\/]+)\/hidden\/([^\/]+)\$ { feed_hide \$1 \$2; }\n$1/m;

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_stream feed:posts partitions=2;
    feed_cache_size 10;
    feed_cache_local 1m;
    feed_pull_threshold 12;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;

$server
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

my @R = map { "r$_" } 1 .. 9;
my ($node, $per) = $c->spread(@R);
is(scalar keys %$per, 3, 'the readers\' timelines are on all three masters');

none_failed([ follow_each($t, 'celeb', @R, map { "x$_" } 1 .. 6) ],
    '15 follows of celeb (a pull author past 12)');
none_failed([ follow_each($t, 'small', @R) ], '9 follows of small');

my @posts;    # oldest first
for my $i (1 .. 12) {
    push @posts, post($t, 'small', "s$i"), post($t, 'celeb', "c$i");
}
is(scalar(grep { defined } @posts), 24, '24 posts');
my @ids = reverse @posts;    # newest first

# each reader's first page of 5: [status, cache, ids]
sub firsts {
    my @res = parallel($t, 50,
        map { [ 'GET', "/users/$_/timeline?limit=5" ] } (@_) x 2);
    return map { [ $_->{status}, $_->{headers}{'x-feed-cache'} // '',
        join(' ', @{ tl_ids($_) }) ] } @res;
}

# the readers' first pages as @$want's first 5, cache $cache when given
sub firsts_are {
    my ($readers, $want, $cache, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $w = join ' ', @$want[0 .. 4];
    my @bad = grep { $_->[0] != 200 || $_->[2] ne $w
        || ($cache && $_->[1] ne $cache) } firsts(@$readers);
    ok(!@bad, $name) or diag("got @{ $bad[0] }\nwant $w");
}

sub visible {
    my (@hid) = @_;
    my %h = map { $_ => 1 } @hid;
    return [ grep { !$h{$_} } @ids ];
}

ok($t->wait_for(10, sub { !grep { $_->[2] !~ /^\Q$ids[0]\E/ } firsts(@R) }),
    'every reader\'s first page has the newest post');
firsts(@R) for 1 .. 2;

# each reader hides a post of small (pushed) on the first page, one of
# celeb (pulled), and one past the cache; readers differ
my %hid;
for my $k (0 .. $#R) {
    my $r = $R[$k];
    $hid{$r} = [ $ids[1 + $k % 2], $ids[6 + $k % 3], $ids[18 + $k % 4] ];
    my @s = map { $t->http('PUT', "/users/$r/hidden/$_")->{status} }
        @{ $hid{$r} };
    is("@s", '204 204 204', "$r (on $node->{$r}): three hidden");
}

for my $r (@R) {
    firsts_are([$r], visible(@{ $hid{$r} }), 'HIT',
        "$r: first pages, HIT, without the hidden posts");
}

for my $r (@R) {
    my $w = tl_walk($t, $r, 4, most => 50);
    my $want = visible(@{ $hid{$r} });
    ok(!@{ $w->{problems} }, "$r: walk 4: pages well formed")
        or diag($w->{problems}[0]);
    is(join(' ', @{ $w->{ids} }), join(' ', @$want),
        "$r: walk 4: every other post once")
        or diag(first_diff($w->{ids}, $want));
    ok(grep({ ($_ // '') eq 'DEEP' } @{ $w->{caches} }),
        "$r: walk 4: DEEP past the cache");
}

# shown again
my $r = $R[0];
is($t->http('DELETE', "/users/$r/hidden/$hid{$r}[0]")->{status}, 204,
    "$r: the first shown again");
shift @{ $hid{$r} };
firsts_are([$r], visible(@{ $hid{$r} }), 'HIT', "$r: shown at once, a HIT");

# the filter set lost: made again from MongoDB
my $f = "feed:tlf:{$R[1]}";
$c->key_cmd($f, 'DEL', $f);
my $p = $t->get("/users/$R[1]/timeline?limit=5&max_id=$ids[0]");
is($p->{headers}{'x-feed-cache'}, 'MISS', "$R[1]: filters lost: rebuilt");
is($c->key_cmd($f, 'HGET', $f, "#$hid{$R[1]}[0]"), 8,
    "$R[1]: filters lost: the hidden posts loaded again");
firsts_are([$R[1]], visible(@{ $hid{$R[1]} }), '',
    "$R[1]: rebuilt: without the hidden posts");

$t->done;
