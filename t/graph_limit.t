#!/usr/bin/perl

# feed_follow_max: a user follows at most that many users (3 here).  A
# follow past it answers 422 too_many_follows and writes nothing; follows
# already there, unfollows and follows after an unfollow work as before.
# Concurrent follows by one user never leave more than the limit: each
# follow counts again after its write and takes itself back when over.
#
#   - one by one: 3 follows, the 4th 422, counts and lists unchanged; a
#     refollow at the limit is 204; an unfollow frees a place;
#   - 8 rounds of 12 concurrent follows by one user (a burst: the first
#     3 ms ahead of the other 11), starting from 0, 1 and
#     2 follows: every answer 204 or 422, the 204s and the follows already
#     there never more than 3, and they are exactly what MongoDB lists and
#     counts (following and the targets' followers).  Near the limit all
#     of a round may be refused (each saw the others): only the total of
#     accepted ones is checked to be above 0;
#   - nginx -t: the directive takes a number from 1.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use Time::HiRes qw(sleep);
use FeedTest::Util qw(short is_error status_all);

my $t = FeedTest->new;

$t->start_backends;

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;
    @@MAX@@

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
        location ~ ^/users/([^/]+)/followers$ { feed_followers $1; }
        location = /status { feed_status; }
    }
}
EOF

sub conf { (my $c = $CONF) =~ s/\@\@MAX\@\@/$_[0]/; $c }

# ---------------------------------------------------------- the directive --

# in a directory of its own: the error log of the one that runs stays clean
my $tc = FeedTest->new;
for my $bad ('0', '-1', 'abc', '1 2') {
    $tc->write_conf(conf("feed_follow_max $bad;"));
    my ($ok, $out) = $tc->test_conf;
    ok(!$ok, "feed_follow_max $bad rejected");
    like($out, qr/\[emerg\].*("feed_follow_max"|value must be between 1 and)/,
        "the message names feed_follow_max ($bad)");
}

$t->write_conf(conf('feed_follow_max 3;'))->run;
ok($t->wait_for(10, sub { status_all($t, 'mongo') }), 'mongodb up');

my $TAG = sprintf '%x%x', $$, time;

sub follow { $t->http('PUT', "/users/$_[0]/following/$_[1]") }
sub unfollow { $t->http('DELETE', "/users/$_[0]/following/$_[1]") }

# whom $u follows (sorted) and the count, as MongoDB answers them now
sub following {
    my ($u) = @_;
    my $r = $t->get("/users/$u/following?limit=100");
    return ([ sort map { $_->{id} } @{$r->{json}{items} || []} ],
        $r->{json}{count});
}

sub followers_count { $t->get("/users/$_[0]/followers")->{json}{count} }

# ---------------------------------------------------------- one by one --

my $u = "u-$TAG";
my @to = map { "t$_-$TAG" } 1 .. 4;

is(follow($u, $to[$_])->{status}, 204, "follow $_") for 0 .. 2;
my $r = follow($u, $to[3]);
is_error($r, 422, 'too_many_follows', 'the 4th follow');
like($r->{json}{message} // '', qr/\b3\b/, 'the message says the limit');

my ($list, $n) = following($u);
is_deeply($list, [ sort @to[0 .. 2] ], 'the 4th is not listed');
is($n, 3, 'following count 3');
is(followers_count($to[3]), 0, 'its target\'s followers count 0');

is(follow($u, $to[0])->{status}, 204, 'a follow already there: 204');
is(unfollow($u, $to[0])->{status}, 204, 'an unfollow');
is(follow($u, $to[3])->{status}, 204, 'then the 4th follow');
is(follow($u, $to[0])->{status}, 422, 'and the first again is over');
($list, $n) = following($u);
is_deeply($list, [ sort @to[1 .. 3] ], 'the three listed');
is($n, 3, 'following count 3');

# ------------------------------------------------------------ together --

my (@bad, $accepted);
for my $round (1 .. 8) {
    my $v = "v$round-$TAG";
    my $have = ($round - 1) % 3;
    my @before = map { "b$_-$v" } 1 .. $have;
    is(follow($v, $_)->{status}, 204, "round $round: a follow before")
        for @before;

    my @targets = map { "c$_-$v" } 1 .. 12;
    # the first a moment ahead, as a burst arrives, the other 11 in the
    # same instant: they still race for the places left; all 12 at once
    # on a busy machine can each see all the others and all be refused
    my @h = ($t->http_start('PUT', "/users/$v/following/$targets[0]"));
    sleep 0.003;
    push @h, map { $t->http_start('PUT', "/users/$v/following/$_") }
        @targets[1 .. 11];
    my @res = map { $t->http_end($_) } @h;

    my @ok = map { $targets[$_] } grep { $res[$_]{status} == 204 } 0 .. 11;
    my @other = grep { $_->{status} != 204
        && !($_->{status} == 422
            && ($_->{json}{error} // '') eq 'too_many_follows') } @res;
    push @bad, "round $round: " . short($other[0]) if @other;

    my ($list, $n) = following($v);
    my @want = sort(@before, @ok);
    push @bad, "round $round: " . scalar(@want) . ' follows' if @want > 3;
    $accepted += @ok;
    push @bad, "round $round: listed @$list, want @want"
        unless "@$list" eq "@want";
    push @bad, "round $round: count $n, want " . scalar(@want)
        unless $n == @want;
    my @f = grep { followers_count($_) != 1 } @ok;
    my @g = grep { followers_count($_) != 0 }
        grep { my $x = $_; !grep { $_ eq $x } @ok } @targets;
    push @bad, "round $round: followers counts of @f @g" if @f || @g;
}
ok(!@bad, '8 rounds of 12 concurrent follows: never over 3, answers, '
    . 'lists and counts agree') or diag(join "\n", @bad);
ok($accepted, "$accepted of them accepted");

$t->done;
