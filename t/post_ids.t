#!/usr/bin/perl

# Post ids made on one node increase strictly in the order the posts were
# made, whichever worker made them (a node-wide sequence in shared memory):
#
#   - 200 posts one after another by one client, over 4 workers
#     (reuseport spreads the connections): each id greater than the one
#     before, and GET /users/{uid}/posts lists them in exactly that order;
#   - 10 rounds of 20 posts in parallel: all ids distinct, each round's
#     above the round before;
#   - the layout: the first 4 bytes are ts's seconds, then ts's
#     milliseconds, and the node's 5 random bytes last, the same in every
#     worker and across a reload (the zone is kept), above the ids before.
#
# timer_resolution makes each worker's cached clock lag by up to 100 ms, as
# it may in production: ids taken from the clock alone go backwards from
# one worker to the next.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short summary post post_start post_end status_all);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run;
worker_processes 4;
timer_resolution 100ms;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location = /status { feed_status; }
    }
}
EOF

ok($t->wait_for(10, sub { status_all($t, 'mongo') }), 'mongodb up');

my $U = 'ids-' . $$ . '-' . int(time);

# the ids of a user's posts as listed, newest first, 100 a page
sub listed {
    my ($uid) = @_;
    my (@ids, $max);
    for (1 .. 100) {
        my $r = $t->get("/users/$uid/posts?limit=100"
            . (defined $max ? "&max_id=$max" : ''));
        return (@ids, 'error: ' . short($r)) unless $r->{status} == 200;
        push @ids, map { $_->{id} } @{$r->{json}{items}};
        $max = $r->{json}{next} // last;
    }
    return @ids;
}

# the ids that are not above the one before them
sub not_increasing {
    my @ids = @_;
    return map { "$_: $ids[$_ - 1] then $ids[$_]" }
        grep { $ids[$_] le $ids[$_ - 1] } 1 .. $#ids;
}

# ---------------------------------------------------- one after another --

my (@made, %post);
for my $i (1 .. 200) {
    my $id = post($t, $U, "post $i", keep => \%post);
    push @made, $id if $id;
}
is(scalar @made, 200, '200 posts made one after another');

my @back = not_increasing(@made);
ok(!@back, 'each id above the one made before it')
    or diag(scalar(@back) . " not: @back[0 .. ($#back < 4 ? $#back : 4)]");

my @listed = reverse listed($U);
is_deeply(\@listed, \@made, 'GET /users/{uid}/posts lists them in the '
    . 'order they were made') or diag(summary(\@listed, \@made));

my %pids = map { $_->{pid} => 1 } grep { ref $_ eq 'HASH' }
    map { $t->get('/status')->{json} } 1 .. 40;
ok(keys %pids > 1, 'the connections reached ' . scalar(keys %pids)
    . ' workers');

# --------------------------------------------------------- in parallel --

my @rounds;
for my $round (1 .. 10) {
    my @h = map { post_start($t, "$U-p$_", "round $round") } 1 .. 20;
    push @rounds, [ sort grep defined,
        map { post_end($t, $_, "round $round") } @h ];
}
my @all = map { @$_ } @rounds;
is(scalar @all, 200, '10 rounds of 20 posts made in parallel');
my %n;
$n{$_}++ for @all;
is(scalar(grep { $n{$_} > 1 } keys %n), 0, 'all their ids distinct');
my @late = grep { $rounds[$_][0] le $rounds[$_ - 1][-1] } 1 .. $#rounds;
ok(!@late, "each round's ids above the round before") or diag("@late");

# -------------------------------------------------------------- layout --

my @bad;
for my $id (@made) {
    my $ts = $post{$id}{ts};
    my $sec = hex(substr($id, 0, 8));
    my $ms = hex(substr($id, 8, 6)) >> 14;
    push @bad, "$id: ts $ts" if $sec != int($ts / 1000) || $ms != $ts % 1000;
}
ok(!@bad, 'ids begin with their ts: seconds, then milliseconds')
    or diag("@bad[0 .. ($#bad < 4 ? $#bad : 4)]");

my %node = map { substr($_, 14) => 1 } @made, @all;
is(scalar keys %node, 1, 'the node\'s random bytes: the same in every id')
    or diag(join ' ', grep defined, (sort keys %node)[0 .. 4]);

ok($t->reload, 'reload');
my $after = post($t, $U, 'after the reload');
ok($after && $after gt $made[-1] && $after gt $all[-1],
    'an id made after a reload is above those before');
is(substr($after // '', 14), (keys %node)[0],
    'the same node bytes after a reload');

$t->done;
