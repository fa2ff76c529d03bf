#!/usr/bin/perl

# Local hits (issue 30): a worker answers a user's first page from its own
# copy with no Redis command while Redis's client-side caching vouches
# that none of the user's keys changed (X-Feed-Cache: LOCAL).  Two nginx
# nodes of two workers each on one Redis (node A through t/lib/tcp_proxy.pl
# in "hold" mode, node B straight) and one MongoDB stand-in, in
# feed_cache_mode link and embed, against a model of the pages:
#
#   - after warm-up, 40 first pages over a second answered LOCAL by both
#     workers, and Redis ran no command for them (INFO commandstats after
#     CONFIG RESETSTAT: nothing but the heartbeats' PUBLISH, at their
#     rate, and the fanout's XREADGROUP, XAUTOCLAIM, XINFO CONSUMERS; up
#     to 3 windows, each with one EVALSHA per read that was not LOCAL);
#     /status answered_without_redis and /metrics feed_local_hits_total,
#     feed_timeline_reads_total{cache="LOCAL"} count them;
#   - each kind of change, made while both workers answer LOCAL: every read
#     shows it within 300 ms (a delete: every read after its 204, on both
#     workers), no worker shows the page before it again once it showed
#     the change, and LOCAL answers resume, right: a post of a followed
#     author (fanned out), a delete, a follow, an unfollow, a block, a
#     mute, a hidden post, the read marker moved (X-Feed-Unread), a pull
#     author's post, and a delete of it after its list went;
#   - faults: a reload (new workers answer right, LOCAL again); the watch's
#     connection killed (CLIENT KILL TYPE pubsub: a post right after it
#     shown within 300 ms); the subscription stalled (the proxy holds
#     Redis's bytes to it: a post right after the stall shown within
#     300 ms, no LOCAL answer once 300 ms passed, a post hidden then shown
#     at once); CLIENT PAUSE WRITE (the heartbeat's PUBLISH held: no LOCAL
#     answer past 300 ms, pages right); FLUSHALL with a follow written
#     straight into MongoDB (the null invalidation: the rebuilt page
#     within 300 ms); Redis restarted with a follow written into MongoDB
#     while it was down (no copy of before once the workers reconnected,
#     LOCAL again, a post shown within 300 ms);
#   - tracking-table-max-keys 10 with 30 readers each answered LOCAL by
#     both workers in turn: Redis evicts their tracked keys (invalidations),
#     a pull author's post reaches every page, and then a post each hides
#     (keys Redis no longer tracks) is gone from every page;
#   - two nodes (B without fanout): a post and a delete made through node
#     A seen on node B's hits within 300 ms, the delete never after A's
#     204; node A's workers stopped (SIGSTOP: no list changes), a delete
#     made through B never on B's hits after its 204 (feed:dlc);
#   - the TTL (link mode, a reload with feed_cache_ttl 4s: the refresh
#     interval 1 s): a reader read only by hits for 6 s never gets a MISS,
#     mostly LOCAL, and the list's PTTL stays above 1 s;
#   - feed_cache_tracking off (a reload): no LOCAL answer, an EVALSHA per
#     read and no CLIENT CACHING, a post shown within 300 ms;
#   - neither node logs an [alert] (FeedTest::finish).
#
# A post's bound runs from when it is in Redis (in the reader's list, or
# in its author's pull list), itself a test of its own (500 ms of the
# 201): the local hits cannot show a post the fanout has not delivered.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use JSON::PP ();
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short summary tl_page_problems tl_ids post
    follow_each none_failed statuses wait_settled rd
    metrics_scrape metrics_val);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $T0 = time;
my $JSON = JSON::PP->new->utf8->canonical;

my $t = FeedTest->new;      # node A, Redis through the hold proxy
my $u = FeedTest->new;      # node B, Redis straight

$t->start_redis;
$t->start_mongo;
my $PROXY = 'redishold';
$t->start_proxy($PROXY, $t->port('redis'), 0, 'hold');
$t->port('http');
$u->set_port($_, $t->port($_)) for qw(redis mongo);
$u->port('http') == $_ and die "port taken twice\n" for values %{$t->{ports}};

my $LIMIT = 20;
my $BOUND = 0.3;

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS_NODE%%;
    feed_redis_timeout 3s;
    %%FEED_MONGO%%
    feed_mongo_timeout 3s;
    feed_cache_mode %%MODE%%;
    feed_cache_ttl %%TTL%%;
    feed_fanout %%FANOUT%%;
    feed_fanout_block 200ms;
    feed_fanout_claim_idle 2s;
    feed_pull_threshold 3;
    %%MORE%%

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)$ { feed_block $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/hidden/([^/]+)$ { feed_hide $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
        location ~ ^/users/([^/]+)/timeline/unread$ {
            feed_timeline_unread $1;
            feed_timeline_fallback /_feed/timeline;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache $feed_cache_status always;
            add_header X-Worker $pid always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
    }
}
EOF

sub conf {
    my ($mode, $redis, $ttl, $more, $fanout) = @_;
    (my $c = $CONF) =~ s/%%MODE%%/$mode/;
    $c =~ s/%%FANOUT%%/$fanout || 'on'/e;
    $c =~ s/%%MORE%%/$more || ''/e;
    $c =~ s/%%TTL%%/$ttl || '7d'/e;
    $c =~ s/%%PORT_REDIS_NODE%%/%%PORT_\U$redis\E%%/;
    return $c;
}

# ----------------------------------------------------------------- model --

my %FOL;    # user => { followee => 1 }
my %BY;     # author => [ post ids ]
my %DEL;    # post id => 1 once deleted
my %HID;    # user => { post id => 1 }
my %FILT;   # user => { author => 1 }: blocked or muted
my %MARK;   # user => the read marker's post id

sub visible {
    my ($r) = @_;
    return sort { $b cmp $a } grep { !$DEL{$_} && !$HID{$r}{$_} }
        map { @{ $BY{$_} || [] } } grep { !$FILT{$r}{$_} }
        $r, keys %{ $FOL{$r} || {} };
}

sub want_ids {
    my @v = visible($_[0]);
    splice(@v, $LIMIT) if @v > $LIMIT;
    return join ' ', @v;
}

sub want_unread {
    my ($r) = @_;
    return 'none' unless $MARK{$r};
    return scalar grep { $_ gt $MARK{$r} } visible($r);
}

sub want { want_ids($_[0]) . ' | unread ' . want_unread($_[0]) }

sub mypost {
    my ($node, $au, $body) = @_;
    my $id = post($node, $au, $body) or return;
    push @{ $BY{$au} }, $id;
    return $id;
}

# --------------------------------------------------------------- reads --

# $n reads of $r's first page at once on $node: records of each
sub reads {
    my ($node, $r, $n) = @_;
    my @h = map { $node->http_start('GET', "/users/$r/timeline?limit=$LIMIT")
        } 1 .. ($n || 1);
    return map {
        my $start = $_->{start};
        my $res = $node->http_end($_);
        my @p = tl_page_problems($res, $r, $LIMIT);
        {
            start => $start, end => time, problems => join('; ', @p),
            ids => join(' ', @{ tl_ids($res) }),
            unread => $res->{headers}{'x-feed-unread'} // 'none',
            cache => $res->{headers}{'x-feed-cache'} // '',
            worker => $res->{headers}{'x-worker'} // '',
        }
    } @h;
}

sub got { "$_[0]{ids} | unread $_[0]{unread}" }

# what is wrong with a read, '' when it is as the model has it; $lax: a
# missing X-Feed-Unread is right too (the marker's copy being made again)
sub wrong {
    my ($x, $r, $lax) = @_;
    return $x->{problems} if $x->{problems};
    my $w = want($r);
    return '' if got($x) eq $w;
    return '' if $lax && $x->{unread} eq 'none' && $x->{ids} eq want_ids($r);
    return sprintf('%s: %s', $x->{cache}, $x->{ids} ne want_ids($r)
        ? summary([ split / /, $x->{ids} ], [ split / /, want_ids($r) ])
        : "X-Feed-Unread $x->{unread}, want " . want_unread($r));
}

# reads on $node until both its workers answered LOCAL (each right); a test
sub warm {
    my ($node, $r, $name, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my (%local, %cache, @bad, $n);
    my $end = time + ($o{secs} || 5);
    while (time < $end && keys %local < 2) {
        for my $x (reads($node, $r, 2)) {
            $n++;
            $cache{ $x->{cache} }++;
            my $w = wrong($x, $r, $o{lax});
            push @bad, $w if $w;
            $local{ $x->{worker} }++ if $x->{cache} eq 'LOCAL';
        }
    }
    ok(keys %local == 2 && !@bad, "$name: LOCAL answers from both workers "
        . "($n reads, each right: " . join(', ', map { "$_ $cache{$_}" }
        sort keys %cache) . ')')
        or diag(@bad ? scalar(@bad) . " wrong, first: $bad[0]"
            : 'LOCAL from ' . join(' ', keys %local));
}

# $n reads on $node, each right; a test
sub pages_ok {
    my ($node, $r, $name, $n, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = grep { $_ } map { wrong($_, $r, $o{lax}) }
        map { reads($node, $r, 2) } 1 .. ($n || 4) / 2;
    ok(!@bad, "$name: " . ($n || 4) . ' first pages as the model has them')
        or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

# A change, made by $do (which updates the model) while $node's workers
# answer $r's page LOCAL; reads on $node from then on for $o{poll}
# seconds, two at a time: a test that each shows the page before or the
# one after, none the page before when sent more than $BOUND after the
# change (at_once: at all), no worker the page before once it showed the
# one after, and at least one the one after; then LOCAL again, right.
sub change_is {
    my ($name, $r, $do, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $node = $o{node} || $t;
    my ($before, $before_ids) = (want($r), want_ids($r));
    warm($node, $r, "$name, before", lax => $o{lax}) unless $o{cold};
    my $made = $do->() or return fail("$name: the change made");
    my $t0 = time;
    my $after = want($r);
    isnt($after, $before, "$name: the change changes the page");

    # a post is in Redis once fanned out, or in its author's pull list:
    # the bound runs from then, and the fanout's delay has its own test
    my ($landed, @recs) = ($o{landed} ? undef : 0);
    while (time - $t0 < ($o{poll} || 0.8)) {
        push @recs, reads($node, $r, 2);
        $landed = time - $t0
            if !defined $landed && $o{landed}->($made);
    }
    if ($o{landed}) {
        ok(defined $landed && $landed <= 0.5, sprintf('%s: in Redis within '
            . '500 ms of the 201 (%s)', $name, defined $landed
            ? sprintf('%.3fs', $landed) : 'not within ' . ($o{poll}
            || 0.8) . 's'));
        $landed //= 0;
    }

    my (%new_at, %workers, %cache, @bad, $first);
    for my $x (sort { $a->{end} <=> $b->{end} } @recs) {
        my $s = $x->{start} - $t0;
        my $g = got($x);
        $workers{ $x->{worker} }++;
        $cache{ $x->{cache} }++;
        my $lax = $o{lax} && $x->{unread} eq 'none';
        if ($x->{problems}) {
            push @bad, $x->{problems};
        } elsif ($g eq $after || ($lax && $x->{ids} eq want_ids($r))) {
            $new_at{ $x->{worker} } //= $x->{end};
            $first //= $x->{end} - $t0;
        } elsif ($g eq $before || ($lax && $x->{ids} eq $before_ids)) {
            push @bad, sprintf('the page before, %s, sent at %.3fs%s',
                $x->{cache}, $s, $o{at_once} ? ''
                : sprintf(' (in Redis at %.3fs, bound %s)', $landed, $BOUND))
                if $o{at_once} || $s > $landed + $BOUND;
            push @bad, sprintf('the page before again on worker %s, %s, '
                . 'sent at %.3fs', $x->{worker}, $x->{cache}, $s)
                if $new_at{ $x->{worker} }
                    && $x->{start} > $new_at{ $x->{worker} };
        } else {
            push @bad, sprintf('neither page, sent at %.3fs: %s', $s,
                wrong($x, $r));
        }
        push @bad, sprintf('LOCAL, sent at %.3fs', $s)
            if $o{no_local_after} && $x->{cache} eq 'LOCAL'
                && $x->{start} > $o{no_local_after};
    }
    ok(!@bad && defined $first && keys %workers == 2, sprintf('%s: every '
        . 'read shows it %s, never the page before once it showed (%d reads '
        . 'on 2 workers: %s; first at %s)', $name, $o{at_once}
        ? 'at once' : sprintf('within %d ms', $BOUND * 1000), scalar @recs,
        join(', ', map { "$_ $cache{$_}" } sort keys %cache),
        defined $first ? sprintf('%.3fs', $first) : 'never'))
        or diag(join "\n", 'workers: ' . join(' ', keys %workers),
            @bad[0 .. ($#bad > 5 ? 5 : $#bad)], "want $after",
            "before $before");
    warm($node, $r, "$name, after", lax => $o{lax}) unless $o{no_warm};
}

sub status_of { my $j = $_[0]->get('/status', timeout => 5)->{json};
    ref $j eq 'HASH' ? $j : {} }

# both workers of $node up, their watches subscribed and heard
sub watching {
    my ($node) = @_;
    my $st = statuses($node);
    return keys %$st == 2 && !grep {
        !($_->{redis}{up} && $_->{mongo}{up} && $_->{fanout}{reading}
            && $_->{pull}{watch}{subscribed}
            && ($_->{pull}{watch}{heard_ms_ago} // -1) >= 0)
    } values %$st;
}

# a sum over the workers of $node
sub wsum {
    my ($node, $get) = @_;
    my $s = 0;
    $s += $get->($_) // 0 for values %{ statuses($node) };
    return $s;
}

# calls of each Redis command since the last CONFIG RESETSTAT
sub calls {
    my %c;
    for (split /\r?\n/, $t->redis('INFO', 'commandstats')) {
        $c{$1} = $2 if /^cmdstat_(\S+):calls=(\d+)/;
    }
    return \%c;
}

sub http_ok {
    my ($node, $method, $uri, $want, $body) = @_;
    my $r = $node->http($method, $uri, defined $body ? (body => $body,
        headers => { 'Content-Type' => 'application/json' }) : ());
    return 1 if $r->{status} == $want;
    diag("$method $uri: " . short($r));
    return 0;
}

# a post by $au as a change of $r's page (change_is), made right after
# $o{first}->(): in Redis once in $r's list, or in the pull list of its
# author ($o{pull})
sub post_is {
    my ($name, $r, $au, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $key = $o{pull} ? "feed:pl:{$au}" : "feed:tl:{$r}";
    change_is($name, $r, sub {
        return if $o{first} && !$o{first}->();
        mypost($t, $au, $name) }, %o,
        landed => sub {
            my $l = rd($t, 'LRANGE', $key, 0, 9);
            ref $l eq 'ARRAY' && grep { entry_id($_) eq $_[0] } @$l;
        });
}

# each reader's page read until both workers answered LOCAL, reader after
# reader: with a small tracking table, the reads of the next ones evict
# the keys of those before from it; a test
sub warm_all {
    my ($name, @U) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my (@bad, %c, @cold);
    for my $v (@U) {
        my %local;
        my $end = time + 3;
        while (keys %local < 2 && time < $end) {
            for my $x (reads($t, $v, 2)) {
                $c{ $x->{cache} }++;
                my $w = wrong($x, $v);
                push @bad, "$v: $w" if $w;
                $local{ $x->{worker} } = 1 if $x->{cache} eq 'LOCAL';
            }
        }
        push @cold, $v if keys %local < 2;
    }
    ok(!@bad && !@cold, "$name: each of " . scalar(@U) . ' readers\' pages '
        . 'answered LOCAL by both workers, right (' . join(', ', map {
        "$_ $c{$_}" } sort keys %c) . ')')
        or diag(@bad ? scalar(@bad) . " wrong, first: $bad[0]"
            : "not LOCAL on both: @cold");
}

# two reads of each reader's page, each right; a test
sub all_right {
    my ($name, @U) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my (@bad, %c);
    for my $v (@U) {
        for my $x (reads($t, $v, 2)) {
            $c{ $x->{cache} }++;
            my $w = wrong($x, $v);
            push @bad, "$v: $w" if $w;
        }
    }
    ok(!@bad, "$name (" . join(', ', map { "$_ $c{$_}" } sort keys %c)
        . ')') or diag(scalar(@bad) . " wrong, first: $bad[0]");
}

# the marker's copy gone from Redis (FLUSHALL, a restart): first pages
# leave X-Feed-Unread out until an unread count reads MongoDB and fills
# the copy back (t/timeline_unread.t); a test that it is back
sub refill {
    my ($node, $r, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $c = $node->get("/users/$r/timeline/unread");
    my $want = want_unread($r);
    ok($c->{status} == 200 && ($c->{json}{count} // -1) == $want
        && $node->wait_for(3, sub {
            !grep { wrong($_, $r) } reads($node, $r, 2) }),
        "$name: an unread count ($want), then X-Feed-Unread on first pages")
        or diag(short($c));
}

sub start_node {
    my ($node, $mode, $redis, $name) = @_;
    $node->write_conf(conf($mode, $redis))->run;
    ok($node->wait_for(10, sub { watching($node) }), "$name: both workers "
        . 'up, reading, their watches subscribed');
}

# ---------------------------------------------------------- per mode --

for my $mode (qw(link embed)) {
    my $m = substr $mode, 0, 1;
    my ($R, $A, $B, $C, $D, $E, $F, $P) = map { "$m$_" }
        qw(reader a b c d e f pull);
    my @X = map { "$m-x$_" } 1 .. 2;

    $t->stop if $mode ne 'link';
    eval { $t->redis('FLUSHALL') };
    start_node($t, $mode, $PROXY, "$mode: node A");

    # ------------------------------------------------------------ setup --

    none_failed([ follow_each($t, $_, $R) ], "$mode: setup: $R follows $_")
        for $A, $B, $C, $P;
    none_failed([ follow_each($t, $P, @X) ], "$mode: setup: 3 follow $P");
    $FOL{$R}{$_} = 1 for $A, $B, $C, $P;
    for my $au ($A, $B, $C, $D, $E, $F, $P) {
        mypost($t, $au, "$au $_") for 1 .. 2;
    }
    wait_settled($t, "$mode: setup");
    ok(rd($t, 'EXISTS', "feed:pl:{$P}"), "$mode: setup: $P is a pull "
        . 'author (feed:pl)');
    pages_ok($t, $R, "$mode: setup", 4);

    # ------------------------------------------------- 1. zero commands --

    {
        my $name = "$mode: zero commands";
        my $m0 = metrics_scrape($t);
        my $st0 = wsum($t, sub { $_[0]{local_pages}{answered_without_redis} });
        warm($t, $R, $name);

        # 40 reads over a second, up to 3 times until none made a round
        # trip (a heartbeat late on a busy machine stops the vouching):
        # each round trip is one EVALSHA, a LOCAL answer none
        my (@wins, @bad, $c, $dt, @recs, @round);
        for my $try (1 .. 3) {
            $t->redis('CONFIG', 'RESETSTAT');
            my $c0 = time;
            @recs = map { sleep 0.05; reads($t, $R, 2) } 1 .. 20;
            $dt = time - $c0;
            $c = calls();
            push @bad, grep { $_ } map { wrong($_, $R) } @recs;
            @round = grep { $_->{cache} ne 'LOCAL' } @recs;
            push @wins, [ scalar @round, ($c->{evalsha} // 0)
                + ($c->{eval} // 0), join(' ', map { sprintf '%.2fs %s',
                $_->{start} - $c0, $_->{cache} } @round) ];
            last unless @round;
            diag("$name: window $try: " . scalar(@round) . ' round trips '
                . "($wins[-1][2]), watches: " . $JSON->encode({ map {
                $_->{pid} => $_->{pull}{watch} } values %{ statuses($t) } }));
        }
        my %w = map { $_->{worker} => 1 } @recs;
        ok(!@bad && !@round && keys %w == 2, "$name: 40 reads over "
            . sprintf('%.2fs, LOCAL from both workers, each right (window '
            . '%d)', $dt, scalar @wins)) or diag(@bad ? "wrong: $bad[0]"
                : join("\n", map { "round trips: @$_" } @wins));
        ok(!grep({ $_->[0] != $_->[1] } @wins), "$name: as many EVALSHA as "
            . 'round trips in each window (' . join(', ', map {
            "$_->[1]/$_->[0]" } @wins) . ')');

        # the fanout's blocked XREADGROUP, its claims and its consumers'
        # check, and the heartbeats are the workers' own, whatever the
        # reads
        my %bg = map { $_ => 1 } qw(publish xreadgroup xautoclaim
            xinfo|consumers config|resetstat info);
        my @other = grep { !$bg{$_} && $c->{$_} } sort keys %$c;
        ok(!@other, sprintf('%s: Redis ran no command for them (INFO '
            . 'commandstats: no EVALSHA, no CLIENT, no other command than '
            . '%s)', $name, join(', ', sort keys %bg)))
            or diag($JSON->encode($c));
        my $beats = 2 * ($dt / 0.1 + 2);
        ok(($c->{publish} // 0) >= 1 && $c->{publish} <= $beats, "$name: "
            . "PUBLISH at the heartbeats' rate (1 <= "
            . ($c->{publish} // 0) . sprintf(' <= %.0f)', $beats));

        my $st1 = wsum($t, sub { $_[0]{local_pages}{answered_without_redis} });
        ok($st1 - $st0 >= 40, "$name: /status answered_without_redis over "
            . "both workers +" . ($st1 - $st0) . ' (>= 40)');
        my $m1 = metrics_scrape($t);
        my $h0 = metrics_val($m0, 'feed_local_hits_total') // -1e9;
        my $h1 = metrics_val($m1, 'feed_local_hits_total') // 0;
        my $l0 = metrics_val($m0, 'feed_timeline_reads_total',
            cache => 'LOCAL') // -1e9;
        my $l1 = metrics_val($m1, 'feed_timeline_reads_total',
            cache => 'LOCAL') // 0;
        ok($h1 - $h0 >= 40 && $l1 - $l0 >= 40, "$name: /metrics "
            . 'feed_local_hits_total and feed_timeline_reads_total'
            . '{cache="LOCAL"} +40 at least (' . ($h1 - $h0) . ', '
            . ($l1 - $l0) . ')') or diag($m1->{error} // '');
    }

    # ----------------------------------------------- 2. every change --

    post_is("$mode: a post of $A", $R, $A);

    {
        my $gone = $BY{$A}[-1];
        change_is("$mode: a delete", $R, sub {
            http_ok($t, 'DELETE', "/users/$A/posts/$gone", 204)
                and $DEL{$gone} = 1 }, at_once => 1);
    }

    change_is("$mode: a follow of $D", $R, sub {
        http_ok($t, 'PUT', "/users/$R/following/$D", 204)
            and $FOL{$R}{$D} = 1 });

    change_is("$mode: an unfollow of $D", $R, sub {
        http_ok($t, 'DELETE', "/users/$R/following/$D", 204)
            and delete $FOL{$R}{$D} });

    # a block ends the follow
    change_is("$mode: a block of $C", $R, sub {
        http_ok($t, 'PUT', "/users/$R/blocks/$C", 204)
            and delete $FOL{$R}{$C} });

    change_is("$mode: a mute of $B", $R, sub {
        http_ok($t, 'PUT', "/users/$R/mutes/$B", 204)
            and $FILT{$R}{$B} = 1 });

    change_is("$mode: an unmute of $B", $R, sub {
        http_ok($t, 'DELETE', "/users/$R/mutes/$B", 204)
            and delete $FILT{$R}{$B} });

    {
        my $h = $BY{$B}[-1];
        change_is("$mode: a hidden post", $R, sub {
            http_ok($t, 'PUT', "/users/$R/hidden/$h", 204)
                and $HID{$R}{$h} = 1 });
    }

    {
        my @v = visible($R);
        change_is("$mode: a read marker", $R, sub {
            http_ok($t, 'PUT', "/users/$R/timeline/marker", 200,
                $JSON->encode({ last_read_id => $v[3] }))
                and $MARK{$R} = $v[3] });
        change_is("$mode: the read marker moved", $R, sub {
            http_ok($t, 'PUT', "/users/$R/timeline/marker", 200,
                $JSON->encode({ last_read_id => $v[1] }))
                and $MARK{$R} = $v[1] });
    }

    post_is("$mode: a post of $A with a marker", $R, $A);

    post_is("$mode: a post of pull author $P", $R, $P, pull => 1);
    ok(rd($t, 'EXISTS', "feed:pl:{$P}"), "$mode: $P still pull");

    # the pull author's list gone (expired, evicted), then a post of
    # theirs deleted: taken out of no list
    {
        my $gone = $BY{$P}[-1];
        change_is("$mode: a delete while the author's list is gone", $R,
            sub {
                $t->redis('DEL', "feed:pl:{$P}", "feed:pv:{$P}");
                http_ok($t, 'DELETE', "/users/$P/posts/$gone", 204)
                    and $DEL{$gone} = 1;
            }, at_once => 1);
    }

    # ------------------------------------------------------ 3. faults --

    {
        my $name = "$mode: reload";
        warm($t, $R, "$name, before");
        ok($t->reload(15), "$name: new workers, the old ones gone");
        ok($t->wait_for(10, sub { watching($t) }), "$name: new workers "
            . 'up, subscribed');
        pages_ok($t, $R, $name, 4);
        post_is("$name: a post", $R, $A);
    }

    post_is("$mode: watch killed", $R, $A, first => sub {
        my $k = $t->redis('CLIENT', 'KILL', 'TYPE', 'pubsub');
        diag("$mode: CLIENT KILL TYPE pubsub killed $k, want 2") if $k != 2;
        $k == 2 });
    ok($t->wait_for(5, sub { watching($t) }), "$mode: watch killed: "
        . 'subscribed again');

    {
        my $name = "$mode: subscription stalled";
        warm($t, $R, "$name, before");
        my $pg = $t->pid($PROXY);
        kill 'USR1', -$pg;
        my $held = time;
        my $quiet = $held + $BOUND + 0.02;

        # its invalidation held: the copies are answered until the last
        # heartbeat heard is 300 ms old, no longer
        post_is("$name: a post right after", $R, $A, cold => 1,
            no_warm => 1, no_local_after => $quiet);

        # nothing vouched for any more: a change shown at once
        sleep $quiet - time if $quiet > time;
        my $h = $BY{$A}[-1];
        change_is("$name: a post hidden 300 ms on", $R, sub {
            http_ok($t, 'PUT', "/users/$R/hidden/$h", 204)
                and $HID{$R}{$h} = 1 }, cold => 1, no_warm => 1,
            at_once => 1, no_local_after => $quiet);
        pages_ok($t, $R, "$name, still", 4);
        kill 'USR2', -$pg;
        warm($t, $R, "$name, relayed again");
    }

    {
        my $name = "$mode: CLIENT PAUSE WRITE";
        warm($t, $R, "$name, before");
        $t->redis('CLIENT', 'PAUSE', 1500, 'WRITE');
        my $p0 = time;
        sleep 0.35;
        my @recs = reads($t, $R, 6);
        my @bad = grep { $_ } map { wrong($_, $R) } @recs;
        my @local = grep { $_->{cache} eq 'LOCAL' } @recs;
        ok(!@bad && !@local, "$name: 6 reads sent 350 ms into the pause, "
            . 'none LOCAL, each right (' . join(' ', map { $_->{cache} }
            @recs) . sprintf(', answered at %.2fs)', $recs[-1]{end} - $p0))
            or diag(@bad ? "wrong: $bad[0]" : scalar(@local) . ' LOCAL');
        $t->wait_for(3, sub { time - $p0 > 1.6 });
        warm($t, $R, "$name, over");
    }

    {
        # a follow of $E written straight into MongoDB: Redis does not
        # know it; FLUSHALL makes every page be rebuilt with it
        my $name = "$mode: FLUSHALL";
        my $now = int(time * 1000);
        change_is($name, $R, sub {
            $t->mongo_insert('follows', sprintf('{"src": "%s", "dst": "%s",'
                . ' "status": 1, "created": {"$date": {"$numberLong": '
                . '"%d"}}}', $R, $E, $now));
            $FOL{$R}{$E} = 1;
            $t->redis('FLUSHALL');
            1;
        }, lax => 1);
        refill($t, $R, $name);
    }

    {
        my $name = "$mode: redis restart";
        # a follow of $F written into MongoDB while Redis is down: the
        # pages rebuilt once it is back have it; no copy of before is
        # answered once the workers connected again
        change_is($name, $R, sub {
            $t->stop_redis;
            $t->mongo_insert('follows', sprintf('{"src": "%s", "dst": "%s",'
                . ' "status": 1, "created": {"$date": {"$numberLong": '
                . '"%d"}}}', $R, $F, int(time * 1000)));
            $FOL{$R}{$F} = 1;
            $t->start_redis;
            ok($t->wait_for(10, sub { watching($t) }), "$name: "
                . 'reconnected, subscribed');
        }, at_once => 1, lax => 1);
        refill($t, $R, $name);
        post_is("$name, a post", $R, $A);
    }

    # ---------------------------------- 6. a small tracking table --

    {
        my $name = "$mode: tracking-table-max-keys 10";
        my $au = "$m-many";
        my @U = map { "$m-u$_" } 1 .. 30;
        none_failed([ follow_each($t, $au, @U) ], "$name: 30 follow $au");
        $FOL{$_}{$au} = 1 for @U;
        mypost($t, $au, "$au $_") for 1 .. 2;
        wait_settled($t, $name);
        $t->redis('CONFIG', 'SET', 'tracking-table-max-keys', 10);
        my $inv0 = wsum($t, sub { $_[0]{pull}{watch}{invalidations} });

        warm_all($name, @U);
        my $inv1 = wsum($t, sub { $_[0]{pull}{watch}{invalidations} });
        ok($inv1 - $inv0 >= 20, "$name: Redis evicted tracked keys "
            . '(invalidations +' . ($inv1 - $inv0) . ')');

        # 30 followers: $au is a pull author since its first post, and
        # its post is heard of on feed:pvc
        ok(rd($t, 'EXISTS', "feed:pl:{$au}"), "$name: $au is a pull author");
        mypost($t, $au, "$au, to all");
        wait_settled($t, $name);
        sleep $BOUND;
        all_right("$name: the pull author's post on all 30 readers' pages",
            @U);

        # every copy answered by both workers, most readers' keys evicted
        # since: each reader hides that post, a change of keys Redis tells
        # no one of once it evicted them (the copy no longer vouched for)
        warm_all("$name, again", @U);
        my $id = $BY{$au}[-1];
        my @hid = grep { !http_ok($t, 'PUT', "/users/$_/hidden/$id", 204) }
            @U;
        ok(!@hid, "$name: each reader hides the post") or diag("@hid");
        $HID{$_}{$id} = 1 for @U;
        sleep $BOUND;
        all_right("$name: the hidden post gone from all 30 pages", @U);
        $t->redis('CONFIG', 'SET', 'tracking-table-max-keys', 1000000);
    }

    # ------------------------------------------------- 5. two nodes --

    {
        my $name = "$mode: two nodes";
        $u->stop;

        # node B does no fanout: node A's workers write every list
        $u->write_conf(conf($mode, 'redis', undef, undef, 'off'))->run;
        ok($u->wait_for(10, sub {
            my $st = statuses($u);
            keys %$st == 2 && !grep { !($_->{redis}{up}
                && $_->{pull}{watch}{subscribed}) } values %$st;
        }), "$name: node B (no fanout): both workers up, subscribed");
        pages_ok($u, $R, "$name: node B", 4);
        post_is("$name: a post through A, read on B", $R, $A, node => $u);
        my $gone = $BY{$A}[-1];
        change_is("$name: a delete through A, read on B", $R, sub {
            http_ok($t, 'DELETE', "/users/$A/posts/$gone", 204)
                and $DEL{$gone} = 1 }, node => $u, at_once => 1);

        # node A's workers stopped: a delete made through B is taken out
        # of no list; only its word on feed:dlc keeps B's copies from
        # showing it after the 204
        post_is("$name: another post through A, read on B", $R, $A,
            node => $u);
        $gone = $BY{$A}[-1];
        my @wa = $t->worker_pids;
        change_is("$name: node A stopped, a delete through B", $R, sub {
            kill 'STOP', @wa;
            http_ok($u, 'DELETE', "/users/$A/posts/$gone", 204)
                and $DEL{$gone} = 1 }, node => $u, at_once => 1);
        kill 'CONT', @wa;
        ok($t->wait_for(10, sub { watching($t) }), "$name: node A's "
            . 'workers again');
        pages_ok($t, $R, "$name: node A", 4);
        $u->stop;
    }

    # ------------------------------------------------------------- 4. TTL --

    if ($mode eq 'link') {
        my $name = "$mode: TTL";
        my $R = 'ttl-reader';
        $t->write_conf(conf('link', $PROXY, '4s'));
        ok($t->reload(15), "$name: reloaded with feed_cache_ttl 4s");
        ok($t->wait_for(10, sub { watching($t) }), "$name: workers up");
        none_failed([ follow_each($t, 'ttl-a', $R) ], "$name: follow");
        $FOL{$R}{'ttl-a'} = 1;
        mypost($t, 'ttl-a', "ttl $_") for 1 .. 3;
        wait_settled($t, $name);
        warm($t, $R, $name);
        my (%c, @bad, $ttl_min);
        my $end = time + 6;
        while (time < $end) {
            for my $x (reads($t, $R, 2)) {
                $c{ $x->{cache} }++;
                my $w = wrong($x, $R);
                push @bad, $w if $w;
            }
            my $ttl = rd($t, 'PTTL', "feed:tl:{$R}") // -3;
            $ttl_min = $ttl if !defined $ttl_min || $ttl < $ttl_min;
            sleep 0.05;
        }
        ok(!@bad && !$c{MISS} && $c{LOCAL} && $ttl_min > 1000, "$name: 6 s "
            . 'of reads, each right, no MISS, the list\'s TTL kept above 1 s ('
            . join(', ', map { "$_ $c{$_}" } sort keys %c)
            . ", least PTTL $ttl_min ms)")
            or diag(@bad ? "wrong: $bad[0]" : '');
        ok(($c{LOCAL} // 0) > 3 * ($c{HIT} // 0), "$name: mostly LOCAL");
    }

    # ------------------------------------------ feed_cache_tracking off --

    if ($mode eq 'link') {
        my $name = "$mode: feed_cache_tracking off";
        $t->write_conf(conf($mode, $PROXY, undef, 'feed_cache_tracking off;'));
        ok($t->reload(15), "$name: reloaded");
        ok($t->wait_for(10, sub { watching($t) }), "$name: workers up");
        my @recs = map { reads($t, $R, 2) } 1 .. 15;
        my @bad = grep { $_ } map { wrong($_, $R) } @recs;
        my %c;
        $c{ $_->{cache} }++ for @recs;
        ok(!@bad && !$c{LOCAL} && $c{HIT}, "$name: 30 reads, none LOCAL, "
            . 'each right (' . join(', ', map { "$_ $c{$_}" } sort keys %c)
            . ')') or diag(@bad ? "wrong: $bad[0]" : '');
        $t->redis('CONFIG', 'RESETSTAT');
        @recs = map { reads($t, $R, 2) } 1 .. 10;
        my $c = calls();
        ok(($c->{evalsha} // 0) >= 20 && !$c->{'client|caching'},
            "$name: 20 reads, an EVALSHA each, no CLIENT CACHING ("
            . ($c->{evalsha} // 0) . ')') or diag($JSON->encode($c));
        post_is($name, $R, $A, cold => 1, no_warm => 1,
            no_local_after => 0);
    }
}

ok(1, sprintf('total %.1fs', time - $T0));

$u->finish;
$t->done;
