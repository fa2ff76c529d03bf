#!/usr/bin/perl

# Timelines kept in MongoDB behind the Redis cache: what every
# model with a floor (time_buckets, size_buckets, capped) does alike, each
# in its own nginx, with feed_cache_mode embed (the other tests use link):
#
#   - the entries embed the post as the API shows it;
#   - with the reader's timeline gone from Redis, every page of the
#     fallback source is what fanout on read gives, from the embedded
#     entries, merged with the pull author's posts;
#   - MongoDB down during a fanout: the entry stays pending, and once
#     MongoDB is back the post is delivered into the store, once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(node_counts);
use FeedTest::Store;

# where each model keeps a user's entries: the documents, and their
# entries in them
my %models = (
    time_buckets => sub {
        my ($t, $user) = @_;
        map { @{ $_->{c} // [] } } $t->mongo_find('timeline_time',
            qq({"_id.u": "$user", "_id.t": {"\$gte": 0}}));
    },
    size_buckets => sub {
        my ($t, $user) = @_;
        map { @{ $_->{c} // [] } } $t->mongo_find('timeline_size',
            qq({"_id.u": "$user", "_id.s": {"\$gte": 0}}));
    },
    capped => sub {
        my ($t, $user) = @_;
        $t->mongo_find('timeline_capped', qq({"u": "$user"}));
    },
);

for my $model (sort keys %models) {
    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_backends;
    $t->write_conf(FeedTest::Store::conf($model, 'feed_cache_mode embed',
        'feed_timeline_bucket_time 1s', 'feed_timeline_bucket_size 3'))->run;

    my $s = FeedTest::Store->new($t);
    my $entries = sub { $models{$model}->($t, $_[0]) };
    my $count = sub {
        my ($id, $user) = @_;
        scalar grep { $_->{i}{'$oid'} eq $id } $entries->($user);
    };

    $s->graph;
    $s->post('a1', "$model a1 before");
    is($t->get('/users/r1/timeline')->{status}, 200,
        "$model: the first read, a floor");
    sleep 2.5;

    my $turn = $s->post('celeb', "$model the turn");
    ok($t->wait_for(5,
        sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
        "$model: celeb is a pull author");
    $s->post('celeb', "$model pulled");
    $s->post('a1', "$model a1 $_") for 1 .. 4;
    $s->post('a2', "$model a2 $_") for 1 .. 4;

    my $last = $s->last_post;
    ok($t->wait_for(5, sub { $count->($last, 'r1') }),
        "$model: fanout into r1's store");

    # ------------------------------------------------------------ embed --

    my ($e) = grep { $_->{i}{'$oid'} eq $last } $entries->('r1');
    is(ref $e->{p}, 'HASH', "$model embed: the entry embeds the post");
    is($e->{p}{id} . ' ' . $e->{p}{author} . ' ' . $e->{p}{body},
        "$last a2 $model a2 4", "$model embed: as the API shows it");
    ok(!exists $e->{a}, "$model embed: no separate author");

    $s->forget('r1');
    my @bad = $s->pages_bad('r1');
    ok(!@bad, "$model embed: every page as fanout on read")
        or diag(scalar(@bad) . " wrong, first: $bad[0]");

    # ---------------------------------------------------- MongoDB down --

    $s->mongo_down("$model, MongoDB down", sub { $count->($_[0], 'r1') });

    $s->forget('r1');
    @bad = $s->pages_bad('r1');
    ok(!@bad, "$model, MongoDB down: every page as fanout on read after")
        or diag(scalar(@bad) . " wrong, first: $bad[0]");

    $t->finish;
}

done_testing;
