#!/usr/bin/perl

# One JSON style, compact (issue 33): every JSON the module writes has no
# whitespace outside its strings, {"id":"...","author":"bob"} in
# {"items":[...]}, while a string keeps its spaces, quotes and
# backslashes.  conf/nginx.conf as shipped (feed_cache_size 4 and
# feed_pull_threshold 3, so that deep pages come from the fallback and an
# author is pulled), in link mode, then in embed mode: every answer with a
# body (a post's 201, its idempotent replay, posts read, lists of posts,
# timelines missed, hit, kept and deep, a long poll, an update event of a
# stream, the graph's lists and counts, blocks, mutes, hidden posts, the
# read marker, unread counts, the module's errors and the shipped
# configuration's error pages, /status), and what Redis keeps of posts
# and pages (feed:p: in link mode, the timeline's entries in embed mode,
# the pull author's list, the kept pages, the marker's copy).  The
# error pages of every configuration of conf/ are read too.  /metrics is
# Prometheus' text: not JSON, not checked.  A body may end with one "\n".

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(short enc follow_each none_failed post tl_ids entry_json);

# the offsets of the whitespace outside the strings of a JSON text: a
# backslash in a string escapes the byte after it
sub loose {
    my ($text) = @_;
    my ($in, $esc, @at) = (0, 0);
    for my $i (0 .. length($text) - 1) {
        my $c = substr($text, $i, 1);
        if ($in) {
            if ($esc) { $esc = 0 }
            elsif ($c eq '\\') { $esc = 1 }
            elsif ($c eq '"') { $in = 0 }
        } elsif ($c =~ /[ \t\r\n]/) {
            push @at, $i;
        } elsif ($c eq '"') {
            $in = 1;
        }
    }
    return @at;
}

# a JSON text (one "\n" after it allowed) that decodes and is compact
sub compact_ok {
    my ($text, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    $text //= '';
    (my $json = $text) =~ s/\n\z//;
    my @at = loose($json);
    my $valid = length $json && eval { FeedTest::json_decode($json); 1 };
    ok($valid && !@at, "$name: compact JSON")
        or diag(($valid ? '' : 'not JSON; ') . 'whitespace at '
            . join(' ', @at[0 .. ($#at > 4 ? 4 : $#at)]) . ': '
            . substr($text, 0, 300));
}

# an answer: its status, application/json, a compact body
sub answer_ok {
    my ($r, $status, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    is($r->{status}, $status, "$name: $status") or diag(short($r));
    like($r->{headers}{'content-type'} // '', qr{^application/json},
        "$name: application/json");
    compact_ok($r->{body}, $name);
}

# the scanner itself: a string's spaces and escapes are not outside it
is(join(' ', loose('{"a": [1, "b c"]}')), '5 9', 'loose: the spaces found');
is(join(' ', loose('{"a":"x \" y \\\\","b":[" ",{"c":"\\\\"}]}')), '',
    'loose: spaces and escaped quotes in strings are not outside them');
is(join(' ', loose('{"a":"\\\\" ,"b":1}')), '9',
    'loose: an escaped backslash ends the string before a space');

# the error pages of every configuration of conf/
for my $file (glob "$FindBin::Bin/../conf/*.conf") {
    open my $fh, '<', $file or die "$file: $!\n";
    my @pages = map { /return \d+ '(.*)\\n';/ ? $1 : () } <$fh>;
    close $fh;
    (my $short = $file) =~ s{.*/}{};
    ok(@pages >= 10, "$short: its error pages") or next;
    my @loose = grep { loose($_) } @pages;
    ok(!@loose, "$short: every error page compact") or diag("@loose");
}

my $t = FeedTest->new;
$t->start_backends;

# a body with what a squeeze must not touch: spaces, a quote, backslashes,
# a tab and a line break (both escaped by libbson)
my $BODY = qq(hello, "ann" \\ { "x" : 1 }, back\\slash\ttab\nline);

for my $mode (qw(link embed)) {
    my $m = substr($mode, 0, 1);
    my ($a, $r, $p) = map { "$m$_" } qw(a r p);

    my $conf = $t->shipped_conf;
    $conf =~ s/^(\s*feed_cache_mode )link;/$1$mode;/m
        or die "no feed_cache_mode link in conf/nginx.conf\n";
    $conf =~ s/^(\s*feed_cache_size )\d+;/${1}4;/m
        or die "no feed_cache_size in conf/nginx.conf\n";
    $conf =~ s/^(\s*feed_pull_threshold )\w+;/${1}3;/m
        or die "no feed_pull_threshold in conf/nginx.conf\n";
    $t->write_conf($conf)->run;

    # the graph: $r follows $a and $p, who has 3 followers (pulled)
    none_failed([ follow_each($t, $a, $r) ], "$mode: $r follows $a");
    none_failed([ follow_each($t, $p, $r, "${m}x1", "${m}x2") ],
        "$mode: $p has 3 followers");

    # posts: the 201, a read, a list
    my $c = $t->http('POST', "/users/$a/posts", body => enc({ body => $BODY }),
        headers => { 'Content-Type' => 'application/json' });
    answer_ok($c, 201, "$mode: a post's 201");
    is($c->{json}{body}, $BODY, "$mode: its body as sent, spaces and all");
    my $id = $c->{json}{id} // 'none';
    my @ids = ($id, map { post($t, $a, "post $_ of $a") } 1 .. 5);
    answer_ok($t->get("/posts/$id"), 200, "$mode: GET /posts/{id}");
    my $l = $t->get("/users/$a/posts?limit=2");
    answer_ok($l, 200, "$mode: a page of the posts of $a");
    ok(defined $l->{json}{next}, "$mode: ... with a next page");

    # the idempotent replay
    my @k = map {
        $t->http('POST', "/users/$a/posts", body => '{"body": "keyed"}',
            headers => { 'Content-Type' => 'application/json',
                'Idempotency-Key' => "k$m" })
    } 1, 2;
    answer_ok($k[0], 201, "$mode: a keyed post");
    answer_ok($k[1], 201, "$mode: its replay");
    is($k[1]{json}{id}, $k[0]{json}{id}, "$mode: the replay is the post");
    unshift @ids, $k[0]{json}{id} // 'none';

    # timelines: a miss, a hit (or the worker's copy), a deep page
    my $tl = $t->get("/users/$r/timeline?limit=2");
    answer_ok($tl, 200, "$mode: a timeline missed ("
        . ($tl->{headers}{'x-feed-cache'} // '') . ')');
    my $pp = post($t, $p, "a pulled post of $p");
    my $pushed = post($t, $a, "a pushed post of $a");
    ok($t->wait_for(10, sub {
        (tl_ids($t->get("/users/$r/timeline?limit=2"))->[0] // '')
            eq ($pushed // 'none') }), "$mode: the pushed post delivered");
    my %seen;
    for my $i (1 .. 3) {
        $tl = $t->get("/users/$r/timeline?limit=2");
        my $cache = $tl->{headers}{'x-feed-cache'} // '';
        $seen{$cache}++;
        answer_ok($tl, 200, "$mode: a first page read again ($cache)");
    }
    my $uri = "/users/$r/timeline?limit=3";
    for my $page (1 .. 4) {
        $tl = $t->get($uri);
        my $cache = $tl->{headers}{'x-feed-cache'} // '';
        $seen{$cache}++;
        answer_ok($tl, 200, "$mode: page $page ($cache)");
        my $next = $tl->{json}{next} or last;
        $uri = "/users/$r/timeline?limit=3&max_id=$next";
    }
    ok($seen{DEEP}, "$mode: a page past the cache read ("
        . join(' ', map { "$_ x$seen{$_}" } sort keys %seen) . ')');
    my $pulled = grep { $_ eq ($pp // 'none') }
        @{ tl_ids($t->get("/users/$r/timeline?limit=20")) };
    ok($pulled, "$mode: the pulled post in the timeline");

    # a long poll, and an update of a stream
    my $s = FeedTest::SSE->open(port => $t->port('http'),
        path => "/users/$r/timeline/stream");
    is($s->status, 200, "$mode: a stream");
    my $h = $t->http_start('GET',
        "/users/$r/timeline?since_id=$pushed&wait=20", timeout => 30);
    sleep 0.3;
    my $live = post($t, $a, "  a live post  ");
    answer_ok($t->http_end($h), 200, "$mode: a long poll");
    my $ev;
    for (1 .. 5) {
        $ev = $s->next_event(timeout => 3) or last;
        last if $ev->{event} eq 'update';
    }
    is($ev && $ev->{id}, $live, "$mode: the stream's update");
    compact_ok($ev && $ev->{data}, "$mode: the update's data");
    $s->close;

    # the graph, blocks, mutes and hidden posts
    answer_ok($t->get("/users/$r/following"), 200, "$mode: following");
    answer_ok($t->get("/users/$p/followers?limit=1"), 200,
        "$mode: followers, a page");
    for my $w (qw(blocks mutes)) {
        is($t->http('PUT', "/users/$r/$w/${m}z")->{status}, 204, "PUT $w");
        answer_ok($t->get("/users/$r/$w"), 200, "$mode: $w");
        $t->http('DELETE', "/users/$r/$w/${m}z");
    }
    is($t->http('PUT', "/users/$r/hidden/$ids[-1]")->{status}, 204,
        "$mode: a post hidden");
    answer_ok($t->get("/users/$r/hidden"), 200, "$mode: hidden posts");

    # the read marker, unread counts
    my $mk = $t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $ids[2] }),
        headers => { 'Content-Type' => 'application/json' });
    answer_ok($mk, 200, "$mode: the read marker set");
    answer_ok($t->get("/users/$r/timeline/marker"), 200,
        "$mode: the read marker read");
    answer_ok($t->get("/users/$r/timeline/unread"), 200,
        "$mode: unread count");

    # errors: the module's, and the shipped configuration's pages
    answer_ok($t->get('/posts/' . ('0' x 24)), 404, "$mode: no such post");
    answer_ok($t->get('/posts/nothex'), 400, "$mode: an invalid post id");
    answer_ok($t->http('POST', "/users/$a/posts", body => '{"body": ',
        headers => { 'Content-Type' => 'application/json' }), 400,
        "$mode: invalid JSON");
    answer_ok($t->http('DELETE', "/users/$r/timeline"), 405,
        "$mode: a method not allowed");
    answer_ok($t->http('PUT', "/users/$r/timeline/marker",
        body => enc({ last_read_id => $ids[1] }),
        headers => { 'Content-Type' => 'application/json',
            'If-Match' => '99' }), 409, "$mode: a marker's version stale");
    answer_ok($t->get('/no/such/thing'), 404, "$mode: the conf's 404");
    answer_ok($t->http('GET', '/', raw => "GET /x%00y HTTP/1.1\r\n"
        . "Host: localhost\r\nConnection: close\r\n\r\n"), 400,
        "$mode: the conf's 400");

    answer_ok($t->get('/status'), 200, "$mode: /status");

    # what Redis keeps: posts (feed:p: in link mode, the timeline's
    # entries in embed mode), the pull author's list (read from MongoDB,
    # then a post added), the marker's copy; an entry of a list is the
    # id's 12 bytes, then the JSON, and END (the mark of a whole list) an
    # id alone; kept first pages hold no JSON (their version and span).
    # The consumer adds the post to the list after the 201 (waited for),
    # and its readers' kept pages go: the pages read after it are kept
    post($t, $p, "a pulled post of $p, added to its list");
    ok($t->wait_for(10, sub {
        $t->get("/users/$r/timeline?limit=2");
        grep({ length > 12 }
            @{ $t->redis('LRANGE', "feed:pl:{$p}", 0, -1) || [] }) >= 2 }),
        "$mode: the pulled post added to its list");
    $t->wait_for(10, sub {
        $t->get("/users/$r/timeline?limit=2");
        my %kept = @{ $t->redis('HGETALL', "feed:tlp:{$r}") || [] };
        grep { /^v\d+$/ } keys %kept });
    my @posts;
    if ($mode eq 'link') {
        my ($cur, @keys) = (0);
        do {
            my $sc = $t->redis('SCAN', $cur, 'MATCH', 'feed:p:*',
                'COUNT', 1000);
            ($cur, my $k) = @$sc;
            push @keys, @$k;
        } while ($cur);
        @posts = map { [ $_, $t->redis('GET', $_) ] } @keys;
    } else {
        @posts = map { [ "feed:tl:{$r}", entry_json($_) ] }
            grep { length > 12 }
                @{ $t->redis('LRANGE', "feed:tl:{$r}", 0, -1) };
    }
    my @pull = map { [ "feed:pl:{$p}", entry_json($_) ] }
        grep { length > 12 }
            @{ $t->redis('LRANGE', "feed:pl:{$p}", 0, -1) };
    my %pages = @{ $t->redis('HGETALL', "feed:tlp:{$r}") || [] };
    my @marker = ([ "feed:mk:{$r} j",
        $t->redis('HGET', "feed:mk:{$r}", 'j') ]);
    is(join(' ', scalar(@posts) >= 3 ? 'posts' : scalar(@posts),
        scalar(@pull) >= 2 ? 'pull' : scalar(@pull),
        (grep { /^v\d+$/ } keys %pages) ? 'page' : 0),
        'posts pull page', "$mode: what Redis keeps, to read")
        or diag(join ' ', @{ $t->redis('KEYS', 'feed:*') });
    ok(!grep({ /^\d+$/ } keys %pages), "$mode: no page's JSON kept");
    compact_ok($_->[1], "$mode: $_->[0]") for @posts, @pull, @marker;

    next unless $mode eq 'link';
    ok($t->stop, "$mode: nginx stopped gracefully");
    $t->redis('FLUSHALL');
}

$t->done;
