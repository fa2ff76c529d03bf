#!/usr/bin/perl

# Follows written into MongoDB by another application sharing the database,
# with user ids the API never accepts (too long for any buffer, bad
# characters, not strings), among real ones:
#
#   - follower and following pages skip them: pages stay full, "next"
#     walks every valid id exactly once, no cursor is made from them (the
#     cursor buffers overflowed on a 200-byte id and killed the worker);
#   - fanout skips them without counting them against feed_fanout_page
#     (a page of only such ids ended the fanout: nobody got the post);
#   - a rebuild by fanout on read ignores followees with such ids;
#   - each skip is logged.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short rd tl_key copies copies_summary all_n
    follow_each read_each none_failed post wait_settled);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_fanout on;
    feed_fanout_page 2;
    feed_fanout_block 200ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
        location ~ ^/users/([^/]+)/followers$ { feed_followers $1; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 1m;
            feed_timeline_source;
        }
    }
}
EOF

my $P = 'fi' . int(rand 1e6);
my $STAR = "${P}star";
my @FANS = map { "${P}fan$_" } 1 .. 5;

none_failed([ follow_each($t, $STAR, @FANS) ], 'five fans follow the star');

# newer than the API's follows, so they sort first: a page of only them
my $now = int(time * 1000) + 60_000;
my @FOREIGN = ('x' x 200, 'bad id!', 'y' x 65);

my $i = 0;
$t->mongo_insert('follows',
    (map { sprintf('{"src": "%s", "dst": "%s", "status": 1, '
        . '"created": {"$date": {"$numberLong": "%d"}}}', $_, $STAR,
        $now - $i++) } @FOREIGN),
    sprintf('{"src": 12345, "dst": "%s", "status": 1, '
        . '"created": {"$date": {"$numberLong": "%d"}}}', $STAR, $now - 10),
    (map { sprintf('{"src": "%s", "dst": "%s", "status": 1, '
        . '"created": {"$date": {"$numberLong": "%d"}}}', $FANS[0], $_,
        $now - $i++) } @FOREIGN));

# walks a list with pages of $limit; returns (ids, page sizes, problems)
sub walk {
    my ($uid, $which, $limit) = @_;
    my (@ids, @sizes, @bad, $cursor);

    for my $n (1 .. 50) {
        my $uri = "/users/$uid/$which?limit=$limit"
            . (defined $cursor ? "&cursor=$cursor" : '');
        my $r = $t->get($uri);
        unless ($r->{status} == 200 && ref $r->{json} eq 'HASH') {
            push @bad, "page $n: " . short($r);
            last;
        }
        my @items = @{$r->{json}{items}};
        push @ids, map { $_->{id} } @items;
        push @sizes, scalar @items;
        $cursor = $r->{json}{next};
        last unless defined $cursor;
    }

    return (\@ids, \@sizes, \@bad);
}

for my $limit (1, 2, 3) {
    my ($ids, $sizes, $bad) = walk($STAR, 'followers', $limit);
    ok(!@$bad, "followers, limit $limit: every page answered")
        or diag(join "\n", @$bad);
    is_deeply([ sort @$ids ], [ sort @FANS ],
        "followers, limit $limit: each fan once, no foreign id");
    ok(!grep({ $_ != $limit } @$sizes[0 .. $#$sizes - 1]),
        "followers, limit $limit: pages are full (@$sizes)");
}

my ($ids, $sizes, $bad) = walk($FANS[0], 'following', 1);
ok(!@$bad, 'following with foreign ids: answered') or diag(join "\n", @$bad);
is_deeply($ids, [ $STAR ], 'following: only the valid followee');

# fanout: every fan has a cached timeline, then the star posts

my ($res, @failed) = read_each($t, @FANS);
none_failed(\@failed, 'fans read their timelines (caches made)');

my $id = post($t, $STAR, 'past the foreign follows');
ok($id, 'the star posts');

wait_settled($t, 'fanout');

my $c = copies($t, $id, @FANS);
ok(all_n($c, 1), 'every fan got the post once, foreign ids notwithstanding')
    or diag(copies_summary($c));

# a rebuild of a fan following a foreign id

rd($t, 'DEL', tl_key($FANS[0]));
my $r = $t->get("/users/$FANS[0]/timeline");
is($r->{status}, 200, 'rebuild with a foreign followee: 200')
    or diag(short($r));
is_deeply([ map { $_->{id} } @{$r->{json}{items} || []} ], [ $id ],
    'rebuild: the star\'s post');

my $log = $t->error_log;
like($log, qr/follows of "\Q$STAR\E": \d+ documents with invalid user ids/,
    'skips in lists logged');
like($log, qr/fanout: followers of "\Q$STAR\E": \d+ documents with invalid/,
    'skips in fanout logged');

$t->done;
