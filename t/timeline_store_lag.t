#!/usr/bin/perl

# Timelines kept in MongoDB while fanout is behind, for each
# model of feed_timeline_store: a reader follows an author and reads (a
# floor, or their document); the author then makes 240 posts 8 at a time
# while no worker fans out, and 40 more while the workers work through
# that backlog with MongoDB slowed down (30 ms a command).  With fanout
# still behind (some posts in no kept timeline yet, others delivered out
# of order), the reader's pages are walked to the end, limit=100, each
# from the last id of the one before (max_id):
#
#   - every page of the fallback source is exact: each of the author's
#     posts (all in MongoDB) once, newest first, none missing, however far
#     behind fanout is.  A store that has not received a post yet does not
#     vouch for the range it falls in: the posts in flight are read first
#     (docs/storage.md, "Fanout behind");
#   - once fanout caught up, the same walk again.
#
# The walk asks the fallback source (the pages past the end of the Redis
# cache, or of a rebuild): the Redis cache shows a post once fanout
# delivered it there, which is not the stores' to answer for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(parallel follow_each none_failed failed_answers
    group_info wait_settled);
use FeedTest::Store;

plan skip_all => 'the stand-in slowed down' if FeedTest::real_mongo();

my $limit = 100;

# the posts of $author, $at_once at a time: their ids
sub posts {
    my ($t, $author, $n, $at_once, $name) = @_;
    my @reqs = map { [ 'POST', "/users/$author/posts",
        qq({"body": "$name $_"}) ] } 1 .. $n;
    my @res = parallel($t, $at_once, @reqs);
    none_failed([ failed_answers(201, [ map { $_->[1] } @reqs ], @res) ],
        "$name: $n posts made, $at_once at a time");
    return map { $_->{json}{id} // () } @res;
}

# the fallback source's pages of $user to the end; the ids, or undef and
# what failed
sub walk {
    my ($t, $user) = @_;
    my (@ids, $max);
    for (1 .. 50) {
        my $r = $t->get("/_feed/timeline?user=$user&limit=$limit"
            . ($max ? "&max_id=$max" : ''));
        return (undef, "status $r->{status} after " . scalar(@ids))
            unless $r->{status} == 200;
        my @page = map { $_->{id} } @{ $r->{json}{items} || [] };
        push @ids, @page;
        return (\@ids) if @page < $limit;
        $max = $page[-1];
    }
    return (undef, 'more than 50 pages');
}

# what differs between a walk and the posts, newest first
sub differs {
    my ($got, $want) = @_;
    my %seen;
    $seen{$_}++ for @$got;
    my %in = map { $_ => 1 } @$want;
    my @missing = grep { !$seen{$_} } @$want;
    my @twice = grep { $seen{$_} > 1 } keys %seen;
    my @other = grep { !$in{$_} } keys %seen;
    my $order = join(' ', @$got) eq join(' ', grep { $seen{$_} } @$want)
        ? 0 : 1;
    return () unless @missing || @twice || @other || $order;
    return (scalar(@$got) . ' of ' . scalar(@$want) . ' posts: '
        . scalar(@missing) . ' missing, ' . scalar(@twice) . ' twice, '
        . scalar(@other) . ' not made'
        . ($order ? ', out of order' : ''));
}

for my $model (qw(cache time_buckets size_buckets capped)) {
    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_redis;
    $t->start_mongo;

    my $conf = FeedTest::Store::conf($model);
    (my $stopped = $conf) =~ s/^(\s*feed_fanout) on;/$1 off;/m
        or die "no feed_fanout in the conf\n";
    $t->write_conf($conf)->run;

    none_failed([ follow_each($t, 'au', 'rd') ], "$model: rd follows au");
    my @posts = posts($t, 'au', 20, 4, "$model before");
    is($t->get('/users/rd/timeline')->{status}, 200,
        "$model: rd reads, a floor or a document");
    sleep 2.5;

    # no fanout: every post behind
    $t->write_conf($stopped);
    ok($t->reload, "$model: reloaded without fanout");
    push @posts, posts($t, 'au', 240, 8, "$model unsent");

    # fanout again, slowed down, while more posts come
    $t->mongo_latency(30);
    $t->write_conf($conf);
    ok($t->reload, "$model: reloaded with fanout");
    push @posts, posts($t, 'au', 40, 8, "$model meanwhile");
    @posts = reverse sort @posts;

    my $g = group_info($t) // {};
    my $behind = ($g->{lag} // 0) + ($g->{pending} // 0);
    ok($behind > 0, "$model: fanout is behind ($behind entries not "
        . 'acknowledged)');

    my ($ids, $err) = walk($t, 'rd');
    my @bad = $ids ? differs($ids, \@posts) : ($err);
    ok(!@bad, "$model, fanout behind: every page exact, each post once")
        or diag($bad[0]);

    $t->mongo_latency(0);
    wait_settled($t, "$model: fanout caught up", 60);
    ($ids, $err) = walk($t, 'rd');
    @bad = $ids ? differs($ids, \@posts) : ($err);
    ok(!@bad, "$model, fanout caught up: every page exact")
        or diag($bad[0]);

    $t->finish;
}

done_testing();
