#!/usr/bin/perl

# Home timelines when a backend is slow or gone, and with an application
# as the fallback.  In both feed_cache_mode link and embed:
#
#   - MongoDB slower than feed_mongo_timeout, then stopped: cache hits
#     (HIT, or LOCAL from a worker's copy) stay fast 200s while misses (of
#     6 other users, and 4 at once of one user) wait, then answer 503
#     unavailable + Retry-After after about the timeout; back to normal
#     once MongoDB is;
#   - Redis stopped (and, in link mode, hung by SIGSTOP): every timeline
#     served from the fallback (BYPASS), the right posts, pagination and
#     since_id included, no deleted post;
#   - the fallback location as proxy_pass to a small HTTP application
#     written here: a cold read is its answer and warms the cache, a hit
#     does not ask it, pages past the cache do (DEEP), 200 cold readers
#     ask it once, and an answer of 500 or 404 (or none at all) makes a
#     miss 503 while hits go on.
#
# And (link mode) a post deleted while Redis is cut off, then reachable
# again with its cache intact: later reads must not show it.

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
    tl_page_problems status_all tl_key is_hit $HIT);

my $t = FeedTest->new;
my $REAL = FeedTest::real_mongo();
my $T0 = time;

$t->start_backends;

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:@@REDIS@@;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 800ms;
    feed_cache_size @@SIZE@@;
    feed_cache_ttl 7d;
    feed_cache_mode @@MODE@@;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            feed_timeline_fallback /_feed/timeline;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            @@FALLBACK@@
        }
        location = /status { feed_status; }
    }
}
EOF

my $SOURCE = 'feed_timeline_source;';
my $PROXY = 'proxy_pass http://127.0.0.1:%%PORT_APP%%;';

my $END = '0' x 24;
my $JSON = JSON::PP->new->utf8->canonical;
my $SFX = $REAL ? sprintf('-%x%x', $$, int(time) % 65536) : '';

# ---------------------------------------------------------------- helpers --

my ($MODE, $SIZE);

sub start_nginx {
    my (%o) = @_;
    $t->stop;
    ($MODE, $SIZE) = ($o{mode}, $o{size});
    (my $c = $CONF) =~ s/\@\@SIZE\@\@/$o{size}/;
    $c =~ s/\@\@MODE\@\@/$o{mode}/;
    $c =~ s/\@\@FALLBACK\@\@/$o{fallback}/;
    $c =~ s/\@\@REDIS\@\@/'%%PORT_' . uc($o{redis} || 'redis') . '%%'/e;
    $t->write_conf($c)->run;
    ok($t->wait_for(8,
        sub { status_all($t, 'redis') && status_all($t, 'mongo') }),
        "$o{name}: nginx up, redis and mongodb up");
}

# --- the model --

my (%TAG, %AUTHOR, %DELETED, %F);

sub follow {
    my ($u, @vs) = @_;
    my @bad;
    for my $v (@vs) {
        my $r = $t->http('PUT', "/users/$u/following/$v");
        if ($r->{status} == 204) {
            $F{$u}{$v} = 1;
        } else {
            push @bad, "$u -> $v: " . short($r);
        }
    }
    ok(!@bad, "$u follows @vs") or diag(join "\n", @bad);
}

sub create_posts {
    my ($name, @specs) = @_;
    my (@ids, @bad);
    my $n = @specs;
    while (my @batch = splice(@specs, 0, 25)) {
        my @h = map {
            [ $_->[0], $t->http_start('POST', "/users/$_->[0]/posts",
                body => enc($_->[1]),
                headers => { 'Content-Type' => 'application/json' }) ]
        } @batch;
        for my $h (@h) {
            my $r = $t->http_end($h->[1]);
            my $tag = tag($r->{json});
            my @p = $r->{status} == 201 ? post_problems($r->{json})
                : ('not 201');
            if (@p) {
                push @bad, join('; ', @p) . ': ' . short($r);
                next;
            }
            $TAG{$r->{json}{id}} = $tag;
            $AUTHOR{$r->{json}{id}} = $h->[0];
            push @ids, $r->{json}{id};
        }
    }
    ok(!@bad && @ids == $n, "$name: $n posts created")
        or diag(scalar(@bad) . ' failed, first: ' . ($bad[0] // ''));
    return @ids;
}

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

# without Redis a delete is refused: cached timelines could not be told to
# skip the post, so it is not deleted at all (503, nothing written)
sub remove_refused {
    my ($uid, $id, $name) = @_;
    my $r = $t->http('DELETE', "/users/$uid/posts/$id");
    ok($r->{status} == 503 && ($r->{json}{error} // '') eq 'unavailable'
        && defined $r->{headers}{'retry-after'},
        "$name: DELETE answers 503 unavailable, Retry-After")
        or diag(short($r));
    is($t->get("/posts/$id")->{status}, 200, "$name: the post is still there");
}

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

sub page_is {
    my ($uid, $q, $want, $want_next, $name, %o) = @_;
    my $r = $t->get(tl_uri($uid, %$q), timeout => $o{timeout} || 10);
    my $tags = tag($r->{json});
    my @p = tl_page_problems($r, $uid, $q->{limit} // 20);
    ok(!@p, "$name: a well-formed 200 page") or diag(join "\n", @p);
    return $r if @p;
    my $j = $r->{json};
    my @got = map { $_->{id} } @{$j->{items}};
    is_deeply(\@got, $want, "$name: the posts, newest first")
        or diag(summary(\@got, $want));
    is_deeply($tags->{items}, [ map { $TAG{$_} // "?$_" } @$want ],
        "$name: each post identical to its original") if "@got" eq "@$want";
    if ($want_next) {
        ok(defined $j->{next}, "$name: a next page") or diag(short($r));
    } else {
        ok(!defined $j->{next}, "$name: no next page") or diag(short($r));
    }
    # cache: a value, or a pattern ($HIT: a hit, from Redis or the
    # worker's copy)
    if (ref $o{cache}) {
        like($r->{headers}{'x-feed-cache'} // '', $o{cache},
            "$name: X-Feed-Cache "
            . ($o{cache} == $HIT ? 'a hit' : $o{cache}));
    } elsif (defined $o{cache}) {
        is($r->{headers}{'x-feed-cache'}, $o{cache},
            "$name: X-Feed-Cache $o{cache}");
    }
    return $r;
}

sub walk {
    my ($uid, $limit, %o) = @_;
    my (@ids, @tags, @pages, @problems);
    my $uri = tl_uri($uid, limit => $limit, since_id => $o{since_id});
    for my $n (1 .. 400) {
        my $before = $o{count} ? $o{count}->() : 0;
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
            asked => ($o{count} ? $o{count}->() - $before : 0) };
        last unless defined $j->{next};
        ($uri) = $r->{headers}{link} =~ /<([^>]*)>/;
        $uri =~ s{^https?://[^/]+}{};
    }
    return { ids => \@ids, tags => \@tags, pages => \@pages,
        problems => \@problems };
}

sub walk_is {
    my ($w, $want, $name) = @_;
    ok(!@{$w->{problems}}, "$name: every page a well-formed 200")
        or diag(join "\n", @{$w->{problems}});
    is_deeply($w->{ids}, $want, "$name: every post exactly once, newest "
        . 'first (' . scalar(@$want) . ' posts, ' . scalar(@{$w->{pages}})
        . ' pages)') or diag(summary($w->{ids}, $want));
    is_deeply($w->{tags}, [ map { $TAG{$_} // "?$_" } @$want ],
        "$name: each post identical to its original")
        if "@{$w->{ids}}" eq "@$want";
}

sub cache_statuses {
    my ($w) = @_;
    my %n;
    $n{$_->{cache} // '(none)'}++ for @{$w->{pages}};
    return \%n;
}

# a 503 {"error": "unavailable"} with Retry-After
sub unavailable_problems {
    my ($r) = @_;
    my @p;
    push @p, "status $r->{status}" unless $r->{status} == 503;
    push @p, 'not a JSON {"error": "unavailable", "message"}'
        unless ($r->{headers}{'content-type'} // '') =~ m{^application/json}i
            && ref $r->{json} eq 'HASH'
            && ($r->{json}{error} // '') eq 'unavailable'
            && is_str($r->{json}{message});
    push @p, 'no Retry-After'
        unless ($r->{headers}{'retry-after'} // '') =~
            /^\s*(\d+|\w{3}, \d\d \w{3} \d{4} [\d:]{8} GMT)\s*$/;
    return @p ? (@p, short($r)) : ();
}

sub cache_ids {
    my $l = eval { $t->redis('LRANGE', tl_key($_[0]), 0, -1) };
    return [ map { entry_id($_) } @{ ref $l eq 'ARRAY' ? $l : [] } ];
}

my %TIMING;

# ============================================ MongoDB slow, stopped; Redis down

for my $mode (qw(link embed)) {
    my $p = substr($mode, 0, 1) . $SFX;
    my $tm = time;

    eval { $t->redis('FLUSHALL') };
    start_nginx(name => "$mode, feed_timeline_source", mode => $mode,
        size => 800, fallback => $SOURCE);

    my $hot = "hot-$p";
    my @hf = ("hotf1-$p", "hotf2-$p");
    my @cold = map { "cold$_-$p" } 1 .. 12;
    my $same = "same-$p";
    follow($hot, @hf);
    follow($_, $hf[0]) for @cold, $same;
    create_round_robin("$mode: hot, its followees, the cold users", 3,
        $hot, @hf, @cold, $same);
    create_round_robin("$mode: hot and its followees", 10, $hot, @hf);
    my $wh = expected($hot);

    page_is($hot, { limit => 100 }, $wh, 0, "$mode: hot, cold read",
        cache => 'MISS');
    page_is($hot, { limit => 100 }, $wh, 0, "$mode: hot, warm",
        cache => 'HIT');

    SKIP: {
        skip 'slows and stops MongoDB: stand-in only', 30 if $REAL;

        # ------------------------------------------- 8a. MongoDB slow --

        $t->mongo_latency(2000);
        my $ts = time;
        my @miss = map { $t->http_start('GET', tl_uri($_, limit => 5),
            timeout => 15) } @cold[0 .. 5];
        my @same = map { $t->http_start('GET', tl_uri($same, limit => 5),
            timeout => 15) } 1 .. 4;
        sleep 0.1;

        my (@hits, @bad);
        for my $i (1 .. 15) {
            my $r = $t->get(tl_uri($hot, limit => 10, $i % 2 ?
                (max_id => $wh->[$i]) : ()));
            my $want = [ @$wh[($i % 2 ? $i + 1 : 0) ..
                ($i % 2 ? $i + 10 : 9)] ];
            my @got = $r->{status} == 200
                ? map { $_->{id} } @{$r->{json}{items} || []} : ();
            push @hits, $r->{elapsed};
            push @bad, "hit $i: " . short($r)
                unless $r->{status} == 200 && is_hit($r)
                    && "@got" eq "@$want";
        }
        my $hits_done = time - $ts;
        my ($max_hit) = sort { $b <=> $a } @hits;
        ok(!@bad, "$mode, mongodb slow: 15 hits meanwhile, each 200 a hit "
            . 'with the right posts') or diag(join "\n", @bad);
        ok($max_hit < 0.3, sprintf('%s, mongodb slow: each hit fast '
            . '(slowest %.3fs)', $mode, $max_hit));

        my @mr = map { $t->http_end($_) } @miss;
        my @sr = map { $t->http_end($_) } @same;
        my @why;
        for my $r (@mr, @sr) {
            my @u = unavailable_problems($r);
            push @why, join('; ', @u) if @u;
        }
        ok(!@why, "$mode, mongodb slow: 6 misses of 6 users and 4 of one "
            . 'user: 503 unavailable + Retry-After') or diag(join "\n", @why);
        my @el = sort { $a <=> $b } map { $_->{elapsed} } @mr;
        ok($el[0] > 0.6 && $el[-1] < 2.5, sprintf('%s, mongodb slow: the '
            . 'misses of 6 users answered after about the timeout of 0.8s '
            . '(%.2fs .. %.2fs)', $mode, $el[0], $el[-1]));
        my @els = map { sprintf '%.2fs', $_->{elapsed} } @sr;
        ok(!grep({ $_->{elapsed} > 2.5 || $_->{elapsed} < 0.6 } @sr),
            "$mode, mongodb slow: the 4 concurrent misses of one user too, "
            . "all within 2.5s (@els)");
        ok($hits_done < $el[0], sprintf('%s, mongodb slow: the 15 hits '
            . 'were all answered (%.2fs) while the misses still waited',
            $mode, $hits_done));

        $t->mongo_latency(0);
        sleep 0.3;
        # MongoDB fast again: the misses work, no lock left behind
        my $w1 = expected($cold[0]);
        my $r = page_is($cold[0], { limit => 100 }, $w1, 0,
            "$mode, mongodb fast again: a miss", cache => 'MISS');
        ok($r->{elapsed} < 1, sprintf('%s, mongodb fast again: the miss '
            . 'took %.3fs', $mode, $r->{elapsed}));
        page_is($same, { limit => 100 }, expected($same), 0,
            "$mode, mongodb fast again: the user whose rebuild failed",
            cache => 'MISS');

        # -------------------------------------------- 8b. MongoDB down --

        $t->stop_mongo;
        my $td = time;
        @miss = map { $t->http_start('GET', tl_uri($_, limit => 5),
            timeout => 15) } @cold[6 .. 9];
        sleep 0.05;
        @bad = ();
        @hits = ();
        for my $i (1 .. 10) {
            my $r = $t->get(tl_uri($hot, limit => 100));
            my @got = $r->{status} == 200
                ? map { $_->{id} } @{$r->{json}{items} || []} : ();
            push @hits, $r->{elapsed};
            push @bad, "hit $i: " . short($r)
                unless $r->{status} == 200 && is_hit($r)
                    && "@got" eq "@$wh";
        }
        ($max_hit) = sort { $b <=> $a } @hits;
        ok(!@bad && $max_hit < 0.3, sprintf('%s, mongodb stopped: hits are '
            . '200, right posts, fast (slowest %.3fs)', $mode, $max_hit))
            or diag(join "\n", @bad);
        @mr = map { $t->http_end($_) } @miss;
        push @mr, $t->get(tl_uri($cold[10]), timeout => 15);
        @why = ();
        for my $r (@mr) {
            my @u = unavailable_problems($r);
            push @why, join('; ', @u) if @u;
        }
        ok(!@why, "$mode, mongodb stopped: misses 503 unavailable + "
            . 'Retry-After') or diag(join "\n", @why);
        @el = sort { $a <=> $b } map { $_->{elapsed} } @mr;
        ok($el[-1] < 2.5, sprintf('%s, mongodb stopped: the misses '
            . 'answered within a few seconds (%.2fs .. %.2fs)', $mode,
            $el[0], $el[-1]));

        $t->start_mongo;
        ok($t->wait_for(10, sub { status_all($t, 'mongo') }),
            "$mode: mongodb back");
        page_is($cold[6], { limit => 100 }, expected($cold[6]), 0,
            "$mode, mongodb back: a miss", cache => 'MISS');
        page_is($hot, { limit => 100 }, $wh, 0,
            "$mode, mongodb back: still a hit", cache => $HIT);
        $TIMING{"$mode, mongodb slow and down"} = time - $tm;
    }

    # ------------------------------------------------- 9. Redis down --

    my $tr = time;
    my $ru = "rd-$p";
    my @rf = ("rdf1-$p", "rdf2-$p");
    follow($ru, @rf);
    my @rp = create_round_robin("$mode: rd and its followees", 15, $ru, @rf);
    remove($rf[0], $rp[4], "$mode: a post deleted before redis goes down");
    my $wr = expected($ru);
    is(scalar @$wr, 44, "$mode: (model) 44 posts in rd's timeline");
    page_is($ru, { limit => 10 }, [ @$wr[0 .. 9] ], 1,
        "$mode: rd warm", cache => 'MISS');

    $t->stop_redis;
    ok($t->wait_for(5, sub { status_all($t, 'redis', up => 0) }),
        "$mode: redis down");

    my $r = page_is($ru, { limit => 100 }, $wr, 0,
        "$mode, redis down: rd (cached before)", cache => 'BYPASS');
    ok($r->{elapsed} < 1.5, sprintf('%s, redis down: answered in %.3fs',
        $mode, $r->{elapsed}));
    page_is($cold[11], { limit => 100 }, expected($cold[11]), 0,
        "$mode, redis down: a user never cached", cache => 'BYPASS');
    my $w = walk($ru, 7);
    walk_is($w, $wr, "$mode, redis down: rd by 7 via Link");
    is_deeply(cache_statuses($w), { BYPASS => scalar @{$w->{pages}} },
        "$mode, redis down: every page BYPASS");
    page_is($ru, { limit => 5, since_id => $wr->[20] },
        [ @$wr[0 .. 4] ], 1, "$mode, redis down: since_id, the newest 5",
        cache => 'BYPASS');
    page_is($ru, { limit => 100, max_id => $wr->[3],
        since_id => $wr->[20] }, [ @$wr[4 .. 19] ], 0,
        "$mode, redis down: max_id and since_id", cache => 'BYPASS');
    remove_refused($AUTHOR{$wr->[1]}, $wr->[1],
        "$mode, redis down: a delete meanwhile");
    page_is($ru, { limit => 100 }, $wr, 0,
        "$mode, redis down: the post refused a delete still shown",
        cache => 'BYPASS');

    $t->start_redis;
    ok($t->wait_for(8, sub { status_all($t, 'redis') }), "$mode: redis back");
    remove($AUTHOR{$wr->[1]}, $wr->[1], "$mode, redis back: the delete");
    my $wr2 = expected($ru);
    page_is($ru, { limit => 100 }, $wr2, 0, "$mode, redis back: rebuilt",
        cache => 'MISS');
    page_is($ru, { limit => 100 }, $wr2, 0, "$mode, redis back: warm",
        cache => 'HIT');

    # Redis hung (SIGSTOP): after feed_redis_timeout, the same.  The page
    # was read twice since the MISS: a worker may answer its copy (LOCAL)
    # while the last heartbeat its watch heard was sent less than 300 ms
    # ago (nothing can change in a Redis that is stopped); past that, the
    # read waits for Redis, which is what this part tests
    if ($mode eq 'link') {
        $t->signal('redis', 'STOP');
        sleep 0.4;
        my $rh = $t->get(tl_uri($ru, limit => 100), timeout => 10);
        my @got = $rh->{status} == 200
            ? map { $_->{id} } @{$rh->{json}{items} || []} : ();
        ok($rh->{status} == 200
            && ($rh->{headers}{'x-feed-cache'} // '') eq 'BYPASS'
            && "@got" eq "@$wr2", "$mode, redis hung: 200 BYPASS, the "
            . 'timeline') or diag(short($rh));
        ok($rh->{elapsed} < 2.5, sprintf('%s, redis hung: answered in '
            . '%.2fs (feed_redis_timeout 1s)', $mode, $rh->{elapsed}));
        $t->signal('redis', 'CONT');
        ok($t->wait_for(8, sub { status_all($t, 'redis') }),
            "$mode: redis running again");
        page_is($ru, { limit => 100 }, $wr2, 0,
            "$mode, redis running again", cache => $HIT);
    }
    $TIMING{"$mode, redis down"} = time - $tr;
}

# =================== a delete while Redis is cut off, its cache intact

{
    my $tb = time;
    $t->start_proxy('redisproxy', $t->port('redis'));
    eval { $t->redis('FLUSHALL') };
    start_nginx(name => 'link, redis through a relay', mode => 'link',
        size => 800, fallback => $SOURCE, redis => 'redisproxy');

    my $u = "cut$SFX";
    my $f = "cutf$SFX";
    follow($u, $f);
    my @ids = create_round_robin('cut: posts', 5, $u, $f);
    my $w = expected($u);
    page_is($u, { limit => 100 }, $w, 0, 'cut: warm', cache => 'MISS');
    page_is($u, { limit => 100 }, $w, 0, 'cut: hit', cache => 'HIT');

    $t->stop_proc('redisproxy', 'TERM');
    ok($t->wait_for(5, sub { status_all($t, 'redis', up => 0) }),
        'cut: redis unreachable');
    my $gone = $w->[2];
    remove_refused($AUTHOR{$gone}, $gone, 'cut: a delete meanwhile');
    page_is($u, { limit => 100 }, $w, 0, 'cut: still shown meanwhile',
        cache => 'BYPASS');

    $t->start_proxy('redisproxy', $t->port('redis'));
    ok($t->wait_for(8, sub { status_all($t, 'redis') }), 'cut: redis reachable '
        . 'again, the cache still there')
        or diag('cache: ' . join(' ', @{cache_ids($u)}));
    remove($AUTHOR{$gone}, $gone, 'cut: the delete, redis back');
    my $t_del = time;
    # for 5 seconds after, 4 reads a second
    my $back = time;
    my (@seen, %st);
    for my $i (1 .. 20) {
        my $r = $t->get(tl_uri($u, limit => 100));
        my @got = $r->{status} == 200
            ? map { $_->{id} } @{$r->{json}{items} || []} : ();
        $st{($r->{headers}{'x-feed-cache'} // '-') . "/$r->{status}"}++;
        push @seen, sprintf('%.2fs', time - $back)
            if grep { $_ eq $gone } @got;
        sleep 0.25;
    }
    ok(!@seen, 'cut: reads after redis is back do not show the post '
        . 'deleted while it was cut off')
        or diag(sprintf("%s shown by %d of 20 reads, from %s to %s after "
            . "redis was back (which was %.2fs after the delete's 204); "
            . 'statuses: %s',
            $gone, scalar @seen, $seen[0], $seen[-1], $back - $t_del,
            join(', ', map { "$_ x$st{$_}" } sort keys %st)));
    $t->stop_proc('redisproxy', 'TERM');
    $TIMING{'redis cut off'} = time - $tb;
}

# ====================================== 10. proxy_pass to an application

my $APP_SRC = <<'EOF';
use strict;
use warnings;
use IO::Socket::INET;
use JSON::PP;

# app.pl PORT DATA LOG CONTROL: answers the timeline fallback contract from
# DATA ({"user": [post, ...newest first]}), re-read on every request;
# appends each request's URI to LOG; answers the status in CONTROL
# instead, when that file holds one

my ($port, $data, $log, $ctl) = @ARGV;
$SIG{TERM} = sub { exit 0 };
my $srv = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
    Listen => 128, ReuseAddr => 1) or die "listen $port: $!\n";
my $J = JSON::PP->new->utf8->canonical;

while (1) {
    my $c = $srv->accept or next;
    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        my $n = sysread($c, my $buf, 4096);
        last unless $n;
        $head .= $buf;
    }
    my ($uri) = $head =~ m{^\S+ (\S+)};
    $uri //= '';
    if (open my $lf, '>>', $log) { print $lf "$uri\n"; close $lf }

    my $status = 200;
    if (open my $cf, '<', $ctl) {
        my $s = <$cf>;
        $status = $1 if defined $s && $s =~ /(\d+)/;
        close $cf;
    }

    my $body;
    if ($status == 200) {
        my ($qs) = $uri =~ /\?(.*)$/;
        my %q = map { my ($k, $v) = split /=/, $_, 2; ($k => $v // '') }
            split /&/, $qs // '';
        open my $df, '<', $data or die "$data: $!\n";
        my $d = $J->decode(do { local $/; <$df> });
        close $df;
        my @items = grep {
            (!defined $q{max_id} || $_->{id} lt $q{max_id})
                && (!defined $q{since_id} || $_->{id} gt $q{since_id})
        } @{ $d->{$q{user} // ''} || [] };
        my $limit = $q{limit} // 20;
        splice(@items, $limit) if @items > $limit;
        $body = $J->encode({ items => \@items });
    } else {
        $body = qq({"error": "the app says $status"});
    }
    print $c "HTTP/1.1 $status X\r\nContent-Type: application/json\r\n"
        . 'Content-Length: ' . length($body) . "\r\nConnection: close\r\n\r\n"
        . $body;
    close $c;
}
EOF

{
    my $dir = $t->dir;
    my ($app, $data, $log, $ctl) = map { "$dir/$_" }
        qw(app.pl app-data.json app-requests.log app-status);
    open my $fh, '>', $app or die "$app: $!\n";
    print $fh $APP_SRC;
    close $fh;

    # the application's timelines: synthetic posts, ids newest first
    my %tl;
    my $base = int(time) - 100000;
    my $k = 0;
    my $mk = sub {
        my ($user, $n, @authors) = @_;
        my @posts;
        for my $i (1 .. $n) {
            $k++;
            my $p = { id => sprintf('%08x%016x', $base + $k, $k),
                author => $authors[$i % @authors],
                body => "app post $i for $user \x{e9}\x{1F600}",
                ts => ($base + $k) * 1000 };
            $p->{data} = { i => $i, l => [ 1, 'two', undef ],
                t => JSON::PP::true } if $i % 4 == 0;
            push @posts, $p;
        }
        $tl{$user} = [ reverse @posts ];
    };
    $mk->("app1$SFX", 120, 'app1', 'appf1', 'appf2');
    $mk->("app2$SFX", 10, 'app2');
    $mk->("app3$SFX", 10, 'app3');
    $mk->("app4$SFX", 30, 'app4', 'appf1');
    $mk->("app5$SFX", 8, 'app5');
    $mk->("app6$SFX", 8, 'app6');
    $mk->("app7$SFX", 6, 'app7');

    # among app7's posts, ids that are not post ids: an application's bug,
    # or worse (they went into "next" and the Link header as they were)
    my $i = 0;
    for my $bad ("0123456789abcdef01234567\r\nX-Injected: yes",
        'abc"def', 'ABCDEF0123456789ABCDEF01')
    {
        splice(@{$tl{"app7$SFX"}}, 1 + 2 * $i++, 0, { id => $bad,
            author => 'app7', body => 'not a post id', ts => $base * 1000 });
    }

    # and ids that are not even strings
    for my $bad (42, ['0123456789abcdef01234567']) {
        splice(@{$tl{"app7$SFX"}}, 1 + 2 * $i++, 0, { id => $bad,
            author => 'app7', body => 'no string id', ts => $base * 1000 });
    }

    open $fh, '>', $data or die "$data: $!\n";
    print $fh $JSON->encode(\%tl);
    close $fh;
    for my $u (keys %tl) {
        for my $p (@{$tl{$u}}) {
            $TAG{$p->{id}} = tag(FeedTest::json_decode($JSON->encode($p)));
        }
    }
    my %want = map { $_ => [ grep { /^[0-9a-f]{24}$/ }
        map { $_->{id} } @{$tl{$_}} ] } keys %tl;

    my $set_status = sub {
        open my $c, '>', "$ctl.new" or die;
        print $c "$_[0]\n";
        close $c;
        rename "$ctl.new", $ctl;
    };
    my $asked = sub {
        my ($u) = @_;
        open my $l, '<', $log or return ();
        return grep { m{[?&]user=\Q$u\E(&|$)} } map { chomp; $_ } <$l>;
    };

    $t->spawn('app', $^X, $app, $t->port('app'), $data, $log, $ctl);
    ok($t->wait_port($t->port('app')), 'the application listens');

    for my $mode (qw(link embed)) {
        my $tp = time;
        unlink $log;
        $set_status->(200);
        eval { $t->redis('FLUSHALL') };
        start_nginx(name => "$mode, proxy_pass", mode => $mode, size => 50,
            fallback => $PROXY);

        my $u = "app1$SFX";
        my $w = $want{$u};
        my $r = page_is($u, { limit => 20 }, [ @$w[0 .. 19] ], 1,
            "$mode, proxy: cold read is the application's answer",
            cache => 'MISS');
        my @a = $asked->($u);
        is(scalar @a, 1, "$mode, proxy: the application was asked once")
            or diag(join "\n", @a);
        like($a[0] // '', qr{^/_feed/timeline\?}, "$mode, proxy: at the "
            . 'fallback location');
        my ($lim) = ($a[0] // '') =~ /[?&]limit=(\d+)/;
        ok(defined $lim && $lim >= 20 && $a[0] !~ /max_id|since_id/,
            "$mode, proxy: for the newest posts, limit $lim");
        is_deeply(cache_ids($u), [ @$w[0 .. 49] ],
            "$mode, proxy: its answer warmed the cache (50 entries)");

        page_is($u, { limit => 20 }, [ @$w[0 .. 19] ], 1,
            "$mode, proxy: second read", cache => 'HIT');
        page_is($u, { limit => 30, max_id => $w->[5],
            since_id => $w->[40] }, [ @$w[6 .. 35] ], 1,
            "$mode, proxy: a page inside the cache", cache => 'HIT');
        is(scalar($asked->($u)), 1, "$mode, proxy: the hits did not ask the "
            . 'application');

        # past the cache: the application is asked for those pages only
        my $wk = walk($u, 15, count => sub { scalar $asked->($u) });
        walk_is($wk, $w, "$mode, proxy: by 15, past the cache");
        # hits: HIT, or LOCAL (the worker's copy) for the first page only
        my @wrong = map { "page $_: $wk->{pages}[$_ - 1]{cache}, asked "
            . "$wk->{pages}[$_ - 1]{asked}" } grep {
            my $pg = $wk->{pages}[$_ - 1];
            (is_hit($pg->{cache}) && $pg->{asked} != 0)
                || ($pg->{cache} eq 'DEEP' && $pg->{asked} < 1)
                || ($pg->{cache} eq 'LOCAL' && $_ != 1)
                || $pg->{cache} !~ /^(HIT|LOCAL|DEEP)$/
        } 1 .. @{$wk->{pages}};
        my $st = cache_statuses($wk);
        ok(!@wrong && ($st->{HIT} || $st->{LOCAL}) && $st->{DEEP},
            "$mode, proxy: hit pages "
            . 'did not ask the application, DEEP ones did ('
            . join(', ', map { "$_ x$st->{$_}" } sort keys %$st) . ')')
            or diag(join "\n", @wrong);
        my @deep = grep { /max_id=/ } $asked->($u);
        ok(@deep >= 1, "$mode, proxy: deep pages asked with max_id")
            or diag(join "\n", $asked->($u));

        # 200 cold readers: the application asked once
        my $u4 = "app4$SFX";
        my @h = map { $t->http_start('GET', tl_uri($u4, limit => 30),
            timeout => 15) } 1 .. 200;
        my @res = map { $t->http_end($_) } @h;
        my %bodies;
        my @bad;
        for my $x (@res) {
            if ($x->{status} == 200) {
                $bodies{$x->{body}}++;
            } else {
                push @bad, short($x);
            }
        }
        ok(!@bad, "$mode, proxy: 200 concurrent cold reads, all 200")
            or diag(scalar(@bad) . ' not: ' . $bad[0]);
        is(scalar keys %bodies, 1, "$mode, proxy: all identical");
        my @ids = $res[0]{json} ? map { $_->{id} } @{$res[0]{json}{items}}
            : ();
        is_deeply(\@ids, $want{$u4}, "$mode, proxy: the application's "
            . 'timeline');
        is(scalar($asked->($u4)), 1, "$mode, proxy: the application was "
            . 'asked once for the 200') or diag(join "\n", $asked->($u4));

        # the application fails: misses 503, hits go on
        for my $s (500, 404) {
            $set_status->($s);
            my $uu = $s == 500 ? "app2$SFX" : "app3$SFX";
            my $x = $t->get(tl_uri($uu));
            my @u = unavailable_problems($x);
            ok(!@u, "$mode, proxy: the application answers $s: a miss is "
                . '503 unavailable + Retry-After') or diag(join "\n", @u);
            is(scalar($asked->($uu)), 1, "$mode, proxy: it was asked");
            page_is($u, { limit => 20 }, [ @$w[0 .. 19] ], 1,
                "$mode, proxy: application answering $s, a hit",
                cache => $HIT);
            is_deeply(cache_ids($uu), [], "$mode, proxy: nothing cached for "
                . "the failed user");
        }
        $set_status->(200);
        page_is("app2$SFX", {}, $want{"app2$SFX"}, 0,
            "$mode, proxy: the application well again", cache => 'MISS');

        # no application at all
        $t->stop_proc('app');
        my $x = $t->get(tl_uri("app5$SFX"));
        my @u = unavailable_problems($x);
        ok(!@u, "$mode, proxy: the application is down: a miss is 503 "
            . 'unavailable + Retry-After') or diag(join "\n", @u);
        page_is($u, { limit => 20 }, [ @$w[0 .. 19] ], 1,
            "$mode, proxy: the application down, a hit", cache => $HIT);
        $t->spawn('app', $^X, $app, $t->port('app'), $data, $log, $ctl);
        ok($t->wait_port($t->port('app')), 'the application listens again');

        # Redis down: pages straight from the application
        $t->stop_redis;
        ok($t->wait_for(5, sub { status_all($t, 'redis', up => 0) }),
            "$mode, proxy: redis down");
        my $n6 = scalar $asked->("app6$SFX");
        page_is("app6$SFX", { limit => 5 }, [ @{$want{"app6$SFX"}}[0 .. 4] ],
            1, "$mode, proxy, redis down: from the application",
            cache => 'BYPASS');
        walk_is(walk($u, 40), $w, "$mode, proxy, redis down: by 40");
        my $x7 = page_is("app7$SFX", { limit => 2 },
            [ @{$want{"app7$SFX"}}[0 .. 1] ], 1,
            "$mode, proxy, redis down: ids that are not post ids skipped",
            cache => 'BYPASS');
        ok(!grep({ /injected/i } keys %{$x7->{headers}}),
            "$mode, proxy, redis down: no header injected by an id");
        walk_is(walk("app7$SFX", 2), $want{"app7$SFX"},
            "$mode, proxy, redis down: by 2 past ids that are not post ids");
        like($t->error_log, qr/items without a valid post id, skipped/,
            "$mode, proxy, redis down: the skipped ids logged");
        ok(scalar($asked->("app6$SFX")) > $n6, "$mode, proxy, redis down: "
            . 'the application was asked');
        $t->start_redis;
        ok($t->wait_for(8, sub { status_all($t, 'redis') }),
            "$mode, proxy: redis back");
        $TIMING{"$mode, proxy_pass"} = time - $tp;
    }
}

ok(1, join(', ', map { sprintf('%s %.1fs', $_, $TIMING{$_}) }
    sort keys %TIMING) . sprintf(', total %.1fs', time - $T0));

$t->done;
