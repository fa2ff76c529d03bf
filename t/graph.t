#!/usr/bin/perl

# The follow graph: PUT/DELETE /users/{uid}/following/{target}, GET
# /users/{uid}/following and /users/{uid}/followers.  Follow, refollow,
# unfollow; counts and both lists after every step; cursor pagination that
# survives follows and unfollows between pages; every bad input answered
# with a JSON error and nothing written; identity binding; MongoDB down
# (503 + Retry-After, nothing half-written); Redis down (served from
# MongoDB, no stale count afterwards); concurrent follows counted once.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short now_ms json_int is_str dupes is_error status_all);

my $t = FeedTest->new;
my $REAL = FeedTest::real_mongo();

$t->start_backends;

$t->write_conf(<<'EOF')->run('httpid');
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 500ms;
    feed_mongo_timeout 800ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
        location ~ ^/users/([^/]+)/followers$ { feed_followers $1; }
        location = /status { feed_status; }
    }

    server {
        listen 127.0.0.1:%%PORT_HTTPID%%;
        feed_identity $http_x_user;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/following$ { feed_following $1; }
    }
}
EOF

my $T0 = time * 1000;       # ms, nothing in this test can be older
my $ID_RE = qr/^[A-Za-z0-9_.-]{1,64}$/;

# ---------------------------------------------------------------- helpers --

sub esc {
    my ($s) = @_;
    $s =~ s/([^A-Za-z0-9_.~-])/sprintf('%%%02X', ord $1)/ge;
    return $s;
}

# the shape of one list page; returns a list of problems
sub page_problems {
    my ($r, $limit) = @_;
    my @p;

    return ("not 200: " . short($r)) unless $r->{status} == 200;
    push @p, 'content-type ' . ($r->{headers}{'content-type'} // '(none)')
        unless ($r->{headers}{'content-type'} // '') =~ m{^application/json};
    my $j = $r->{json};
    return (@p, 'body is not a JSON object: ' . short($r))
        unless ref $j eq 'HASH';

    push @p, 'count is not a JSON integer: ' . short($r)
        unless json_int($j->{count});
    return (@p, 'items is not an array: ' . short($r))
        unless ref $j->{items} eq 'ARRAY';

    for my $it (@{$j->{items}}) {
        unless (ref $it eq 'HASH') {
            push @p, 'item is not an object: ' . short($r);
            next;
        }
        push @p, 'item since is not a JSON integer: ' . short($r)
            unless json_int($it->{since});
        push @p, 'item id is not a user id: ' . short($r)
            unless is_str($it->{id}) && $it->{id} =~ $ID_RE;
    }

    push @p, 'next is neither null nor a non-empty string: ' . short($r)
        unless !exists $j->{next} ? 0
            : !defined $j->{next} || is_str($j->{next});
    push @p, scalar(@{$j->{items}}) . " items, more than limit $limit"
        if @{$j->{items}} > $limit;

    return @p;
}

# one page
sub page {
    my ($uid, $which, %o) = @_;
    my @q;
    push @q, "limit=$o{limit}" if defined $o{limit};
    push @q, 'cursor=' . esc($o{cursor}) if defined $o{cursor};
    my $uri = "/users/$uid/$which" . (@q ? '?' . join('&', @q) : '');
    return $t->get($uri, $o{port} ? (port => $o{port}) : ());
}

# walks a whole list following "next"; $o{between}->($page_number, \@items)
# runs after each page that has a "next".  Returns a hash: items (in order),
# pages (sizes), counts (per page), problems (list).
sub walk {
    my ($uid, $which, $limit, %o) = @_;
    my (@items, @sizes, @counts, @problems, $cursor);

    for my $n (1 .. 1000) {
        my $r = page($uid, $which, limit => $limit, cursor => $cursor);
        my @p = page_problems($r, $limit);
        if (@p) {
            push @problems, map { "$which of $uid, page $n: $_" } @p;
            last;
        }
        my $j = $r->{json};
        push @items, @{$j->{items}};
        push @sizes, scalar @{$j->{items}};
        push @counts, $j->{count};
        last unless defined $j->{next};
        if ($n == 1000) {
            push @problems, "$which of $uid: still a next after 1000 pages";
            last;
        }
        $cursor = $j->{next};
        $o{between}->($n, \@items) if $o{between};
    }

    return { items => \@items, pages => \@sizes, counts => \@counts,
        problems => \@problems, ids => [ map { $_->{id} } @items ] };
}

sub non_increasing {
    my ($items) = @_;
    for my $i (1 .. $#$items) {
        return "item $i ($items->[$i]{id}, $items->[$i]{since}) newer than "
            . "item " . ($i - 1) . " ($items->[$i-1]{id}, "
            . "$items->[$i-1]{since})"
            if $items->[$i]{since} > $items->[$i - 1]{since};
    }
    return '';
}

# one page with the default limit must be exactly these ids, newest first;
# returns { id => since }
sub list_is {
    my ($uid, $which, $want, $name) = @_;
    my $r = page($uid, $which);
    my @p = page_problems($r, 20);
    my %since;

    ok(!@p, "$name: $which of $uid is a well-formed 200") or diag(join "\n", @p);
    return {} if @p;

    my $j = $r->{json};
    is($j->{count}, scalar @$want, "$name: $which count of $uid")
        or diag(short($r));
    is_deeply([ map { $_->{id} } @{$j->{items}} ], $want,
        "$name: $which of $uid, newest first") or diag(short($r));
    ok(!defined $j->{next}, "$name: $which of $uid has no next page")
        or diag(short($r));

    $since{$_->{id}} = $_->{since} for @{$j->{items}};
    return \%since;
}

sub is_204 {
    my ($r, $name) = @_;
    ok($r->{status} == 204 && ($r->{body} // '') eq '', "$name: 204, empty body")
        or diag(short($r));
}

sub follow {
    my ($u, $v, %o) = @_;
    return $t->http('PUT', "/users/$u/following/$v", %o);
}

sub unfollow {
    my ($u, $v, %o) = @_;
    return $t->http('DELETE', "/users/$u/following/$v", %o);
}

# the model: $F{a}{b} = 1 when a follows b
my %F;

sub model_following { [ sort keys %{$F{$_[0]} || {}} ] }
sub model_followers {
    my ($u) = @_;
    return [ sort grep { $F{$_}{$u} } keys %F ];
}

# both lists of each user, walked whole: every page's count, the number of
# items and the model agree; no id twice; newest first
sub users_wrong {
    my (@users) = @_;
    my @why;
    for my $u (@users) {
        for my $which (qw(following followers)) {
            my $w = walk($u, $which, 100);
            my $want = $which eq 'following'
                ? model_following($u) : model_followers($u);
            my @w = @{$w->{problems}};
            if (!@w) {
                my @bad = grep { $_ != @$want } @{$w->{counts}};
                push @w, "counts @{$w->{counts}}, want " . scalar @$want
                    if @bad;
                push @w, "ids: [@{[ sort @{$w->{ids}} ]}], want [@$want]"
                    unless join(' ', sort @{$w->{ids}}) eq join(' ', @$want);
                my $ni = non_increasing($w->{items});
                push @w, "order: $ni" if $ni;
            }
            push @why, map { "$which of $u: $_" } @w;
        }
    }
    return @why;
}

sub check_users {
    my ($name, @users) = @_;
    for my $u (@users) {
        my @why = users_wrong($u);
        ok(!@why, "$name: following and followers of $u: count, items and "
            . "model agree") or diag(join "\n", @why);
    }
}

# A change stored while Redis cannot take its cache side effects: 503, and
# the sweeper completes it once Redis is back (docs/graph.md)
sub is_pending {
    my ($r, $name) = @_;
    ok($r->{status} == 503 && ($r->{headers}{'retry-after'} // '') eq '1'
        && ($r->{json}{error} // '') eq 'unavailable',
        "$name: 503, stored, the cache pending") or diag(short($r));
}

sub counts_right_soon {
    my ($name, @users) = @_;
    my @why;
    ok($t->wait_for(3, sub { !(@why = users_wrong(@users)) }),
        "$name: the caches took the changes within 3 s")
        or diag(join "\n", @why);
    counts_right($name, @users);
}

# writes seen by MongoDB (the stand-in's command log) and by Redis
# (INFO commandstats, commands flagged "write" plus scripts)

sub mongo_writes {
    return 0 if $REAL;
    return scalar grep {
        ($_->{cmd} // '') =~ /^(insert|update|delete|findandmodify)$/i
    } $t->mongo_commands;
}

my %REDIS_WRITE = map { $_ => 1 } qw(eval evalsha fcall);
{
    my $cmds = eval { $t->redis('COMMAND') } || [];
    for my $c (@$cmds) {
        next unless ref $c eq 'ARRAY' && ref $c->[2] eq 'ARRAY';
        $REDIS_WRITE{lc $c->[0]} = 1 if grep { $_ eq 'write' } @{$c->[2]};
    }
}

sub redis_writes {
    my $info = eval { $t->redis('INFO', 'commandstats') } // return -1;
    my $n = 0;
    while ($info =~ /^cmdstat_([^:|]+)(?:\|[^:]*)?:calls=(\d+)/mg) {
        $n += $2 if $REDIS_WRITE{lc $1};
    }
    return $n;
}

sub writes { (mongo_writes(), redis_writes()) }

sub no_new_writes {
    my ($before, $name) = @_;
    my @now = writes();
    ok($now[0] == $before->[0] && $now[1] == $before->[1],
        "$name: nothing written")
        or diag("mongo writes $before->[0] -> $now[0], "
            . "redis write commands $before->[1] -> $now[1]");
}

ok($t->wait_for(8, sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
    'redis and mongodb up');

# ------------------------------------------------ 1. follow and unfollow --

{
    my $n = 'empty';
    list_is('alice', 'following', [], $n);
    list_is('alice', 'followers', [], $n);
    list_is('bob', 'followers', [], $n);
    list_is('bob', 'following', [], $n);

    my $before = now_ms();
    is_204(follow('alice', 'bob'), 'follow');
    my $after = now_ms();

    my $s1 = list_is('alice', 'following', ['bob'], 'follow');
    my $s2 = list_is('bob', 'followers', ['alice'], 'follow');
    list_is('bob', 'following', [], 'follow');
    list_is('alice', 'followers', [], 'follow');

    my $since = $s1->{bob} // -1;
    ok($since >= $before - 3000 && $since <= $after + 3000,
        'follow: since is now, in ms since the epoch')
        or diag(sprintf 'since %s, request between %.0f and %.0f',
            $since, $before, $after);
    is($s2->{alice}, $since, 'follow: the same since in both lists');

    sleep 0.03;
    is_204(follow('alice', 'bob'), 'repeated follow');
    my $s3 = list_is('alice', 'following', ['bob'], 'repeated follow');
    list_is('bob', 'followers', ['alice'], 'repeated follow');
    is($s3->{bob}, $since, 'repeated follow: since unchanged');

    sleep 0.03;
    is_204(follow('carol', 'bob'), 'second follower');
    sleep 0.03;
    is_204(follow('alice', 'carol'), 'second followee');
    list_is('bob', 'followers', ['carol', 'alice'], 'two');
    list_is('alice', 'following', ['carol', 'bob'], 'two');
    list_is('carol', 'followers', ['alice'], 'two');
    list_is('carol', 'following', ['bob'], 'two');

    is_204(unfollow('alice', 'bob'), 'unfollow');
    list_is('alice', 'following', ['carol'], 'unfollow');
    list_is('bob', 'followers', ['carol'], 'unfollow');

    is_204(unfollow('alice', 'bob'), 'repeated unfollow');
    list_is('alice', 'following', ['carol'], 'repeated unfollow');
    list_is('bob', 'followers', ['carol'], 'repeated unfollow');

    is_204(unfollow('alice', 'dave'), 'unfollow never followed');
    list_is('alice', 'following', ['carol'], 'unfollow never followed');
    list_is('dave', 'followers', [], 'unfollow never followed');

    sleep 0.03;
    $before = now_ms();
    is_204(follow('alice', 'bob'), 'refollow');
    $after = now_ms();
    my $s4 = list_is('alice', 'following', ['bob', 'carol'], 'refollow');
    my $s5 = list_is('bob', 'followers', ['alice', 'carol'], 'refollow');
    my $new = $s4->{bob} // -1;
    ok($new >= $since, 'refollow: since not older than the first one')
        or diag("first $since, now $new");
    ok($new >= $before - 3000 && $new <= $after + 3000,
        'refollow: a new since, now') or diag(sprintf
        'since %s, request between %.0f and %.0f', $new, $before, $after);
    is($s5->{alice}, $new, 'refollow: the same since in both lists');

    # the edges of the id syntax
    my $long = 'x' x 64;
    is_204(follow($long, 'bob'), '64-character id follows');
    is_204(follow('A.b-c_9', $long), 'id with . - _ follows');
    list_is($long, 'following', ['bob'], 'id edges');
    list_is($long, 'followers', ['A.b-c_9'], 'id edges');
    list_is('bob', 'followers', [$long, 'alice', 'carol'], 'id edges');
    is_204(unfollow($long, 'bob'), '64-character id unfollows');
    is_204(unfollow('A.b-c_9', $long), 'id with . - _ unfollows');
    list_is($long, 'followers', [], 'id edges gone');
    list_is('bob', 'followers', ['alice', 'carol'], 'id edges gone');

    $F{alice}{bob} = $F{alice}{carol} = $F{carol}{bob} = 1;
}

# ------------------------------------------------------ 3. bad input --

{
    my $x65 = 'a' x 65;
    my @bad_ids = ('a%20b', 'a!b', $x65, '%C3%A9');

    my @cases;      # [ method, uri, status, name ]

    for my $m (qw(PUT DELETE)) {
        for my $id (@bad_ids) {
            push @cases, [ $m, "/users/$id/following/bob", 400,
                "$m bad uid '$id'" ];
            push @cases, [ $m, "/users/alice/following/$id", 400,
                "$m bad target '$id'" ];
        }
        push @cases, [ $m, '/users/alice/following/alice', 400,
            "$m self" ];
        push @cases, [ $m, '/users/bob/following/bob', 400,
            "$m self (bob)" ];
    }

    for my $m (qw(POST PATCH)) {
        push @cases, [ $m, '/users/alice/following/bob', 405,
            "$m on the follow path" ];
        push @cases, [ $m, '/users/dave/following/bob', 405,
            "$m on the follow path (not following)" ];
    }

    for my $which (qw(following followers)) {
        for my $id (@bad_ids) {
            push @cases, [ 'GET', "/users/$id/$which", 400,
                "GET $which of bad id '$id'" ];
        }
        for my $l ('0', '101', '-1', 'abc', '1.5', '') {
            push @cases, [ 'GET', "/users/alice/$which?limit=$l", 400,
                "GET $which limit='$l'" ];
        }
        for my $c ('!!!', 'zzz') {
            push @cases, [ 'GET', "/users/alice/$which?cursor=" . esc($c),
                400, "GET $which cursor='$c'" ];
            push @cases, [ 'GET',
                "/users/alice/$which?limit=5&cursor=" . esc($c), 400,
                "GET $which limit=5 cursor='$c'" ];
        }
        for my $m (qw(PUT POST DELETE)) {
            push @cases, [ $m, "/users/alice/$which", 405,
                "$m on the $which list" ];
        }
    }

    sleep 0.3;      # nothing of the reads above still on its way
    my @all_before = writes();

    for my $c (@cases) {
        my ($m, $uri, $status, $name) = @$c;
        my @before = writes();
        my $body = $m eq 'POST' || $m eq 'PATCH'
            || ($m eq 'PUT' && $uri !~ m{/following/});
        my $r = $t->http($m, $uri, $body ? (body => '{}') : ());

        is_error($r, $status, undef, $name);

        if ($status == 405) {
            my $allow = $r->{headers}{allow} // '';
            my @want = $uri =~ m{/following/} ? qw(PUT DELETE) : qw(GET);
            ok((!grep { $allow !~ /\b$_\b/ } @want) && $allow !~ /\b$m\b/,
                "$name: Allow lists @want, not $m")
                or diag("Allow: '$allow'");
        }

        no_new_writes(\@before, $name);
    }

    sleep 0.2;
    no_new_writes(\@all_before, 'all bad requests, a moment later');

    # the limits that are fine
    for my $l (1, 100) {
        my $r = page('alice', 'following', limit => $l);
        my @p = page_problems($r, $l);
        ok(!@p && @{$r->{json}{items}} == ($l == 1 ? 1 : 2),
            "limit=$l accepted") or diag(join "\n", @p, short($r));
    }

    my $r = page('alice', 'following', limit => 1);
    if (!page_problems($r, 1) && defined $r->{json}{next}) {
        my $r2 = page('alice', 'following', limit => 1,
            cursor => $r->{json}{next});
        my @p = page_problems($r2, 1);
        ok(!@p && $r->{json}{items}[0]{id} eq 'bob'
            && $r2->{json}{items}[0]{id} eq 'carol',
            'limit=1: two pages, newest first') or diag(short($r2));
    } else {
        fail('limit=1 with 2 followees has a next') or diag(short($r));
    }

    check_users('after bad input', qw(alice bob carol));
    list_is('dave', 'following', [], 'after bad input');
}

# --------------------------------------------------------- 4. identity --

{
    my $p = $t->port('httpid');
    sleep 0.3;
    my @before = writes();

    for my $m (qw(PUT DELETE)) {
        my $path = '/users/alice/following/dave';

        is_error($t->http($m, $path, port => $p,
            headers => { 'X-User' => 'mallory' }), 403, undef,
            "identity: $m as other");
        is_error($t->http($m, $path, port => $p,
            headers => { 'X-User' => 'ALICE' }), 403, undef,
            "identity: $m as other (case differs)");
        is_error($t->http($m, $path, port => $p), 401, undef,
            "identity: $m without X-User");

        my $r = $t->http($m, $path, port => $p,
            headers => { 'X-User' => '' });
        ok(($r->{status} == 401 || $r->{status} == 403)
            && ref $r->{json} eq 'HASH' && is_str($r->{json}{error}),
            "identity: $m with an empty X-User refused") or diag(short($r));
    }

    no_new_writes(\@before, 'identity refusals');
    list_is('dave', 'followers', [], 'identity refusals');
    check_users('identity refusals', qw(alice));

    is_204(follow('alice', 'dave', port => $p,
        headers => { 'X-User' => 'alice' }), 'identity: PUT as self');
    $F{alice}{dave} = 1;
    check_users('identity: followed as self', qw(alice dave));

    is_204(unfollow('alice', 'dave', port => $p,
        headers => { 'X-User' => 'alice' }), 'identity: DELETE as self');
    delete $F{alice}{dave};
    check_users('identity: unfollowed as self', qw(alice dave));

    for my $h ({}, { 'X-User' => 'mallory' }) {
        my $who = %$h ? 'as another user' : 'anonymous';
        my $r = $t->get('/users/alice/following', port => $p, headers => $h);
        my @pr = page_problems($r, 20);
        ok(!@pr && $r->{json}{count} == 2, "identity: read $who")
            or diag(join "\n", @pr, short($r));
    }
}

# ------------------------------------------------------- 2. pagination --

{
    my @fans = map { sprintf 'p%03d', $_ } 1 .. 250;

    my @res;
    for my $i (0 .. 9) {
        my @h = map { $t->http_start('PUT', "/users/$_/following/star") }
            @fans[$i * 25 .. $i * 25 + 24];
        push @res, map { $t->http_end($_) } @h;
    }
    my @bad = grep { $_->{status} != 204 } @res;
    ok(!@bad, '250 followers of star: all 204')
        or diag(scalar(@bad) . ' failed, first: ' . short($bad[0]));
    $F{$_}{star} = 1 for @fans;

    my $r = page('star', 'followers');
    my @p = page_problems($r, 20);
    ok(!@p && @{$r->{json}{items}} == 20 && $r->{json}{count} == 250
        && defined $r->{json}{next}, 'default limit is 20, count 250, next')
        or diag(join "\n", @p, short($r));

    # walk with limit 100; between pages 1 and 2 a new follower comes (an
    # offset cursor would repeat one), between pages 2 and 3 a visited one
    # leaves (an offset cursor would skip one)
    my ($gone, @new);
    my $w = walk('star', 'followers', 100, between => sub {
        my ($n, $so_far) = @_;
        if ($n == 1) {
            push @new, 'newbie1';
            is_204(follow('newbie1', 'star'), 'new follower between pages');
        } elsif ($n == 2) {
            # the newest, visited on page 1, unfollows
            $gone = $so_far->[0]{id};
            is_204(unfollow($gone, 'star'),
                'a visited follower leaves between pages');
        }
    });
    $F{$_}{star} = 1 for @new;
    delete $F{$gone}{star} if $gone;

    ok(!@{$w->{problems}}, 'walk with mutations: every page well-formed')
        or diag(join "\n", @{$w->{problems}});
    is(scalar @{$w->{pages}}, 3, 'walk with mutations: 3 pages')
        or diag("page sizes @{$w->{pages}}");

    my %seen;
    $seen{$_}++ for @{$w->{ids}};
    my @throughout = grep { !defined $gone || $_ ne $gone } @fans;
    my @missing = grep { !$seen{$_} } @throughout;
    my @twice = dupes(@{$w->{ids}});
    my %known = map { $_ => 1 } @fans, @new;
    my @stray = grep { !$known{$_} } keys %seen;

    ok(!@missing, 'walk with mutations: every follower present throughout '
        . 'seen') or diag(scalar(@missing) . " missing: @missing");
    ok(!@twice, 'walk with mutations: none seen twice')
        or diag("twice: @twice");
    ok(!@stray, 'walk with mutations: nobody else') or diag("@stray");
    ok($gone && $seen{$gone} && $gone ne 'newbie1',
        'the leaver was seen on page 1') or diag('leaver: ' . ($gone // '-'));
    my $ni = non_increasing($w->{items});
    ok(!$ni, 'walk with mutations: newest first') or diag($ni);

    my @bad_since = grep { $_->{since} < $T0 - 5000
        || $_->{since} > now_ms() + 5000 } @{$w->{items}};
    ok(!@bad_since, 'every since is a time during this test')
        or diag("e.g. $bad_since[0]{id}: $bad_since[0]{since}, test "
            . "started at $T0");

    # a quiet walk afterwards sees exactly the current followers
    $w = walk('star', 'followers', 100);
    my $want = model_followers('star');
    ok(!@{$w->{problems}}, 'second walk well-formed')
        or diag(join "\n", @{$w->{problems}});
    is(scalar @$want, 250, 'model: 250 followers of star');
    ok(!grep({ $_ != 250 } @{$w->{counts}}), 'second walk: count 250')
        or diag("counts @{$w->{counts}}");
    is_deeply([ sort @{$w->{ids}} ], $want,
        'second walk: exactly the followers, once each');
    is_deeply($w->{pages}, [100, 100, 50], 'second walk: pages of 100')
        or diag("page sizes @{$w->{pages}}");
    is($w->{ids}[0], 'newbie1', 'second walk: the newest first');

    # following: 120 in order, walked 7 at a time
    my @targets = map { sprintf 't%03d', $_ } 1 .. 120;
    my @bad2;
    for my $i (0 .. $#targets) {
        sleep 0.005 if $i == 1 || $i == $#targets;
        my $r = follow('fan', $targets[$i]);
        push @bad2, "$targets[$i]: " . short($r) if $r->{status} != 204;
    }
    ok(!@bad2, 'fan follows 120') or diag(join "\n", @bad2[0 .. 2]);
    $F{fan}{$_} = 1 for @targets;

    $w = walk('fan', 'following', 7);
    ok(!@{$w->{problems}}, 'following walk, limit 7: well-formed')
        or diag(join "\n", @{$w->{problems}});
    is(scalar @{$w->{ids}}, 120, 'following walk: 120 items');
    is_deeply([ sort @{$w->{ids}} ], \@targets,
        'following walk: each followee exactly once');
    is_deeply($w->{pages}, [ (7) x 17, 1 ],
        'following walk: 17 full pages of 7, then 1')
        or diag("page sizes @{$w->{pages}}");
    ok(!grep({ $_ != 120 } @{$w->{counts}}), 'following walk: count 120')
        or diag("counts @{$w->{counts}}");
    $ni = non_increasing($w->{items});
    ok(!$ni, 'following walk: newest first') or diag($ni);
    is($w->{ids}[0], 't120', 'following walk: the last followed first');
    is($w->{ids}[-1], 't001', 'following walk: the first followed last');
}

# ------------------------------------------------------ 7. concurrency --

{
    is_204(follow('c0', 'c2'), 'c2 has a follower');
    is_204(follow('c1', 'cx'), 'c1 follows someone');
    $F{c0}{c2} = $F{c1}{cx} = 1;
    check_users('before concurrent follows', qw(c1 c2));

    my @h = map { $t->http_start('PUT', '/users/c1/following/c2') } 1 .. 30;
    my @r = map { $t->http_end($_) } @h;
    my @bad = grep { $_->{status} != 204 } @r;
    ok(!@bad, '30 concurrent PUTs of one pair: all 204')
        or diag(scalar(@bad) . ' not 204, e.g. ' . short($bad[0]));
    $F{c1}{c2} = 1;
    check_users('30 concurrent PUTs of one pair', qw(c1 c2));

    # 30 different followers at once
    my @d = map { sprintf 'd%02d', $_ } 1 .. 30;
    @h = map { $t->http_start('PUT', "/users/$_/following/c2") } @d;
    @r = map { $t->http_end($_) } @h;
    @bad = grep { $_->{status} != 204 } @r;
    ok(!@bad, '30 concurrent followers: all 204')
        or diag(scalar(@bad) . ' not 204, e.g. ' . short($bad[0]));
    $F{$_}{c2} = 1 for @d;
    check_users('30 concurrent followers', qw(c2 d01 d30));

    # 30 concurrent DELETEs of one pair: -1 once
    @h = map { $t->http_start('DELETE', '/users/c1/following/c2') } 1 .. 30;
    @r = map { $t->http_end($_) } @h;
    @bad = grep { $_->{status} != 204 } @r;
    ok(!@bad, '30 concurrent DELETEs of one pair: all 204')
        or diag(scalar(@bad) . ' not 204, e.g. ' . short($bad[0]));
    delete $F{c1}{c2};
    check_users('30 concurrent DELETEs of one pair', qw(c1 c2));

    # follows and unfollows of one pair racing: whatever wins, the count
    # and the lists agree on both sides
    @h = map { $t->http_start($_ % 2 ? 'PUT' : 'DELETE',
        '/users/c3/following/c4') } 1 .. 20;
    @r = map { $t->http_end($_) } @h;
    @bad = grep { $_->{status} != 204 } @r;
    ok(!@bad, '20 racing PUTs and DELETEs: all 204')
        or diag(scalar(@bad) . ' not 204, e.g. ' . short($bad[0]));

    my $ra = walk('c3', 'following', 100);
    my $rb = walk('c4', 'followers', 100);
    my $ok = !@{$ra->{problems}} && !@{$rb->{problems}}
        && @{$ra->{ids}} == $ra->{counts}[0]
        && @{$rb->{ids}} == $rb->{counts}[0]
        && @{$ra->{ids}} == @{$rb->{ids}}
        && @{$ra->{ids}} <= 1
        && (!@{$ra->{ids}}
            || ($ra->{ids}[0] eq 'c4' && $rb->{ids}[0] eq 'c3'));
    ok($ok, 'racing PUTs and DELETEs: both sides agree')
        or diag(join "\n", @{$ra->{problems}}, @{$rb->{problems}},
            "c3 following [@{$ra->{ids}}] count @{$ra->{counts}}, "
            . "c4 followers [@{$rb->{ids}}] count @{$rb->{counts}}");
    $F{c3}{c4} = 1 if $ok && @{$ra->{ids}};
}

# ------------------------------------------------------- 6. Redis down --

sub counts_right {
    my ($name, @users) = @_;
    # several times: requests spread over both workers
    for my $i (1 .. 3) {
        check_users("$name ($i)", @users);
    }
}

{
    is_204(follow('r1', 'r2'), 'r1 follows r2');
    $F{r1}{r2} = 1;
    counts_right('redis up, caches warm', qw(r1 r2 r3));

    # A. stopped and started again empty
    $t->stop_redis;

    my $r = page('r1', 'following');
    ok($r->{elapsed} < 2, 'redis stopped: a list answers at once')
        or diag("took $r->{elapsed}");
    check_users('redis stopped: served from MongoDB', qw(r1 r2 r3));

    is_pending(follow('r1', 'r3'), 'redis stopped: follow');
    $F{r1}{r3} = 1;
    is_pending(unfollow('r1', 'r2'), 'redis stopped: unfollow');
    delete $F{r1}{r2};
    check_users('redis stopped: after writes', qw(r1 r2 r3));

    $t->start_redis;
    ok($t->wait_for(8, sub { status_all($t, 'redis') }), 'redis back');
    counts_right_soon('redis back (empty)', qw(r1 r2 r3));
    is_204(follow('r1', 'r3'), 'redis back: the follow retried');

    # B. restarted from a snapshot taken before writes made while it was
    # down, as a persistent Redis would: the cached counts in it are stale
    counts_right('caches warm again', qw(r1 r3 r4));
    is(eval { $t->redis('SAVE') } // "$@", 'OK', 'redis snapshot saved');
    $t->stop_redis;

    is_pending(follow('r1', 'r4'), 'redis stopped again: follow');
    $F{r1}{r4} = 1;
    is_pending(unfollow('r1', 'r3'), 'redis stopped again: unfollow');
    delete $F{r1}{r3};
    check_users('redis stopped again', qw(r1 r3 r4));

    $t->start_redis;
    ok($t->wait_for(8, sub { status_all($t, 'redis') }),
        'redis back from its snapshot');
    counts_right_soon('redis back from a stale snapshot', qw(r1 r3 r4));

    # C. hung (SIGSTOP) while a follow happens, then resumed with its data
    counts_right('caches warm before the hang', qw(r5 r6));
    $t->signal('redis', 'STOP');

    $r = follow('r5', 'r6');
    is_pending($r, 'redis hung: follow');
    ok($r->{elapsed} < 3, 'redis hung: the follow did not wait long')
        or diag("took $r->{elapsed}");
    $F{r5}{r6} = 1;
    check_users('redis hung', qw(r5 r6));

    $t->signal('redis', 'CONT');
    ok($t->wait_for(8, sub { status_all($t, 'redis') }), 'redis resumed');
    counts_right_soon('redis resumed with old data', qw(r5 r6));
    is_204(follow('r5', 'r6'), 'redis resumed: the follow retried');
}

# ----------------------------------------------------- 5. MongoDB down --

SKIP: {
    skip 'stops MongoDB: stand-in only', 1 if $REAL;

    is_204(follow('m1', 'm2'), 'm1 follows m2');
    $F{m1}{m2} = 1;
    counts_right('mongodb up, caches warm', qw(m1 m2 m3));

    $t->stop_mongo;

    for my $i (1 .. 2) {
        for my $req ([ 'PUT', 'm3' ], [ 'DELETE', 'm2' ]) {
            my ($m, $to) = @$req;
            my $r = $t->http($m, "/users/m1/following/$to", timeout => 15);
            my $name = "mongodb stopped: $m m1 -> $to ($i)";
            is_error($r, 503, undef, $name);
            like($r->{headers}{'retry-after'} // '',
                qr/^\s*(\d+|\w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT)\s*$/,
                "$name: Retry-After");
            ok($r->{elapsed} < 3, "$name: answered within a few seconds")
                or diag("took $r->{elapsed}");
        }
    }

    $t->start_mongo;
    ok($t->wait_for(10, sub { status_all($t, 'mongo') }), 'mongodb back');

    counts_right('mongodb back: nothing half-written', qw(m1 m2 m3));

    is_204(follow('m1', 'm3'), 'mongodb back: retried PUT');
    $F{m1}{m3} = 1;
    is_204(unfollow('m1', 'm2'), 'mongodb back: retried DELETE');
    delete $F{m1}{m2};
    counts_right('mongodb back: retried writes', qw(m1 m2 m3));
}

# everything written earlier is still there
check_users('at the end', qw(alice bob carol c2 fan));

$t->done;
