#!/usr/bin/perl

# The capped model's slots (feed_timeline_capped_size), with
# feed_cache_size 10: 48 posts of 8 authors fanned out concurrently by 2
# workers to r2, whose timeline is then gone from Redis.
#
#   - by default r2 has twice feed_cache_size slots, 20: the rebuild of
#     r2's timeline is answered from them alone, without fanout on read
#     (no query of posts by author), and is what fanout on read gives;
#   - with feed_timeline_capped_size 10, as many slots as the rebuild asks
#     for posts, the slots vouch for fewer (the newest entry overwritten
#     bounds them) and fanout on read makes up the rest: what the default
#     is for.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Store;

plan skip_all => 'the stand-in\'s command log' if FeedTest::real_mongo();

for my $slots (20, 10) {
    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_redis;
    $t->start_mongo;
    $t->write_conf(FeedTest::Store::conf('capped',
        $slots == 20 ? () : "feed_timeline_capped_size $slots"))->run;

    my $s = FeedTest::Store->new($t);
    $s->race;

    ok($t->wait_for(10, sub {
        scalar($t->mongo_find('timeline_capped', '{"u": "r2"}')) == $slots
            && (($t->mongo_find('timeline_capped_users',
                '{"_id": "r2"}'))[0]{n} // 0) >= 48 }),
        "$slots slots: r2's 48 posts delivered, $slots kept");

    $s->forget('r2');
    my $before = () = $t->mongo_commands;
    my $r = $t->get('/users/r2/timeline?limit=10');
    is($r->{status}, 200, "$slots slots: the rebuild answers");
    is(join(' ', map { $_->{id} } @{ $r->{json}{items} || [] }),
        join(' ', @{ $s->expected('r2') }[0 .. 9]),
        "$slots slots: the page fanout on read gives");

    my @cmds = ($t->mongo_commands)[ $before .. ($t->mongo_commands) - 1 ];
    my $by_author = grep { $_->{cmd} eq 'find'
        && ($_->{coll} // '') eq 'posts'
        && exists(($_->{filter} // {})->{author}) } @cmds;

    if ($slots == 20) {
        is($by_author, 0, 'by default: the rebuild read no posts by author');
    } else {
        ok($by_author > 0, 'as many slots as the cache: fanout on read '
            . 'made up the rest');
    }

    $t->finish;
}

done_testing();
