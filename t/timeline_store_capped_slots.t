#!/usr/bin/perl

# The capped model's slots (feed_timeline_capped_size), with
# feed_cache_size 20: 72 posts of 8 authors made 4 at a time and fanned
# out concurrently by 2 workers to r2, whose timeline is then gone from
# Redis.
#
#   - by default r2 has twice feed_cache_size slots, 40: the rebuild of
#     r2's timeline (20 posts, and whether there are more) is answered
#     from them alone, without fanout on read (no query of posts by
#     author), and is what fanout on read gives.  Deliveries come in
#     about the order of the posts: the 20 slots past the rebuild's are
#     room for those out of order (a few here, 4 posts at a time);
#   - with feed_timeline_capped_size 20, as many slots as the rebuild
#     asks for posts, the slots vouch for fewer when a delivery came out
#     of order (the newest entry overwritten bounds them) and fanout on
#     read makes up the rest: what the default is for.  Deliveries all in
#     order (a slow machine) leave the 20 newest, and they are the page.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Store;

plan skip_all => 'the stand-in\'s command log' if FeedTest::real_mongo();

for my $slots (40, 20) {
    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_redis;
    $t->start_mongo;
    $t->write_conf(FeedTest::Store::conf('capped', 'feed_cache_size 20',
        $slots == 40 ? () : "feed_timeline_capped_size $slots"))->run;

    my $s = FeedTest::Store->new($t);
    $s->race(0, 72, 4);

    ok($t->wait_for(10, sub {
        scalar($t->mongo_find('timeline_capped', '{"u": "r2"}')) == $slots
            && (($t->mongo_find('timeline_capped_users',
                '{"_id": "r2"}'))[0]{n} // 0) >= 72 }),
        "$slots slots: r2's 72 posts delivered, $slots kept");

    my $disorder = $slots == 40 ? 0 : out_of_order($t, 'r2');
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

    if ($slots == 40) {
        is($by_author, 0, 'by default: the rebuild read no posts by author');
    } elsif ($disorder) {
        ok($by_author > 0, 'as many slots as the cache: fanout on read '
            . 'made up the rest');
    } else {
        # every delivery came in the order of the posts (a slow machine
        # may do that): the 20 slots hold the 20 newest, and vouch for
        # all of them
        is($by_author, 0, 'as many slots as the cache, deliveries in '
            . 'order: the slots vouched for the whole page');
    }

    $t->finish;
}

# whether an entry overwritten ("w") is newer than one kept: then the
# slots vouch for fewer than they hold
sub out_of_order {
    my ($t, $u) = @_;
    my ($doc) = $t->mongo_find('timeline_capped_users', qq({"_id": "$u"}));
    my $w = $doc && $doc->{w} ? $doc->{w}{'$oid'} : '';
    my @kept = map { $_->{i}{'$oid'} }
        $t->mongo_find('timeline_capped', qq({"u": "$u"}));
    my $older = grep { $_ lt $w } @kept;
    diag("r2: newest overwritten $w, $older of the "
        . scalar(@kept) . ' kept older');
    return $older;
}

done_testing();
