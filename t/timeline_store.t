#!/usr/bin/perl

# Timelines kept in MongoDB behind the Redis cache, the "cache"
# model: feed_timeline_store cache, one capped document per user who reads
# (timeline_cache), with feed_cache_size 10 and a pull author.
#
#   - a reader's first read makes their document (empty first, then filled
#     from fanout on read); a user who never read gets none, however many
#     posts their followees make;
#   - fanout adds posts to the documents of the followers who have one,
#     capped, sorted, in one statement for a page of followers; a pull
#     author's posts are not added;
#   - with their timeline gone from Redis, a reader is answered from the
#     document, merged with the pull author's posts, and is what fanout on
#     read gives: every page of the fallback source, for every max_id and
#     since_id along the timeline, past the document's end too (fanout on
#     read goes on below its bound);
#   - a walk of the timeline (Redis cache, then DEEP pages) visits every
#     post once;
#   - a post fanned out again (its stream entry added twice) is in a
#     document once;
#   - a deleted post leaves every document and every answer;
#   - MongoDB gone while a post is fanned out: delivered into the
#     document once it is back, once;
#   - an unfollow drops the reader's document; the next read makes it
#     again, without the unfollowed author.
#
# The time_buckets model: t/timeline_store_time.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(tl_walk node_counts);
use FeedTest::Store;

my $t = FeedTest->new(fresh_mongo => 1);

$t->start_backends;

$t->write_conf(FeedTest::Store::conf('cache'))->run;

my $s = FeedTest::Store->new($t);

# ------------------------------------------------------------- helpers --

# the ids of a user's kept document, oldest first; undef without one
sub kept {
    my ($user) = @_;
    my ($doc) = $t->mongo_find('timeline_cache', qq({"_id": "$user"}));
    return undef unless $doc;
    return [ map { $_->{i}{'$oid'} } @{ $doc->{c} // [] } ];
}

sub settled {
    my ($id, @users) = @_;
    return $t->wait_for(5, sub {
        !grep { my $k = kept($_); !$k || !grep { $_ eq $id } @$k } @users;
    });
}

sub page_ids {
    my ($r) = @_;
    return join ' ', map { $_->{id} } @{ $r->{json}{items} // [] };
}

# ------------------------------------------------------------- the graph --

$s->graph;

$s->post('a1', "a1 $_") for 1 .. 3;
$s->post('a2', "a2 $_") for 1 .. 3;

# ----------------------------------------------------- made when read --

is(kept('r1'), undef, 'no document before the first read');
my $r = $t->get('/users/r1/timeline');
is($r->{status}, 200, 'first read: 200');
is($r->{headers}{'x-feed-cache'}, 'MISS', 'first read: MISS');
ok($t->wait_for(3, sub { kept('r1') }), 'first read: r1\'s document made');
is(join(' ', reverse @{ kept('r1') || [] }),
    join(' ', @{ $s->expected('r1') }),
    'first read: the document holds the posts fanout on read found');

my $turn = $s->post('celeb', 'the turn');
ok(settled($turn, 'r1'), 'the turn: delivered into r1\'s document');
ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
    'the turn: celeb is a pull author');
my @pulled = map { $s->post('celeb', "pulled $_") } 1 .. 2;
$s->post('a1', "a1 later $_") for 1 .. 2;
ok(settled($s->last_post, 'r1'), 'fanout: a1\'s posts into r1\'s document');
ok(!grep({ my $id = $_; grep { $_ eq $id } @pulled } @{ kept('r1') }),
    'fanout: the pull author\'s posts are not delivered');
my $k = kept('r1');
is(join(' ', @$k), join(' ', sort @$k), 'the document sorted, oldest first');
is(kept('i1'), undef, 'i1, who never read: no document, after '
    . scalar($s->posts) . ' posts');
SKIP: {
    skip 'the stand-in\'s command log', 1 if FeedTest::real_mongo();
    # a page of followers is one statement, whoever of them read: i1 costs
    # no statement of its own
    my @updates = grep { $_->{cmd} eq 'update'
        && ($_->{coll} // '') eq 'timeline_cache' } $t->mongo_commands;
    ok(@updates && !grep({ @{ $_->{filters} || [] } != 1 } @updates),
        'fanout: one update statement for a page of followers');
}

# ----------------------------------------------- answered from the store --

$s->forget('r1');
$r = $t->get('/users/r1/timeline');
is($r->{status}, 200, 'Redis without r1\'s timeline: 200');
is(page_ids($r), join(' ', @{ $s->expected('r1') }),
    'Redis without r1\'s timeline: every post, the pulled ones merged');
$s->was_read('timeline_cache',
    'Redis without r1\'s timeline: the document was read');

# more posts than the cap: the document keeps the newest 10
$s->post('a2', "a2 many $_") for 1 .. 14;
ok(settled($s->last_post, 'r1'), 'many posts: delivered');
is(scalar @{ kept('r1') }, 10, 'many posts: the document capped at 10');

my @bad = $s->pages_bad('r1');
ok(!@bad, 'the source from the document: every page along the timeline, '
    . 'above and below the document\'s end, as fanout on read')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");

$s->forget('r1');
my $w = tl_walk($t, 'r1', 4);
ok(!@{ $w->{problems} }
    && join(' ', @{ $w->{ids} }) eq join(' ', @{ $s->expected('r1') }),
    'walk: every post once, newest first: '
    . join(' ', map { $_ // '' } @{ $w->{caches} }))
    or diag(join "\n", @{ $w->{problems} });

# ------------------------------------------------------------ redelivery --

my $last = $s->last_post;
ok($s->redeliver($last), 'redelivery: the last post\'s entry again');
sleep 1;
is(scalar(grep { $_ eq $last } @{ kept('r1') }), 1,
    'redelivery: the post once in the document');

# ---------------------------------------------------------------- delete --

my $gone = ($s->posts)[-2];
is($t->http('DELETE', "/users/a2/posts/$gone")->{status}, 204,
    'delete: 204');
$s->deleted($gone);
ok($t->wait_for(5, sub { !grep { $_ eq $gone } @{ kept('r1') } }),
    'delete: out of the document');
$s->forget('r1');
is(join(' ', @{ $s->source_ids('user=r1&limit=30') // [] }),
    join(' ', @{ $s->expected('r1') }), 'delete: in no answer');

# ----------------------------------------------------- MongoDB down --

$s->mongo_down('MongoDB down',
    sub { my $id = shift; scalar grep { $_ eq $id } @{ kept('r1') // [] } });

# -------------------------------------------------------------- unfollow --

is($t->http_retried('DELETE', '/users/r1/following/a2')->{status}, 204,
    'unfollow: 204');
$s->unfollows('r1', 'a2');
is(kept('r1'), undef, 'unfollow: r1\'s document dropped');
$r = $t->get('/users/r1/timeline?limit=30');
is(page_ids($r), join(' ', @{ $s->expected('r1') }),
    'unfollow: the next read without a2');
ok($t->wait_for(3, sub { kept('r1') }), 'unfollow: the document made again');

$t->done;
