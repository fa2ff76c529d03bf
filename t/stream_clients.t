#!/usr/bin/perl

# Live timelines (feed_timeline_stream) read by real clients, against real
# nginx (two workers, one Redis, the MongoDB stand-in, link mode):
#
#   - the npm eventsource package (FeedTest::SSE::node_client), through
#     t/lib/tcp_proxy.pl: it gets a post; the proxy is killed (the live TCP
#     connection cut from outside), two posts are made meanwhile, the proxy
#     is started again on the same port; the package reconnects by itself
#     with Last-Event-ID (the id of the post it got: nginx's access log
#     says) and gets exactly the two posts, oldest first, then a live one;
#   - the package across a reload of nginx: the old workers end their
#     streams, it reconnects to the new ones; each post once, in order;
#   - headless Chromium (FeedTest::SSE::browser): a page served by the same
#     nginx (same origin), whose EventSource gets a post made after it
#     reported 'open', with the post's id as lastEventId and the post's
#     JSON, as the timeline page has it, as data.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use File::Path qw(make_path);
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util qw(post statuses tl_ids);

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $T0 = time;
my $t = FeedTest->new;
my $dir = $t->dir;
make_path("$dir/www");

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF')->run;
worker_processes 2;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;

    log_format leid '$request_uri $status last-event-id=$http_last_event_id';

    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        access_log %%TESTDIR%%/streams.log leid;

        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline/stream$ {
            feed_timeline_stream $1;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /page.html { root %%TESTDIR%%/www; }
        location = /favicon.ico { return 204; }
        location = /status { feed_status; }
    }
}
EOF

ok($t->wait_for(15, sub {
    my $st = statuses($t);
    keys %$st == 2 && !grep { !($_->{redis}{up} && $_->{mongo}{up}
        && $_->{pull}{watch} && $_->{pull}{watch}{tracking}) } values %$st;
}), 'nginx up, both workers\' watches tracking');

my $port = $t->port('http');

sub items { @{ $t->get("/users/$_[0]/timeline?limit=$_[1]")->{json}{items}
    || [] } }
sub newest_is {
    my ($u, $id) = @_;
    return $t->wait_for(5, sub { (((items($u, 5))[0] // {})->{id} // '')
        eq $id });
}

# the access log's lines of a user's stream requests (nginx writes them
# when a stream ends)
sub stream_log {
    my ($u) = @_;
    open my $fh, '<', "$dir/streams.log" or return ();
    return grep { m{^/users/\Q$u\E/timeline/stream } } map { chomp; $_ }
        <$fh>;
}

for (['ann', 'bob'], ['cat', 'dan']) {
    is($t->http('PUT', "/users/$_->[0]/following/$_->[1]")->{status}, 204,
        "$_->[0] follows $_->[1]");
}
my $old = post($t, 'bob', 'old');
ok(newest_is('ann', $old), 'an old post in ann\'s timeline');

# -------------------------------------------- (a) the npm eventsource --

SKIP: {
    my $why = FeedTest::SSE::node_missing();
    if ($why) {
        fail("npm eventsource: $why");
        skip $why, 12;
    }

    my $pp = $t->start_proxy('sseproxy', $port);
    my $n = FeedTest::SSE::node_client(
        url => "http://127.0.0.1:$pp/users/ann/timeline/stream",
        seconds => 45, dir => $dir);

    my $opens = sub { scalar grep { $_->{type} eq 'open' } @_ };
    my $upd = sub { grep { $_->{type} eq 'update' } @_ };

    ok($n->wait_for(sub { $opens->(@_) >= 1 }, 10), 'node: open')
        or diag($n->stderr);
    sleep 0.5;     # the reader's first read: the stream live

    my $p1 = post($t, 'bob', 'before the cut');
    my @l = $n->wait_for(sub { grep { ($_->{id} // '') eq $p1 } @_ }, 5);
    ok(@l, 'node: the post made after it connected, as an update')
        or diag(explain([ $n->lines ]));
    is(join(' ', map { $_->{id} } $upd->(@l)), $p1,
        'node: that post only (not the old one)');

    # the connection cut from outside: the proxy (and its relaying
    # children) killed
    $t->stop_proc('sseproxy', 'TERM');
    my $cut = time;
    ok($n->wait_for(sub { grep { $_->{type} eq 'error' } @_ }, 5),
        'node: an error when the connection was cut')
        or diag(explain([ $n->lines ]));

    my @missed = map { post($t, 'bob', "while cut $_") } 1 .. 2;
    ok(newest_is('ann', $missed[-1]), 'two posts made while cut, in ann\'s '
        . 'timeline');

    # the same port again, within the package's 3 s wait when possible
    $t->start_proxy('sseproxy', $port);
    is($t->port('sseproxy'), $pp, 'the proxy again on the same port');

    @l = $n->wait_for(sub { $opens->(@_) >= 2 }, 15);
    ok(@l, sprintf('node: reconnected by itself (%.1fs after the cut)',
        time - $cut)) or diag(explain([ $n->lines ]));

    @l = $n->wait_for(sub { grep { ($_->{id} // '') eq $missed[-1] } @_ },
        5);
    my @after = @l;
    my ($i) = grep { $after[$_]{type} eq 'open' } reverse 0 .. $#after;
    @after = defined $i ? @after[$i + 1 .. $#after] : ();
    is(join(' ', map { "$_->{type} $_->{id}" } @after),
        join(' ', map { "update $_" } @missed),
        'node: after reconnecting, exactly the two posts made while cut, '
        . 'oldest first') or diag(explain([ $n->lines ]));

    my %item = map { $_->{id} => $_ } items('ann', 5);
    is_deeply([ map { FeedTest::json_decode($_->{data}) } @after ],
        [ map { $item{$_} } @missed ], 'node: their data: the posts as '
        . 'the timeline has them');

    my $live = post($t, 'bob', 'live after the reconnection');
    @l = $n->wait_for(sub { grep { ($_->{id} // '') eq $live } @_ }, 5);
    ok(@l, 'node: then a live post') or diag(explain([ $n->lines ]));
    my @all = map { $_->{id} } $upd->($n->lines);
    is("@all", "$p1 @missed $live", 'node: every post once, in order, no '
        . 'other event') or diag(explain([ $n->lines ]));
    is(join(',', map { $_->{type} } grep { $_->{type} !~ /^(?:update|open|error)$/ }
        $n->lines), '', 'node: no reset, no delete');

    $n->kill;
    $t->stop_proc('sseproxy', 'TERM');

    ok($t->wait_for(10, sub { stream_log('ann') >= 2 }),
        'nginx logged both streams');
    my @log = stream_log('ann');
    is(join("\n", map { /last-event-id=(\S*)/ ? ($1 eq '-' ? '(none)' : $1) : '?' }
        @log), "(none)\n$p1", 'node: Last-Event-ID: none, then the post it '
        . 'got before the cut') or diag(join "\n", @log);
}

# ------------------------------- (a2) the npm eventsource, a reload --

# nginx reloaded: the old workers end their streams at their next tick,
# the package reconnects to the new ones with Last-Event-ID; every post
# made around it reaches it once, in order
SKIP: {
    my $why = FeedTest::SSE::node_missing();
    if ($why) {
        fail("npm eventsource: $why");
        skip $why, 4;
    }

    my $n = FeedTest::SSE::node_client(
        url => "http://127.0.0.1:$port/users/ann/timeline/stream",
        seconds => 30, dir => $dir);
    my $opens = sub { scalar grep { $_->{type} eq 'open' } @_ };
    ok($n->wait_for(sub { $opens->(@_) >= 1 }, 10), 'reload: node open')
        or diag($n->stderr);
    sleep 0.5;
    my @p = (post($t, 'bob', 'before the reload'));
    ok($n->wait_for(sub { grep { ($_->{id} // '') eq $p[0] } @_ }, 5),
        'reload: a post live');

    ok($t->reload(15), 'reload: new workers');
    push @p, map { post($t, 'bob', "around the reload $_") } 1 .. 2;
    ok($n->wait_for(sub { $opens->(@_) >= 2 }, 15),
        'reload: the package reconnected') or diag(explain([ $n->lines ]));
    sleep 0.5;
    push @p, post($t, 'bob', 'after the reload');
    $n->wait_for(sub { grep { ($_->{id} // '') eq $p[-1] } @_ }, 5);
    my @ids = map { $_->{id} } grep { $_->{type} eq 'update' } $n->lines;
    is("@ids", "@p", 'reload: each post once, in order, across the two '
        . 'connections') or diag(explain([ $n->lines ]));
    $n->kill;
    ok($t->wait_for(15, sub { statuses($t) && keys %{ statuses($t) } == 2 }),
        'reload: both new workers answer');
}

# ------------------------------------------------ (b) headless Chromium --

SKIP: {
    my $why = FeedTest::SSE::browser_missing();
    if ($why) {
        fail("browser: $why");
        skip $why, 5;
    }

    FeedTest::SSE::browser_page_file(file => "$dir/www/page.html",
        stream => '/users/cat/timeline/stream');
    is($t->get('/page.html')->{status}, 200, 'nginx serves the page');

    # an application reads the timeline, then follows it live: the read
    # makes cat's list (link mode), which the fanout delivers to (a stream
    # of a user without a list is told "reset", reason "gone", and gets
    # no post until the timeline is read)
    is(scalar(items('cat', 5)), 0, 'cat\'s timeline read (empty)');

    my $b = FeedTest::SSE::browser(url => "http://127.0.0.1:$port/page.html",
        seconds => 40, dir => $dir);
    my @l = $b->wait_for(sub { grep { $_->{type} eq 'open' } @_ }, 30);
    ok(@l, 'browser: the page\'s EventSource open')
        or diag(substr($b->stderr, -3000));
    sleep 0.5;     # the reader's first read: the stream live

    my $p = post($t, 'dan', 'for the browser');
    @l = $b->wait_for(sub { grep { ($_->{lastEventId} // '') eq $p } @_ },
        10);
    ok(@l, 'browser: the post made after it connected')
        or diag(substr($b->stderr, -3000));
    my ($ev) = grep { $_->{type} eq 'update' } @l;
    ok($ev && $ev->{lastEventId} eq $p, 'browser: event update, '
        . 'lastEventId the post id') or diag(explain(\@l));
    my ($item) = grep { $_->{id} eq $p } items('cat', 5);
    is_deeply($ev && eval { FeedTest::json_decode($ev->{data}) }, $item,
        'browser: data: the post\'s JSON, as the timeline has it');
    is(join(',', map { $_->{type} } grep { $_->{type} ne 'page' } @l),
        'open,update', 'browser: open, then the update, nothing else')
        or diag(explain(\@l));

    $b->kill;
}

ok(time - $T0 < 90, sprintf('under 90 s (%.1fs)', time - $T0));
$t->done;
