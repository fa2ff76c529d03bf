#!/usr/bin/perl

# The buckets a user keeps (feed_timeline_bucket_keep 2), in
# feed_timeline_store time_buckets (periods of 1 s) and size_buckets (3
# entries a bucket), each in its own nginx:
#
#   - however many posts, r1 (who read) and i1 (who never did) keep their
#     2 newest buckets: fanout deletes the older ones when it opens one;
#   - r1's floor gets a mark "d" first: every post of whom r1 follows from
#     it up is in the buckets kept, and none older is;
#   - with r1's timeline gone from Redis, every page of the fallback source,
#     for every max_id and since_id along the timeline, is what fanout on
#     read gives: from the buckets above the mark, fanout on read below it;
#   - 48 posts of 8 authors fanned out concurrently by 2 workers to r2: r2
#     keeps 2 buckets, each post at most once, and every page of r2 is
#     still what fanout on read gives.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep);
use FeedTest;
use FeedTest::Store;

my %models = (
    time_buckets => [ 'timeline_time', 't', 'feed_timeline_bucket_time 1s' ],
    size_buckets => [ 'timeline_size', 's', 'feed_timeline_bucket_size 3' ],
);

for my $model (sort keys %models) {
    my ($coll, $field, $conf) = @{ $models{$model} };

    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_backends;
    $t->write_conf(FeedTest::Store::conf($model, $conf,
        'feed_timeline_bucket_keep 2'))->run;

    my $s = FeedTest::Store->new($t);

    my $buckets = sub {
        my ($user) = @_;
        return $t->mongo_find($coll,
            qq({"_id.u": "$user", "_id.$field": {"\$gte": 0}}));
    };
    my $floor = sub {
        my ($user) = @_;
        my ($doc) = $t->mongo_find($coll,
            qq({"_id": {"u": "$user", "$field": -1}}));
        return $doc;
    };
    my $kept = sub {
        my ($user) = @_;
        my %in;
        $in{ $_->{i}{'$oid'} }++ for map { @{ $_->{c} // [] } }
            $buckets->($user);
        return \%in;
    };

    $s->floor_and_turn(sub { ($floor->($_[0]) // {})->{f}{'$oid'} });

    # posts over 6 periods of 1 s, and 18 entries: 6 buckets of 3
    for my $k (1 .. 6) {
        $s->post('a1', "$model a1 $k");
        $s->post('a2', "$model a2 $k");
        sleep 1.1;
    }

    my $last = $s->last_post;
    ok($t->wait_for(10, sub { $kept->('r1')->{$last} }),
        "$model: the last post delivered to r1");

    for my $user (qw(r1 i1)) {
        my @b = $buckets->($user);
        ok(@b >= 1 && @b <= 2, "$model: $user keeps " . scalar(@b)
            . ' buckets, at most 2');
    }

    my $d = ($floor->('r1') // {})->{d}{'$oid'};
    ok($d, "$model: r1's floor has a mark");

    my $in = $kept->('r1');
    my @want = @{ $s->expected('r1') };
    my @above = grep { $_ ge ($d // '') } @want;
    ok(@above && !grep({ !$in->{$_} } @above),
        "$model: every post from the mark up kept ("
        . scalar(@above) . ')');
    ok(!grep({ $_ lt ($d // '') } keys %$in),
        "$model: no post below the mark kept");

    $s->forget('r1');
    my @bad = $s->pages_bad('r1');
    ok(!@bad, "$model: every page along r1's timeline as fanout on read")
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
    $s->was_read($coll, "$model: the buckets were read");

    $s->race;
    # the newest post is kept, and 48 entries fill 16 buckets
    ok($t->wait_for(10, sub { $model eq 'time_buckets'
            ? $kept->('r2')->{ $s->last_post }
            : grep { $_->{_id}{s} >= 15 } $buckets->('r2') }),
        "$model: the race delivered to r2");
    sleep 0.5;
    my @b = $buckets->('r2');
    ok(@b >= 1 && @b <= 2, "$model, the race: r2 keeps " . scalar(@b)
        . ' buckets');
    ok(!grep({ $_ > 1 } values %{ $kept->('r2') }),
        "$model, the race: each post at most once");
    $s->forget('r2');
    @bad = $s->pages_bad('r2');
    ok(!@bad, "$model, the race: every page of r2 as fanout on read")
        or diag(scalar(@bad) . " wrong, first: $bad[0]");

    $t->finish;
}

done_testing();
