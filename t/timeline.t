#!/usr/bin/perl

# Home timelines: GET /users/{uid}/timeline, served from the Redis list
# cache, rebuilt from the fallback location (feed_timeline_source) on a
# miss.  Run in both feed_cache_mode link and embed:
#
#   - a cold read answers MISS and warms feed:tl:{uid}; the next read is a
#     HIT with the same posts, identical to their 201s (unicode, NUL,
#     nested data included); the list's layout, end mark and TTL;
#   - pagination inside the cache and past it (feed_cache_size 50 with 120
#     posts; 800 with 2,000 posts): following next visits every post
#     once, newest first, HIT then DEEP, also while new posts arrive;
#   - since_id (newest first, exclusive) on HIT, MISS and DEEP pages;
#   - 200 concurrent cold reads of one user: all answered alike from ONE
#     rebuild (the MongoDB stand-in's command log);
#   - 100 posts of 4 KiB (a 400 KiB Redis reply) read whole;
#   - deleted posts never shown: warm cache, cold rebuild, deep pages;
#   - every bad input: 400 invalid_limit / invalid_post_id /
#     invalid_user_id, 405 with Allow, nothing cached.
#
# MongoDB slow or down, Redis down and the proxy_pass fallback are in
# t/timeline_fallback.t.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use JSON::PP ();
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(short enc is_str tag summary post_problems tl_uri
    tl_page_problems status_all tl_key);

my $t = FeedTest->new;
my $REAL = FeedTest::real_mongo();
my $T0 = time;

$t->start_backends;

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 800ms;
    # the stand-in's latency below must not cut rebuilds short: the
    # deadline is t/timeline_deadline.t's
    feed_timeline_rebuild_deadline 0;
    feed_cache_size @@SIZE@@;
    feed_cache_ttl 7d;
    feed_cache_mode @@MODE@@;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
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

my $TTL = 7 * 24 * 3600;
my $END = '0' x 24;
my $JSON = JSON::PP->new->utf8->canonical;

# against a real MongoDB, data outlives the run: user ids unique per run
my $SFX = $REAL ? sprintf('-%x%x', $$, int(time) % 65536) : '';

# ---------------------------------------------------------------- helpers --

my ($MODE, $SIZE);

sub start_nginx {
    my ($mode, $size) = @_;
    $t->stop;
    ($MODE, $SIZE) = ($mode, $size);
    (my $c = $CONF) =~ s/\@\@SIZE\@\@/$size/;
    $c =~ s/\@\@MODE\@\@/$mode/;
    $t->write_conf($c)->run;
    ok($t->wait_for(8,
        sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
        "$mode, cache $size: nginx up, redis and mongodb up");
}

# --- the model: every post created, who follows whom, what was deleted --

my (%TAG, %AUTHOR, %DELETED, %F);

sub follow {
    my ($u, @vs) = @_;
    my @bad;
    my $n = @vs;
    my @all = @vs;
    while (my @batch = splice(@vs, 0, 25)) {
        my @h = map { [ $_, $t->http_start('PUT', "/users/$u/following/$_") ] }
            @batch;
        for my $h (@h) {
            my $r = $t->http_end($h->[1]);
            if ($r->{status} == 204) {
                $F{$u}{$h->[0]} = 1;
            } else {
                push @bad, "$u -> $h->[0]: " . short($r);
            }
        }
    }
    ok(!@bad, "$u follows " . ($n > 5 ? "$n users" : "@all"))
        or diag(join "\n", @bad[0 .. ($#bad > 4 ? 4 : $#bad)]);
}

# creates posts, 25 in flight: each spec [uid, post hash or JSON bytes];
# returns their ids in the order given
sub create_posts {
    my ($name, @specs) = @_;
    my (@ids, @bad);
    my $n = @specs;
    while (my @batch = splice(@specs, 0, 25)) {
        my @h = map {
            my $bytes = ref $_->[1] ? enc($_->[1]) : $_->[1];
            [ $_->[0], $t->http_start('POST', "/users/$_->[0]/posts",
                body => $bytes,
                headers => { 'Content-Type' => 'application/json' }) ]
        } @batch;
        for my $h (@h) {
            my $r = $t->http_end($h->[1]);
            my $tag = tag($r->{json});
            my @p = $r->{status} == 201 ? post_problems($r->{json})
                : ('not 201');
            push @p, "author $r->{json}{author}, want $h->[0]"
                if !@p && $r->{json}{author} ne $h->[0];
            if (@p) {
                push @bad, join('; ', @p) . ': ' . short($r);
                next;
            }
            my $id = $r->{json}{id};
            $TAG{$id} = $tag;
            $AUTHOR{$id} = $h->[0];
            push @ids, $id;
        }
    }
    ok(!@bad && @ids == $n, "$name: $n posts created")
        or diag(scalar(@bad) . ' failed, first: ' . ($bad[0] // ''));
    return @ids;
}

# $n posts for each of the users, interleaved
sub create_round_robin {
    my ($name, $n, @users) = @_;
    my @specs;
    for my $i (1 .. $n) {
        push @specs, map { [ $_, { body => "post $i of $_" } ] } @users;
    }
    return create_posts($name, @specs);
}

sub remove {
    my ($uid, $id, $name) = @_;
    my $r = $t->http('DELETE', "/users/$uid/posts/$id");
    my $ok = ok($r->{status} == 204, "$name: DELETE answers 204")
        or diag(short($r));
    $DELETED{$id} = 1 if $ok;
    return $ok;
}

# the home timeline of $u as the model has it: ids newest first
sub expected {
    my ($u, %o) = @_;
    my %a = ($u => 1, %{$F{$u} || {}});
    return [ sort { $b cmp $a } grep {
        $a{$AUTHOR{$_}} && !$DELETED{$_}
            && (!defined $o{max_id} || $_ lt $o{max_id})
            && (!defined $o{since_id} || $_ gt $o{since_id})
    } keys %AUTHOR ];
}

# --- timeline pages --

sub tl_get {
    my ($uid, %q) = @_;
    return $t->get(tl_uri($uid, %q));
}

# one page: exactly these posts, each identical to its 201
sub page_is {
    my ($uid, $q, $want, $want_next, $name, %o) = @_;
    my $r = tl_get($uid, %$q);
    my $tags = tag($r->{json});
    my @p = tl_page_problems($r, $uid, $q->{limit} // 20);
    ok(!@p, "$name: a well-formed 200 page") or diag(join "\n", @p);
    return $r if @p;
    my $j = $r->{json};
    my @got = map { $_->{id} } @{$j->{items}};
    is_deeply(\@got, $want, "$name: the posts, newest first")
        or diag(summary(\@got, $want));
    is_deeply($tags->{items}, [ map { $TAG{$_} // "?$_" } @$want ],
        "$name: each post identical to its 201") if "@got" eq "@$want";
    if ($want_next) {
        ok(defined $j->{next}, "$name: a next page") or diag(short($r));
    } else {
        ok(!defined $j->{next}, "$name: no next page") or diag(short($r));
    }
    if (ref $o{cache}) {
        like($r->{headers}{'x-feed-cache'} // '', $o{cache},
            "$name: X-Feed-Cache $o{cache}");
    } elsif (defined $o{cache}) {
        is($r->{headers}{'x-feed-cache'}, $o{cache},
            "$name: X-Feed-Cache $o{cache}");
    }
    return $r;
}

# follows a timeline from its first page to its end, via the Link URL or
# via max_id=next; between->($page_number) after each page that has a next
sub walk {
    my ($uid, $limit, %o) = @_;
    my (@ids, @tags, @pages, @problems);
    my $uri = tl_uri($uid, limit => $limit, since_id => $o{since_id});

    for my $n (1 .. 400) {
        my $r = $t->get($uri);
        my $tags = tag($r->{json});
        my @p = tl_page_problems($r, $uid, $limit);
        if (@p) {
            push @problems, map { "$uid, page $n ($uri): $_" } @p;
            last;
        }
        my $j = $r->{json};
        my @pids = map { $_->{id} } @{$j->{items}};
        push @ids, @pids;
        push @tags, @{$tags->{items}};
        push @pages, { ids => \@pids, cache => $r->{headers}{'x-feed-cache'},
            uri => $uri };
        last unless defined $j->{next};
        if (($o{via} // 'link') eq 'link') {
            ($uri) = $r->{headers}{link} =~ /<([^>]*)>/;
            $uri =~ s{^https?://[^/]+}{};
        } else {
            $uri = tl_uri($uid, limit => $limit, max_id => $j->{next},
                since_id => $o{since_id});
        }
        $o{between}->($n) if $o{between};
    }

    return { ids => \@ids, tags => \@tags, pages => \@pages,
        problems => \@problems };
}

sub walk_is {
    my ($w, $want, $name) = @_;
    ok(!@{$w->{problems}}, "$name: every page a well-formed 200")
        or diag(join "\n", @{$w->{problems}});
    is_deeply($w->{ids}, $want,
        "$name: every post exactly once, newest first ("
        . scalar(@$want) . ' posts, ' . scalar(@{$w->{pages}}) . ' pages)')
        or diag(summary($w->{ids}, $want));
    is_deeply($w->{tags}, [ map { $TAG{$_} // "?$_" } @$want ],
        "$name: each post identical to its 201")
        if "@{$w->{ids}}" eq "@$want";
}

# what each page of a walk must have answered, given the live (not
# deleted) ids of the trimmed cache: HIT inside it, DEEP once a page needs
# posts past its end; a page ending on its last entry may be either
sub cache_statuses_ok {
    my ($w, $cached, $name, %o) = @_;
    my %in = map { $_ => 1 } @$cached;
    my $last = $cached->[-1] // '';
    my (@bad, %seen);
    my $i = 0;
    for my $pg (@{$w->{pages}}) {
        $i++;
        my $got = $pg->{cache} // '';
        my $want;
        if (!$o{complete} && grep { !$in{$_} } @{$pg->{ids}}) {
            $want = 'DEEP';
        } elsif ($o{complete} || !grep { $_ eq $last } @{$pg->{ids}}) {
            $want = 'HIT';
        } else {
            $want = 'HIT|DEEP';
        }
        $seen{$got}++;
        push @bad, "page $i (" . scalar(@{$pg->{ids}}) . " items from "
            . ($pg->{ids}[0] // '-') . "): $got, want $want"
            unless $got =~ /^(?:$want)$/;
    }
    ok(!@bad, "$name: X-Feed-Cache per page ("
        . join(', ', map { "$_ x$seen{$_}" } sort keys %seen) . ')')
        or diag(join "\n", @bad);
}

# the same, for a walk while new posts arrive (they may be fanned out to
# the cache, pushing its oldest entries out): HIT pages first, then DEEP
sub cache_statuses_hit_then_deep {
    my ($w, $name) = @_;
    my @st = map { $_->{cache} // '' } @{$w->{pages}};
    my $s = join ' ', @st;
    ok($s =~ /^HIT( HIT)*( DEEP)+$/, "$name: X-Feed-Cache per page, HIT "
        . 'then DEEP') or diag($s);
}

# --- the cache in Redis --

sub cache_entries {
    my ($u) = @_;
    my $l = eval { $t->redis('LRANGE', tl_key($u), 0, -1) };
    return ref $l eq 'ARRAY' ? $l : [];
}

sub tl_keys {
    my $k = eval { $t->redis('KEYS', 'feed:tl:*') };
    return ref $k eq 'ARRAY' ? @$k : ();
}

sub cache_ids { [ map { entry_id($_) } @{cache_entries($_[0])} ] }

sub live { [ grep { $_ ne $END && !$DELETED{$_} } @{$_[0]} ] }

# the list holds $want (newest first), each entry's post as created,
# with the end mark when it holds the whole history
sub cache_is {
    my ($u, $want, $complete, $name) = @_;
    my $e = cache_entries($u);
    my @ids = map { entry_id($_) } @$e;
    my @w = (@$want, $complete ? ($END) : ());
    is_deeply(\@ids, \@w, "$name: feed:tl:{$u} holds the "
        . scalar(@$want) . ' newest posts, newest first'
        . ($complete ? ', then the end mark' : ', no end mark'))
        or diag(summary(\@ids, \@w));
    ok(@$e <= $SIZE, "$name: at most feed_cache_size ($SIZE) entries")
        or diag(scalar(@$e) . ' entries');

    my @bad;
    for my $x (@$e) {
        my $id = entry_id($x);
        next if $id eq $END || !$TAG{$id};
        my $json;
        if ($MODE eq 'embed') {
            $json = entry_json($x);
        } else {
            push @bad, "entry $id is not just the id (" . length($x)
                . ' bytes)' if length($x) != 12;
            $json = eval { $t->redis('GET', post_key($id)) };
        }
        my $d = defined $json ? eval { FeedTest::json_decode($json) } : undef;
        my $tg = tag($d);
        push @bad, "$id: " . (defined $json ? "'" . substr($json, 0, 80)
            . "' is not its post" : 'no post JSON')
            unless ref $tg eq 'HASH' && $JSON->encode($tg) eq
                $JSON->encode($TAG{$id});
        last if @bad > 5;
    }
    ok(!@bad, "$name: each entry's post ($MODE mode) identical to its 201")
        or diag(join "\n", @bad);

    my $ttl = eval { $t->redis('TTL', tl_key($u)) } // -3;
    ok($ttl > $TTL - 120 && $ttl <= $TTL, "$name: TTL is feed_cache_ttl")
        or diag("TTL $ttl");
}

ok(1, 'started: ' . ($REAL ? "real MongoDB $REAL" : 'MongoDB stand-in'));

# ------------------------------------------------------------ the data --

# the full-scale users (2,000 posts, shared by both modes: Redis is
# flushed between them); the rest is made per mode

start_nginx('link', 800);

my $FS = "fs$SFX";
my @FSF = map { "fs$_$SFX" } 1 .. 4;
my $t_fs = time;
follow($FS, @FSF);
create_round_robin('full scale', 400, $FS, @FSF);
my $FS_CREATE = time - $t_fs;
ok(1, sprintf('full scale: 2,000 posts created in %.1fs', $FS_CREATE));

# ------------------------------------------------------ bad input (once) --

{
    my $u = "bad$SFX";
    create_posts('bad: a post', [ $u, { body => 'the only post' } ]);
    my $x65 = 'a' x 65;
    my @cases;      # [ name, method, uri, status, code, allow ]

    for my $l ('0', '101', '-1', 'abc', '1.5', '', '1000', '20x', '%205', '+5') {
        push @cases, [ "limit='$l'", 'GET', "/users/$u/timeline?limit=$l",
            400, 'invalid_limit' ];
    }
    for my $id ('abc', uc('a' x 24), 'A' . ('b' x 23), 'z' x 24, 'g' x 24,
        'a' x 25, 'a' x 23, '')
    {
        push @cases, [ "max_id='$id'", 'GET',
            "/users/$u/timeline?max_id=$id", 400, 'invalid_post_id' ];
        push @cases, [ "since_id='$id'", 'GET',
            "/users/$u/timeline?since_id=$id", 400, 'invalid_post_id' ];
    }
    push @cases, [ 'good max_id, bad since_id', 'GET',
        "/users/$u/timeline?max_id=" . ('f' x 24) . '&since_id=xyz', 400,
        'invalid_post_id' ];
    for my $id ('a!b', $x65, '%C3%A9', 'a%20b', 'a*b') {
        push @cases, [ "uid '$id'", 'GET', "/users/$id/timeline", 400,
            'invalid_user_id' ];
    }
    for my $m (qw(POST PUT DELETE PATCH)) {
        push @cases, [ "$m /users/$u/timeline", $m, "/users/$u/timeline",
            405, undef, [ 'GET' ] ];
    }

    my %before = map { $_ => 1 } tl_keys();
    for my $c (@cases) {
        my ($name, $m, $uri, $status, $code, $allow) = @$c;
        my $r = $t->http($m, $uri,
            $m =~ /^(POST|PUT|PATCH)$/ ? (body => '{"body":"x"}',
                headers => { 'Content-Type' => 'application/json' }) : ());
        my $ok = $r->{status} == $status
            && ($r->{headers}{'content-type'} // '') =~ m{^application/json}i
            && ref $r->{json} eq 'HASH'
            && is_str($r->{json}{error})
            && (!defined $code || $r->{json}{error} eq $code)
            && is_str($r->{json}{message});
        ok($ok, "bad input, $name: $status " . ($code // 'JSON error')
            . ' {error, message}') or diag("$m $uri: " . short($r));
        if ($allow) {
            my $a = $r->{headers}{allow} // '';
            ok((!grep { $a !~ /\b$_\b/ } @$allow) && $a !~ /\b$m\b/,
                "bad input, $name: Allow lists @$allow, not $m")
                or diag("Allow: '$a'");
        }
    }
    my @new = grep { !$before{$_} } tl_keys();
    ok(!@new, 'bad input: no timeline cached by any of them')
        or diag("new: @new");

    # the bounds that are fine
    my $id = expected($u)->[0];
    page_is($u, { limit => 1 }, [ $id ], 0, 'limit=1', cache => 'MISS');
    page_is($u, { limit => 100 }, [ $id ], 0, 'limit=100', cache => 'HIT');
    page_is($u, { max_id => 'f' x 24, since_id => $END }, [ $id ], 0,
        'max_id ffff..., since_id 0000...', cache => 'HIT');
    my $long = substr('tl' . ('x' x 64), 0, 64 - length $SFX) . $SFX;
    page_is($long, {}, [], 0, '64-character uid, no posts');
    page_is("T.l-c_9$SFX", {}, [], 0, 'uid T.l-c_9, no posts');
}

# ------------------------------------------------------------ per mode --

my %TIMING;

for my $mode (qw(link embed)) {
    my $p = substr($mode, 0, 1) . $SFX;     # user id suffix of this mode
    my $t_mode = time;

    if ($mode ne 'link') {
        eval { $t->redis('FLUSHALL') };
        start_nginx($mode, 800);
    }

    # ---------------------------------------------- 1. cold, then warm --

    my ($alice, $bob, $carol, $dave) = map { "$_-$p" } qw(alice bob carol dave);
    follow($alice, $bob, $carol);
    follow($dave, $alice);

    my $body = "h\x{e9}llo \x{65e5}\x{672c}\x{8a9e} \x{1F600} \"quoted\" "
        . "back\\slash\nsecond line\ttab \x{0} nul, </script> \x{10348}";
    my $data = {
        n => 42, neg => -7, f => 1.5, big => 1234567890123, zero => 0,
        yes => JSON::PP::true, no => JSON::PP::false, nothing => undef,
        s => "caf\x{e9} \x{1F600} \x{0} \\ \"", empty_s => '',
        arr => [ 1, 'two', { three => 3 }, [ 4, [ 5 ] ], undef,
            JSON::PP::true, -2.25 ],
        obj => { deep => { deeper => { s => "\x{65e5}", l => [] } },
            e => {} },
        'with space' => 'k',
    };

    create_round_robin("$mode: alice, bob, carol, dave", 8,
        $alice, $bob, $carol, $dave);
    my ($rich) = create_posts("$mode: a rich post by bob",
        [ $bob, { body => $body, data => $data } ]);
    create_posts("$mode: a post without data, one with {}",
        [ $carol, { body => 'x' } ], [ $carol, { body => 'y', data => {} } ]);
    my $want = expected($alice);
    is(scalar @$want, 27, "$mode: alice's home timeline has 27 posts");

    is_deeply(cache_ids($alice), [], "$mode: alice has no cache yet");
    my $t1 = time;
    my $r1 = page_is($alice, { limit => 100 }, $want, 0,
        "$mode: cold read", cache => 'MISS');
    my $cold_s = time - $t1;
    cache_is($alice, $want, 1, "$mode: after the cold read");

    my $t2 = time;
    my $r2 = page_is($alice, { limit => 100 }, $want, 0,
        "$mode: second read", cache => 'HIT');
    my $hit_s = time - $t2;
    is_deeply(tag($r2->{json}), tag($r1->{json}),
        "$mode: HIT answers the same items as the MISS");
    ok($hit_s < 0.5, sprintf('%s: the HIT took %.3fs (cold %.3fs)', $mode,
        $hit_s, $cold_s));

    # the default limit, and following the pages
    my $r = page_is($alice, {}, [ @$want[0 .. 19] ], 1,
        "$mode: default limit 20", cache => 'HIT');
    page_is($alice, { max_id => $r->{json}{next} }, [ @$want[20 .. 26] ], 0,
        "$mode: page 2 (max_id=next)", cache => 'HIT');
    walk_is(walk($alice, 5), $want, "$mode: alice by 5 via Link");
    walk_is(walk($alice, 27, via => 'max_id'), $want,
        "$mode: alice by 27 via max_id");

    # dave follows alice: alice's posts, not those she follows
    page_is($dave, { limit => 100 }, expected($dave), 0,
        "$mode: dave (follows alice only)", cache => 'MISS');
    ok(!grep({ $AUTHOR{$_} eq $bob } @{expected($dave)}),
        "$mode: (model) no posts of bob in dave's timeline");

    # a user without posts who follows nobody
    my $nobody = "nobody-$p";
    page_is($nobody, {}, [], 0, "$mode: no posts at all", cache => 'MISS');
    page_is($nobody, {}, [], 0, "$mode: no posts at all, again",
        cache => 'HIT');

    # reads refresh the list's TTL
    {
        eval { $t->redis('EXPIRE', tl_key($alice), 100) };
        page_is($alice, { limit => 3 }, [ @$want[0 .. 2] ], 1,
            "$mode: a read after the TTL was lowered", cache => 'HIT');
        my $ttl = eval { $t->redis('TTL', tl_key($alice)) } // -3;
        ok($ttl > $TTL - 120, "$mode: the read set the list's TTL back to "
            . 'feed_cache_ttl') or diag("TTL $ttl");
    }

    # ------------------------------------------------------- 3. since_id --

    {
        my @d = @$want;
        page_is($alice, { limit => 100, since_id => $d[10] },
            [ @d[0 .. 9] ], 0, "$mode: since_id: the 10 newer",
            cache => 'HIT');
        page_is($alice, { limit => 4, since_id => $d[10] }, [ @d[0 .. 3] ], 1,
            "$mode: since_id, limit 4: the NEWEST 4 newer", cache => 'HIT');
        walk_is(walk($alice, 4, since_id => $d[10]), [ @d[0 .. 9] ],
            "$mode: since_id, limit 4, followed via Link");
        walk_is(walk($alice, 3, since_id => $d[10], via => 'max_id'),
            [ @d[0 .. 9] ], "$mode: since_id, limit 3, followed via max_id");
        page_is($alice, { limit => 100, max_id => $d[5], since_id => $d[12] },
            [ @d[6 .. 11] ], 0, "$mode: max_id and since_id: strictly "
            . 'between', cache => 'HIT');
        page_is($alice, { limit => 2, max_id => $d[5], since_id => $d[12] },
            [ @d[6 .. 7] ], 1, "$mode: max_id and since_id, limit 2");
        page_is($alice, { limit => 100, max_id => $d[5], since_id => $d[6] },
            [], 0, "$mode: max_id and since_id adjacent");
        page_is($alice, { limit => 100, since_id => $d[0] }, [], 0,
            "$mode: since_id of the newest: nothing", cache => 'HIT');
        page_is($alice, { limit => 100, max_id => $d[-1] }, [], 0,
            "$mode: max_id of the oldest: nothing", cache => 'HIT');
        page_is($alice, { limit => 5, max_id => 'f' x 24 },
            [ @d[0 .. 4] ], 1, "$mode: max_id above everything");
        page_is($alice, { limit => 5, since_id => $END },
            [ @d[0 .. 4] ], 1, "$mode: since_id 0000...");
        page_is($alice, { limit => 3, max_id => $d[0] }, [ @d[1 .. 3] ], 1,
            "$mode: max_id exclusive");

        # since_id on the very first (cold) read
        my $dd = expected($dave);
        eval { $t->redis('DEL', tl_key($dave)) };
        page_is($dave, { limit => 3, since_id => $dd->[7] },
            [ @$dd[0 .. 2] ], 1, "$mode: since_id on a cold read: the "
            . 'newest 3', cache => 'MISS');
        page_is($dave, { limit => 100, since_id => $dd->[7] },
            [ @$dd[0 .. 6] ], 0, "$mode: since_id after it",
            cache => 'HIT');
        cache_is($dave, $dd, 1, "$mode: dave's cache built whole by a "
            . 'since_id read');
    }

    # --------------------------------------------------- 6. deleted posts --

    {
        my @d = @$want;
        my ($bpost) = grep { $AUTHOR{$_} eq $bob && $_ ne $rich } @d[2 .. 8];
        my $own = $d[0] eq $rich ? $d[1] : $d[0];
        my $oa = $AUTHOR{$own};
        remove($bob, $bpost, "$mode: bob deletes a post in alice's warm cache");
        remove($oa, $own, "$mode: $oa deletes the newest post");
        my $w2 = expected($alice);
        is(scalar @$w2, 25, "$mode: (model) 25 left");
        page_is($alice, { limit => 100 }, $w2, 0,
            "$mode: the next read after the deletes", cache => 'HIT');
        walk_is(walk($alice, 4), $w2, "$mode: walk after the deletes");

        # the cursor itself deleted between two pages
        my $w = walk($alice, 5, via => 'max_id', between => sub {
            my ($n) = @_;
            return unless $n == 1;
            remove($AUTHOR{$w2->[4]}, $w2->[4],
                "$mode: delete the cursor post between pages");
            remove($AUTHOR{$w2->[12]}, $w2->[12],
                "$mode: delete a post not visited yet");
        });
        walk_is($w, [ grep { $_ ne $w2->[12] } @$w2 ],
            "$mode: walk with deletes between pages: the unvisited one gone");

        # deleted before the cache is built
        my $e = "erin-$p";
        follow($e, $bob);
        my @ep = create_round_robin("$mode: erin, bob", 3, $e, $bob);
        remove($e, $ep[2], "$mode: erin deletes a post of hers (cold)");
        remove($bob, $ep[3], "$mode: bob deletes a post (erin cold)");
        my $we = expected($e);
        ok(!grep({ $_ eq $ep[2] || $_ eq $ep[3] } @$we),
            "$mode: (model) erin's deleted posts left out");
        page_is($e, { limit => 100 }, $we, 0,
            "$mode: cold rebuild after the deletes", cache => 'MISS');
        page_is($e, { limit => 100 }, $we, 0,
            "$mode: and the HIT after it", cache => 'HIT');
    }

    # ---------------------------------------- 5. 100 posts of 4 KiB each --

    {
        my $u = "big-$p";
        my $f = "bigf-$p";
        follow($u, $f);
        my @specs;
        for my $i (1 .. 100) {
            my $s = sprintf('%s %03d ', $mode, $i);
            my $b = $s . join('', map { chr(0x21 + ($i * 7 + $_) % 90) }
                1 .. 4096 - length($s) - 2) . "\x{e9}";
            push @specs, [ $i % 3 ? $u : $f, { body => $b } ];
        }
        create_posts("$mode: 100 posts of 4 KiB", @specs);
        my $wb = expected($u);
        is(scalar @$wb, 100, "$mode: (model) 100 posts in big's timeline");
        my $rb = page_is($u, { limit => 100 }, $wb, 0,
            "$mode: 100 x 4 KiB, cold", cache => 'MISS');
        $rb = page_is($u, { limit => 100 }, $wb, 0,
            "$mode: 100 x 4 KiB, HIT", cache => 'HIT');
        ok(length($rb->{body}) > 400 * 1024, "$mode: a body of "
            . length($rb->{body}) . ' bytes');
        cache_is($u, $wb, 1, "$mode: 100 x 4 KiB");
        page_is($u, { limit => 100, max_id => $wb->[10] },
            [ @$wb[11 .. 99] ], 0, "$mode: 4 KiB posts, limit 100 from the "
            . 'middle', cache => 'HIT');
        walk_is(walk($u, 33), $wb, "$mode: 4 KiB posts by 33");
    }

    # ------------------------------------------------------ 4. coalescing --

    {
        my $u = "crowd-$p";
        my @fs = map { "crowdf$_-$p" } 1 .. 3;
        follow($u, @fs);
        create_round_robin("$mode: crowd", 10, $u, @fs);
        my $wc = expected($u);
        my $n0 = $REAL ? 0 : scalar(my @c0 = $t->mongo_commands);

        # each command of the rebuild takes 250 ms: all 200 requests are
        # in before it can be done
        $t->mongo_latency(250) unless $REAL;
        my $tc = time;
        my @h = map { $t->http_start('GET', tl_uri($u, limit => 50),
            timeout => 15) } 1 .. 200;
        my @res = map { $t->http_end($_) } @h;
        my $took = time - $tc;
        $t->mongo_latency(0) unless $REAL;

        my (%status, %cache, %bodies, @bad);
        for my $r (@res) {
            $status{$r->{status}}++;
            $cache{$r->{headers}{'x-feed-cache'} // '(none)'}++;
            my $tags = tag($r->{json});
            if ($r->{status} == 200 && ref $tags eq 'HASH') {
                $bodies{$JSON->encode($tags)}++;
            } elsif (@bad < 3) {
                push @bad, short($r);
            }
        }
        is_deeply(\%status, { 200 => 200 },
            "$mode: 200 concurrent cold reads, all 200")
            or diag(join "\n", map({ "$_ x$status{$_}" } sort keys %status),
                @bad);
        is(scalar keys %bodies, 1, "$mode: all 200 answers identical")
            or diag(scalar(keys %bodies) . ' different answers');
        my ($one) = grep { $_->{status} == 200 } @res;
        if ($one) {
            my @ids = map { $_->{id} } @{$one->{json}{items} || []};
            is_deeply(\@ids, $wc, "$mode: and they are the timeline")
                or diag(summary(\@ids, $wc));
        }
        is_deeply(\%cache, { MISS => 200 }, "$mode: all 200 answered MISS "
            . '(they waited for the rebuild)')
            or diag(join ', ', map { "$_ x$cache{$_}" } sort keys %cache);
        ok(1, sprintf('%s: 200 concurrent cold reads took %.2fs', $mode,
            $took));

        SKIP: {
            skip 'command log of the stand-in only', 2 if $REAL;
            my @cmds = $t->mongo_commands;
            @cmds = @cmds[$n0 .. $#cmds];
            my @fol = grep { ($_->{cmd} // '') eq 'find'
                && ($_->{coll} // '') eq 'follows'
                && ref $_->{filter} eq 'HASH'
                && ($_->{filter}{src} // '') eq $u
                && !exists $_->{filter}{dst} } @cmds;
            my @pst = grep { ($_->{cmd} // '') eq 'find'
                && ($_->{coll} // '') eq 'posts'
                && ref $_->{filter} eq 'HASH'
                && ref $_->{filter}{author} eq 'HASH'
                && ref $_->{filter}{author}{'$in'} eq 'ARRAY'
                && grep({ $_ eq $u } @{$_->{filter}{author}{'$in'}}) } @cmds;
            # the rebuild's 800 are more than feed_timeline_window's
            # posts: a second find, for those past it
            my @past = grep { ref $_->{filter}{_id} eq 'HASH'
                && exists $_->{filter}{_id}{'$lt'} } @pst;
            is(scalar @fol, 1, "$mode: ONE rebuild: one find of whom $u "
                . 'follows') or diag(join "\n", map { $JSON->encode($_) } @fol);
            is(scalar @pst - @past, 1, "$mode: ONE rebuild: one find of the "
                . 'posts, one more for those past the window')
                or diag(join "\n", map { $JSON->encode($_) } @pst);
            ok(@past <= 1, "$mode: ONE rebuild: at most one find past the "
                . 'window') or diag(join "\n", map { $JSON->encode($_) } @past);
        }
        cache_is($u, $wc, 1, "$mode: crowd");

        # concurrent cold reads of different pages of one user
        my $u2 = "crowd2-$p";
        follow($u2, @fs);
        my $w2 = expected($u2);
        $t->mongo_latency(150) unless $REAL;
        my @q;
        for my $i (0 .. 59) {
            my %q = (limit => 1 + ($i * 7) % 30);
            $q{max_id} = $w2->[$i % 40] if $i % 3 == 1;
            $q{since_id} = $w2->[10 + $i % 20] if $i % 4 == 2;
            push @q, \%q;
        }
        @h = map { $t->http_start('GET', tl_uri($u2, %$_), timeout => 15) }
            @q;
        @res = map { $t->http_end($_) } @h;
        $t->mongo_latency(0) unless $REAL;
        my @wrong;
        for my $i (0 .. $#q) {
            my $q = $q[$i];
            my $r = $res[$i];
            my $all = expected($u2, max_id => $q->{max_id},
                since_id => $q->{since_id});
            my @w = @$all[0 .. ($#$all < $q->{limit} - 1 ? $#$all
                : $q->{limit} - 1)];
            my @p = tl_page_problems($r, $u2, $q->{limit});
            my @got = @p ? () : map { $_->{id} } @{$r->{json}{items}};
            push @wrong, tl_uri($u2, %$q) . ': '
                . (@p ? $p[0] : summary(\@got, \@w))
                if @p || "@got" ne "@w"
                    || !!defined($r->{json}{next}) != !!(@$all > $q->{limit});
        }
        ok(!@wrong, "$mode: 60 concurrent cold reads of different pages, "
            . 'each the right page') or diag(join "\n", @wrong[0 .. 4]);
    }

    # ------------------------- 4. coalescing: clients that go away --

    {
        my $u = "gone-$p";
        follow($u, "crowdf1-$p");
        create_posts("$mode: gone", map { [ $u, { body => "gone $_" } ] }
            1 .. 5);
        my $wg = expected($u);
        $t->mongo_latency(300) unless $REAL;
        my @h = map { $t->http_start('GET', tl_uri($u, limit => 100),
            timeout => 15) } 1 .. 30;
        sleep 0.1;
        # the first ones (a leader in each worker, most likely) give up
        close $h[$_]{sock} for 0 .. 4;
        delete $h[$_]{sock} for 0 .. 4;
        my @res = map { $t->http_end($h[$_]) } 5 .. 29;
        $t->mongo_latency(0) unless $REAL;
        my @bad;
        for my $r (@res) {
            my @got = $r->{status} == 200
                ? map { $_->{id} } @{$r->{json}{items} || []} : ();
            push @bad, short($r) unless "@got" eq "@$wg";
        }
        ok(!@bad, "$mode: 5 of 30 concurrent cold readers go away, the "
            . '25 others get the timeline')
            or diag(scalar(@bad) . " not, first: $bad[0]");
        # a hit, from Redis or from the worker's copy it vouches for
        page_is($u, { limit => 100 }, $wg, 0, "$mode: gone, after",
            cache => qr/^(HIT|LOCAL)$/);
    }

    # ------------------------ link: a post's JSON gone from Redis --

    if ($mode eq 'link') {
        my $u = "lost-$p";
        follow($u, "crowdf1-$p");
        create_posts("$mode: lost", map { [ $u, { body => "lost $_" } ] }
            1 .. 5);
        my $wl = expected($u);
        page_is($u, { limit => 100 }, $wl, 0, "$mode: lost, cold",
            cache => 'MISS');
        eval { $t->redis('DEL', post_key($wl->[3])) };
        page_is($u, { limit => 100 }, $wl, 0, "$mode: feed:p:<id> of a "
            . 'cached post gone: still the whole timeline');
        page_is($u, { limit => 100 }, $wl, 0, "$mode: and after");
    }

    # -------------------------------------- 2. full scale: 2,000 posts, 800 --

    {
        my $wf = expected($FS);
        ok(@$wf >= 2000, "$mode: full scale: " . scalar(@$wf) . ' posts in '
            . 'the timeline');
        my $tw = time;
        page_is($FS, { limit => 100 }, [ @$wf[0 .. 99] ], 1,
            "$mode: full scale: cold read", cache => 'MISS');
        cache_is($FS, [ @$wf[0 .. 799] ], 0,
            "$mode: full scale: 800 cached");
        my $w = walk($FS, 100);
        walk_is($w, $wf, "$mode: full scale, by 100 via Link");
        cache_statuses_ok($w, live([ @$wf[0 .. 799] ]),
            "$mode: full scale, by 100");
        my $t_walk = time - $tw;

        # posts arrive while the walk goes on: newer than the cursor, never
        # in it
        $tw = time;
        my $k = 0;
        $w = walk($FS, 90, via => 'max_id', between => sub {
            my ($n) = @_;
            my @specs = map { [ $_, { body => "arrived " . $k++ } ] }
                ($FS, @FSF)[0 .. ($n % 5)];
            create_posts("$mode: full scale: new posts after page $n",
                @specs) if $n % 3 == 1;
        });
        walk_is($w, $wf, "$mode: full scale, by 90, new posts arriving");
        cache_statuses_hit_then_deep($w,
            "$mode: full scale, by 90, new posts arriving");
        ok(1, sprintf('%s: full scale: walks of 20 and 23 pages took %.1fs, '
            . '%.1fs', $mode, $t_walk, time - $tw));
    }

    $TIMING{"$mode, cache 800"} = time - $t_mode;

    # ------------------------------- 2. pagination past a cache of 50 --

    $t_mode = time;
    start_nginx($mode, 50);
    {
        my $u = "pg-$p";
        my @fs = ("pgf1-$p", "pgf2-$p");
        my $other = "pgx-$p";
        follow($u, @fs);
        my @specs;
        for my $i (1 .. 45) {
            push @specs, [ $u, { body => "pg $i" } ] if $i <= 30;
            push @specs, map { [ $_, { body => "$_ $i" } ] } @fs;
            push @specs, [ $other, { body => "not followed $i" } ]
                if $i <= 20;
        }
        create_posts("$mode, cache 50: 120 posts in pg's timeline, 20 "
            . 'elsewhere', @specs);
        my $wp = expected($u);
        is(scalar @$wp, 120, "$mode, cache 50: (model) 120 posts");

        page_is($u, { limit => 7 }, [ @$wp[0 .. 6] ], 1,
            "$mode, cache 50: cold read", cache => 'MISS');
        cache_is($u, [ @$wp[0 .. 49] ], 0, "$mode, cache 50");

        my $w = walk($u, 7);
        walk_is($w, $wp, "$mode, cache 50: by 7 via Link");
        cache_statuses_ok($w, [ @$wp[0 .. 49] ], "$mode, cache 50: by 7");
        $w = walk($u, 10, via => 'max_id');
        walk_is($w, $wp, "$mode, cache 50: by 10 via max_id (a page ends "
            . 'on the last cached post)');
        cache_statuses_ok($w, [ @$wp[0 .. 49] ], "$mode, cache 50: by 10");
        $w = walk($u, 100);
        walk_is($w, $wp, "$mode, cache 50: by 100");
        cache_statuses_ok($w, [ @$wp[0 .. 49] ], "$mode, cache 50: by 100");

        # pages starting past the cache
        page_is($u, { limit => 5, max_id => $wp->[70] },
            [ @$wp[71 .. 75] ], 1, "$mode, cache 50: a page past the cache",
            cache => 'DEEP');
        page_is($u, { limit => 100, max_id => $wp->[100] },
            [ @$wp[101 .. 119] ], 0, "$mode, cache 50: the last page past "
            . 'the cache', cache => 'DEEP');
        page_is($u, { limit => 20, max_id => $wp->[39] },
            [ @$wp[40 .. 59] ], 1, "$mode, cache 50: a page across the end "
            . 'of the cache', cache => 'DEEP');
        is_deeply(cache_ids($u), [ @$wp[0 .. 49] ],
            "$mode, cache 50: deep pages did not change the cache");
        page_is($u, { limit => 10, since_id => $wp->[0] }, [], 0,
            "$mode, cache 50: since_id of the newest: nothing",
            cache => 'HIT');
        page_is($u, { limit => 10, max_id => $wp->[-1] }, [], 0,
            "$mode, cache 50: max_id of the oldest: nothing",
            cache => 'DEEP');


        # since_id across the end of the cache
        page_is($u, { limit => 100, since_id => $wp->[70] },
            [ @$wp[0 .. 69] ], 0, "$mode, cache 50: since_id past the cache");
        page_is($u, { limit => 5, max_id => $wp->[60],
            since_id => $wp->[70] }, [ @$wp[61 .. 65] ], 1,
            "$mode, cache 50: max_id and since_id past the cache",
            cache => 'DEEP');
        walk_is(walk($u, 8, since_id => $wp->[70]), [ @$wp[0 .. 69] ],
            "$mode, cache 50: since_id past the cache, by 8 via Link");

        # deleted: one in the cache, one past it
        my @cached = @$wp[0 .. 49];
        remove($AUTHOR{$wp->[20]}, $wp->[20],
            "$mode, cache 50: delete a cached post");
        remove($AUTHOR{$wp->[49]}, $wp->[49],
            "$mode, cache 50: delete the last cached post");
        remove($AUTHOR{$wp->[80]}, $wp->[80],
            "$mode, cache 50: delete a post past the cache");
        my @wd = grep { !$DELETED{$_} } @$wp;
        is(scalar @wd, 117, "$mode, cache 50: (model) 117 left");
        $w = walk($u, 7);
        walk_is($w, \@wd, "$mode, cache 50: by 7 after the deletes");
        cache_statuses_ok($w, live(\@cached),
            "$mode, cache 50: by 7 after the deletes");
        page_is($u, { limit => 10, max_id => $wp->[75] },
            [ @$wp[76 .. 79], @$wp[81 .. 86] ], 1,
            "$mode, cache 50: a deep page around the deleted one",
            cache => 'DEEP');

        # new posts arriving while the walk goes on
        $w = walk($u, 9, via => 'max_id', between => sub {
            my ($n) = @_;
            create_posts("$mode, cache 50: new posts after page $n",
                map { [ $_, { body => "arrived after page $n" } ] }
                    $u, @fs);
        });
        walk_is($w, \@wd, "$mode, cache 50: by 9, new posts arriving between "
            . 'pages');
        cache_statuses_hit_then_deep($w,
            "$mode, cache 50: by 9, new posts arriving");
    }

    # exactly as many posts as the cache holds, and one fewer
    for my $n (50, 49) {
        my $u = "exact$n-$p";
        create_posts("$mode, cache 50: $n posts",
            map { [ $u, { body => "exact $_" } ] } 1 .. $n);
        my $we = expected($u);
        page_is($u, { limit => 10 }, [ @$we[0 .. 9] ], 1,
            "$mode, cache 50: $n posts, cold", cache => 'MISS');
        cache_is($u, $we, $n < 50, "$mode, cache 50: $n posts");
        my $w = walk($u, 10);
        walk_is($w, $we, "$mode, cache 50: $n posts by 10");
        cache_statuses_ok($w, $we, "$mode, cache 50: $n posts by 10",
            complete => $n < 50);
        page_is($u, { limit => 100 }, $we, 0,
            "$mode, cache 50: $n posts at once");
    }

    # 250 followees: the fallback's posts query in several parts, merged
    {
        my @au = map { sprintf('mf%03d%s', $_, $SFX) } 1 .. 250;
        create_round_robin("$mode, cache 50: 2 posts by each of 250 "
            . 'authors', 2, @au) if $mode eq 'link';
        my $u = "many-$p";
        follow($u, @au);
        create_posts("$mode, cache 50: many's own", [ $u, { body => 'own' } ]);
        my $wm = expected($u);
        is(scalar @$wm, 501, "$mode, cache 50: (model) 501 posts in the "
            . 'timeline of a user following 250');
        page_is($u, { limit => 100 }, [ @$wm[0 .. 99] ], 1,
            "$mode, cache 50: following 250, cold");
        cache_is($u, [ @$wm[0 .. 49] ], 0, "$mode, cache 50: following 250");
        my $w = walk($u, 45);
        walk_is($w, $wm, "$mode, cache 50: following 250, by 45");
        cache_statuses_ok($w, [ @$wm[0 .. 49] ],
            "$mode, cache 50: following 250, by 45");
        page_is($u, { limit => 100, max_id => $wm->[300],
            since_id => $wm->[350] }, [ @$wm[301 .. 349] ], 0,
            "$mode, cache 50: following 250, deep, max_id and since_id",
            cache => 'DEEP');
    }
    $TIMING{"$mode, cache 50"} = time - $t_mode;
}

ok(1, join(', ', sprintf('full scale data %.1fs', $FS_CREATE),
    map { sprintf('%s %.1fs', $_, $TIMING{$_}) } sort keys %TIMING)
    . sprintf(', total %.1fs', time - $T0));

$t->done;
