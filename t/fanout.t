#!/usr/bin/perl

# Fanout on write: every nginx worker is a consumer of the group "feed" of
# the stream feed:posts and delivers each post into the cached home
# timelines (feed:tl:{uid}) of the author's followers that have one, and
# the author's own.  With 3 workers:
#
#   - the group, one consumer per worker ("<host>:<pid>"), two Redis
#     connections per worker (one blocked in XREADGROUP);
#   - 500 followers of whom 200 have a cache: each post is in all 200 (and
#     the author's own) within 1 s of its 201, once; no cache appears for
#     the other 300; reads show it (HIT), a cold read rebuilds it (MISS);
#   - redelivery (the same entry added again, 5 at once): one copy;
#   - poison entries (a post that does not exist, malformed entries):
#     acknowledged, logged, skipped, not retried;
#   - follow / unfollow drop the follower's cache (next read MISS, with /
#     without the followee's posts; fanout follows the new graph);
#   - delete: never shown by a read, gone from every list after fanout,
#     also when the delete lands while the post is being fanned out;
#   - reload (SIGHUP) while a post to 5,000 followers (500 cached) is in
#     flight in an old worker: delivered once to the 500, finished by
#     the old worker (nothing left to claim), posts sent meanwhile too;
#   - embed mode, feed_cache_size 5: deliveries keep the cap, are
#     idempotent, an old post does not land past a trimmed end; follower
#     pages of 7 and delivery batches of 3;
#   - /status: fanout counters (consumed, deliveries, acked, skipped)
#     moving as they should, summed over the workers; queue pending/lag.
#
# Failures (SIGKILL of a worker, Redis restarts, MongoDB down) are in
# t/fanout_failures.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use Sys::Hostname ();
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw($STREAM $GROUP short rd tl_key copies copies_summary
    all_n follow_each read_each none_failed post group_info wait_settled
    statuses fsum $HIT);

my $t = FeedTest->new;
my $T0 = time;

$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 3;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    # 50 writes at once, each a few commands, queue up in the stand-in
    feed_mongo_timeout 3s;
    feed_cache_size @@SIZE@@;
    feed_cache_mode @@MODE@@;
    feed_fanout on;
    feed_fanout_claim_idle @@CLAIM@@s;
    # empty timelines (the readers of big, before its post) live for the
    # whole part, however slow the machine
    feed_cache_empty_ttl 600s;
    feed_fanout_block 500ms;
    @@EXTRA@@

    server {
        # reuseport: connections spread over the workers, so that /status
        # reaches each of them
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
        location ~ ^/users/([^/]+)/followers$ { feed_followers $1; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
}
EOF

my $END = '0' x 24;

# feed_fanout_claim_idle: an entry in flight longer than it is claimed by
# another worker; the sanitizer's build takes longer than 2 s over the
# 5,000 followers of the reload's post (MongoDB at 300 ms a command)
my $CLAIM = $FeedTest::ASAN ? 5 : 2;
my $JSON = JSON::PP->new->utf8->canonical;

# ---------------------------------------------------------------- helpers --

sub follow_all {
    my ($name, $target, @users) = @_;
    my $t0 = time;
    my @bad = follow_each($t, $target, @users);
    none_failed(\@bad, sprintf('%s: %d follows of %s (%.1fs)', $name,
        scalar @users, $target, time - $t0));
}

# reads each user's timeline once (200): their cache exists afterwards
sub read_all {
    my ($name, @users) = @_;
    my $t0 = time;
    my ($res, @bad) = read_each($t, @users);
    none_failed(\@bad, sprintf('%s: %d timelines read (%.1fs)', $name,
        scalar @users, time - $t0));
    return @$res;
}

my %POST;   # id => the 201's JSON

sub exists_count {
    my (@users) = @_;
    my $n = 0;
    while (my @b = splice(@users, 0, 500)) {
        my $r = rd($t, 'EXISTS', map { tl_key($_) } @b);
        return -1 unless defined $r;
        $n += $r;
    }
    return $n;
}

sub counters {
    my $st = statuses($t, verbose => 1);
    return { map { $_ => fsum($st, $_) }
        qw(consumed deliveries acked claims failures skipped in_flight) };
}

sub delta {
    my ($a, $b) = @_;
    return { map { $_ => $b->{$_} - $a->{$_} } keys %$b };
}

# waits until the summed counters show what is expected (they move just
# after the XACK reply, a hair after Redis shows the entry settled)
sub counters_are {
    my ($before, $want, $name) = @_;
    my $d;
    $t->wait_for(3, sub {
        $d = delta($before, counters());
        !grep { $d->{$_} != $want->{$_} } keys %$want;
    });
    is_deeply({ map { $_ => $d->{$_} } keys %$want }, $want,
        "$name: status counters moved by "
        . join(', ', map { "$_ +$want->{$_}" } sort keys %$want))
        or diag('moved by ' . $JSON->encode($d));
}

# the MongoDB stand-in's command log past byte $off
sub mongo_since {
    my ($off) = @_;
    open my $fh, '<', $t->dir . '/mongo-commands.log' or return ();
    seek $fh, $off || 0, 0;
    my @c;
    while (<$fh>) {
        my $c = eval { FeedTest::json_decode($_) } or next;
        push @c, $c;
    }
    return @c;
}

sub error_log_has {
    my ($re) = @_;
    return scalar grep { /$re/ } split /\n/, $t->error_log;
}

sub start_nginx {
    my ($mode, $size, $extra) = @_;
    $t->stop;
    (my $c = $CONF) =~ s/\@\@SIZE\@\@/$size/;
    $c =~ s/\@\@MODE\@\@/$mode/;
    $c =~ s/\@\@CLAIM\@\@/$CLAIM/;
    $c =~ s/\@\@EXTRA\@\@/$extra || ''/e;
    $t->write_conf($c)->run;
    ok($t->wait_for(10, sub {
        my $st = statuses($t, verbose => 1);
        keys %$st == 3 && !grep {
            !($_->{redis}{up} && $_->{mongo}{up} && $_->{fanout}{reading})
        } values %$st;
    }), "$mode, cache $size: 3 workers up, redis and mongodb up, "
        . 'each worker reading');
}

# ----------------------------------------------------- the consumer group --

start_nginx('link', 800);

{
    my $st = statuses($t, verbose => 1);
    my @pids = sort { $a <=> $b } $t->worker_pids;
    is(scalar @pids, 3, 'three workers');
    my $host = lc Sys::Hostname::hostname();

    my @bad;
    for my $pid (@pids) {
        my $f = $st->{$pid} ? $st->{$pid}{fanout} : undef;
        unless (ref $f eq 'HASH') {
            push @bad, "$pid: no fanout in status";
            next;
        }
        push @bad, "$pid: enabled is not true"
            unless JSON::PP::is_bool($f->{enabled}) && $f->{enabled};
        push @bad, "$pid: consumer '" . ($f->{consumer} // 'null')
            . "', want ending with ':$pid'"
            unless ($f->{consumer} // '') =~ /:\Q$pid\E\z/;
        push @bad, "$pid: consumer '" . ($f->{consumer} // 'null')
            . "' is not '$host:$pid'"
            unless ($f->{consumer} // '') eq "$host:$pid";
        push @bad, "$pid: $_ is not 0 at start ("
            . ($f->{$_} // 'null') . ')'
            for grep { ($f->{$_} // -1) ne '0' }
                qw(consumed deliveries acked failures skipped in_flight);
        push @bad, "$pid: last_error " . ($f->{last_error} // '')
            if defined $f->{last_error};
        my $q = $st->{$pid}{queue};
        push @bad, "$pid: queue " . $JSON->encode($q // 'absent')
            . ', want pending 0, lag_ms 0'
            unless ref $q eq 'HASH' && ($q->{pending} // -1) eq '0'
                && ($q->{lag_ms} // -1) eq '0';
    }
    ok(!@bad, 'status of each worker: fanout enabled, reading, consumer '
        . '"<host>:<pid>", counters at 0, queue empty')
        or diag(join "\n", @bad);

    my $g = group_info($t);
    ok($g, "group '$GROUP' of $STREAM exists")
        or diag($JSON->encode(rd($t, 'XINFO', 'GROUPS', $STREAM) // 'none'));

    # three connections per worker: one blocked in XREADGROUP, one
    # subscribed to what the copies of first pages depend on (the watch)
    my ($n, $blocked, $subs, $list) = (0, 0, 0, '');
    $t->wait_for(5, sub {
        $list = rd($t, 'CLIENT', 'LIST') // '';
        my @c = grep { !/cmd=client\|list/ } split /\n/, $list;
        $n = @c;
        $blocked = grep { /flags=\S*b/ && /cmd=xreadgroup/ } @c;
        $subs = grep { /cmd=subscribe/ && /sub=5 / } @c;
        $n == 9 && $blocked == 3 && $subs == 3;
    });
    is($n, 9, 'CLIENT LIST: 3 Redis connections per worker') or diag($list);
    is($subs, 3, 'CLIENT LIST: one per worker subscribed to 5 channels')
        or diag($list);
    is($blocked, 3, 'CLIENT LIST: one per worker blocked in XREADGROUP')
        or diag($list);
}

# ----------------------- 500 followers, 200 with a cache: within 1 s, once --

my $STAR = 'star';
my @F = map { sprintf 'f%03d', $_ } 1 .. 500;
my @ACTIVE = @F[0 .. 199];
my @IDLE = @F[200 .. 499];

follow_all('star', $STAR, @F);
read_all('star: 200 followers', @ACTIVE);
read_all('star: the author', $STAR);

is(exists_count(@ACTIVE, $STAR), 201,
    'star: the 200 readers and the author have a cache');
is(exists_count(@IDLE), 0, 'star: the 300 others have none');

my @SP;     # star's posts, oldest first
my %SLA;

for my $round (1 .. 3) {
    my $c0 = counters();
    my $id = post($t, $STAR, "star post $round", keep => \%POST);
    last unless $id;
    my $t201 = time;
    push @SP, $id;

    my ($c, $when);
    $t->wait_for(5, sub {
        $c = copies($t, $id, @ACTIVE, $STAR);
        $when = time - $t201;
        $c && !grep { $_ < 1 } values %$c;
    });
    $SLA{$round} = $when;
    ok(all_n($c, 1) && $when <= 1.0, sprintf('star post %d: in all 200 '
        . 'follower caches and the author\'s within 1 s of its 201 (%.3fs)',
        $round, $when)) or diag(copies_summary($c));

    wait_settled($t, "star post $round");

    $c = copies($t, $id, @ACTIVE, $STAR);
    ok(all_n($c, 1), "star post $round: exactly one copy in each of the 201")
        or diag(copies_summary($c));
    is(exists_count(@IDLE), 0,
        "star post $round: still no cache for the 300 without one");
    my @k = map { @{rd($t, 'KEYS', $_) // []} } 'feed:tl:*', 'feed:tlq:*';
    my %ok = map { (tl_key($_) => 1) } @ACTIVE, $STAR;
    my @stray = grep { !$ok{$_} } @k;
    ok(!@stray, "star post $round: no other feed:tl: or feed:tlq: key")
        or diag("@stray[0 .. ($#stray > 9 ? 9 : $#stray)]");

    counters_are($c0, { consumed => 1, acked => 1, deliveries => 201,
        failures => 0, skipped => 0, in_flight => 0 },
        "star post $round");
}

{
    # the lists: newest first, link mode entries are the bare ids
    my @want = (reverse(@SP), $END);
    my @bad;
    for my $u (@ACTIVE[0, 57, 199], $STAR) {
        my $l = rd($t, 'LRANGE', tl_key($u), 0, -1) // [];
        my @ids = map { length($_) == 12 ? entry_id($_) : "($_)" } @$l;
        push @bad, "$u: @ids" unless "@ids" eq "@want";
    }
    ok(!@bad, 'star: lists hold the 3 posts newest first, then the end '
        . 'mark, entries are bare ids (link mode)') or diag(join "\n", @bad);

    my @json = grep { !defined rd($t, 'GET', post_key($_)) } @SP;
    ok(!@json, 'star: each post\'s JSON in feed:p:<id>') or diag("@json");

    # reads: HIT, the posts as created
    for my $u ($ACTIVE[0], $ACTIVE[199], $STAR) {
        my $r = $t->get("/users/$u/timeline");
        my @ids = map { $_->{id} } @{ref $r->{json} eq 'HASH'
            ? $r->{json}{items} // [] : []};
        ok($r->{status} == 200
            && ($r->{headers}{'x-feed-cache'} // '') eq 'HIT'
            && "@ids" eq join(' ', reverse @SP),
            "star: $u reads the 3 posts from the cache (HIT)")
            or diag(short($r));
        is_deeply($r->{json}{items}[0], $POST{$SP[-1]},
            "star: $u sees the post as its 201 had it")
            if $r->{status} == 200;
    }

    # an idle follower's first read: rebuilt, with the posts
    my $r = $t->get("/users/$IDLE[0]/timeline");
    my @ids = map { $_->{id} } @{ref $r->{json} eq 'HASH'
        ? $r->{json}{items} // [] : []};
    ok($r->{status} == 200 && ($r->{headers}{'x-feed-cache'} // '') eq 'MISS'
        && "@ids" eq join(' ', reverse @SP),
        "star: $IDLE[0], without a cache, gets the posts rebuilt (MISS)")
        or diag(short($r));
    push @ACTIVE, $IDLE[0];
    shift @IDLE;
}

# ------------------------------------------------------ redelivery: once --

{
    my $id = $SP[0];
    my $p = $POST{$id};
    my $c0 = counters();
    my $len0 = rd($t, 'LLEN', tl_key($ACTIVE[0]));

    # the same entry again, five times at once: consumers race on it
    for (1 .. 5) {
        rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $id,
            'author', $STAR, 'ts', $p->{ts});
    }
    wait_settled($t, 'redelivery x5');

    my $c = copies($t, $id, @ACTIVE, $STAR);
    ok(all_n($c, 1), 'redelivery x5 of star post 1: still one copy in each '
        . 'of the ' . scalar(keys %$c) . ' caches') or diag(copies_summary($c));
    is(rd($t, 'LLEN', tl_key($ACTIVE[0])), $len0,
        'redelivery: list length unchanged');
    counters_are($c0, { consumed => 5, acked => 5, deliveries => 0,
        failures => 0 }, 'redelivery x5');

    # and the newest post again
    rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $SP[-1],
        'author', $STAR, 'ts', $POST{$SP[-1]}{ts});
    wait_settled($t, 'redelivery of the newest');
    $c = copies($t, $SP[-1], @ACTIVE, $STAR);
    ok(all_n($c, 1), 'redelivery of star post 3: one copy')
        or diag(copies_summary($c));
    my $l = rd($t, 'LRANGE', tl_key($ACTIVE[0]), 0, -1) // [];
    is(join(' ', map { entry_id($_) } @$l), join(' ', reverse(@SP), $END),
        'redelivery: the list unchanged, in order');
}

# ---------------------------------------------------------- poison entries --

{
    my $c0 = counters();
    my $ghost = '0123456789abcdef01234567';
    my %sid;

    $sid{ghost} = rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $ghost,
        'author', $STAR, 'ts', int(time * 1000));
    $sid{bad_id} = rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', 'zz',
        'author', $STAR);
    $sid{upper_id} = rd($t, 'XADD', $STREAM, '*', 'type', 'post',
        'id', uc($SP[0]), 'author', $STAR);
    $sid{bad_type} = rd($t, 'XADD', $STREAM, '*', 'type', 'bogus',
        'id', $SP[0], 'author', $STAR);
    $sid{no_author} = rd($t, 'XADD', $STREAM, '*', 'type', 'post',
        'id', $SP[0]);
    $sid{bad_author} = rd($t, 'XADD', $STREAM, '*', 'type', 'post',
        'id', $SP[0], 'author', 'no such/user!');
    $sid{junk} = rd($t, 'XADD', $STREAM, '*', 'foo', 'bar');

    my $ok = wait_settled($t, 'poison entries');
    my $g = group_info($t) // {};
    is($g->{pending}, 0, 'poison entries: none left pending (not retried)');

    # still nothing after a claim period: no entry came back
    sleep $CLAIM + 0.5;
    is((rd($t, 'XPENDING', $STREAM, $GROUP) // [ -1 ])->[0], 0,
        'poison entries: nothing pending after claim_idle');

    counters_are($c0, { consumed => 7, acked => 7, skipped => 7,
        deliveries => 0, failures => 0 }, 'poison entries');

    ok(error_log_has(qr/fanout: post \Q$ghost\E is gone, entry \Q$sid{ghost}\E acknowledged/),
        'poison: a post that does not exist is logged as gone');
    my @missing = grep {
        !error_log_has(qr/fanout: malformed stream entry \Q$sid{$_}\E acknowledged/)
    } grep { $_ ne 'ghost' } sort keys %sid;
    ok(!@missing, 'poison: each malformed entry logged with its id')
        or diag("not logged: @missing");

    my $c = copies($t, $ghost, @ACTIVE, $STAR);
    ok(all_n($c, 0), 'poison: the ghost post is in no cache')
        or diag(copies_summary($c));
    $c = copies($t, $SP[0], @ACTIVE, $STAR);
    ok(all_n($c, 1), 'poison: entries naming star post 1 changed nothing')
        or diag(copies_summary($c));
}

# ------------------------------------------- follow, unfollow and delete --

{
    my ($ann, $bob, $carl) = ('ann', 'bob', 'carl');

    my @c = map { scalar post($t, $carl, "carl $_", keep => \%POST) }
        1 .. 2;
    my @b = map { scalar post($t, $bob, "bob $_", keep => \%POST) } 1 .. 3;

    is($t->http('PUT', "/users/$ann/following/$carl")->{status}, 204,
        'graph: ann follows carl');
    read_all('graph: ann', $ann);
    my $r = $t->get("/users/$ann/timeline");
    is($r->{headers}{'x-feed-cache'}, 'HIT', 'graph: ann has a cache');

    # follow: the cache goes with the 204, the next read has bob's posts
    $r = $t->http('PUT', "/users/$ann/following/$bob");
    is($r->{status}, 204, 'follow: ann follows bob') or diag(short($r));
    is(rd($t, 'EXISTS', tl_key($ann)), 0,
        'follow: ann\'s cached timeline dropped before the 204');
    $r = $t->get("/users/$ann/timeline");
    my @ids = map { $_->{id} } @{$r->{json}{items} // []};
    is($r->{headers}{'x-feed-cache'}, 'MISS', 'follow: next read rebuilds');
    is("@ids", join(' ', sort { $b cmp $a } @b, @c),
        'follow: it shows bob\'s recent posts, with carl\'s');

    # bob's new post reaches ann's cache
    my $b4 = post($t, $bob, 'bob 4', keep => \%POST);
    ok($t->wait_for(3, sub { (copies($t, $b4, $ann) // {})->{$ann} == 1 }),
        'follow: bob\'s next post delivered into ann\'s cache');

    # unfollow: bob hidden in the cache in place (reason 'u', 16), the
    # next read, a hit, has none of bob's posts
    $r = $t->http('DELETE', "/users/$ann/following/$bob");
    is($r->{status}, 204, 'unfollow: ann unfollows bob') or diag(short($r));
    is(rd($t, 'HGET', "feed:tlf:{$ann}", $bob), 16,
        'unfollow: bob hidden in ann\'s cached timeline before the 204');
    $r = $t->get("/users/$ann/timeline");
    @ids = map { $_->{id} } @{$r->{json}{items} // []};
    like($r->{headers}{'x-feed-cache'}, $HIT, 'unfollow: next read a hit');
    is("@ids", join(' ', sort { $b cmp $a } @c),
        'unfollow: none of bob\'s posts, carl\'s still there');

    my $b5 = post($t, $bob, 'bob 5', keep => \%POST);
    wait_settled($t, 'unfollow: bob posts again');
    is((copies($t, $b5, $ann) // {})->{$ann}, 0,
        'unfollow: bob\'s new post not delivered to ann');
    $r = $t->get("/users/$ann/timeline");
    @ids = map { $_->{id} } @{$r->{json}{items} // []};
    ok($r->{headers}{'x-feed-cache'} eq 'HIT'
        && "@ids" eq join(' ', sort { $b cmp $a } @c),
        'unfollow: ann\'s cached read still without bob') or diag(short($r));

    # delete: reads never show it, fanout takes it out of every list
    my $gone = $SP[1];
    my @readers = ($ACTIVE[0], $ACTIVE[100], $STAR);
    $r = $t->http('DELETE', "/users/$STAR/posts/$gone");
    is($r->{status}, 204, 'delete: star deletes post 2') or diag(short($r));
    my @shown;
    for my $u (@readers) {
        my $x = $t->get("/users/$u/timeline");
        push @shown, "$u: " . short($x)
            if $x->{status} != 200 || $x->{body} =~ /\Q$gone\E/;
    }
    ok(!@shown, 'delete: no read shows it, right after the 204')
        or diag(join "\n", @shown);

    wait_settled($t, 'delete');
    my $cc = copies($t, $gone, @ACTIVE, $STAR);
    ok(all_n($cc, 0), 'delete: gone from all ' . scalar(keys %$cc)
        . ' cached lists after fanout') or diag(copies_summary($cc));
    $cc = copies($t, $SP[0], @ACTIVE, $STAR);
    ok(all_n($cc, 1), 'delete: the other posts stay')
        or diag(copies_summary($cc));
    is(rd($t, 'EXISTS', post_key($gone)), 0, 'delete: feed:p:<id> dropped');
    @SP = grep { $_ ne $gone } @SP;

    # a redelivered post entry of the deleted post does not bring it back
    rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $gone, 'author', $STAR,
        'ts', $POST{$gone}{ts});
    wait_settled($t, 'delete, then its post entry again');
    $cc = copies($t, $gone, @ACTIVE, $STAR);
    ok(all_n($cc, 0), 'delete: a late post entry of it delivers nothing')
        or diag(copies_summary($cc));

    # posted and deleted at once, 5 times: in no list once fanout is done
    my @quick;
    for my $i (1 .. 5) {
        my $id = post($t, $STAR, "short-lived $i", keep => \%POST)
            or next;
        my $d = $t->http('DELETE', "/users/$STAR/posts/$id");
        push @quick, $id if $d->{status} == 204;
    }
    is(scalar @quick, 5, 'delete at once: 5 posts created and deleted');
    wait_settled($t, 'delete at once');
    my @left;
    for my $id (@quick) {
        my $x = copies($t, $id, @ACTIVE, $STAR);
        push @left, "$id: " . copies_summary($x) unless all_n($x, 0);
    }
    ok(!@left, 'delete at once: none of them left in any cached list')
        or diag(join "\n", @left);
    my $x = $t->get("/users/$ACTIVE[0]/timeline");
    my @seen = grep { my $q = $_; $x->{body} =~ /\Q$q\E/ } @quick;
    ok($x->{status} == 200 && !@seen, 'delete at once: reads show none')
        or diag(short($x));

    # The same race, made certain: the post entry's consumer has read the
    # post and the author's counters, and waits for the follower page
    # (MongoDB at 500 ms a command, the three reads well within
    # feed_fanout_claim_idle) when the delete lands; MongoDB fast again,
    # the delete's entry is fanned out first, the post's delivery comes
    # after it.
    my $off = -s $t->dir . '/mongo-commands.log';
    $t->mongo_latency(500);
    my $t0 = time;
    my $id = post($t, $STAR, 'deleted while being fanned out',
        keep => \%POST);
    my $page = $t->wait_for(3, sub {
        grep { $_->{cmd} eq 'find' && ($_->{coll} // '') eq 'follows'
            && ref $_->{filter} eq 'HASH'
            && ($_->{filter}{dst} // '') eq $STAR } mongo_since($off);
    });
    $t->mongo_latency(0);
    ok($page, 'delete during fanout: the post\'s follower page is being '
        . 'read (MongoDB slow)');
    $r = $t->http('DELETE', "/users/$STAR/posts/$id");
    is($r->{status}, 204, 'delete during fanout: deleted')
        or diag(short($r));
    wait_settled($t, 'delete during fanout');
    sleep 0.2;
    my $dc = copies($t, $id, @ACTIVE, $STAR);
    ok(all_n($dc, 0), 'delete during fanout: the post is in no cached list '
        . 'once both entries are done') or diag(copies_summary($dc)
        . "\nstream: " . $JSON->encode(rd($t, 'XREVRANGE', $STREAM, '+', '-',
            'COUNT', 2)));
    $x = $t->get("/users/$ACTIVE[0]/timeline");
    ok($x->{status} == 200 && $x->{body} !~ /\Q$id\E/,
        'delete during fanout: reads do not show it') or diag(short($x));
}

# ------------------------------------------------------------------ status --

{
    my $st = statuses($t, verbose => 1);
    my @bad;
    for my $pid (sort keys %$st) {
        my $j = $st->{$pid};
        push @bad, "$pid: in_flight $j->{fanout}{in_flight}"
            if $j->{fanout}{in_flight};
        push @bad, "$pid: failures $j->{fanout}{failures}"
            if $j->{fanout}{failures};
        push @bad, "$pid: queue " . $JSON->encode($j->{queue})
            unless ($j->{queue}{pending} // -1) == 0
                && ($j->{queue}{lag_ms} // -1) == 0;
    }
    ok(!@bad, 'status at rest: nothing in flight, no failures, queue empty')
        or diag(join "\n", @bad);

    my $sum = counters();
    my $g = group_info($t) // {};
    is($sum->{consumed}, $g->{'entries-read'},
        'status: consumed summed over the workers = the group\'s '
        . 'entries-read') or diag($JSON->encode($sum));
    is($sum->{acked}, $sum->{consumed},
        'status: every consumed entry acknowledged');
    # consumers appear in XINFO CONSUMERS once they have read something
    # (Redis 7.0 creates none for a read blocked on an empty stream)
    my $host = lc Sys::Hostname::hostname();
    my %cons = map { my %h = @$_; ($h{name} => \%h) }
        @{rd($t, 'XINFO', 'CONSUMERS', $STREAM, $GROUP) // []};
    my @want = map { "$host:$_" } grep { $st->{$_}{fanout}{consumed} > 0 }
        keys %$st;
    my %cur = map { ("$host:$_" => 1) } keys %$st;
    my @stray = grep { !$cur{$_} } keys %cons;
    my @absent = grep { !$cons{$_} } @want;
    ok(!@stray && !@absent, 'XINFO CONSUMERS: each worker that consumed '
        . 'is a consumer "<host>:<pid>", no other consumer')
        or diag("consumers: @{[sort keys %cons]}; absent: @absent");
    my @busy = grep { $st->{$_}{fanout}{consumed} > 0 } keys %$st;
    ok(1, 'status: entries were consumed by ' . scalar(@busy)
        . ' of the 3 workers (' . join(', ', map {
            "$_: $st->{$_}{fanout}{consumed}" } sort keys %$st) . ')');
}

# ------------------------------------- reload during a large fanout --

# The follows go straight into the MongoDB stand-in's data file, in the
# module's schema (docs/storage.md), while it is stopped: through the API,
# 5,000 follows take about 100 s on the stand-in (each follow scans its
# collections).  Against a real MongoDB they are made through the API.
my $NBIG = $ENV{FANOUT_RELOAD_FOLLOWERS} || 5000;

sub seed_follows {
    my ($author, @followers) = @_;

    if (FeedTest::real_mongo()) {
        follow_all('reload', $author, @followers);
        return;
    }

    my $seed = $t->dir . '/seed';
    system('cc', FeedTest->root . '/bench/seed.c', '-o', $seed,
        split(' ', `pkg-config --cflags --libs libbson-1.0`)) == 0
        or die "cannot build bench/seed.c\n";

    $t->stop_mongo;
    system($seed, $t->dir . '/mongo-db/standin-data.bson', 'feed', $author,
        scalar @followers, 'b%04d') == 0 or die "seed failed\n";
    $t->start_mongo;

    ok($t->wait_for(10, sub { status_all_mongo() }),
        'reload: mongodb back with the seeded follows');
}

sub status_all_mongo {
    my $st = statuses($t, verbose => 1);
    return keys %$st && !grep { !$st->{$_}{mongo}{up} } keys %$st;
}

{
    my $big = 'big';
    my @bf = map { sprintf 'b%04d', $_ } 1 .. $NBIG;
    my @bact = @bf[map { int($_ * $NBIG / 500) } 0 .. 499];
    my %isact = map { $_ => 1 } @bact;
    my @bidle = grep { !$isact{$_} } @bf;

    my $t0 = time;
    seed_follows($big, @bf);
    my $tfollow = time - $t0;
    read_all('reload: 500 of the followers', @bact, $big);

    # MongoDB slowed down (300 ms a command): the fanout certainly in
    # flight when the old workers are told to quit
    my @old = sort { $a <=> $b } $t->worker_pids;
    $t->mongo_latency(300);
    my ($id) = post($t, $big, 'posted right before a reload',
        keep => \%POST);
    my $pend = [];
    $t->wait_for(1, sub {
        $pend = rd($t, 'XPENDING', $STREAM, $GROUP, '-', '+', 10) // [];
        @$pend;
    });
    my $holder = @$pend ? $pend->[0][1] : '(none)';
    $t->signal('nginx', 'HUP');
    my $thup = time;
    ok(@$pend == 1 && $holder =~ /:(\d+)\z/ && grep({ $_ == $1 } @old),
        "reload: the entry is in flight, held by an old worker ($holder), "
        . 'as SIGHUP is sent');
    $t->mongo_latency(0);

    # posts right after the HUP: whoever takes them, none is lost
    my @small;
    push @small, scalar post($t, $big, "after the reload $_",
        keep => \%POST) for 1 .. 3;

    my ($c, $when);
    $t->wait_for(2 + 8, sub {
        $c = copies($t, $id, @bact, $big);
        $when = time - $thup;
        $c && !grep { $_ < 1 } values %$c;
    });
    ok(all_n($c, 1), sprintf('reload: the post in all 500 caches and the '
        . 'author\'s (%.2fs after SIGHUP)', $when))
        or diag(copies_summary($c));

    ok($t->wait_for(15, sub {
        my %now = map { $_ => 1 } $t->worker_pids;
        keys %now == 3 && !grep { $now{$_} } @old;
    }), 'reload: the old workers exited, 3 new ones run');

    wait_settled($t, 'reload', 15);
    $c = copies($t, $id, @bact, $big);
    ok(all_n($c, 1), 'reload: exactly one copy in each')
        or diag(copies_summary($c));
    my @bad;
    for my $s (@small) {
        my $x = copies($t, $s, @bact, $big);
        push @bad, "$s: " . copies_summary($x) unless all_n($x, 1);
    }
    ok(!@bad, 'reload: the 3 posts sent during the reload: one copy in '
        . 'each cache') or diag(join "\n", @bad);
    is(exists_count(@bidle), 0, 'reload: no cache for the '
        . scalar(@bidle) . ' followers without one');

    # finished by the old worker, not left to be claimed by the new ones
    my $st = statuses($t, verbose => 1);
    my $claims = fsum($st, 'claims');
    is($claims, 0, 'reload: the old workers finished their entries in '
        . 'flight (no claims by the new workers)')
        or diag(join "\n", map { "$_: " . $JSON->encode($st->{$_}{fanout}) }
            sort keys %$st);
    my @stuck = grep { $_ } map { my %h = @$_; $h{pending} }
        @{rd($t, 'XINFO', 'CONSUMERS', $STREAM, $GROUP) // []};
    ok(!@stuck, 'reload: no consumer holds pending entries');

    my $r = $t->get("/users/$bact[0]/timeline");
    my @ids = map { $_->{id} } @{$r->{json}{items} // []};
    is("@ids", join(' ', reverse(@small), $id),
        'reload: a follower reads the 4 posts (' . ($r->{headers}{'x-feed-cache'} // '') . ')')
        or diag(short($r));

    ok(1, sprintf('reload: %d followers (follows created in %.1fs)',
        $NBIG, $tfollow));
}

# --------------------------------------------------- the cap, embed mode --

# small follower pages and delivery batches: many of each per entry
start_nginx('embed', 5,
    'feed_fanout_page 7; feed_fanout_deliver_batch 3;');

{
    my ($ca, $r) = ('capa', 'capr');
    is($t->http('PUT', "/users/$r/following/$ca")->{status}, 204,
        'cap: capr follows capa');
    my @old = map { scalar post($t, $ca, "cap old $_", keep => \%POST) }
        1 .. 8;
    read_all('cap', $r);
    my $l = rd($t, 'LRANGE', tl_key($r), 0, -1) // [];
    is(join(' ', map { entry_id($_) } @$l),
        join(' ', reverse @old[3 .. 7]),
        'cap: the rebuilt list holds the 5 newest, no end mark');

    my @new;
    for my $i (1 .. 3) {
        my $id = post($t, $ca, "cap new $i", keep => \%POST) or next;
        push @new, $id;
        $t->wait_for(3, sub { (copies($t, $id, $r) // {})->{$r} == 1 });
    }
    wait_settled($t, 'cap');
    $l = rd($t, 'LRANGE', tl_key($r), 0, -1) // [];
    my @want = (reverse(@new), reverse(@old[6, 7]));
    is(join(' ', map { entry_id($_) } @$l), join(' ', @want),
        'cap: 3 deliveries: still 5 entries, the newest first');

    my @bad;
    for my $e (@$l) {
        my $id = entry_id($e);
        my $d = eval { FeedTest::json_decode(entry_json($e)) };
        push @bad, "$id: '" . substr($e, 0, 100) . "'"
            unless $d && $POST{$id} && $JSON->encode($d) eq
                $JSON->encode($POST{$id});
    }
    ok(!@bad, 'cap: each embed entry is the id then the post as created')
        or diag(join "\n", @bad);

    # redelivered (the newest) and an old post (past the trimmed end)
    rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $new[-1], 'author', $ca,
        'ts', $POST{$new[-1]}{ts});
    rd($t, 'XADD', $STREAM, '*', 'type', 'post', 'id', $old[0], 'author', $ca,
        'ts', $POST{$old[0]}{ts});
    wait_settled($t, 'cap: redelivery');
    $l = rd($t, 'LRANGE', tl_key($r), 0, -1) // [];
    is(join(' ', map { entry_id($_) } @$l), join(' ', @want),
        'cap: a redelivery and an old post leave the list as it was');

    my $x = $t->get("/users/$r/timeline");
    my @ids = map { $_->{id} } @{$x->{json}{items} // []};
    ok($x->{status} == 200 && "@ids" eq
        join(' ', reverse(@new), reverse(@old)), 'cap: a read has every '
        . 'post, newest first (' . ($x->{headers}{'x-feed-cache'} // '')
        . ')') or diag(short($x));
}

# ------------------------------- follower pages of 7, batches of 3 --

{
    my $au = 'pager';
    my @pf = map { sprintf 'p%02d', $_ } 1 .. 60;
    my @pact = grep { $_ !~ /[05]\z/ } @pf;     # 48 of them
    my %isact = map { $_ => 1 } @pact;
    my @pidle = grep { !$isact{$_} } @pf;

    # followed concurrently: many relationships share a millisecond, so
    # the page cursor's tie-break (created, then src) matters
    follow_all('pages', $au, @pf);
    read_all('pages', @pact, $au);
    my $fl = $t->get("/users/$au/followers?limit=100");
    my %ms;
    $ms{$_->{since}}++ for @{$fl->{json}{items} // []};
    my $shared = grep { $_ > 1 } values %ms;
    ok(1, "pages: $shared milliseconds shared by several of the "
        . scalar(keys %ms) . ' follow times');

    my @ids;
    for my $i (1 .. 3) {
        my $id = post($t, $au, "paged $i", keep => \%POST) or next;
        push @ids, $id;
    }
    wait_settled($t, 'pages');
    my @bad;
    for my $id (@ids) {
        my $c = copies($t, $id, @pact, $au);
        push @bad, "$id: " . copies_summary($c) unless all_n($c, 1);
    }
    ok(!@bad, 'pages: 3 posts, each once in the 48 caches and the '
        . 'author\'s (9 pages of 7, batches of 3)') or diag(join "\n", @bad);
    is(exists_count(@pidle), 0, 'pages: no cache for the 12 others');

    my $r = $t->http('DELETE', "/users/$au/posts/$ids[1]");
    is($r->{status}, 204, 'pages: the second post deleted');
    wait_settled($t, 'pages: delete');
    my $c = copies($t, $ids[1], @pact, $au);
    ok(all_n($c, 0), 'pages: the delete reached every cache')
        or diag(copies_summary($c));
    $c = copies($t, $ids[2], @pact, $au);
    ok(all_n($c, 1), 'pages: the others stay') or diag(copies_summary($c));
}

ok(1, sprintf('fanout SLA: %s; total %.1fs', join(', ',
    map { sprintf('post %d %.3fs', $_, $SLA{$_}) } sort keys %SLA),
    time - $T0));

$t->done;
