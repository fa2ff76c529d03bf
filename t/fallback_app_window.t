#!/usr/bin/perl
# tools/fallback-app's time window (--window, as the module's
# feed_timeline_window, issue 34), against the MongoDB stand-in: a reader
# of 210 authors (two chunks of the $in), 200 of them with posts two hours
# old, 10 with posts made in the last minutes, and a window of one hour.
#
#   - a page the recent posts fill: one query per chunk, all newer than
#     the window's edge (the stand-in's command log says so);
#   - a page they do not fill: a second query per chunk, at or below the
#     edge, and the page is exactly the newest posts, newest first;
#   - walks by max_id of 1, 7 and 40 a page, and since_id reads around the
#     edge: every post once, in order;
#   - --window 0: one query per chunk, the same answers.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(summary);

plan(skip_all => 'the stand-in\'s command log needed')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_mongo;

my $now = time;
my (@docs, @all);
my @authors = map { "wa$_" } 1 .. 210;
push @docs, map { qq({"src": "wr", "dst": "$_", "status": 1, )
    . qq("created": {"\$date": 0}}) } @authors;
$t->mongo_insert('follows', @docs);

# two posts by each author: the old ones 2 h ago, the recent ones of the
# last 10 authors 1 to 10 minutes ago; ids made of the time and a count
my $n = 0;
@docs = ();
for my $i (0 .. $#authors) {
    my @ages = $i >= 200 ? (60 * ($i - 199), 60 * ($i - 199) + 30)
                         : (7200 + $i, 7200 + $i + 500);
    for my $age (@ages) {
        my $id = sprintf('%08x%016x', $now - $age, ++$n);
        push @all, [ $id, $now - $age ];
        push @docs, qq({"_id": {"\$oid": "$id"}, "author": "$authors[$i]", )
            . qq("body": "p$n", "ts": ${\ (($now - $age) * 1000)}});
    }
}
$t->mongo_insert('posts', @docs);
my @want = map { $_->[0] } sort { $b->[0] cmp $a->[0] } @all;
is(scalar @want, 420, '420 posts, 20 of them within the hour');

sub start_app {
    my ($window) = @_;
    $t->stop_proc('app', 'TERM') if $t->pid('app');
    $t->spawn('app', $FeedTest::PYTHON, $t->root . '/tools/fallback-app',
        '--port', $t->port('app'), '--mongo-uri', $t->mongo_uri,
        '--window', $window);
    ok($t->wait_port($t->port('app'), 20), "app listens, --window $window");
}

sub app {
    my $r = $t->get("/internal/timeline?user=wr&$_[0]",
                    port => $t->port('app'));
    return [ map { $_->{id} } @{ $r->{json}{items} || [] } ];
}

# the posts queries since $n0, each as "newer", "older" or "all" by its
# bounds on _id
sub finds {
    my ($n0) = @_;
    my @c = $t->mongo_commands;
    return join ' ', map {
        my $f = ref $_->{filter}{_id} eq 'HASH' ? $_->{filter}{_id} : {};
        exists $f->{'$lte'} ? 'older'
            : exists $f->{'$gt'} && !exists $f->{'$lt'} ? 'newer' : 'all'
    } grep { ($_->{cmd} // '') eq 'find' && ($_->{coll} // '') eq 'posts' }
        @c[$n0 .. $#c];
}

sub walk {
    my ($limit) = @_;
    my (@got, $max);
    for (1 .. 500) {
        my $p = app("limit=$limit" . ($max ? "&max_id=$max" : ''));
        last unless @$p;
        push @got, @$p;
        $max = $p->[-1];
    }
    return \@got;
}

for my $window (3600, 0) {
    start_app($window);
    my $w = $window ? 'window 1h' : 'no window';

    my $n0 = scalar(my @c = $t->mongo_commands);
    is_deeply(app('limit=15'), [ @want[0 .. 14] ], "$w: a page of 15");
    is(finds($n0), $window ? 'newer newer' : 'all all',
        "$w: one query a chunk" . ($window ? ', newer than the edge' : ''));

    $n0 = scalar(@c = $t->mongo_commands);
    my $p = app('limit=50');
    is_deeply($p, [ @want[0 .. 49] ], "$w: a page of 50, past the edge")
        or diag(summary($p, [ @want[0 .. 49] ]));
    is(finds($n0), $window ? 'newer newer older older' : 'all all',
        "$w: " . ($window ? 'then one query a chunk at or below the edge'
                          : 'one query a chunk'));

    for my $limit (1, 7, 40) {
        my $got = walk($limit);
        is_deeply($got, \@want, "$w: a walk of $limit a page: every post "
            . 'once, newest first') or diag(summary($got, \@want));
    }
    for my $k (15, 19, 20, 21, 60) {
        is_deeply(app("limit=500&since_id=$want[$k]"), [ @want[0 .. $k - 1] ],
            "$w: since_id the post $k: the $k newer");
        is_deeply(app("limit=3&max_id=$want[$k]&since_id=$want[$k + 4]"),
            [ @want[$k + 1 .. $k + 3] ], "$w: max_id and since_id at $k");
    }
}

$t->done;
