#!/usr/bin/perl

# Unread counts: GET /users/{uid}/timeline/unread answers {"count", "more"},
# the posts of the home timeline newer than the read marker, and first
# pages of the timeline say the same in X-Feed-Unread.  With 2 workers,
# feed_cache_local, a cache of 24 posts, a pull author (celeb), in link and
# embed mode, against the posts as the test made them:
#
#   - no marker: everything the cache holds counts, no header;
#   - a marker: the count, and the header on 12 first pages across both
#     workers (MISS, then kept pages and worker copies: HIT), moves at once
#     with the marker, with a new post (a push), a mute (of a pushed
#     author and of the pull author), a block, a hidden post, a post being
#     deleted and a delete, each left out;
#   - a trimmed cache: a marker older than its end counts what it holds,
#     "more" ("24+" in the header); a marker inside it does not;
#   - the marker's copy gone from Redis: the count kept with the first
#     pages still answers; without it too, the count reads MongoDB and
#     fills the copy back (the header is left out until then); a user
#     without a marker gets a copy saying so;
#   - the list gone: the count rebuilds it (MISS), as a read does;
#   - a marker PUT whose copy Redis refused (out of memory: 503, the copy
#     and the count kept with it dropped, scripts/marker_drop.lua): no
#     first page nor count answers the old count, during the fault or
#     after it; the new count once the copy is back;
#   - a reload: the same counts; a reload (SIGHUP) with first pages,
#     counts and a marker's PUT held on the old workers: old and new
#     workers answer the same counts, a marker moved by an old worker
#     counted by the new ones and the other way round;
#   - Redis errors (the marker's copy of the wrong type) and Redis down:
#     the count from the fallback and MongoDB (BYPASS), pages without the
#     header;
#   - bad user ids 400, 405 with Allow, HEAD as GET, identity 401/403 (and
#     no header on another user's timeline).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Select;
use IO::Socket::INET;
use FeedTest;
use FeedTest::Util qw(short rd post server_conf parallel enc is_error
    node_counts node_moved statuses);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $MORE = <<'EOF';
        location ~ ^/posts/([^/]+)$ { feed_post $1; }
        location ~ ^/users/([^/]+)/blocks/([^/]+)$ { feed_block $1 $2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/hidden/([^/]+)$ { feed_hide $1 $2; }
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
        location ~ ^/users/([^/]+)/timeline/unread$ {
            feed_timeline_unread $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
EOF

my $CONF = <<'EOF';
worker_processes 2;
thread_pool feedtp threads=8;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 1s;
    feed_mongo_timeout 2s;
    feed_cache_mode @@MODE@@;
    feed_cache_size 24;
    feed_cache_local 1m;
    feed_fanout on;
    feed_fanout_block 100ms;
    feed_pull_threshold 3;

@@SERVER@@

    server {
        listen 127.0.0.1:%%PORT_HTTPID%%;
        feed_identity $http_x_user;
        location ~ ^/users/([^/]+)/timeline/unread$ {
            feed_timeline_unread $1;
        }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline { internal; feed_timeline_source; }
    }
}
EOF

my $RUN = $$ . int(time);
my $N = 0;

sub conf {
    my ($mode) = @_;
    my $c = $CONF;
    my $server = server_conf();
    $server =~ s/^(\s*location = \/status)/$MORE$1/m;
    # which worker answered: X-Worker, in the locations with headers of
    # their own too
    my $w = 'add_header X-Worker $pid always;';
    $server =~ s/(add_header X-Feed-Cache \$feed_cache_status always;)/$1
            $w/g;
    $server =~ s/^(\s*listen 127\.0\.0\.1:%%PORT_HTTP%% reuseport;)/$1
        $w/m or die "no listen\n";
    $c =~ s/\@\@SERVER\@\@\n/$server/;
    $c =~ s/\@\@MODE\@\@/$mode/;
    return $c;
}

sub put { $t->http('PUT', $_[0])->{status} }

sub mark {
    my ($uid, $id) = @_;
    return $t->http('PUT', "/users/$uid/timeline/marker",
        body => enc({ last_read_id => $id, force => \1 }),
        headers => { 'Content-Type' => 'application/json' })->{status};
}

sub unread { $t->get("/users/$_[0]/timeline/unread", @_[1 .. $#_]) }

# the posts newer than $marker ('' none) of @$posts ([id, author]) whose
# authors are not in @hidden
sub want {
    my ($posts, $marker, @hidden) = @_;
    my %h = map { $_ => 1 } @hidden;
    return scalar grep { $_->[0] gt $marker && !$h{ $_->[1] } } @$posts;
}

# the count answered, with its cache
sub count_is {
    my ($uid, $count, $more, $cache, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $r = unread($uid);
    my $j = $r->{json};
    ok($r->{status} == 200 && ref $j eq 'HASH'
        && defined $j->{count} && $j->{count} == $count
        && !!$j->{more} == !!$more
        && (!$cache || ($r->{headers}{'x-feed-cache'} // '') eq $cache),
        "$name: {\"count\": $count, \"more\": " . ($more ? 'true' : 'false')
        . '}' . ($cache ? ", $cache" : '')) or diag(short($r));
    return $r;
}

# X-Feed-Unread of 12 first pages, read 4 at a time (both workers): each
# the same, $want (undef: none), and their caches.  A worker's copy made
# before a change is answered until its watch hears the change, a few ms
# after a round trip sees it (another worker's, often: the change was
# waited for there): the 12 are read again, for up to a second, while
# some are stale.  Longer, a copy would outlive the watch's vouching
# (300 ms without a heartbeat heard, pull.md)
sub headers_are {
    my ($uid, $want, $name, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my (@r, @bad);
    my $end = time + 1;
    do {
        @r = parallel($t, 4, map { [ 'GET',
            "/users/$uid/timeline?limit=" . ($o{limit} || 5) ] } 1 .. 12);
        @bad = grep { $_->{status} != 200
            || ($_->{headers}{'x-feed-unread'} // 'none') ne ($want // 'none')
            } @r;
    } while (@bad && time < $end);
    my %c;
    $c{ $_->{headers}{'x-feed-cache'} // '' }++ for @r;
    ok(!@bad, "$name: 12 first pages, X-Feed-Unread "
        . ($want // 'none') . ' ('
        . join(', ', map { "$_ x$c{$_}" } sort keys %c) . ')')
        or diag(short($bad[0]) . ' unread '
            . ($bad[0]{headers}{'x-feed-unread'} // 'none'));
    return \%c;
}

# first pages @r after the marker moved from a count $old to $new: each
# 200, its X-Feed-Unread $new or none (the marker's copy not back yet),
# never $old
sub stale_none {
    my ($old, $new, $name, @r) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @bad = grep { $_->{status} != 200
        || ($_->{headers}{'x-feed-unread'} // $new) ne $new } @r;
    my %h;
    $h{ $_->{headers}{'x-feed-unread'} // 'none' }++ for @r;
    ok(!@bad, "$name: X-Feed-Unread $new or none, never $old ("
        . join(', ', map { "$_ x$h{$_}" } sort keys %h) . ')')
        or diag(short($bad[0]) . ' unread '
            . ($bad[0]{headers}{'x-feed-unread'} // 'none'));
}

# ------------------------------------------- requests held on a worker --

# a request held by the worker that took its connection: HEAD /status
# first, answered (its X-Worker names the worker), then $method $uri
# pipelined but for the blank line that ends its header: the worker waits
# for it, through a reload (a request under way keeps an old worker).
# held_end() sends the rest, and answers as $t->http does
sub held {
    my ($method, $uri, $body) = @_;
    $body //= '';
    my $s = IO::Socket::INET->new(PeerAddr => '127.0.0.1:'
        . $t->port('http'), Proto => 'tcp', Timeout => 10)
        or return { pid => '', error => "connect: $!" };
    $s->syswrite("HEAD /status HTTP/1.1\r\nHost: localhost\r\n\r\n"
        . "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\n" . (length $body
            ? "Content-Type: application/json\r\n"
              . 'Content-Length: ' . length($body) . "\r\n" : ''));
    my ($head, $sel) = ('', IO::Select->new($s));
    while ($head !~ /\r\n\r\n/ && $sel->can_read(10)) {
        $s->sysread(my $b, 4096) or last;
        $head .= $b;
    }
    my ($pid) = $head =~ /^X-Worker: (\d+)\r$/mi;
    return { sock => $s, pid => $pid // '', rest => "\r\n$body" };
}

sub held_end {
    my ($h) = @_;
    return { status => 0, headers => {}, error => $h->{error} }
        unless $h->{sock};
    $h->{sock}->syswrite($h->{rest});
    return $t->http_end({ sock => $h->{sock}, start => time,
        timeout => 10 });
}

# a held first page ($what 'page') or count ('count') answered by one of
# the workers of %$pids, with $want unread
sub held_is {
    my ($h, $what, $want, $pids, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $res = held_end($h);
    my $got = $what eq 'page' ? $res->{headers}{'x-feed-unread'}
        : ref $res->{json} eq 'HASH' ? $res->{json}{count} : undef;
    ok($res->{status} == 200 && $pids->{ $res->{headers}{'x-worker'} // '' }
        && ($got // 'none') eq $want, "$name: $want, by the worker that "
        . "held it ($h->{pid})") or diag(short($res) . ' x-worker '
            . ($res->{headers}{'x-worker'} // 'none') . ' unread '
            . ($got // 'none'));
}

# 12 first pages and 12 counts, 4 at a time: each $want, each answered
# by a worker of %$pids, and all of them answering
sub workers_count {
    my ($uid, $want, $pids, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my @r = parallel($t, 4, map { ([ 'GET', "/users/$uid/timeline?limit=5" ],
        [ 'GET', "/users/$uid/timeline/unread" ]) } 1 .. 12);
    my (%by, @bad);
    for my $i (0 .. $#r) {
        my $res = $r[$i];
        my $got = $i % 2 == 0 ? $res->{headers}{'x-feed-unread'}
            : ref $res->{json} eq 'HASH' ? $res->{json}{count} : undef;
        my $w = $res->{headers}{'x-worker'} // '';
        $by{$w}++;
        push @bad, $res if $res->{status} != 200 || !$pids->{$w}
            || ($got // 'none') ne $want;
    }
    ok(!@bad && keys %by == keys %$pids, "$name: 12 first pages and 12 "
        . "counts, $want, by the workers "
        . join(' ', map { "$_ x$by{$_}" } sort keys %by))
        or diag(@bad ? short($bad[0]) . ' x-worker '
            . ($bad[0]{headers}{'x-worker'} // 'none') . ' unread '
            . ($bad[0]{headers}{'x-feed-unread'} // 'none') : 'workers');
}

# ------------------------------------------------------------ each mode --

for my $mode (qw(link embed)) {
    $N++;
    my $u = sub { "$_[0]$N$RUN" };
    my ($r, $celeb) = ($u->('r'), $u->('celeb'));
    my @a = map { $u->("a$_") } 1 .. 3;

    $t->write_conf(conf($mode));
    $t->run('httpid');

    my @bad = grep { put("/users/$_->[0]/following/$_->[1]") != 204 }
        (map({ [$r, $_] } @a, $celeb),
         map({ [$u->("p$_"), $celeb] } 1 .. 3));
    ok(!@bad, "$mode: follows") or diag("@{ $bad[0] }");

    # celeb's followers make them a pull author before they post
    my @posts;
    push @posts, [post($t, $celeb, 'turn'), $celeb];
    ok($t->wait_for(5, sub {
        (rd($t, 'SISMEMBER', "feed:tla:{$r}", $celeb) // 0) == 1
        || !rd($t, 'EXISTS', "feed:tl:{$r}") }), "$mode: celeb turned");

    # 16 more posts, the authors interleaved
    for my $i (1 .. 4) {
        for my $w (@a, $celeb) {
            my $id = post($t, $w, "$w $i") or next;
            push @posts, [$id, $w];
        }
    }
    is(scalar @posts, 17, "$mode: 17 posts");

    # ------------------------------------------------------ no marker --

    count_is($r, 17, 0, 'MISS', "$mode: no marker: everything");
    is(rd($t, 'HGET', "feed:mk:{$r}", 'v'), '0',
        "$mode: the copy says: no marker");
    ok((rd($t, 'SISMEMBER', "feed:tla:{$r}", $celeb) // 0) == 1,
        "$mode: celeb is merged");
    count_is($r, 17, 0, 'HIT', "$mode: no marker, again");
    headers_are($r, undef, "$mode: no marker");

    # ---------------------------------------------------------- marker --

    my $m = $posts[6][0];
    is(mark($r, $m), 200, "$mode: marker set");
    my $n = want(\@posts, $m);
    is($n, 10, "$mode: 10 posts newer than the marker");
    count_is($r, $n, 0, 'HIT', "$mode: marker");
    my $c = headers_are($r, $n, "$mode: marker");
    ok($c->{HIT} && !$c->{MISS}, "$mode: marker: the reads were hits");
    my $c0 = node_counts($t);
    headers_are($r, $n, "$mode: marker, kept pages and workers' copies");
    my $d = node_moved($t, $c0);
    ok(($d->{'local_pages.answered'} // 0) > 0
        && ($d->{'pull.vouched'} // 0) > 0,
        "$mode: answered from workers' copies ($d->{'local_pages.answered'}"
        . "), vouched for (" . ($d->{'pull.vouched'} // 0) . ')');
    my $deep = $t->get("/users/$r/timeline?limit=5&max_id=$posts[-1][0]");
    ok($deep->{status} == 200 && !$deep->{headers}{'x-feed-unread'},
        "$mode: no header past the first page");
    my $unseen = $t->get("/users/$r/timeline?limit=5&unseen=1");
    ok($unseen->{status} == 200 && !$unseen->{headers}{'x-feed-unread'},
        "$mode: no header on a page of unseen posts") or diag(short($unseen));

    $m = $posts[12][0];
    is(mark($r, $m), 200, "$mode: marker moved");
    $n = want(\@posts, $m);
    count_is($r, $n, 0, 'HIT', "$mode: marker moved: at once");
    headers_are($r, $n, "$mode: marker moved: at once");

    # a push: the kept pages go, the count with them
    push @posts, [post($t, $a[0], 'new'), $a[0]];
    $n = want(\@posts, $m);
    ok($t->wait_for(5, sub { (unread($r)->{json}{count} // -1) == $n }),
        "$mode: a new post counts");
    headers_are($r, $n, "$mode: a new post");

    # a post of the pull author: in their own list
    push @posts, [post($t, $celeb, 'celeb new'), $celeb];
    $n = want(\@posts, $m);
    ok($t->wait_for(5, sub { (unread($r)->{json}{count} // -1) == $n }),
        "$mode: a new post of the pull author counts");
    headers_are($r, $n, "$mode: a new post of the pull author");

    # the pull author's list trimmed above the marker (made by hand: its
    # two newest entries, no end mark), the kept count dropped: more
    rd($t, 'LTRIM', "feed:pl:{$celeb}", 0, 1);
    rd($t, 'DEL', "feed:tlp:{$r}");
    count_is($r, $n, 1, 'HIT', "$mode: a pull author's list trimmed: more");
    headers_are($r, "$n+", "$mode: a pull author's list trimmed");
    rd($t, 'DEL', "feed:pl:{$celeb}");
    rd($t, 'DEL', "feed:tlp:{$r}");
    count_is($r, $n, 0, 'HIT', "$mode: the pull author's list gone: loaded");
    headers_are($r, $n, "$mode: the pull author's list loaded again");

    # ------------------------------------------------ filters, deletes --

    is(put("/users/$r/mutes/$a[1]"), 204, "$mode: mute");
    $n = want(\@posts, $m, $a[1]);
    count_is($r, $n, 0, 'HIT', "$mode: mute: left out");
    headers_are($r, $n, "$mode: mute");

    is(put("/users/$r/mutes/$celeb"), 204, "$mode: mute the pull author");
    $n = want(\@posts, $m, $a[1], $celeb);
    count_is($r, $n, 0, '', "$mode: muted pull author: left out");
    headers_are($r, $n, "$mode: muted pull author");

    # a delete in progress, as it begins (the post in feed:deleting, its
    # entries still in the lists, fanout yet to take them out, the
    # workers' copies told on feed:dlc): left out as soon as each worker
    # heard it, the count kept before not answered; then the delete itself.
    # Without the message, a worker's copy was answered (LOCAL) with the
    # old count until the other worker's read dropped the kept pages and
    # that was heard: a race the full run lost (CI, 7fac205's successor)
    my $dying = (grep { $_->[1] eq $a[2] && $_->[0] gt $m } @posts)[0][0];
    my $heard = sub { my $st = statuses($t);
        return { map { $_ => $st->{$_}{pull}{watch}{deletes} // 0 }
                 keys %$st } };
    my $d0 = $heard->();
    rd($t, 'ZADD', 'feed:deleting', '+inf', $dying);
    rd($t, 'PUBLISH', 'feed:dlc', $dying);
    ok($t->wait_for(5, sub { my $d = $heard->();
        keys(%$d) == 2 && !grep { $d->{$_} <= ($d0->{$_} // 0) } keys %$d }),
        "$mode: a post being deleted: both workers heard it");
    count_is($r, $n - 1, 0, 'HIT', "$mode: a post being deleted: left out");
    headers_are($r, $n - 1, "$mode: a post being deleted");
    is($t->http('DELETE', "/users/$a[2]/posts/$dying")->{status}, 204,
        "$mode: the post deleted");
    @posts = grep { $_->[0] ne $dying } @posts;
    $n = want(\@posts, $m, $a[1], $celeb);
    count_is($r, $n, 0, 'HIT', "$mode: the post deleted: still left out");

    my $del = (grep { $_->[1] eq $a[0] && $_->[0] gt $m } @posts)[0];
    is($t->http('DELETE', "/users/$a[0]/posts/$del->[0]")->{status}, 204,
        "$mode: delete a post");
    @posts = grep { $_->[0] ne $del->[0] } @posts;
    $n = want(\@posts, $m, $a[1], $celeb);
    ok($t->wait_for(5, sub { (unread($r)->{json}{count} // -1) == $n }),
        "$mode: a deleted post is left out ($n)")
        or diag(short(unread($r)));
    headers_are($r, $n, "$mode: a deleted post");

    is(put("/users/$r/blocks/$a[2]"), 204, "$mode: block");
    $n = want(\@posts, $m, $a[1], $celeb, $a[2]);
    count_is($r, $n, 0, '', "$mode: block: left out");
    headers_are($r, $n, "$mode: block");

    is($t->http('DELETE', "/users/$r/mutes/$a[1]")->{status}, 204,
        "$mode: unmute");
    $n = want(\@posts, $m, $celeb, $a[2]);
    count_is($r, $n, 0, '', "$mode: unmute: back");

    # a hidden post (pushed): left out at once, back when shown
    my $hid = (grep { $_->[1] eq $a[1] && $_->[0] gt $m } @posts)[0][0];
    is(put("/users/$r/hidden/$hid"), 204, "$mode: hide a post");
    count_is($r, $n - 1, 0, 'HIT', "$mode: a hidden post: left out");
    headers_are($r, $n - 1, "$mode: a hidden post");
    is($t->http('DELETE', "/users/$r/hidden/$hid")->{status}, 204,
        "$mode: show it again");
    count_is($r, $n, 0, 'HIT', "$mode: shown again: counted");
    headers_are($r, $n, "$mode: shown again");

    # -------------------------------------------- the list, the copy --

    rd($t, 'DEL', "feed:tl:{$r}");
    count_is($r, $n, 0, 'MISS', "$mode: the list gone: rebuilt");
    rd($t, 'DEL', "feed:tl:{$r}");
    $c = headers_are($r, $n, "$mode: the list gone, a page");
    ok($c->{MISS}, "$mode: the list gone: a page's MISS has the header");

    # the marker's copy gone (expired): the count kept with the first
    # pages holds (the marker did not move: a move drops it)
    rd($t, 'DEL', "feed:mk:{$r}");
    headers_are($r, $n, "$mode: the marker's copy gone: the count kept");
    count_is($r, $n, 0, 'HIT', "$mode: the marker's copy gone: the count");
    ok(!rd($t, 'EXISTS', "feed:mk:{$r}"), "$mode: MongoDB not asked");

    # and the count kept gone too: no header, the count asks MongoDB
    rd($t, 'HDEL', "feed:tlp:{$r}", 'u');
    headers_are($r, undef, "$mode: neither copy nor count: no header");
    count_is($r, $n, 0, 'HIT', "$mode: neither copy nor count: MongoDB");
    ok($t->wait_for(5, sub {
        (rd($t, 'HGET', "feed:mk:{$r}", 'l') // '') eq $m }),
        "$mode: the copy filled back");
    headers_are($r, $n, "$mode: the copy back");

    my $z = $u->('z');
    put("/users/$z/following/$a[0]");
    rd($t, 'DEL', "feed:mk:{$z}");
    count_is($z, want(\@posts, '', grep { $_ ne $a[0] } @a, $celeb), 0,
        '', "$mode: a user without a marker");
    is(rd($t, 'HGET', "feed:mk:{$z}", 'v'), '0',
        "$mode: the copy says no marker");

    # ------------------------------------------------- a trimmed cache --

    my ($q, $w) = ($u->('q'), $u->('w'));
    put("/users/$q/following/$w");
    my @many;
    push @many, [post($t, $w, "many $_"), $w] for 1 .. 30;
    count_is($q, 24, 1, 'MISS', "$mode: trimmed, no marker: more");
    is(mark($q, $many[1][0]), 200, "$mode: a marker past the cache");
    count_is($q, 24, 1, 'HIT', "$mode: a marker past the cache: more");
    headers_are($q, '24+', "$mode: a marker past the cache");
    is(mark($q, $many[20][0]), 200, "$mode: a marker in the cache");
    count_is($q, 9, 0, 'HIT', "$mode: a marker in the cache");
    headers_are($q, 9, "$mode: a marker in the cache");

    # ------------------------------- a marker PUT whose copy Redis refused --

    # out of memory (noeviction), Redis takes no write but deletes: the
    # PUT is stored in MongoDB and answered 503, its copy dropped, and the
    # count kept with the first pages, counted from the marker before,
    # with it.  No first page nor count answers that old count again.
    headers_are($r, $n, "$mode: before the refused PUT: the count kept");
    my @newer = sort { $a->[0] cmp $b->[0] }
        grep { $_->[0] gt $m && $_->[1] ne $celeb && $_->[1] ne $a[2] }
        @posts;
    my $m2 = $newer[0][0];
    my $n2 = want(\@posts, $m2, $celeb, $a[2]);
    ok($n2 != $n, "$mode: the refused marker counts $n2, the old one $n");

    rd($t, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    rd($t, 'CONFIG', 'SET', 'maxmemory', '1');
    my $ref = $t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $m2, force => \1 }),
        headers => { 'Content-Type' => 'application/json' });
    is_error($ref, 503, 'unavailable', "$mode: PUT, Redis out of memory");
    my @oom = parallel($t, 4,
        map { [ 'GET', "/users/$r/timeline?limit=5" ] } 1 .. 8);
    rd($t, 'CONFIG', 'SET', 'maxmemory', '0');
    stale_none($n, $n2, "$mode: out of memory, first pages", @oom);

    stale_none($n, $n2, "$mode: after the refused PUT, first pages",
        parallel($t, 4,
            map { [ 'GET', "/users/$r/timeline?limit=5" ] } 1 .. 12));
    count_is($r, $n2, 0, '', "$mode: after the refused PUT: the new count");
    ok($t->wait_for(5, sub {
        ($t->get("/users/$r/timeline?limit=5")->{headers}{'x-feed-unread'}
            // '') eq $n2 }), "$mode: after the refused PUT: the header back");
    headers_are($r, $n2, "$mode: after the refused PUT");

    is(mark($r, $m2), 200, "$mode: its retry: 200");
    count_is($r, $n2, 0, 'HIT', "$mode: its retry: the count");
    is(mark($r, $m), 200, "$mode: the marker back");
    count_is($r, $n, 0, 'HIT', "$mode: the marker back: the count");
    headers_are($r, $n, "$mode: the marker back");

    # ---------------------------------------------------------- reload --

    ok($t->reload, "$mode: reload");
    count_is($r, $n, 0, 'HIT', "$mode: after the reload");
    headers_are($r, $n, "$mode: after the reload");

    # a reload (SIGHUP) with requests under way on the old workers: they
    # answer them after the new workers started, a marker moved by an old
    # worker is counted by the new ones, and one moved by a new worker by
    # the old ones
    ok($n >= 2, "$mode: $n unread, 2 markers more to move to");
    my ($ma, $mb) = map { $_->[0] } @newer[0, 1];
    my %h = (page1 => held('GET', "/users/$r/timeline?limit=5"),
        count1 => held('GET', "/users/$r/timeline/unread"),
        put => held('PUT', "/users/$r/timeline/marker",
            enc({ last_read_id => $ma, force => \1 })),
        page2 => held('GET', "/users/$r/timeline?limit=5"),
        count2 => held('GET', "/users/$r/timeline/unread"));
    my %old = map { $_ => 1 } $t->worker_pids;
    ok(!grep({ !$old{ $_->{pid} } } values %h), "$mode: 5 requests held "
        . 'by the workers (' . join(' ', map { $_->{pid} } values %h) . ')');
    $t->signal('nginx', 'HUP');
    my %new;
    ok($t->wait_for(10, sub {
        %new = map { $_ => 1 } grep { !$old{$_} } $t->worker_pids;
        keys %new == 2 }), "$mode: SIGHUP: two new workers");
    # the master tells the old workers to shut down 100 ms after it
    # started the new ones: then they take no connection
    my %held = map { $_->{pid} => 1 } values %h;
    ok($t->wait_for(10, sub { !grep { `ps -o args= -p $_` !~ /shutting down/ }
        keys %held }), "$mode: the old workers holding requests shut down");

    workers_count($r, $n, \%new, "$mode: reloaded, the new workers");
    held_is($h{page1}, 'page', $n, \%held, "$mode: an old worker's page");
    held_is($h{count1}, 'count', $n, \%held,
        "$mode: an old worker's count");

    my $res = held_end($h{put});
    ok($res->{status} == 200 && $held{ $res->{headers}{'x-worker'} // '' }
        && ($res->{json}{last_read_id} // '') eq $ma,
        "$mode: an old worker moves the marker") or diag(short($res));
    my $na = want(\@posts, $ma, $celeb, $a[2]);
    workers_count($r, $na, \%new, "$mode: moved by an old worker, the new");

    $res = $t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $mb, force => \1 }),
        headers => { 'Content-Type' => 'application/json' });
    ok($res->{status} == 200 && $new{ $res->{headers}{'x-worker'} // '' },
        "$mode: a new worker moves the marker") or diag(short($res));
    my $nb = want(\@posts, $mb, $celeb, $a[2]);
    held_is($h{page2}, 'page', $nb, \%held,
        "$mode: moved by a new worker, an old worker's page");
    held_is($h{count2}, 'count', $nb, \%held,
        "$mode: moved by a new worker, an old worker's count");
    workers_count($r, $nb, \%new, "$mode: moved by a new worker, the new");
    ok($t->wait_for(10, sub { !grep { $old{$_} } $t->worker_pids }),
        "$mode: the old workers gone once their requests are answered");

    is(mark($r, $m), 200, "$mode: the marker back");
    count_is($r, $n, 0, 'HIT', "$mode: the marker back: the count");

    # ------------------------------------------------------ bad input --

    my $b = unread('bad!user');
    is_error($b, 400, 'invalid_user_id', "$mode: a bad user id");
    $b = $t->http('POST', "/users/$r/timeline/unread");
    ok($b->{status} == 405 && ($b->{headers}{allow} // '') eq 'GET, HEAD',
        "$mode: POST: 405, Allow: GET, HEAD") or diag(short($b));
    $b = $t->http('HEAD', "/users/$r/timeline/unread");
    ok($b->{status} == 200 && $b->{body} eq ''
        && ($b->{headers}{'x-feed-cache'} // '') eq 'HIT',
        "$mode: HEAD: 200, no body") or diag(short($b));

    # -------------------------------------------------------- identity --

    my $id = $t->port('httpid');
    $b = unread($r, port => $id);
    is_error($b, 401, 'unauthorized', "$mode: identity: none");
    $b = unread($r, port => $id, headers => { 'X-User' => $q });
    is_error($b, 403, 'forbidden', "$mode: identity: another");
    $b = unread($r, port => $id, headers => { 'X-User' => $r });
    is($b->{json}{count}, $n, "$mode: identity: the user's own");
    $b = $t->get("/users/$r/timeline", port => $id,
        headers => { 'X-User' => $q });
    ok($b->{status} == 200 && !exists $b->{headers}{'x-feed-unread'},
        "$mode: identity: another's timeline, no header") or diag(short($b));
    $b = $t->get("/users/$r/timeline", port => $id,
        headers => { 'X-User' => $r });
    is($b->{headers}{'x-feed-unread'}, $n,
        "$mode: identity: the user's own timeline, the header");

    # ------------------------------------------------ Redis errors, down --

    rd($t, 'DEL', "feed:mk:{$r}");
    rd($t, 'SET', "feed:mk:{$r}", 'not a hash');
    rd($t, 'HDEL', "feed:tlp:{$r}", 'u');
    count_is($r, $n, 0, 'BYPASS', "$mode: a Redis error: the fallback");
    rd($t, 'DEL', "feed:mk:{$r}");

    $t->stop_redis;
    count_is($r, $n, 0, 'BYPASS', "$mode: Redis down: the fallback");
    count_is($q, 9, 0, 'BYPASS', "$mode: Redis down: the other user");
    $b = $t->get("/users/$r/timeline?limit=5");
    ok($b->{status} == 200 && !exists $b->{headers}{'x-feed-unread'},
        "$mode: Redis down: pages without the header") or diag(short($b));
    $t->start_redis;

    $t->stop;
}

$t->done;
