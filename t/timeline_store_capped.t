#!/usr/bin/perl

# Timelines kept in MongoDB behind the Redis cache, the
# "capped" model (seed 001): feed_timeline_store capped, a counter per user
# and the n-th post's entry in the slot "<user>_<n mod 10>"
# (feed_timeline_capped_size 10, as feed_cache_size), written by upsert,
# every follower written.  The default slots: t/timeline_store_capped_slots.t.
#
#   - a reader's first read sets their floor; every follower's slots get
#     the posts, a user's who never read too; a pull author's posts are
#     not added;
#   - past 10 posts the oldest entries are overwritten: a user keeps 10,
#     and the newest id overwritten ("w") bounds what the slots hold;
#   - with the reader's timeline gone from Redis, every page of the
#     fallback source, for every max_id and since_id along the timeline,
#     is what fanout on read gives: from the slots above the bound, merged
#     with the pull author's posts, fanout on read below it;
#   - 48 posts of 8 authors fanned out concurrently by 2 workers to r2:
#     r2 keeps 10, each once, each slot holding its number's post, and
#     every page of r2 is still what fanout on read gives;
#   - a post fanned out again, 4 times at once, is kept once, and takes no
#     slot;
#   - a deleted post's entries are gone, and it is in no answer;
#   - an unfollow moves the floor: the next answers leave the unfollowed
#     author out.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(node_counts parallel follow_each none_failed);
use FeedTest::Store;

my $t = FeedTest->new(fresh_mongo => 1);

$t->start_backends;

$t->write_conf(FeedTest::Store::conf('capped',
    'feed_timeline_capped_size 10'))->run;

my $s = FeedTest::Store->new($t);

# ------------------------------------------------------------- helpers --

# a user's entries' ids
sub slotted {
    my ($user) = @_;
    return [ map { $_->{i}{'$oid'} }
        $t->mongo_find('timeline_capped', qq({"u": "$user"})) ];
}

sub counter {
    my ($user) = @_;
    my ($doc) = $t->mongo_find('timeline_capped_users',
        qq({"_id": "$user"}));
    return $doc // {};
}

sub has {
    my ($id, $user) = @_;
    return scalar grep { $_ eq $id } @{ slotted($user) };
}

# ------------------------------------------------------------- the graph --

$s->graph;

$s->post('a1', "a1 $_") for 1 .. 3;

# -------------------------------------------------- the floor, the writes --

is($t->get('/users/r1/timeline')->{status}, 200, 'first read: 200');
ok(counter('r1')->{f}, 'first read: r1\'s floor set');
ok(!counter('i1')->{f}, 'i1, who never read: no floor');

sleep 2.5;
my $turn = $s->post('celeb', 'the turn');
ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
    'the turn: celeb is a pull author');
$s->post('celeb', "pulled $_") for 1 .. 2;
$s->post('a1', "a1 later $_") for 1 .. 3;
$s->post('a2', "a2 $_") for 1 .. 12;

my @posts = $s->posts;
ok($t->wait_for(5, sub { has($posts[-1], 'r1') }), 'fanout: into r1\'s slots');
is(scalar @{ slotted('r1') }, 10, 'r1 keeps 10 entries');
ok(counter('r1')->{w}, 'overwritten entries: the bound "w" set');
ok(!grep({ $s->by($_) eq 'celeb' && $_ ne $turn } @{ slotted('r1') }),
    'the pull author\'s posts are not added');
ok(has((grep { $s->by($_) eq 'a1' } @posts)[-1], 'i1'),
    'i1, who never read: written too');

# ---------------------------------------------------- the source's pages --

$s->forget('r1');
my @bad = $s->pages_bad('r1');
ok(!@bad, 'every page along the timeline as fanout on read, from the '
    . 'slots above their bound and fanout on read below')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");
$s->was_read('timeline_capped', 'the slots were read');

# ------------------------------------------------------ concurrent fanout --

$s->race;

ok($t->wait_for(10, sub { (counter('r2')->{n} // 0) >= 48 }),
    'concurrent fanout: 48 numbers taken for r2');
sleep 0.5;
my @r2 = @{ slotted('r2') };
is(scalar @r2, 10, 'concurrent fanout: r2 keeps 10 entries');
my %once;
$once{$_}++ for @r2;
ok(!grep({ $_ > 1 } values %once), 'concurrent fanout: each post once');
my @slots = $t->mongo_find('timeline_capped', '{"u": "r2"}');
is(join(' ', sort { $a <=> $b } map { $_->{n} % 10 } @slots),
    '0 1 2 3 4 5 6 7 8 9', 'concurrent fanout: each slot its number\'s');
# a round of writes: the find of who has the post, then the slots written
$s->interleaved('timeline_capped',
    sub { $_[0]{cmd} eq 'find' && exists(($_[0]{filter} // {})->{i}) },
    sub { $_[0]{cmd} eq 'update' });

$s->forget('r2');
@bad = $s->pages_bad('r2');
ok(!@bad, 'concurrent fanout: every page of r2 as fanout on read')
    or diag(scalar(@bad) . " wrong, first: $bad[0]");

# ---------------------------------------------------------- a hot author --

# 100 posts of one author made 50 at a time: every delivery to their own
# timeline and to r3's races for the same counter; a claim that does not
# hold is taken again by \$inc, so none runs out of rounds
none_failed([ follow_each($t, 'hot', 'r3') ], 'r3 follows hot');
my @hot = map { $_->{json}{id} } parallel($t, 50,
    map { [ 'POST', '/users/hot/posts', qq({"body": "hot $_"}) ] } 1 .. 100);
is(scalar(grep { defined } @hot), 100, 'a hot author: 100 posts made');
ok($t->wait_for(20, sub { (counter('r3')->{n} // 0) >= 100
    && (counter('hot')->{n} // 0) >= 100 }),
    'a hot author: 100 numbers taken for r3 and for hot');
ok($t->error_log !~ /rounds lost/, 'a hot author: no delivery ran out of '
    . 'rounds');
my %hot = map { $_ => 1 } @hot;
my @r3 = @{ slotted('r3') };
is(scalar(grep { $hot{$_} } @r3), 10, 'a hot author: r3 keeps 10 of them');
my ($newest) = sort { $b cmp $a } @hot;
ok(has($newest, 'r3') || (counter('r3')->{w}{'$oid'} // '') ge $newest,
    'a hot author: the newest kept, or counted as overwritten');

# ------------------------------------------------------------ redelivery --

my $n = counter('r1')->{n};
ok($s->redeliver($posts[-1]) && $s->redeliver($posts[-1])
    && $s->redeliver($posts[-1]) && $s->redeliver($posts[-1]),
    'redelivery: the last post\'s entry 4 times at once');
sleep 1;
is(has($posts[-1], 'r1'), 1, 'redelivery: the post once');
is(counter('r1')->{n}, $n, 'redelivery: no slot taken');

# ---------------------------------------------------------------- delete --

my $gone = $posts[-2];
is($t->http('DELETE', '/users/' . $s->by($gone) . "/posts/$gone")->{status},
    204, 'delete: 204');
$s->deleted($gone);
ok($t->wait_for(5, sub { !has($gone, 'r1') }), 'delete: its entries gone');
@bad = $s->pages_bad('r1');
ok(!@bad, 'delete: in no answer') or diag("first: $bad[0]");

# -------------------------------------------------------------- unfollow --

my $f0 = counter('r1')->{f}{'$oid'};
sleep 1;
is($t->http('DELETE', '/users/r1/following/a2')->{status}, 204,
    'unfollow: 204');
$s->unfollows('r1', 'a2');
ok((counter('r1')->{f}{'$oid'} // '') gt $f0, 'unfollow: the floor moved');
@bad = $s->pages_bad('r1');
ok(!@bad, 'unfollow: every page without a2') or diag("first: $bad[0]");

$t->done;
