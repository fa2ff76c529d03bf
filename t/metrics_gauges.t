#!/usr/bin/perl

# The node's gauges (feed_redis_connections, feed_local_pages,
# feed_local_pages_bytes in /metrics; redis.connections and local_pages in
# /status "node") are what the live workers hold, whatever became of the
# others.  With 2 workers, each holding Redis connections and copies of
# first pages:
#
#   - the gauges equal what the workers hold: the connections Redis lists
#     (CLIENT LIST), the pages and bytes each worker's own /status says;
#   - one worker SIGKILLed and started again by the master: the killed
#     worker's share is gone (its connections closed with it, its pages
#     with its memory), the new worker holds no page until it reads; the
#     counters go on;
#   - a reload while an old worker is kept shutting down (a request
#     reading its body): its connections and pages are counted until it
#     exits, then not.
#
# The SIGKILL makes the master log "[alert] ... worker process N exited
# on signal 9": nginx is stopped here and its error.log checked with that
# one line (for that pid only) allowed, as t/fanout_failures.t does.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post follow_each parallel server_conf
    workers_up wait_settled metrics_scrape metrics_val);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

my $server = server_conf();
$server =~ s{^(\s*)(location = /status .*)$}
    {$1$2\n$1location = /metrics { feed_metrics; }}m
    or die "no /status in server_conf()\n";

$t->write_conf(<<"EOF");
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_mongo_timeout 3s;
    feed_fanout on;
    feed_fanout_block 200ms;
$server}
EOF

$t->run;

my $RUN = $$ . int(time);

# ------------------------------------------------------------- helpers --

# the connections Redis has from the workers: all but the one asking
sub redis_clients {
    my $l = eval { $t->redis('CLIENT', 'LIST') };
    return -1 unless defined $l && !ref $l;
    return scalar grep { length && !/ cmd=client\|list / } split /\r?\n/, $l;
}

# /status of each of @pids (pid => JSON), reached through reuseport
sub statuses_of {
    my (@pids) = @_;
    my %want = map { $_ => 1 } @pids;
    my %got;
    for (1 .. 200) {
        last if keys %got == keys %want;
        my $j = $t->get('/status', timeout => 5)->{json};
        $got{$j->{pid}} = $j if ref $j eq 'HASH' && $want{$j->{pid} // 0};
    }
    return \%got;
}

# pid => [pages, bytes], as each worker's own /status says
sub held {
    my ($st) = @_;
    return { map { $_ => [ $st->{$_}{local_pages}{pages} // -1,
        $st->{$_}{local_pages}{bytes} // -1 ] } keys %$st };
}

# what the node's gauges say, in /metrics and in /status "node"
sub gauges {
    my $m = metrics_scrape($t);
    my $up = metrics_val($m, 'feed_redis_connections', state => 'up');
    my $other = 0;
    $other += metrics_val($m, 'feed_redis_connections', state => $_) // 0
        for qw(connecting down);
    my $n = $t->get('/status', timeout => 5)->{json};
    $n = ref $n eq 'HASH' && ref $n->{node} eq 'HASH' ? $n->{node} : {};
    my $c = ref $n->{redis} eq 'HASH' ? $n->{redis}{connections} : undef;
    $c = {} unless ref $c eq 'HASH';
    my $lp = ref $n->{local_pages} eq 'HASH' ? $n->{local_pages} : {};
    return {
        'metrics pages' => metrics_val($m, 'feed_local_pages') // 'none',
        'metrics bytes' => metrics_val($m, 'feed_local_pages_bytes')
            // 'none',
        'metrics up' => $up // 'none',
        'metrics connecting, down' => $other,
        'status pages' => $lp->{pages} // 'none',
        'status bytes' => $lp->{bytes} // 'none',
        'status up' => $c->{up} // 'none',
        'status connecting, down' => ($c->{connecting} // 0)
            + ($c->{down} // 0),
    };
}

# a test per gauge: it equals what the live workers hold ($pages, $bytes,
# and the connections Redis lists), once the node settled
sub gauges_are {
    my ($name, $pages, $bytes, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my ($g, $want);
    $t->wait_for($o{timeout} || 5, sub {
        my $clients = redis_clients();
        $g = gauges();
        $want = {
            'metrics pages' => $pages, 'metrics bytes' => $bytes,
            'metrics up' => $clients, 'metrics connecting, down' => 0,
            'status pages' => $pages, 'status bytes' => $bytes,
            'status up' => $clients, 'status connecting, down' => 0,
        };
        delete @$want{'metrics connecting, down', 'status connecting, down'}
            if $o{transient};
        !grep { "$g->{$_}" ne "$want->{$_}" } keys %$want;
    });
    for my $k (sort keys %$want) {
        is($g->{$k}, $want->{$k}, "$name: $k $want->{$k}");
    }
}

sub sum {
    my ($held, $i, @pids) = @_;
    my $s = 0;
    $s += $held->{$_} ? $held->{$_}[$i] : 0 for @pids;
    return $s;
}

# first pages read through both workers (reuseport spreads the
# connections), a few times each: the worker that answers keeps a copy
sub read_pages {
    my (@users) = @_;
    my @res = parallel($t, 20,
        map { ([ 'GET', "/users/$_/timeline?limit=5" ]) x 3 } @users);
    return grep { $_->{status} != 200 } @res;
}

sub req_timeline {
    metrics_val(metrics_scrape($t), 'feed_requests_total',
        endpoint => 'timeline', code => '2xx') // -1
}

# ---------------------------------------------------- both workers hold --

ok($t->wait_for(15, sub { workers_up($t, 2) }),
    '2 workers, each with Redis and MongoDB up');

my $author = "ga$RUN";
my @readers = map { "gr$RUN$_" } 1 .. 16;
my @bad = follow_each($t, $author, @readers);
ok(!@bad, '16 follows') or diag($bad[0]);
my @ids = grep { defined } map { post($t, $author, "post $_") } 1 .. 3;
is(scalar @ids, 3, '3 posts');
wait_settled($t, 'posts');

my @w = $t->worker_pids;
my ($st, $held);
for (1 .. 5) {
    @bad = read_pages(@readers);
    $st = statuses_of(@w);
    $held = held($st);
    last if keys %$held == 2 && !grep { $_->[0] <= 0 } values %$held;
}
ok(!@bad, 'first pages read') or diag(short($bad[0]));
ok(keys %$held == 2 && !grep({ $_->[0] <= 0 } values %$held),
    'both workers keep pages: ' . join(', ',
        map { "$_ $held->{$_}[0]" } sort keys %$held));

my $UP = redis_clients();
ok($UP >= 2, "the workers' Redis connections: $UP");
gauges_are('2 workers', sum($held, 0, @w), sum($held, 1, @w));

# ------------------------------------------------------------- SIGKILL --

my ($victim) = sort { $held->{$b}[0] <=> $held->{$a}[0] } keys %$held;
my ($survivor) = grep { $_ != $victim } @w;
my $reads0 = req_timeline();

kill 'KILL', $victim;
ok($t->wait_for(10, sub {
    my @now = $t->worker_pids;
    @now == 2 && !grep { $_ == $victim } @now;
}), "worker $victim SIGKILLed ($held->{$victim}[0] pages): the master "
    . 'started another');
ok($t->wait_for(15, sub { workers_up($t, 2) }),
    'the new worker has Redis and MongoDB up');
ok($t->wait_for(10, sub { redis_clients() == $UP }),
    "Redis lists $UP connections again");

@w = $t->worker_pids;
my ($fresh) = grep { $_ != $survivor } @w;
$held = held(statuses_of(@w));
is($held->{$fresh}[0] // -1, 0, 'the new worker holds no page');
ok(($held->{$survivor}[0] // 0) > 0,
    'the survivor holds its pages: ' . ($held->{$survivor}[0] // 'none'));
gauges_are('after the SIGKILL', sum($held, 0, @w), sum($held, 1, @w));

# the counters go on: 10 reads are 10 more
my $reads1 = req_timeline();
ok($reads1 >= $reads0 && $reads0 > 0,
    "requests{endpoint=\"timeline\"} kept: $reads0, then $reads1");
my @res = parallel($t, 10,
    map { [ 'GET', "/users/$readers[$_]/timeline?limit=5" ] } 0 .. 9);
is(scalar(grep { $_->{status} == 200 } @res), 10, '10 reads');
is(req_timeline() - $reads1, 10, 'requests{endpoint="timeline"}: +10');

# and the new worker's pages are counted once it reads
for (1 .. 5) {
    @bad = read_pages(@readers);
    $held = held(statuses_of(@w));
    last if ($held->{$fresh}[0] // 0) > 0;
}
ok(($held->{$fresh}[0] // 0) > 0,
    "the new worker keeps pages once it reads: $held->{$fresh}[0]");
gauges_are('the new worker read', sum($held, 0, @w), sum($held, 1, @w));

# ------------------------------------------- reload, an old one held --

# a post whose body does not come: the worker reading it stays shutting
# down, holding its connections and pages, until the client goes
my $hold = $t->http_start('POST', "/users/$author/posts",
    raw => "POST /users/$author/posts HTTP/1.1\r\nHost: localhost\r\n"
        . "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        . '{"body":');
sleep 0.3;

my %old = map { $_ => 1 } @w;
$t->signal('nginx', 'HUP');
my @new;
ok($t->wait_for(10, sub {
    @new = grep { !$old{$_} } $t->worker_pids;
    @new == 2 && workers_up($t, 2);
}), 'reloaded: 2 new workers up');
# the other old worker has nothing to finish: it goes
my @kept;
$t->wait_for(5, sub { @kept = grep { $old{$_} } $t->worker_pids; @kept == 1 });
is(scalar @kept, 1, 'the old worker reading the post is still there');

# the new workers read nothing yet: the held worker's pages only
my $held_new = held(statuses_of(@new));
is(sum($held_new, 0, @new), 0, 'the new workers hold no page');
gauges_are('reload, an old worker shutting down', sum($held, 0, @kept),
    sum($held, 1, @kept), transient => 1);

close $hold->{sock};
ok($t->wait_for(10, sub { !grep { $old{$_} } $t->worker_pids }),
    'the old worker exited once its client went');
ok($t->wait_for(10, sub { redis_clients() == $UP }),
    "Redis lists $UP connections");
gauges_are('after the reload', 0, 0);

for (1 .. 5) {
    @bad = read_pages(@readers);
    $held = held(statuses_of(@new));
    last if !grep { $_->[0] <= 0 } values %$held;
}
ok(!grep({ $_->[0] <= 0 } values %$held), 'the new workers keep pages');
gauges_are('the new workers read', sum($held, 0, @new),
    sum($held, 1, @new));

# ------------------------------------------------------------ the end --

# stopped gracefully, error.log checked with the killed worker's alert
ok($t->stop, 'nginx stopped gracefully');
my @lines = $t->bad_log_lines;
my $killed = qr/\[alert\].* worker process \Q$victim\E exited on signal 9/;
is(scalar(grep { /$killed/ } @lines), 1,
    'error.log has the killed worker\'s alert, once');
my @other = grep { !/$killed/ } @lines;
ok(!@other, 'no other alert in error.log') or diag(join "\n", @other);
$t->cleanup;
$t->no_sanitizer_reports;

done_testing();
