#!/usr/bin/perl

# feed_metrics: the node's counters in Prometheus' text format 0.0.4, with
# 2 workers, parsed by prometheus_client's own parser (Debian's
# python3-prometheus-client), not by patterns:
#
#   - the answer is text/plain; version=0.0.4, it parses, every family has
#     HELP and TYPE, counters end in _total, histograms' buckets are
#     cumulative and end with +Inf, which equals _count;
#   - values move with requests: follows and posts by endpoint and status
#     class, posts created and deleted, timeline reads MISS then HIT then
#     DEEP, rebuild and fallback latencies, fanout deliveries, MongoDB
#     queue waits with one thread and a slow MongoDB, Redis stopped (BYPASS,
#     errors, connections down) and started again;
#   - every scrape, whichever worker answers, sees the whole node;
#   - a reload keeps the counts, and the connections gauge of the old
#     workers goes with them.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post follow_each parallel server_conf
    metrics_scrape metrics_val);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

# the usual server, with /metrics, and followers limited to one a minute,
# refused by way of an error_page location
my $EXTRA = <<'EOF';
location = /metrics { feed_metrics; }
        location ~ ^/users/([^/]+)/followers$ {
            limit_req zone=one;
            feed_followers $1;
        }
        error_page 429 /_error/429;
        location = /_error/429 { internal; return 429 "slow down\n"; }
EOF
my $server = server_conf();
$server =~ s{^(\s*)(location = /status .*)$}{$1$2\n$1$EXTRA}m
    or die "no /status in server_conf()\n";

$t->write_conf(<<"EOF");
worker_processes 2;
thread_pool feedtp threads=1;
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_redis_connect_timeout 500ms;
    feed_mongo_timeout 3s;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_cache_size 5;
    limit_req_zone \$binary_remote_addr zone=one:1m rate=1r/m;
    limit_req_status 429;
$server}
EOF

$t->run;

my $RUN = $$ . int(time);

# ------------------------------------------------------------- parsing --

sub scrape { metrics_scrape($t) }
sub val { metrics_val(@_) }

# what is wrong with a scrape's families as Prometheus defines them
sub problems {
    my ($m) = @_;
    my @p;
    push @p, "no families" unless @{$m->{fams}};
    for my $f (@{$m->{fams}}) {
        my $n = $f->{name};
        push @p, "$n: not feed_" unless $n =~ /^feed_/;
        push @p, "$n: no HELP" unless length($f->{help} // '');
        push @p, "$n: type $f->{type}"
            unless $f->{type} =~ /^(counter|gauge|histogram)$/;
        if ($f->{type} eq 'counter') {
            push @p, map { "$n: counter sample $_->[0]" }
                grep { $_->[0] !~ /_total$/ } @{$f->{samples}};
        }
        push @p, histogram_problems($f) if $f->{type} eq 'histogram';
    }
    return @p;
}

sub histogram_problems {
    my ($f) = @_;
    my $n = $f->{name};
    my @b = grep { $_->[0] eq "${n}_bucket" } @{$f->{samples}};
    my ($count) = grep { $_->[0] eq "${n}_count" } @{$f->{samples}};
    my ($sum) = grep { $_->[0] eq "${n}_sum" } @{$f->{samples}};
    my @p;
    push @p, "$n: no buckets" unless @b;
    push @p, "$n: no _count" unless $count;
    push @p, "$n: no _sum" unless $sum;
    return @p if @p;
    my $le = sub { $_[0] eq '+Inf' ? 9**9**9 : $_[0] };
    @b = sort { $le->($a->[1]{le}) <=> $le->($b->[1]{le}) } @b;
    push @p, "$n: last bucket le=$b[-1][1]{le}" if $b[-1][1]{le} ne '+Inf';
    for (1 .. $#b) {
        push @p, "$n: le=$b[$_][1]{le} below the one before"
            if $b[$_][2] < $b[$_ - 1][2];
    }
    push @p, "$n: _count $count->[2], +Inf $b[-1][2]"
        if $count->[2] != $b[-1][2];
    return @p;
}

# a histogram's bucket, _count and _sum
sub hist {
    my ($m, $n, $le) = @_;
    return (val($m, "${n}_bucket", le => $le) // -1,
        val($m, "${n}_count") // -1, val($m, "${n}_sum") // -1);
}

sub req { val($_[0], 'feed_requests_total', endpoint => $_[1],
    code => $_[2]) // -1 }
sub reads { val($_[0], 'feed_timeline_reads_total', cache => $_[1]) // -1 }
sub conns { val($_[0], 'feed_redis_connections', state => $_[1]) // -1 }

# ------------------------------------------------------------- format --

my $m0 = scrape();
is($m0->{status}, 200, 'GET /metrics: 200') or diag($m0->{error});
is($m0->{type}, 'text/plain; version=0.0.4; charset=utf-8',
    'content type: the text format 0.0.4');
ok(!$m0->{error}, 'the answer parses') or diag($m0->{error});
my @p = problems($m0);
ok(!@p, 'every family has HELP and TYPE, counters _total, histograms '
    . 'cumulative up to +Inf = _count') or diag(join("\n", @p));

my %types = map { $_->{name} => $_->{type} } @{$m0->{fams}};
my %want = (
    feed_requests => 'counter', feed_timeline_reads => 'counter',
    feed_timeline_rebuild_seconds => 'histogram',
    feed_timeline_fallback_seconds => 'histogram',
    feed_timeline_rebuild_failures => 'counter',
    feed_timeline_pull_reads => 'counter',
    feed_redis_commands => 'counter', feed_redis_errors => 'counter',
    feed_redis_timeouts => 'counter', feed_redis_reconnects => 'counter',
    feed_redis_connections => 'gauge',
    feed_mongo_tasks => 'counter', feed_mongo_errors => 'counter',
    feed_mongo_queue_wait_seconds => 'histogram',
    feed_fanout_consumed => 'counter', feed_fanout_deliveries => 'counter',
    feed_fanout_failures => 'counter', feed_fanout_claims => 'counter',
    feed_fanout_pending_entries => 'gauge',
    feed_fanout_lag_seconds => 'gauge',
    feed_local_pages_bytes => 'gauge', feed_local_pages => 'gauge',
    feed_local_pages_answered => 'counter',
    feed_posts_created => 'counter', feed_posts_deleted => 'counter',
);
my @miss = grep { ($types{$_} // '') ne $want{$_} } sort keys %want;
ok(!@miss, 'the families, with their types')
    or diag(join(', ', map { "$_: " . ($types{$_} // 'absent') } @miss));

# the workers' request connections, their stream readers and subscribers
ok($t->wait_for(10, sub { conns(scrape(), 'up') > 0 }),
    'Redis connections up');
my $UP = conns(scrape(), 'up');

# ------------------------------------------------- follows and posts --

my $author = "ma$RUN";
my @readers = map { "mr$RUN$_" } 1 .. 6;

my $m1 = scrape();
my @bad = follow_each($t, $author, @readers);
ok(!@bad, '6 follows') or diag($bad[0]);

# the log phase counts a request once it answered: the next scrape sees it
my $m2 = scrape();
is(req($m2, 'follow', '2xx') - req($m1, 'follow', '2xx'), 6,
    'requests{endpoint="follow",code="2xx"}: +6');

my $r = $t->http('POST', "/users/$author/following/x");
is($r->{status}, 405, 'POST to a follow: 405');
is(req(scrape(), 'follow', '4xx') - req($m2, 'follow', '4xx'), 1,
    'requests{endpoint="follow",code="4xx"}: +1');

# a refusal nginx answers from an error_page location counts for the
# endpoint the request was for
$m1 = scrape();
my @st = map { $t->get("/users/$author/followers")->{status} } 1 .. 2;
is("@st", '200 429', 'followers, then followers too soon: 429');
$m2 = scrape();
is(req($m2, 'followers', '2xx') - req($m1, 'followers', '2xx'), 1,
    'requests{endpoint="followers",code="2xx"}: +1');
is(req($m2, 'followers', '4xx') - req($m1, 'followers', '4xx'), 1,
    'requests{endpoint="followers",code="4xx"}: +1, from the error page');

# every reader's first read rebuilds its timeline: MISS
$m1 = scrape();
my @res = parallel($t, 6, map { [ 'GET', "/users/$_/timeline" ] } @readers);
@bad = grep { $_->{status} != 200 } @res;
ok(!@bad, '6 first reads') or diag(short($bad[0]));
is(scalar(grep { ($_->{headers}{'x-feed-cache'} // '') eq 'MISS' } @res), 6,
    'each of them a MISS');
$m2 = scrape();
is(reads($m2, 'MISS') - reads($m1, 'MISS'), 6,
    'timeline_reads{cache="MISS"}: +6');
my @h1 = hist($m1, 'feed_timeline_rebuild_seconds', '+Inf');
my @h2 = hist($m2, 'feed_timeline_rebuild_seconds', '+Inf');
ok($h2[1] - $h1[1] >= 1 && $h2[1] - $h1[1] <= 6,
    'rebuild histogram: one per rebuild (' . ($h2[1] - $h1[1]) . ')');
@h1 = hist($m1, 'feed_timeline_fallback_seconds', '+Inf');
@h2 = hist($m2, 'feed_timeline_fallback_seconds', '+Inf');
ok($h2[1] > $h1[1], 'fallback histogram: counts the rebuilds\' fallbacks');
is(req($m2, 'timeline', '2xx') - req($m1, 'timeline', '2xx'), 6,
    'requests{endpoint="timeline",code="2xx"}: +6');
is(req($m2, 'timeline_source', '2xx'), req($m0, 'timeline_source', '2xx'),
    'the fallback subrequests are no requests of their own');

# 8 posts, delivered into the 6 cached timelines
$m1 = scrape();
my @ids;
push @ids, post($t, $author, "post $_") for 1 .. 8;
is(scalar(grep { defined } @ids), 8, '8 posts');
ok($t->wait_for(10, sub {
    val(scrape(), 'feed_fanout_deliveries_total')
        - val($m1, 'feed_fanout_deliveries_total') >= 48
}), 'fanout_deliveries: +48 (8 posts x 6 readers)');
$m2 = scrape();
is(val($m2, 'feed_posts_created_total') - val($m1, 'feed_posts_created_total'),
    8, 'posts_created: +8');
is(req($m2, 'posts', '2xx') - req($m1, 'posts', '2xx'), 8,
    'requests{endpoint="posts",code="2xx"}: +8');
ok(val($m2, 'feed_fanout_consumed_total')
    > val($m1, 'feed_fanout_consumed_total'), 'fanout_consumed moved');
ok($t->wait_for(10, sub { (val(scrape(), 'feed_fanout_pending_entries')
    // -1) == 0 }), 'fanout_pending_entries: 0 once delivered');

# a page of the cache (HIT), then past its 5 entries (DEEP)
$m1 = scrape();
$r = $t->get("/users/$readers[0]/timeline?limit=4");
# a hit: from Redis (HIT) or from the worker's copy (LOCAL)
my $hit = $r->{headers}{'x-feed-cache'} // '';
like($hit, qr/^(?:HIT|LOCAL)\z/, 'a first page: a hit');
my $last = ref $r->{json} eq 'HASH' && $r->{json}{items}
    ? $r->{json}{items}[-1]{id} : 'none';
$r = $t->get("/users/$readers[0]/timeline?limit=4&max_id=$last");
is($r->{headers}{'x-feed-cache'} // '', 'DEEP', 'past the cache: DEEP')
    or diag(short($r));
$m2 = scrape();
is(reads($m2, $hit) - reads($m1, $hit), 1,
    "timeline_reads{cache=\"$hit\"}: +1");
is(reads($m2, 'DEEP') - reads($m1, 'DEEP'), 1,
    'timeline_reads{cache="DEEP"}: +1');
@h1 = hist($m1, 'feed_timeline_fallback_seconds', '+Inf');
@h2 = hist($m2, 'feed_timeline_fallback_seconds', '+Inf');
is($h2[1] - $h1[1], 1, 'fallback histogram: +1 for the deep page');

# the first page again, from a worker's kept copy or from Redis
$m1 = scrape();
my %how;
$how{ $t->get("/users/$readers[1]/timeline?limit=4")
    ->{headers}{'x-feed-cache'}
    // 'none' }++ for 1 .. 10;
$m2 = scrape();
ok(val($m2, 'feed_local_pages') > 0 && val($m2, 'feed_local_pages_bytes') > 0,
    'local_pages and their bytes: the workers keep pages');
ok(val($m2, 'feed_local_pages_answered_total')
    > val($m1, 'feed_local_pages_answered_total'),
    'local_pages_answered moved')
    or diag(join ', ', map { "$_ $how{$_}" } sort keys %how);

# a delete
$m1 = scrape();
$r = $t->http('DELETE', "/users/$author/posts/$ids[0]");
is($r->{status}, 204, 'a delete') or diag(short($r));
is(val(scrape(), 'feed_posts_deleted_total')
    - val($m1, 'feed_posts_deleted_total'), 1, 'posts_deleted: +1');

# ------------------------------------------ MongoDB: one thread, slow --

# each worker has one thread: of 4 follows at once, some wait for it

$m1 = scrape();
$t->mongo_latency(150);
@bad = follow_each($t, "mb$RUN", map { "mq$RUN$_" } 1 .. 4);
$t->mongo_latency(0);
ok(!@bad, '4 follows at once, MongoDB 150 ms a call') or diag($bad[0]);
$m2 = scrape();
@h1 = hist($m1, 'feed_mongo_queue_wait_seconds', '0.1');
@h2 = hist($m2, 'feed_mongo_queue_wait_seconds', '0.1');
ok($h2[2] - $h1[2] >= 0.1,
    sprintf('mongo_queue_wait sum: +%.3f s waited for the thread',
        $h2[2] - $h1[2]));
ok($h2[1] - $h1[1] > $h2[0] - $h1[0],
    'mongo_queue_wait: some waits past the 0.1 s bucket');
ok(val($m2, 'feed_mongo_tasks_total') - val($m1, 'feed_mongo_tasks_total')
    >= 4, 'mongo_tasks moved');

# --------------------------------------------------------- both workers --

# whichever worker answers, a scrape counts every scrape before it
my (@seen, %pids);
for (1 .. 12) {
    push @seen, req(scrape(), 'metrics', '2xx');
    my $s = $t->get('/status');
    $pids{$s->{json}{pid}} = 1 if ref $s->{json} eq 'HASH';
}
is(scalar(keys %pids), 2, 'both workers answer');
ok(!grep({ $seen[$_] != $seen[0] + $_ } 0 .. $#seen),
    'every scrape sees the scrapes of both workers before it')
    or diag("metrics 2xx seen: @seen");

# ---------------------------------------------------------- Redis down --

$m1 = scrape();
$t->stop_redis;
ok($t->wait_for(10, sub { conns(scrape(), 'up') == 0 }),
    'Redis stopped: no connection up');
$r = $t->get("/users/$readers[2]/timeline");
is($r->{headers}{'x-feed-cache'} // '', 'BYPASS', 'a read: BYPASS')
    or diag(short($r));
$m2 = scrape();
is(reads($m2, 'BYPASS') - reads($m1, 'BYPASS'), 1,
    'timeline_reads{cache="BYPASS"}: +1');
ok(conns($m2, 'down') + conns($m2, 'connecting') > 0,
    'redis_connections: down or connecting');
ok(val($m2, 'feed_redis_errors_total') > val($m1, 'feed_redis_errors_total'),
    'redis_errors moved');
ok(!defined val($m2, 'feed_fanout_pending_entries'),
    'fanout_pending_entries: no sample without Redis');

$t->start_redis;
ok($t->wait_for(15, sub { conns(scrape(), 'up') == $UP }),
    "Redis back: $UP connections up again");
ok(val(scrape(), 'feed_redis_reconnects_total')
    > val($m1, 'feed_redis_reconnects_total'), 'redis_reconnects moved');

# ------------------------------------------------------------- reload --

$m1 = scrape();
ok($t->reload, 'reloaded');
ok($t->wait_for(15, sub {
    my $m = scrape();
    conns($m, 'up') == $UP && conns($m, 'down') == 0
        && conns($m, 'connecting') == 0
}), "after the reload: $UP connections up, the old workers' gone");
$m2 = scrape();
for my $c (['follow', '2xx'], ['posts', '2xx'], ['timeline', '2xx']) {
    ok(req($m2, @$c) >= req($m1, @$c) && req($m1, @$c) > 0,
        "requests{endpoint=\"$c->[0]\"} kept: " . req($m2, @$c));
}
is(val($m2, 'feed_posts_created_total'), val($m1, 'feed_posts_created_total'),
    'posts_created kept');
is(reads($m2, 'MISS'), reads($m1, 'MISS'), 'timeline_reads kept');
@p = problems($m2);
ok(!@p, 'after it all, the format still holds') or diag(join("\n", @p));

$t->done;
