#!/usr/bin/perl

# Empty timelines (a user who follows nobody and posted nothing) are cached
# only for feed_cache_empty_ttl: anonymous reads of random user ids must not
# fill Redis with keys kept for days.
#
#   - 200 reads of 200 random users: each key they left lives at most
#     twice feed_cache_empty_ttl (2 s here; the list itself 2 s), and
#     none is left once that passed;
#   - a second read within it is a HIT and does not extend it; no first
#     page is kept for an empty timeline;
#   - a timeline with posts keeps feed_cache_ttl, also after it was empty;
#   - nginx -t: the directive must be a positive time.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep);
use FeedTest;
use FeedTest::Util qw(short post follow_each none_failed read_each
    status_all tl_key rd);

my $t = FeedTest->new;

$t->start_backends;

my $CONF = <<'EOF';
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;
    feed_cache_ttl 7d;
    @@EMPTY@@

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 1m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

sub conf { (my $c = $CONF) =~ s/\@\@EMPTY\@\@/$_[0]/; $c }

# ---------------------------------------------------------- the directive --

# in a directory of its own: the error log of the one that runs stays clean
my $tc = FeedTest->new;
for my $bad ('0', '-1s', 'abc') {
    $tc->write_conf(conf("feed_cache_empty_ttl $bad;"));
    my ($ok, $out) = $tc->test_conf;
    ok(!$ok, "feed_cache_empty_ttl $bad rejected");
    like($out, qr/"feed_cache_empty_ttl" directive (must be positive|invalid value)/,
        "the message names feed_cache_empty_ttl ($bad)");
}

$t->write_conf(conf('feed_cache_empty_ttl 2s;'))->run;
ok($t->wait_for(10, sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
    'nginx up, redis and mongodb up');

# --------------------------------------------------------- random users --

my $TAG = sprintf '%x%x', $$, time;
my @users = map { "anon-$TAG-$_" } 1 .. 200;
my ($res, @bad) = read_each($t, @users);
none_failed(\@bad, '200 reads of random users answered 200');
is(scalar(grep { !@{$_->{json}{items} || [1]} } @$res), 200,
    'all of them empty');

# every key of those users, with its TTL
sub left {
    my %ttl;
    for my $k (@{ rd($t, 'KEYS', "feed:*{anon-$TAG-*") || [] }) {
        $ttl{$k} = rd($t, 'TTL', $k);
    }
    return \%ttl;
}

my $left = left();
ok(keys %$left, scalar(keys %$left) . ' keys left by them for now');
# the list and its pages' version: twice feed_cache_empty_ttl at most
# (-2: gone between KEYS and TTL, on a slow machine; -1 would be forever)
my @long = grep { $left->{$_} == -1 || $left->{$_} > 4 } sort keys %$left;
ok(!@long, 'each lives at most twice feed_cache_empty_ttl (2 s)')
    or diag(join ', ', map { "$_: $left->{$_}" } @long[0 .. 4]);
is(scalar(grep { /^feed:tlp:/ } keys %$left), 0, 'no first page kept');

# one more, read twice at once: the 200 above may be gone already on a
# slow machine
my $again = "anon-$TAG-again";
$t->get("/users/$again/timeline");
my $r = $t->get("/users/$again/timeline");
is($r->{headers}{'x-feed-cache'}, 'HIT', 'read again within it: a HIT')
    or diag(short($r));
my $ttl = rd($t, 'TTL', tl_key($again));
ok(defined $ttl && $ttl >= 0 && $ttl <= 2, "its TTL not extended ($ttl)");

sleep 4.5;
$left = left();
is(scalar keys %$left, 0, 'none left once it passed')
    or diag(join ', ', map { "$_: $left->{$_}" } (sort keys %$left)[0 .. 4]);

# ------------------------------------------------------ not empty: 7 days --

my $W = "writer-$TAG";
my $R = "reader-$TAG";
ok(post($t, $W, 'hello'), 'a post');

$r = $t->get("/users/$W/timeline");
is(scalar @{$r->{json}{items} || []}, 1, 'the author\'s timeline has it');
ok(rd($t, 'TTL', tl_key($W)) > 6 * 24 * 3600, 'kept feed_cache_ttl');

$r = $t->get("/users/$R/timeline");
is(scalar @{$r->{json}{items} || [1]}, 0, 'an empty timeline');
none_failed([ follow_each($t, $W, $R) ], 'its user follows the author');
$r = $t->get("/users/$R/timeline");
is(scalar @{$r->{json}{items} || []}, 1, 'then it has the post');
ok(rd($t, 'TTL', tl_key($R)) > 6 * 24 * 3600, 'and is kept feed_cache_ttl');
$r = $t->get("/users/$R/timeline");
is($r->{headers}{'x-feed-cache'}, 'HIT', 'read from the cache');
ok(rd($t, 'TTL', "feed:tlp:{$R}") > 6 * 24 * 3600,
    'its first page kept feed_cache_ttl');

$t->done;
