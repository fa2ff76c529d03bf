#!/usr/bin/perl

# Unread counts on a Redis Cluster (three masters): readers on every
# master (three on each, their names picked so), each with a read marker,
# follow two authors and a pull author (whose list each master keeps a
# copy of).  GET .../timeline/unread and the first pages' X-Feed-Unread
# count the posts newer than each marker, on each node, the pull author's
# posts merged from the copy of the reader's node; a mute changes one
# reader's count only, at once; a new post of the pull author counts for
# every reader; a marker PUT whose copy the reader's node refused (out of
# memory: 503) leaves no first page with the old count.  The count and the
# header on a single Redis: t/timeline_unread.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short statuses follow_each parallel none_failed post
    enc is_error);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my ($seed) = $c->masters;
my $seeds = '127.0.0.1:' . $c->port($seed) . ' cluster';

my $server = FeedCluster::server_conf();
my $MORE = <<'EOF';
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
        location ~ ^/users/([^/]+)/timeline/unread$ {
            feed_timeline_unread $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
EOF
$server =~ s/^(\s*location = \/status)/$MORE$1/m
    or die "no place for the locations\n";

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
    feed_cache_size 24;
    feed_cache_local 1m;
    feed_pull_threshold 3;
    feed_fanout on;
    feed_fanout_block 500ms;

$server
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

my $RUN = $$ . int(time);
my ($a1, $a2, $celeb) = map { "$_.$RUN" } qw(a1 a2 celeb);

# nine readers, three on each master: the names r1.$RUN, r2.$RUN, ... in
# order, each taken while its timeline's master has fewer than three (nine
# names drawn at random can all land on two masters)
my (@R, %taken);
for my $i (1 .. 200) {
    last if @R == 9;
    my $name = "r$i.$RUN";
    next if $taken{ $c->master_of("feed:tl:{$name}") }++ >= 3;
    push @R, $name;
}

my ($node, $per) = $c->spread(@R);
ok(@R == 9 && keys %$per == 3 && !grep({ $_ != 3 } values %$per),
    'the readers are on all three masters, three on each: '
    . join(' ', map { "$_=$per->{$_}" } sort keys %$per));

none_failed([ follow_each($t, $_, @R) ], "9 follows of $_")
    for $a1, $a2, $celeb;

my @posts = ([post($t, $celeb, 'turn'), $celeb]);
for my $i (1 .. 3) {
    push @posts, [post($t, $_, "$_ $i"), $_] for $a1, $a2, $celeb;
}
is(scalar(grep { $_->[0] } @posts), 10, '10 posts');

# the posts newer than $m, but those of @hidden
sub want {
    my ($m, @hidden) = @_;
    my %h = map { $_ => 1 } @hidden;
    return scalar grep { $_->[0] gt $m && !$h{ $_->[1] } } @posts;
}

sub counts_are {
    my ($want, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @u = parallel($t, 9,
        map { [ 'GET', "/users/$_/timeline/unread" ] } @R);
    my @bad = grep { $u[$_]{status} != 200
        || ($u[$_]{json}{count} // -1) != $want->{ $R[$_] } } 0 .. $#R;
    ok(!@bad, "$name: each reader's count")
        or diag("$R[$bad[0]]: want $want->{ $R[$bad[0]] }: "
            . short($u[$bad[0]]));
    my @p = parallel($t, 9,
        map { [ 'GET', "/users/$_/timeline?limit=5" ] } @R, @R);
    @bad = grep { $p[$_]{status} != 200
        || ($p[$_]{headers}{'x-feed-unread'} // '') ne
            $want->{ $R[$_ % 9] } } 0 .. $#p;
    ok(!@bad, "$name: each reader's X-Feed-Unread, twice")
        or diag("$R[$bad[0] % 9]: want $want->{ $R[$bad[0] % 9] }: unread "
            . ($p[$bad[0]]{headers}{'x-feed-unread'} // 'none') . ' '
            . short($p[$bad[0]]));
}

my $m = $posts[4][0];
my @marked = parallel($t, 9, map { [ 'PUT', "/users/$_/timeline/marker",
    enc({ last_read_id => $m }) ] } @R);
ok(!grep({ $_->{status} != 200 } @marked), 'the markers set');

my %want = map { $_ => want($m) } @R;
is($want{ $R[0] }, 5, '5 posts newer than the marker');
ok($t->wait_for(10, sub {
    my @u = parallel($t, 9,
        map { [ 'GET', "/users/$_/timeline/unread" ] } @R);
    !grep { ($_->{json}{count} // -1) != 5 } @u }),
    'the counts settle (the pull author turned)');
counts_are(\%want, 'markers');

is($t->http('PUT', "/users/$R[0]/mutes/$a2")->{status}, 204, 'a mute');
$want{ $R[0] } = want($m, $a2);
counts_are(\%want, 'a mute: that reader only');

push @posts, [post($t, $celeb, 'new'), $celeb];
$want{$_}++ for @R;
ok($t->wait_for(10, sub {
    my @u = parallel($t, 9,
        map { [ 'GET', "/users/$_/timeline/unread" ] } @R);
    !grep { ($u[$_]{json}{count} // -1) != $want{ $R[$_] } } 0 .. 8 }),
    'a new post of the pull author counts for every reader');
counts_are(\%want, 'a new post of the pull author');

# a marker PUT whose copy the reader's node refused: out of memory
# (noeviction), the node takes no write but deletes, the PUT is stored in
# MongoDB and answered 503, its copy and the count kept with the first
# pages dropped (scripts/marker_drop.lua, on that node).  No first page
# answers the old count again; the new one once the copy is back.

my $r = $R[1];
my ($m2) = sort grep { $_ gt $m } map { $_->[0] } @posts;
my ($old, $new) = ($want{$r}, want($m2));
ok($new != $old, "the refused marker counts $new, the one before $old");

sub firsts {
    my ($n) = @_;
    return parallel($t, 4,
        map { [ 'GET', "/users/$r/timeline?limit=5" ] } 1 .. $n);
}

sub stale_none {
    my ($name, @res) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = grep { $_->{status} != 200
        || ($_->{headers}{'x-feed-unread'} // $new) ne $new } @res;
    ok(!@bad, "$name: X-Feed-Unread $new or none, never $old")
        or diag(short($bad[0]) . ' unread '
            . ($bad[0]{headers}{'x-feed-unread'} // 'none'));
}

my $at = $node->{$r};
$c->cmd($at, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
$c->cmd($at, 'CONFIG', 'SET', 'maxmemory', '1');
is_error($t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $m2, force => \1 }),
        headers => { 'Content-Type' => 'application/json' }),
    503, 'unavailable', 'a marker PUT, its node out of memory');
my @oom = firsts(8);
$c->cmd($at, 'CONFIG', 'SET', 'maxmemory', '0');
stale_none('out of memory, first pages', @oom);
stale_none('after the refused PUT, first pages', firsts(12));

my $u = $t->get("/users/$r/timeline/unread");
is($u->{status} . ' ' . ($u->{json}{count} // ''), "200 $new",
    'after the refused PUT: the new count');
ok($t->wait_for(5, sub {
    ($t->get("/users/$r/timeline?limit=5")->{headers}{'x-feed-unread'}
        // '') eq $new }), 'after the refused PUT: the header back');

is($t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $m, force => \1 }),
        headers => { 'Content-Type' => 'application/json' })->{status},
    200, 'the marker back');
counts_are(\%want, 'the marker back');

$t->done;
