#!/usr/bin/perl

# Pull authors on a real Redis Cluster (three masters): their lists have a
# copy on every master, feed:pl{<tag>}:{author}, which the read script
# merges on the node of its user's keys.
#
#   - celeb (40 followers, over feed_pull_threshold 30) turns to pull with
#     the post that reaches the followers' cached timelines on all three
#     masters; the posts after it are listed in every master's copy, and
#     delivered to no timeline; small (24 followers) stays pushed;
#   - every follower's first page, on every master, is merged: celeb's
#     posts and small's (pushed), newest first, HIT;
#   - walks of the pages following next, with more posts than
#     feed_cache_size: every post once, newest first, DEEP past the copy's
#     end;
#   - first pages read again and again (kept pages, the workers' copies,
#     vouched for by each master's watch) show a new pulled post, and
#     every post of a storm once it is in every copy;
#   - a pulled post deleted: in no read, out of every copy;
#   - a copy lost (list and version deleted by hand, as when they expire):
#     that master's users still see
#     celeb's posts, the copy is loaded again from MongoDB;
#   - a master's last slot moved (its tag, so its copies' names, change):
#     the copy left behind is retired, its users are answered, see every
#     post, and hit again, merged from copies under the new name;
#   - a follower who follows after the turn is rebuilt with celeb merged.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short statuses fsum tl_ids follow_each parallel
    none_failed post tl_walk node_counts $HIT);
use FeedCluster;

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
my $c = FeedCluster->start($t, masters => 3, replicas => 0);

my ($seed) = $c->masters;
my $seeds = '127.0.0.1:' . $c->port($seed) . ' cluster';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    feed_redis $seeds;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_stream feed:posts partitions=2;
    feed_cache_size 10;
    feed_cache_local 1m;
    feed_pull_threshold 30;
    feed_fanout on;
    feed_fanout_block 500ms;
    feed_fanout_claim_idle 2s;

@{[ FeedCluster::server_conf() ]}
}
EOF

ok($t->wait_for(10, sub { FeedCluster::mapped(statuses($t), 2, 3) }),
    'every worker maps the cluster');

# ------------------------------------------------------------- helpers --

my @F = map { "f$_" } 1 .. 24;
my ($node, $per) = $c->spread(@F);
my %node = %$node;
my %per = %$per;
is(scalar keys %per, 3, 'the followers\' timelines are on all three '
    . 'masters: ' . join(' ', map { "$_=$per{$_}" } sort keys %per));

# each user's first page of 5: [status, cache status, ids]
sub read_all {
    my (@users) = @_;
    my @res = parallel($t, 50,
        map { [ 'GET', "/users/$_/timeline?limit=5" ] } @users);
    return map { [ $_->{status}, $_->{headers}{'x-feed-cache'} // '',
        tl_ids($_) ] } @res;
}

# each master's copy of celeb's list: name => [ids]
sub copies {
    my %l;
    for my $m ($c->masters) {
        for my $k (@{ $c->cmd($m, 'KEYS', 'feed:pl{*}:{celeb}') }) {
            next unless $c->master_of($k) eq $m;
            $l{$m} = [ map { entry_id($_) }
                @{ $c->cmd($m, 'LRANGE', $k, 0, -1) } ];
        }
    }
    return \%l;
}

sub in_list { $c->in_list(@_) }

# a pull counter summed over the workers of statuses()
sub fsum_pull {
    my ($st, $k) = @_;
    my $s = 0;
    $s += $_->{pull}{$k} // 0 for values %$st;
    return $s;
}

# whether every master's copy of celeb's list begins with $id
sub listed_everywhere {
    my ($id) = @_;
    my $l = copies();
    return keys %$l == 3 && !grep { ($l->{$_}[0] // '') ne $id } keys %$l;
}

# '' when the users' first pages are the newest 5 of @$want (and answered
# as the pattern cache says), or the first that is not
sub first_pages_are {
    my ($users, $want, %o) = @_;
    my @r = read_all(@$users);
    my $w = join ' ', grep { defined } @$want[0 .. 4];
    my @bad = grep { $_->[0] != 200 || join(' ', @{$_->[2]}) ne $w
        || ($o{cache} && $_->[1] !~ $o{cache}) } @r;
    return @bad ? "$bad[0][0] $bad[0][1] " . join(' ', @{$bad[0][2]}) : '';
}

my @posts;    # every post, oldest first
my %small;    # small's

# ----------------------------------------------------------- the turn --

none_failed([ follow_each($t, 'celeb', @F, map { "x$_" } 1 .. 16) ],
    '40 follows of celeb');
none_failed([ follow_each($t, 'small', @F) ], '24 follows of small');

push @posts, post($t, 'small', 's1');
$small{$posts[-1]} = 1;
my @r = read_all(@F);
is(scalar(grep { $_->[0] == 200 && $_->[1] eq 'MISS' } @r), 24,
    'first reads: 24 MISS (rebuilt)');

push @posts, post($t, 'celeb', 'the turn');
ok($t->wait_for(5, sub { !grep { !in_list($_, $posts[-1]) } @F }),
    'turn: the post in all 24 cached timelines, on three masters');
ok($t->wait_for(5, sub { (node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
    'turn: celeb is a pull author');

my $d0 = fsum(statuses($t), 'deliveries');
push @posts, post($t, 'celeb', "c$_") for 1 .. 3;

ok($t->wait_for(5, sub {
    my $l = copies();
    keys %$l == 3 && !grep { ($l->{$_}[0] // '') ne $posts[-1] } keys %$l;
}), 'pull: every master has its copy of the list, the last post first')
    or diag(explain(copies()));
is(fsum(statuses($t), 'deliveries') - $d0, 0,
    'pull: the posts after the turn delivered to no timeline');
is(scalar(grep { in_list($_, $posts[-1]) } @F), 0,
    'pull: in no follower\'s timeline');

my $want = [ reverse @posts ];
is(first_pages_are(\@F, $want, cache => $HIT), '',
    'reads: every follower\'s first page merged, HIT, on three masters');
ok((node_counts($t)->{'pull.reads'} // 0) >= 24, 'reads: merged reads '
    . 'counted');

# ----------------------------------------------------- pages past the end --

push @posts, post($t, 'celeb', "d$_") for 1 .. 12;
push @posts, post($t, 'small', 's2');
$small{$posts[-1]} = 1;
$want = [ reverse @posts ];

ok($t->wait_for(5, sub { !first_pages_are(\@F, $want, cache => $HIT) }),
    'deep: the first pages have the newest posts, HIT')
    or diag(first_pages_are(\@F, $want));

my %walked;
for my $u (map { my $m = $_; (grep { $node{$_} eq $m } @F)[0] }
    sort keys %per)
{
    for my $limit (3, 7) {
        my $w = tl_walk($t, $u, $limit);
        my $ok = !@{$w->{problems}}
            && join(' ', @{$w->{ids}}) eq join(' ', @$want);
        ok($ok, "walk: $u ($node{$u}), limit $limit: every post once, "
            . 'newest first')
            or diag(join("\n", @{$w->{problems}}) . "\ngot "
                . join(' ', @{$w->{ids}}));
        $walked{$_}++ for @{$w->{caches}};
    }
}
ok($walked{HIT} && $walked{DEEP}, 'walk: HIT, then DEEP past the copies\' '
    . 'end: ' . join(' ', map { "$_ x$walked{$_}" } sort keys %walked));

# ------------------------------------------------------------ kept pages --

read_all(@F) for 1 .. 3;
push @posts, post($t, 'celeb', 'while pages are kept');
ok($t->wait_for(2, sub {
    !grep { $_->[2][0] ne $posts[-1] } read_all(@F) }),
    'kept pages: the new pulled post first in every follower\'s next reads');

# posts while first pages are read, over and over (kept pages and the
# workers' copies, vouched for by the watch of each master): once a post is
# in every copy, and the watch's window (300 ms) passed, no read misses it

{
    my @bad;
    for my $i (1 .. 8) {
        my $h = FeedTest::Util::post_start($t, 'celeb', "storm $i");
        my @r = map { $t->http_start('GET', "/users/$_/timeline?limit=5") }
            @F[0 .. 5];
        $t->http_end($_) for @r;
        my $id = FeedTest::Util::post_end($t, $h, "storm $i");
        push @posts, $id;
        $t->wait_for(5, sub { listed_everywhere($id) });
        sleep 0.35;
        push @bad, map { "storm $i: $_->[1] " . join(' ', @{$_->[2]}) }
            grep { $_->[0] != 200 || ($_->[2][0] // '') ne $id }
            read_all(@F);
    }
    ok(!@bad, 'storm: 8 posts while pages are read, each in every next '
        . 'read') or diag(scalar(@bad) . " stale, first: $bad[0]");
}

# ---------------------------------------------------------------- delete --

my $gone = (grep { !$small{$_} } @posts)[-2];
is($t->http('DELETE', "/users/celeb/posts/$gone")->{status}, 204,
    'delete: 204');
@posts = grep { $_ ne $gone } @posts;
@r = read_all(@F);
is(scalar(grep { $_->[0] == 200 && !grep { $_ eq $gone } @{$_->[2]} } @r),
    24, 'delete: in no read, on any node');
ok($t->wait_for(5, sub {
    my $l = copies();
    keys %$l == 3 && !grep { grep { $_ eq $gone } @{$l->{$_}} } keys %$l;
}), 'delete: out of every master\'s copy');

# ------------------------------------------------------------ copy lost --

my ($lost) = sort keys %per;
my @theirs = grep { $node{$_} eq $lost } @F;
my $loads = node_counts($t)->{'pull.loads'} // 0;
for my $k (@{ $c->cmd($lost, 'KEYS', 'feed:p[lv]{*}:{celeb}') }) {
    $c->cmd($lost, 'DEL', $k);
}
$want = [ reverse @posts ];
ok($t->wait_for(5, sub { !first_pages_are(\@theirs, $want, cache => $HIT) }),
    "copy lost: $lost\'s users see celeb's posts")
    or diag(first_pages_are(\@theirs, $want));
# a read may still be answered by a worker's kept page until the watch
# hears of the loss; reads that reach Redis load the copy again
ok($t->wait_for(5, sub { first_pages_are(\@theirs, $want); copies()->{$lost} }),
    "copy lost: $lost\'s copy loaded again");
ok((node_counts($t)->{'pull.loads'} // 0) > $loads,
    'copy lost: a load counted');

# ------------------------------------------------ the tag of a master moved --

# no command met a key of another node until now; from here on, a batch
# or a read sent with the old map may (docs/cluster.md: retried, BYPASS)
unlike($t->error_log, qr/CROSSSLOT|non local key/,
    'no command across nodes');

# the master's last slot, which names its copies, moves to another master
my $moved = $lost;
my ($last) = map { $_->[1] } sort { $b->[1] <=> $a->[1] }
    grep { $_->[2][1] == $c->port($moved) } @{ $c->cmd($moved, 'CLUSTER',
    'SLOTS') };
my ($to) = grep { $_ ne $moved } $c->masters;
my $before = join ' ', sort @{ $c->cmd($moved, 'KEYS', 'feed:pl{*}') };
$c->move_slot($last, $moved, $to);

@theirs = grep { $c->master_of("feed:tl:{$_}") eq $moved } @F;
push @posts, post($t, 'celeb', 'after the tag moved');
$want = [ reverse @posts ];

# before any read: the fanout's write of the old copy's name is redirected
# (MOVED), and its map must still learn the new names (the new copy is
# made when a read needs it, or by the fanout); the old copy, whose tag is
# no master's, is retired (docs/cluster.md)
my ($old) = $before =~ /(feed:pl\{[^}]*\}:\{celeb\})/;
ok($t->wait_for(5, sub {
    my $n = 0;
    for my $m ($c->masters) {
        for my $k (@{ $c->cmd($m, 'KEYS', 'feed:pl{*}:{celeb}') }) {
            my $head = $c->cmd($m, 'LINDEX', $k, 0) // '';
            return 0 if $k eq $old
                || entry_id($head) ne $posts[-1];
            $n++;
        }
    }
    return $n >= 2;
}), 'tag moved: the post in every copy there is, the one left behind '
    . "($old) retired");

my %seen;
ok($t->wait_for(10, sub {
    my @r = read_all(@theirs);
    $seen{"$_->[0] $_->[1]"}++ for @r;
    !grep { $_->[0] != 200 || $_->[1] !~ $HIT
        || join(' ', @{$_->[2]}) ne join(' ', @$want[0 .. 4]) } @r;
}), "tag moved: $moved\'s users hit again, every post there")
    or diag(first_pages_are(\@theirs, $want));
ok(!grep({ !/^200 / } keys %seen), 'tag moved: every read answered: '
    . join(', ', map { "$_ x$seen{$_}" } sort keys %seen));

# a user's read meets the missing copies at most once or twice: a worker
# whose map kept the old names would answer from the fallback until its
# next refresh of the map
ok(($seen{'200 BYPASS'} // 0) <= 2 * @theirs, 'tag moved: at most two '
    . 'reads from the fallback per user');
my $after = join ' ', sort @{ $c->cmd($moved, 'KEYS', 'feed:pl{*}') };
ok($after && $after ne $before, "tag moved: $moved\'s copy under its new "
    . "name ($before -> $after)");

# ------------------------------------------------- followed after the turn --

is($t->http('PUT', '/users/late/following/celeb')->{status}, 204,
    'late follower: follows');
@r = read_all('late');
my @celebs = reverse grep { !$small{$_} } @posts;
is(join(' ', @{$r[0][2]}), join(' ', @celebs[0 .. 4]),
    "late follower: rebuilt ($r[0][1]) with celeb's posts");

# ------------------------------------------------------------------ end --

my $st = statuses($t);
is(scalar(grep { my $w = $_->{pull}{watch} // {};
    $w->{subscribed} && ($w->{watches} // 0) == 3 } values %$st), 2,
    'watch: each worker watches the copies of the three masters');
ok(fsum_pull($st, 'vouched') > 0, 'watch: reads answered from copies the '
    . 'workers vouched for: ' . fsum_pull($st, 'vouched'));
unlike($t->error_log, qr/CROSSSLOT/, 'no command across slots');

$t->done;
