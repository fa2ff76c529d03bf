#!/usr/bin/perl

# Timelines kept in MongoDB behind the Redis cache, the
# "size_buckets" model: feed_timeline_store size_buckets, each user's posts
# in buckets of at most feed_timeline_bucket_size entries (3 here, so that
# they roll over often), numbered from 0, every follower written, and a
# floor per user.
#
#   - a reader's first read sets their floor; the buckets of every
#     follower get the posts, the ones of a user who never read too; a
#     pull author's posts are not added;
#   - a user's buckets are 0, 1, ... with no gap, every one full but the
#     newest, each post once, also when 48 posts of 8 authors are fanned
#     out concurrently by 2 workers, and when one post's stream entry is
#     delivered 4 times at once;
#   - with the reader's timeline gone from Redis, every page of the
#     fallback source, for every max_id and since_id along the timeline,
#     is what fanout on read gives: from the buckets above the floor,
#     merged with the pull author's posts, fanout on read below it;
#   - a user whose newest bucket is full and no next one was opened (a
#     worker stopped in between) gets the next bucket;
#   - a deleted post leaves every bucket and every answer, and its bucket
#     stays full;
#   - an unfollow moves the floor: the next answers leave the unfollowed
#     author out.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(follow_each none_failed);
use FeedTest::Store;

my $t = FeedTest->new(fresh_mongo => 1);

$t->start_backends;

$t->write_conf(FeedTest::Store::conf('size_buckets',
    'feed_timeline_bucket_size 3'))->run;

my $s = FeedTest::Store->new($t);

# ------------------------------------------------------------- helpers --

# a user's buckets, by number
sub buckets {
    my ($user) = @_;
    return sort { $a->{_id}{s} <=> $b->{_id}{s} }
        $t->mongo_find('timeline_size',
            qq({"_id.u": "$user", "_id.s": {"\$gte": 0}}));
}

# every id in a user's buckets
sub bucketed {
    my ($user) = @_;
    return [ map { map { $_->{i}{'$oid'} } @{ $_->{c} // [] } }
        buckets($user) ];
}

sub in_buckets {
    my ($id, $user) = @_;
    return scalar grep { $_ eq $id } @{ bucketed($user) };
}

sub floor_of {
    my ($user) = @_;
    my ($doc) = $t->mongo_find('timeline_size',
        qq({"_id": {"u": "$user", "s": -1}}));
    return $doc ? $doc->{f}{'$oid'} : undef;
}

# what is wrong with a user's buckets: a gap in the numbers, one but the
# newest not full, one over the size, one whose "n" is not what it holds,
# a post twice
sub buckets_bad {
    my ($user, $deletes) = @_;
    my @b = buckets($user);
    my (@bad, %seen);
    for my $k (0 .. $#b) {
        my $n = scalar @{ $b[$k]{c} // [] };
        push @bad, "bucket #$k numbered $b[$k]{_id}{s}"
            if $b[$k]{_id}{s} != $k;
        push @bad, "bucket $k holds $n" if $n > 3;
        push @bad, "bucket $k not full" if $k < $#b && $b[$k]{n} != 3;
        push @bad, "bucket $k: n $b[$k]{n}, holds $n"
            if !$deletes && $b[$k]{n} != $n;
        $seen{ $_->{i}{'$oid'} }++ for @{ $b[$k]{c} // [] };
    }
    push @bad, map { "$_ twice" } grep { $seen{$_} > 1 } sort keys %seen;
    return @bad;
}

# ------------------------------------ the graph, the floor, the writes --

my $turn = $s->floor_and_turn(\&floor_of);
for my $round (1 .. 3) {
    $s->post('a1', "a1 round $round");
    $s->post('a2', "a2 round $round $_") for 1 .. 3;
}

my @posts = $s->posts;
ok($t->wait_for(5, sub { in_buckets($posts[-1], 'r1') }),
    'fanout: into r1\'s buckets');
ok(in_buckets($turn, 'r1'), 'the turn: into r1\'s buckets');
ok(!grep({ $s->by($_) eq 'celeb' && $_ ne $turn } @{ bucketed('r1') }),
    'the pull author\'s posts are not added');
my @b = buckets('r1');
ok(@b >= 5, 'r1\'s posts in ' . scalar(@b) . ' buckets of 3');
my @bad = buckets_bad('r1');
ok(!@bad, 'r1\'s buckets: numbered with no gap, full but the newest, '
    . 'each post once') or diag(join '; ', @bad);
ok(in_buckets((grep { $s->by($_) eq 'a1' } @posts)[-1], 'i1'),
    'i1, who never read: in their buckets too');

# ---------------------------------------------------- the source's pages --

$s->forget('r1');

@bad = $s->pages_bad('r1');
ok(!@bad, 'every page along the timeline as fanout on read, from the '
    . 'buckets above the floor and fanout on read below')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");
$s->was_read('timeline_size', 'the buckets were read',
    sub { exists(($_[0]{filter} // {})->{h}) });

# ------------------------------------------- concurrent fanout, rollover --

$s->race;

ok($t->wait_for(10, sub { @{ bucketed('r2') } >= 48 }),
    'concurrent fanout: 48 entries in r2\'s buckets');
sleep 0.5;
is(scalar @{ bucketed('r2') }, 48, 'concurrent fanout: no more than 48');
@bad = buckets_bad('r2');
ok(!@bad, 'concurrent fanout: full buckets 0 to 15, each post once')
    or diag(join '; ', @bad);
# the 17th is opened, empty, by the push that filled the 16th, unless two
# pushes filled it at once: then by the next delivery
my @r2 = buckets('r2');
ok(@r2 == 16 || (@r2 == 17 && $r2[16]{n} == 0),
    'concurrent fanout: no 17th bucket, or an empty one');
# a round of writes: the find of where each user is, then the bulk
$s->interleaved('timeline_size',
    sub { $_[0]{cmd} eq 'find' && exists(($_[0]{filter} // {})->{'$or'}) },
    sub { $_[0]{cmd} eq 'update' });

$s->forget('r2');
@bad = $s->pages_bad('r2');
ok(!@bad, 'concurrent fanout: every page of r2 as fanout on read')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");

# ------------------------------------------------------------ redelivery --

my $again = (grep { $s->by($_) eq 'c1' } $s->posts)[-1];
ok($s->redeliver($again) && $s->redeliver($again) && $s->redeliver($again)
    && $s->redeliver($again), 'redelivery: the entry 4 times at once');
$s->post('c2', 'after the redeliveries');
ok($t->wait_for(5, sub { in_buckets($s->last_post, 'r2') }),
    'redelivery: a post after them delivered');
is((buckets('r2'))[16]{c}[0]{i}{'$oid'}, $s->last_post,
    'redelivery: the post after them, first in bucket 16');
sleep 0.5;
is(in_buckets($again, 'r2'), 1, 'redelivery: the post once');
@bad = buckets_bad('r2');
ok(!@bad, 'redelivery: the buckets as they should be')
    or diag(join '; ', @bad);

# ------------------------------------------------ a bucket never opened --

# z1's only bucket is full, and the next was not opened: as when a worker
# stopped between the push that filled it and the opening of the next

$t->mongo_insert('timeline_size',
    '{"_id": {"u": "z1", "s": 0}, "n": 3, "c": ['
    . join(',', map { qq({"i": {"\$oid": "00000000000000000000000$_"},)
        . qq( "a": "old"}) } 1 .. 3)
    . '], "h": {"$oid": "000000000000000000000003"},'
    . ' "l": {"$oid": "000000000000000000000001"}}');
none_failed([ follow_each($t, 'a1', 'z1') ], 'z1 follows a1');
my $late = $s->post('a1', 'to z1');
ok($t->wait_for(5, sub { in_buckets($late, 'z1') }),
    'a full bucket and no next: delivered');
my @z = buckets('z1');
is_deeply([ map { [ $_->{_id}{s}, $_->{n} ] } @z ], [ [0, 3], [1, 1] ],
    'a full bucket and no next: into bucket 1, bucket 0 left as it was');

# ---------------------------------------------------------------- delete --

@posts = $s->posts;
my ($gone) = grep { $s->by($_) eq 'a2' } reverse @posts;
is($t->http('DELETE', '/users/' . $s->by($gone) . "/posts/$gone")->{status},
    204, 'delete: 204');
$s->deleted($gone);
ok($t->wait_for(5, sub { !in_buckets($gone, 'r1') }),
    'delete: out of the buckets');
@bad = buckets_bad('r1', 1);
ok(!@bad, 'delete: the buckets still full but the newest')
    or diag(join '; ', @bad);
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
