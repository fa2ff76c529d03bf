#!/usr/bin/perl

# The push/pull hybrid's edges (docs/pull.md), with feed_pull_threshold 3:
#
#   - a turn in progress is left to finish: a post of the author while
#     another post turns them is pushed and listed, it does not take the
#     turn over (an author posting faster than one fanout would otherwise
#     never become pull); a turn not heard of for long is taken over, and
#     the author is pull after it;
#   - the author's own timeline, which gets their posts pushed, does not
#     merge their list;
#   - a cached timeline whose set of pull authors is lost (evicted alone)
#     is made again at the next read, which then shows the pull author's
#     posts (before, they were silently left out).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use FeedTest;
use FeedTest::Util qw(short rd post follow_each read_each tl_ids
    node_counts node_moved);

my $t = FeedTest->new;

plan(skip_all => 'needs the stand-in (writes the counters directly)')
    if FeedTest::real_mongo();

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF2')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_fanout on;
    feed_fanout_block 100ms;
    feed_fanout_claim_idle 2s;
    feed_pull_threshold 3;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 4m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF2

# the author's counters, as if another worker's post were turning them
# (or had been, $age ms ago)
sub turning {
    my ($age) = @_;
    my $py = <<'PY';
import sys, datetime
from pymongo import MongoClient
uri, age = sys.argv[1], int(sys.argv[2])
db = MongoClient(uri, serverSelectionTimeoutMS=5000).get_default_database('feed')
when = datetime.datetime.utcnow() - datetime.timedelta(milliseconds=age)
r = db.follow_counts.update_one({'_id': 'star'}, {'$set': {
    'pull': 's', 'pull_token': '0123456789abcdef01234567',
    'pull_changed': when}})
sys.exit(0 if r.matched_count == 1 else 1)
PY
    my $pid = fork() // die "fork: $!\n";
    if ($pid == 0) {
        exec('/usr/bin/python3', '-c', $py, $t->mongo_uri, $age)
            or POSIX::_exit(127);
    }
    waitpid($pid, 0);
    return $? == 0;
}

sub acked {
    my ($c0, $n) = @_;
    return $t->wait_for(5, sub {
        (node_moved($t, $c0)->{'fanout.acked'} // 0) >= $n });
}

# a post by star, fanned out: what the node's counters did
sub star_post {
    my ($body) = @_;
    my $c0 = node_counts($t);
    my $id = post($t, 'star', $body);
    ok(acked($c0, 1), "$body: fanned out");
    return ($id, node_moved($t, $c0));
}

sub first_ids { @{ tl_ids($t->get("/users/$_[0]/timeline?limit=50")) } }

ok(!follow_each($t, 'star', qw(f1 f2 f3)), 'star has 3 followers');
my ($res, @bad) = read_each($t, qw(f1 f2 star));
ok(!@bad, 'f1, f2 and star have cached timelines');

# -- a turn in progress is not taken over --

ok(turning(0), 'star is turning, by a post fanned out elsewhere');
my ($p1, $m1) = star_post('p1');
is($m1->{'pull.to_pull'} // 0, 0, 'p1: it did not turn star');
is($m1->{'fanout.deliveries'}, 3, 'p1: pushed to f1, f2 and star');
my ($p2, $m2) = star_post('p2');
is($m2->{'fanout.deliveries'}, 3, 'p2: pushed too, star is still turning');
is_deeply([ first_ids('f1') ], [ $p2, $p1 ], 'f1 sees p2, p1');

# -- a turn left alone is taken over --

ok(turning(3_600_000), 'star\'s turn was left an hour ago');
my ($p3, $m3) = star_post('p3');
is($m3->{'pull.to_pull'}, 1, 'p3: took the turn over, star is pull');
my ($p4, $m4) = star_post('p4');
is($m4->{'fanout.deliveries'}, 1, 'p4: listed, pushed to star only');
is($m4->{'pull.listed'}, 1, 'p4: in star\'s list');
is_deeply([ first_ids('f1') ], [ $p4, $p3, $p2, $p1 ],
    'f1 sees p4 (merged), p3, p2, p1');

is(rd($t, 'SISMEMBER', 'feed:tla:{star}', 'star'), 0,
    'star\'s own timeline does not merge star\'s list');
ok(rd($t, 'SISMEMBER', 'feed:tla:{f1}', 'star'), 'f1 merges it');
is_deeply([ first_ids('star') ], [ $p4, $p3, $p2, $p1 ],
    'star sees their own posts');

# -- a lost set of pull authors --

$t->redis('DEL', 'feed:tla:{f1}');
my ($p5) = star_post('p5');
my $r = $t->get('/users/f1/timeline?limit=50');
is($r->{headers}{'x-feed-cache'}, 'MISS',
    'f1\'s set of pull authors lost: the timeline is made again');
is_deeply(tl_ids($r), [ $p5, $p4, $p3, $p2, $p1 ],
    'f1 sees p5 (merged) and all before');
ok(rd($t, 'SISMEMBER', 'feed:tla:{f1}', 'star'),
    'f1 merges star again');
is_deeply([ first_ids('f1') ], [ $p5, $p4, $p3, $p2, $p1 ],
    'and the next read is the same');

$t->done;
