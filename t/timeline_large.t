#!/usr/bin/perl

# A large timeline cache: feed_cache_size 20000, in link and embed mode.
# Redis's Lua takes at most 8000 values in one unpack(): every script
# step over a list's ids goes in bounded chunks, so the whole allowed range
# of feed_cache_size works:
#
#   - a cold read of a reader following an author with 20,100 posts
#     rebuilds 20,000 of them in one warm, while a deleted post is in
#     feed:deleting (the warm checks every id against it);
#   - the next read is a HIT; following next with limit=100 visits all
#     20,100 posts once, in order: HIT inside the cache, DEEP past its
#     end; single pages of 20 as deep as 19,900 entries are HITs;
#   - a new post fanned out lands on top, and the list is trimmed back to
#     20,000: its oldest entry goes.
#
# The posts go straight into the MongoDB stand-in's data file (bench/seed.c
# -p): through the API each is an insert, a stream entry and a fanout.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short summary post follow_each none_failed
    status_all tl_uri tl_key rd);

plan skip_all => 'seeds the MongoDB stand-in\'s data file'
    if FeedTest::real_mongo();

my $t = FeedTest->new;
my $SIZE = 20000;
my $N = 20100;

$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 5s;
    feed_mongo_timeout 20s;
    feed_cache_size 20000;
    feed_cache_mode @@MODE@@;
    feed_cache_lock_timeout 60s;
    feed_fanout on;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

# ------------------------------------------------------------------ seed --

my $seed = $t->dir . '/seed';
system('cc', FeedTest->root . '/bench/seed.c', '-o', $seed,
    split(' ', `pkg-config --cflags --libs libbson-1.0`)) == 0
    or die "cannot build bench/seed.c\n";

$t->stop_mongo;
system($seed, '-p', $t->dir . '/mongo-db/standin-data.bson', 'feed', 'big',
    $N) == 0 or die "seed failed\n";
$t->start_mongo;

# ----------------------------------------------------------------- tests --

sub items { @{$_[0]{json}{items} || []} }

sub bodies { map { $_->{body} } items($_[0]) }

# "post $from" down to "post $to"
sub want { map { "post $_" } reverse($_[1] .. $_[0]) }

# every page, 100 at a time, following next: the posts, how many pages
# each X-Feed-Cache status answered, the first pages inside the cache not
# answered HIT
sub walk {
    my ($reader) = @_;
    my (@got, %status, @bad);
    my $uri = tl_uri($reader, limit => 100);

    for my $i (1 .. 300) {
        my $r = $t->get($uri, timeout => 30);
        if ($r->{status} != 200) {
            push @bad, "page $i: " . short($r);
            last;
        }
        my $s = $r->{headers}{'x-feed-cache'} // '(none)';
        push @bad, "page $i (after " . scalar(@got) . " posts): $s"
            if $s ne 'HIT' && @got + 100 < $SIZE;
        last if @bad >= 5;
        $status{$s}++;
        push @got, items($r);
        last unless defined $r->{json}{next};
        $uri = tl_uri($reader, limit => 100, max_id => $r->{json}{next});
    }

    return (\@got, \%status, \@bad);
}

# the posts made through the API so far, newest first
my @new;

for my $mode ('link', 'embed') {
    $t->stop;
    $t->redis('FLUSHALL');
    (my $c = $CONF) =~ s/\@\@MODE\@\@/$mode/;
    $t->write_conf($c)->run;
    ok($t->wait_for(20,
        sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
        "$mode: nginx up, redis and mongodb up");

    my $reader = "reader-$mode";
    my $key = tl_key($reader);

    # a deleted post somewhere: every warm and read checks ids against it
    my $gone = post($t, "other-$mode", 'deleted');
    is($t->http('DELETE', "/users/other-$mode/posts/$gone")->{status}, 204,
        "$mode: a post deleted");
    ok(rd($t, 'ZCARD', 'feed:deleting'), "$mode: feed:deleting not empty");

    none_failed([ follow_each($t, 'big', $reader) ],
        "$mode: $reader follows big");

    my $r = $t->get(tl_uri($reader), timeout => 120);
    is($r->{headers}{'x-feed-cache'}, 'MISS', "$mode: cold read is a MISS")
        or diag(short($r));
    my @want = (@new, want($N, 1));
    is_deeply([ bodies($r) ], [ @want[0 .. 19] ],
        "$mode: the newest 20 posts");
    is(rd($t, 'LLEN', $key), $SIZE, "$mode: $SIZE posts cached by one warm");

    $r = $t->get(tl_uri($reader));
    is($r->{headers}{'x-feed-cache'}, 'HIT', "$mode: then a HIT")
        or diag(short($r));

    my ($got, $status, $bad) = walk($reader);
    ok(!@$bad, "$mode: every page inside the cache a HIT")
        or diag(join("\n", grep defined, @$bad[0 .. 4]));
    my @gotb = map { $_->{body} } @$got;
    is_deeply(\@gotb, \@want,
        "$mode: next visits all " . scalar(@want) . " posts in order")
        or diag(summary(\@gotb, \@want));
    ok($status->{DEEP}, "$mode: past the cache: DEEP")
        or diag(join ' ', %$status);

    # single deep pages of 20: the read script looks for max_id in chunks
    # of 21, 42, 84, ... entries; grown on unbounded, the one that starts
    # at 10,731 would hold more ids than Lua can unpack
    for my $d (1000, 8000, 10740, 15000, 19900) {
        my $r = $t->get(tl_uri($reader, limit => 20,
            max_id => $got->[$d]{id}));
        is_deeply([ map { $_->{id} } items($r) ],
            [ map { $_->{id} } @$got[$d + 1 .. $d + 20] ],
            "$mode: 20 posts after entry $d")
            or diag(short($r));
        is($r->{headers}{'x-feed-cache'}, 'HIT', "$mode: from the cache");
    }

    # a new post: delivered on top, the oldest entry trimmed away
    unshift @new, "new $mode";
    post($t, 'big', $new[0]);
    $r = $t->wait_for(10, sub {
        my $r = $t->get(tl_uri($reader, limit => 2));
        return ((bodies($r))[0] // '') eq $new[0] ? $r : undef;
    });
    ok($r, "$mode: a new post delivered by fanout");
    is($r && $r->{headers}{'x-feed-cache'}, 'HIT',
        "$mode: read from the cache");
    is(rd($t, 'LLEN', $key), $SIZE, "$mode: the list kept at $SIZE");
    is(entry_id(rd($t, 'LINDEX', $key, -1)),
        $got->[$SIZE - 2]{id}, "$mode: its oldest entry trimmed");
}

$t->done;
