#!/usr/bin/perl

# The fanout queue in partitions (feed_stream feed:posts partitions=4), on
# one Redis, with 2 workers:
#
#   - a queue without partitions gets them: the entries left in feed:posts
#     (fanout off, posts made) are delivered once the workers consume the
#     partitions, feed:posts being partition 0;
#   - an author's entries all go to one partition, crc32(author) % 4
#     (feed:posts, feed:posts:1, :2, :3), and the authors spread over all
#     four;
#   - every worker consumes every partition: a group on each, one consumer
#     per worker;
#   - every post reaches every follower's cached timeline once; a post
#     deleted right after it is made (same partition, in order) is in none;
#   - /status: fanout.partitions 4, the queue's pending summed over the
#     partitions, 0 once settled.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use Compress::Zlib ();
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short statuses follow_each read_each none_failed
    post rd server_conf);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 2s;
    feed_cache_mode embed;
    feed_stream feed:posts @@PARTITIONS@@;
    feed_fanout @@FANOUT@@;
    feed_fanout_block 300ms;
    feed_fanout_claim_idle 2s;
    feed_fanout_deliver_batch 4;

@@SERVER@@
}
EOF
$CONF =~ s/\@\@SERVER\@\@\n/server_conf()/e;

sub conf {
    my ($partitions, $fanout) = @_;
    (my $c = $CONF) =~ s/\@\@PARTITIONS\@\@/partitions=$partitions/;
    $c =~ s/\@\@FANOUT\@\@/$fanout/;
    return $c;
}

my @S = ('feed:posts', map { "feed:posts:$_" } 1 .. 3);
sub part_of { $S[ Compress::Zlib::crc32($_[0]) % 4 ] }

# authors spread over the four partitions, three each
my (%by, @A);
for my $i (1 .. 200) {
    my $a = "a$i";
    next if @{ $by{ part_of($a) } // [] } == 3;
    push @{ $by{ part_of($a) } }, $a;
    push @A, $a;
    last if @A == 12;
}
is(scalar @A, 12, 'twelve authors, three of each partition');

my @F = map { "f$_" } 1 .. 10;

sub in_list {
    my ($user, $id) = @_;
    my $l = rd($t, 'LRANGE', "feed:tl:{$user}", 0, -1) || [];
    return scalar grep { entry_id($_) eq $id } @$l;
}

sub all_once {
    my (@ids) = @_;
    for my $f (@F) { for my $p (@ids) { return 0 if in_list($f, $p) != 1 } }
    return 1;
}

# ------------------------------------------- a queue that gets partitions --

$t->write_conf(conf(1, 'off'))->run;

for my $a (@A[0 .. 3]) {
    none_failed([ follow_each($t, $a, @F) ], "10 follows of $a");
}
my (undef, @bad) = read_each($t, @F);
none_failed(\@bad, 'every follower\'s timeline cached');

my @old = map { post($t, $_, "left in the queue by $_") } @A[0 .. 3];
is(rd($t, 'XLEN', 'feed:posts'), 4, 'fanout off: 4 entries left in '
    . 'feed:posts');

$t->stop;
$t->write_conf(conf(4, 'on'))->run;

ok($t->wait_for(10, sub { all_once(@old) }),
    'partitions on: the entries of feed:posts (partition 0) delivered, '
    . 'once each');

# ------------------------------------------------------------ partitions --

for my $a (@A[4 .. 11]) {
    none_failed([ follow_each($t, $a, @F) ], "10 follows of $a");
}
(undef, @bad) = read_each($t, @F);
none_failed(\@bad, 'every follower\'s timeline cached again');

my %made;
for my $round (1 .. 2) {
    for my $a (@A) {
        my $id = post($t, $a, "post $round of $a") or next;
        $made{$id} = $a;
    }
}
is(scalar keys %made, 24, '24 posts made');

my %where;
for my $s (@S) {
    for my $e (@{ rd($t, 'XRANGE', $s, '-', '+') || [] }) {
        my %f = @{ $e->[1] };
        $where{ $f{id} } = $s if $f{id};
    }
}
is(scalar(grep { ($where{$_} // '') eq part_of($made{$_}) } keys %made), 24,
    'each post\'s entry in its author\'s partition, crc32(author) % 4');
is(scalar(grep { my $s = $_; grep { ($where{$_} // '') eq $s } keys %made }
    @S), 4, 'entries in all four partitions');

ok($t->wait_for(10, sub { all_once(keys %made) }),
    'every post once in every follower\'s list');

for my $s (@S) {
    my $g = rd($t, 'XINFO', 'GROUPS', $s) || [];
    my %h = @{ $g->[0] // [] };
    is($h{consumers}, 2, "$s: the group, a consumer a worker");
}

# a post deleted at once: its delete follows it in the same partition
my $a = $A[5];
my $gone = post($t, $a, 'deleted at once');
is($t->http('DELETE', "/users/$a/posts/$gone")->{status}, 204,
    'a post deleted right after it was made');
my $last = post($t, $a, 'after the delete');
ok($t->wait_for(10, sub { all_once($last) }), 'the post after it delivered');
is(scalar(grep { in_list($_, $gone) } @F), 0, 'the deleted post in no list');

# ------------------------------------------------------------------ status --

ok($t->wait_for(10, sub {
    my $j = $t->get('/status')->{json} or return 0;
    ($j->{fanout}{partitions} // 0) == 4 && defined $j->{queue}
        && $j->{queue}{pending} == 0;
}), 'status: 4 partitions, nothing pending in any')
    or diag(short($t->get('/status')));

$t->done;
