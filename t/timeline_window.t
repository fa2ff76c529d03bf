#!/usr/bin/perl

# feed_timeline_window: fanout on read asks each chunk of 200 authors for
# the posts newer than the window first, and reads older ones only for a
# page those did not fill, with exact pages all the same.
#
# A reader follows 208 authors (two chunks with the reader): 200 whose
# posts are all two to three hours old, and 8 who posted in the last half
# hour; the window is an hour.  The posts are inserted with ObjectIds of
# those times, as fanout on read sees any post.
#
#   - a first page the recent posts fill: one query per chunk, each for
#     ids above the window's edge; no query for older posts; the node's
#     mongo.window_reads +1, window_older +0 (/status), and the same in
#     /metrics (feed_timeline_window_*_total);
#   - a page the recent posts do not fill: a second query per chunk, for
#     ids at the edge or below, and the page is the newest posts exactly;
#     window_older +1;
#   - every page walked with max_id (limits 1, 7, 30, 100), pages with
#     since_id below, at and above the edge, and both: each the exact
#     expected list, newest first, no post twice, none missing;
#   - a miss (a page of 10, feed_cache_size 20: the rebuild asks for 20
#     posts) reads no older post; walking the timeline past the cache's
#     end (DEEP, from the fallback with max_id) visits every post once.
#
# What the stand-in received is read from its command log: skipped
# against a real MongoDB, where the pages are checked all the same.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short follow_each none_failed tl_walk_is tl_ids
    node_counts node_moved metrics_scrape metrics_val);

my $REAL = FeedTest::real_mongo();
my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo unless $REAL;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 10s;
    feed_cache_size 20;
    feed_timeline_window 1h;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
    }
}
EOF

my $RUN = $$ . int(time);
my $R = "tw${RUN}r";
my @old = map { "tw${RUN}o$_" } 1 .. 200;
my @new = map { "tw${RUN}n$_" } 1 .. 8;

# ----------------------------------------------------------------- posts --

# an ObjectId of that time (s), unique: the run's and a counter's bytes
my $seq = 0;
sub oid_at {
    my ($s) = @_;
    return sprintf('%08x%08x%08x', $s, $$ & 0xffffffff, ++$seq);
}

my $NOW = time;
my (@docs, %at);

# 40 of the old authors posted, 2 to 3 hours ago, one of them 3 times
for my $i (0 .. 41) {
    my $s = $NOW - 7200 - $i * 85;
    push @docs, [ oid_at($s), $old[$i % 40], $s ];
}

# the recent authors: 30 posts in the last half hour
for my $i (0 .. 29) {
    my $s = $NOW - 60 - $i * 55;
    push @docs, [ oid_at($s), $new[$i % 8], $s ];
}

# and the reader's own, an old one
push @docs, [ oid_at($NOW - 9000), $R, $NOW - 9000 ];

$t->mongo_insert('posts', map {
    sprintf('{"_id": {"$oid": "%s"}, "author": "%s", "body": "p %s",'
        . ' "ts": %d}', $_->[0], $_->[1], $_->[0], $_->[2] * 1000)
} @docs);

my @all = map { $_->[0] } sort { $b->[0] cmp $a->[0] } @docs;
my @recent = grep { hex(substr($_, 0, 8)) > $NOW - 3600 } @all;
is(scalar @recent, 30, 'setup: 30 recent posts of ' . scalar(@all));

none_failed([ map { follow_each($t, $_, $R) } @old, @new ],
    'setup: the reader follows 208 authors');

# --------------------------------------------------------------- queries --

# the posts queries of the reader's chunks since the log had $n0 lines
my %MINE = map { $_ => 1 } $R, @old, @new;
sub post_finds {
    my ($n0) = @_;
    my @c = $t->mongo_commands;
    return grep { ($_->{cmd} // '') eq 'find'
        && ($_->{coll} // '') eq 'posts'
        && ref $_->{filter} eq 'HASH'
        && ref $_->{filter}{author} eq 'HASH'
        && ref $_->{filter}{author}{'$in'} eq 'ARRAY'
        && grep({ $MINE{$_} } @{$_->{filter}{author}{'$in'}})
    } @c[$n0 .. $#c];
}

# 'newer' (ids above the edge), 'older' (at the edge or below) or 'all'
sub side {
    my $id = ref $_[0]{filter}{_id} eq 'HASH' ? $_[0]{filter}{_id} : {};
    my ($gt, $lt) = map { ref $_ eq 'HASH' ? $_->{'$oid'} : $_ }
        @$id{'$gt', '$lt'};
    return 'newer' if defined $gt && $gt =~ /0{16}$/;
    return 'older' if defined $lt && $lt =~ /0{14}01$/;
    return 'all';
}

sub sides {
    my %n;
    $n{ side($_) }++ for @_;
    return \%n;
}

sub source {
    my (%q) = @_;
    my $q = join '&', map { "$_=$q{$_}" } sort keys %q;
    return $t->get("/_feed/timeline?user=$R&$q");
}

sub lines { $REAL ? 0 : scalar(my @c = $t->mongo_commands) }

# a test: the queries since $n0 went to the sides of %$want
sub finds_are {
    my ($n0, $want, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    SKIP: {
        skip 'command log of the stand-in only', 1 if $REAL;
        is_deeply(sides(post_finds($n0)), $want, $name);
    }
}

# a test: the node's window reads and those past it since $c0
sub window_moved_is {
    my ($c0, $reads, $older, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $d = node_moved($t, $c0);
    is_deeply([ map { $d->{"mongo.window_$_"} } qw(reads older) ],
        [ $reads, $older ], "/status: $name");
}

# a page the recent posts fill: their side of the edge only

my $c0 = node_counts($t);
my $m0 = metrics_scrape($t);
my $n0 = lines();
my $r = source(limit => 20);
is($r->{status}, 200, 'a page of 20: 200') or diag(short($r));
is(join(' ', @{ tl_ids($r) }), join(' ', @recent[0 .. 19]),
    'a page of 20: the 20 newest posts');

finds_are($n0, { newer => 2 },
    'a page of 20: one query per chunk, newer than the edge only');

window_moved_is($c0, 1, 0, 'a read with the window, none past it');

# a page the recent posts do not fill: the older posts read too

$c0 = node_counts($t);
$n0 = lines();
$r = source(limit => 50);
is(join(' ', @{ tl_ids($r) }), join(' ', @all[0 .. 49]),
    'a page of 50 across the edge: the 50 newest posts');

finds_are($n0, { newer => 2, older => 2 },
    'a page of 50: a second query per chunk, for the older posts');

window_moved_is($c0, 1, 1, 'a read past the window');

my $m1 = metrics_scrape($t);
is_deeply([ map { (metrics_val($m1, $_) // -1) - (metrics_val($m0, $_) // 0) }
    qw(feed_timeline_window_reads_total feed_timeline_window_older_total) ],
    [ 2, 1 ], '/metrics: feed_timeline_window_reads_total +2, '
        . 'feed_timeline_window_older_total +1');

# a page wholly past the edge: one query per chunk, the range's own

$n0 = lines();
$r = source(limit => 10, max_id => $all[40]);
is(join(' ', @{ tl_ids($r) }), join(' ', @all[41 .. 50]),
    'a page below the edge (max_id): exact');

finds_are($n0, { all => 2 },
    'a page below the edge: one query per chunk');

# ----------------------------------------------------------- exact pages --

# every page of the source walked with max_id
for my $limit (1, 7, 30, 100) {
    my (@got, $max, $pages, $bad);
    while (1) {
        my $p = source(limit => $limit, defined $max ? (max_id => $max) : ());
        $bad = short($p), last if $p->{status} != 200;
        my $ids = tl_ids($p);
        push @got, @$ids;
        last if @$ids < $limit || ++$pages > 200;
        $max = $ids->[-1];
    }
    ok(!$bad, "walk of $limit: every page 200") or diag($bad);
    is(join(' ', @got), join(' ', @all),
        "walk of $limit: every post once, newest first (" . @got . ')');
}

# since_id below, at and above the edge, with max_id or not
my %ix;
@ix{@all} = 0 .. $#all;
for my $case ([ undef, 45 ], [ undef, 29 ], [ undef, 30 ], [ undef, 10 ],
    [ 5, 45 ], [ 25, 35 ], [ 31, 60 ], [ 3, 12 ])
{
    my ($hi, $lo) = @$case;
    for my $limit (4, 100) {
        my @want = grep { (!defined $hi || $ix{$_} > $hi) && $ix{$_} < $lo }
            @all;
        splice(@want, $limit) if @want > $limit;    # the newest of them
        my $p = source(limit => $limit, since_id => $all[$lo],
            defined $hi ? (max_id => $all[$hi]) : ());
        is(join(' ', @{ tl_ids($p) }), join(' ', @want),
            'since_id ' . $lo . (defined $hi ? ", max_id $hi" : '')
                . ", limit $limit: exact");
    }
}

# ------------------------------------------------------------------ miss --

$c0 = node_counts($t);
$n0 = lines();
$r = $t->get("/users/$R/timeline?limit=10");
is($r->{headers}{'x-feed-cache'}, 'MISS', 'the timeline: a miss')
    or diag(short($r));
is(join(' ', @{ tl_ids($r) }), join(' ', @recent[0 .. 9]),
    'the miss: the 10 newest posts');

finds_are($n0, { newer => 2 },
    'the miss (feed_cache_size 20): no older post read');

window_moved_is($c0, 1, 0, 'the rebuild read within the window');

my $caches = tl_walk_is($t, $R, 7, \@all, 'the timeline by 7');
ok($caches->{DEEP}, 'pages past the cache from the fallback (DEEP)')
    or diag(join ', ', %$caches);

$t->done;
