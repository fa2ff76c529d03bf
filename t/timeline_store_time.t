#!/usr/bin/perl

# Timelines kept in MongoDB behind the Redis cache, the
# "time_buckets" model: feed_timeline_store time_buckets, one document per
# user per period (feed_timeline_bucket_time 1s here, so that posts fall
# in many buckets), every follower written, and a floor per user.
#
#   - a reader's first read sets their floor; the buckets of every
#     follower get the posts made after it, the ones of a user who never
#     read too; a pull author's posts are not added;
#   - with the reader's timeline gone from Redis, every page of the
#     fallback source, for every max_id and since_id along the timeline,
#     is what fanout on read gives: from the buckets above the floor,
#     merged with the pull author's posts, fanout on read below it;
#   - 48 posts of 8 authors fanned out concurrently by 2 workers to r2,
#     24 at a time, the second 24 in the next period: each post in the
#     bucket of its period once, and every page of r2 as fanout on read;
#   - a post fanned out again is in a bucket once;
#   - a deleted post leaves every bucket and every answer;
#   - an unfollow moves the floor: the next answers leave the unfollowed
#     author out.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(node_counts);
use FeedTest::Store;

my $t = FeedTest->new(fresh_mongo => 1);

$t->start_backends;

$t->write_conf(FeedTest::Store::conf('time_buckets',
    'feed_timeline_bucket_time 1s'))->run;

my $s = FeedTest::Store->new($t);

# ------------------------------------------------------------- helpers --

# every id in a user's buckets (each bucket's, oldest first)
sub bucketed {
    my ($user) = @_;
    my @docs = $t->mongo_find('timeline_time',
        qq({"_id.u": "$user", "_id.t": {"\$gte": 0}}));
    return [ map { map { $_->{i}{'$oid'} } @{ $_->{c} // [] } } @docs ];
}

sub floor_of {
    my ($user) = @_;
    my ($doc) = $t->mongo_find('timeline_time',
        qq({"_id": {"u": "$user", "t": -1}}));
    return $doc ? $doc->{f}{'$oid'} : undef;
}

sub in_buckets {
    my ($id, $user) = @_;
    return scalar grep { $_ eq $id } @{ bucketed($user) };
}

# ------------------------------------ the graph, the floor, the writes --

my $turn = $s->floor_and_turn(\&floor_of);
for my $round (1 .. 3) {
    $s->post('a1', "a1 round $round");
    $s->post('a2', "a2 round $round $_") for 1 .. 4;
    sleep 1.1;
}

my @posts = $s->posts;
ok($t->wait_for(5, sub { in_buckets($posts[-1], 'r1') }),
    'fanout: into r1\'s buckets');
ok($t->wait_for(5, sub { in_buckets($turn, 'r1') }),
    'the turn: into r1\'s buckets');
ok(!grep({ $s->by($_) eq 'celeb' && $_ ne $turn } @{ bucketed('r1') }),
    'the pull author\'s posts are not added');
my @periods = $t->mongo_find('timeline_time',
    '{"_id.u": "r1", "_id.t": {"$gte": 0}}');
ok(@periods >= 3, 'r1\'s posts in ' . scalar(@periods) . ' buckets');
ok(in_buckets((grep { $s->by($_) eq 'a1' } @posts)[-1], 'i1'),
    'i1, who never read: in their buckets too');
ok(!grep({ in_buckets($_, 'r1') != 1 } grep { $s->by($_) ne 'celeb' }
    @posts[-15 .. -1]), 'each post once');

# ---------------------------------------------------- the source's pages --

$s->forget('r1');

my @bad = $s->pages_bad('r1');
ok(!@bad, 'every page along the timeline as fanout on read, from the '
    . 'buckets above the floor and fanout on read below')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");
$s->was_read('timeline_time', 'the buckets were read');

# ------------------------------------------- concurrent fanout, rollover --

# the second 24 a period after the first: each batch opens a bucket
$s->race(1.1);

my @r2 = grep { $s->by($_) =~ /^c\d$/ } $s->posts;
ok($t->wait_for(10, sub { @{ bucketed('r2') } >= @r2 }),
    'concurrent fanout: ' . scalar(@r2) . ' entries in r2\'s buckets');
sleep 0.5;
my %in;
for my $doc ($t->mongo_find('timeline_time',
    '{"_id.u": "r2", "_id.t": {"$gte": 0}}'))
{
    push @{ $in{ $_->{i}{'$oid'} } }, $doc->{_id}{t} for @{ $doc->{c} };
}
ok(!grep({ @{ $in{$_} // [] } != 1 } @r2), 'concurrent fanout: each post once');
ok(!grep({ $in{$_}[0] != int(hex(substr($_, 0, 8))) } @r2),
    'concurrent fanout: each in the bucket of its period');
my %periods = map { $in{$_}[0] => 1 } @r2;
ok(keys(%periods) >= 2, 'concurrent fanout: over '
    . scalar(keys %periods) . ' periods');

$s->forget('r2');
@bad = $s->pages_bad('r2');
ok(!@bad, 'concurrent fanout: every page of r2 as fanout on read')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");

# ------------------------------------------------------------ redelivery --

ok($s->redeliver($posts[-1]), 'redelivery: the last post\'s entry again');
sleep 1;
is(in_buckets($posts[-1], 'r1'), 1, 'redelivery: the post once');

# ---------------------------------------------------------------- delete --

my $gone = $posts[-2];
is($t->http('DELETE', '/users/' . $s->by($gone) . "/posts/$gone")->{status},
    204, 'delete: 204');
$s->deleted($gone);
ok($t->wait_for(5, sub { !in_buckets($gone, 'r1') }),
    'delete: out of the buckets');
@bad = $s->pages_bad('r1');
ok(!@bad, 'delete: in no answer') or diag("first: $bad[0]");

# -------------------------------------------------------------- unfollow --

my $f0 = floor_of('r1');
sleep 1;
is($t->http('DELETE', '/users/r1/following/a2')->{status}, 204,
    'unfollow: 204');
$s->unfollows('r1', 'a2');
ok(floor_of('r1') && floor_of('r1') gt $f0, 'unfollow: the floor moved');
@bad = $s->pages_bad('r1');
ok(!@bad, 'unfollow: every page without a2') or diag("first: $bad[0]");

$t->done;
