#!/usr/bin/perl

# The cache side effects of writes hold under faults: a reader
# follows three authors and reads their nine posts from the cache; then,
# while a fault keeps Redis from taking writes, the reader unfollows the
# first, is blocked by the second and mutes the third.  Each write is
# stored in MongoDB and answered 503 (not 204: the cache has yet to take
# it), and once Redis takes writes again the reader's timeline shows none
# of the nine posts within 2 s, and still none 5 s later, while it is read
# all along (reads refresh the cache's TTL).  The retried writes are 204.
# A fourth author deletes one of two posts meanwhile: 503 too, and again
# 503 when retried during the fault (not 404: Redis has yet to take it);
# once Redis is back the post is gone from the timeline within 2 s.
#
# The faults, on a live connection and not:
#   - BUSY: another client's long script (the connection stays up);
#   - OOM: maxmemory reached under noeviction (the connection stays up);
#   - Redis unreachable (a proxy stopped), then nginx reloaded before it is
#     back: the old workers, and their memory, are gone;
#   - Redis unreachable, then both workers SIGKILLed before it is back.
#
# Then /status and /metrics show the effects pending while Redis refuses
# them, and none once applied.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post server_conf tl_walk);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;
$t->start_proxy('redisproxy', $t->port('redis'));

my $server = server_conf();
$server =~ s{(location = /status)}{location ~ ^/users/([^/]+)/blocks/([^/]+)\$ { feed_block \$1 \$2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)\$ { feed_mute \$1 \$2; }
        location = /metrics { feed_metrics; }
        $1};

$t->write_conf(<<"EOF");
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDISPROXY%%;
    feed_redis_timeout 1s;
    %%FEED_MONGO%%
    feed_mongo_timeout 2s;
    feed_cache_local 1m;
    feed_fanout on;
    feed_fanout_block 100ms;

$server
}
EOF

$t->run;

my $RUN = $$ . int(time);
my %killed;

sub redis_up {
    my $j = $t->get('/status')->{json} or return 0;
    return $j->{redis}{up};
}

# up in both workers: /status answered by either, six times in a row (a
# worker started again after a SIGKILL connects on its own; the first to
# answer up said nothing of the other, whose writes were still 503)
sub redis_up_all { !grep { !redis_up() } 1 .. 6 }

sub node {
    my $j = $t->get('/status')->{json};
    return ref $j eq 'HASH' && ref $j->{node} eq 'HASH' ? $j->{node} : {};
}

# the authors of the posts the reader's whole timeline shows now
sub shown {
    my ($reader) = @_;
    my $w = tl_walk($t, $reader, 20);
    return (undef, "@{$w->{problems}}") if @{$w->{problems}};
    return ([ map { ($_->{author} // "") =~ s/^str://r } @{$w->{items}} ],
        "@{$w->{caches}}");
}

sub shown_of {
    my ($reader, @authors) = @_;
    my ($shown, $why) = shown($reader);
    return -1 unless $shown;
    my %a = map { $_ => 1 } @authors;
    return scalar grep { $a{$_} } @$shown;
}

sub is_pending {
    my ($r, $name) = @_;
    ok($r->{status} == 503 && ($r->{headers}{'retry-after'} // '') eq '1'
        && ($r->{json}{error} // '') eq 'unavailable',
        "$name: 503 with Retry-After, the cache pending") or diag(short($r));
}

sub put { $t->http('PUT', $_[0]) }

# a reader, three authors with three posts each, all in the reader's
# cached timeline (a hit: HIT, or LOCAL from the worker's copy)
my %deleted;

sub setup {
    my ($name) = @_;
    my ($r, @a) = map { "$name$_$RUN" } qw(r a b c);
    my $d = "${name}d$RUN";

    for my $a (@a, $d) {
        is(put("/users/$r/following/$a")->{status}, 204,
            "$name: $r follows $a");
    }
    for my $a (@a) {
        post($t, $a, "$name by $a $_") for 1 .. 3;
    }
    $deleted{$name} = post($t, $d, "$name by $d, deleted");
    post($t, $d, "$name by $d, kept");
    ok($t->wait_for(5, sub { shown_of($r, @a) == 9 && shown_of($r, $d) == 2 }),
        "$name: the eleven posts in the reader's timeline");
    my (undef, $caches) = shown($r);
    like($caches, qr/^(?:HIT|LOCAL)\b/,
        "$name: read from the cache ($caches)");
    return ($r, @a);
}

sub ids_shown {
    my ($reader) = @_;
    my $w = tl_walk($t, $reader, 20);
    return @{$w->{problems}} ? undef : { map { $_ => 1 } @{$w->{ids}} };
}

# the three writes during the fault: all stored, none taken by the cache
sub writes_refused {
    my ($name, $r, @a) = @_;
    is_pending($t->http('DELETE', "/users/$r/following/$a[0]"),
        "$name: unfollow");
    is_pending(put("/users/$a[1]/blocks/$r"), "$name: block");
    is_pending(put("/users/$r/mutes/$a[2]"), "$name: mute");

    # unreachable, a delete is refused whole (docs/posts.md): it is made
    # once Redis is back
    my $uri = "/users/${name}d$RUN/posts/$deleted{$name}";
    my $cut = $name =~ /^(reload|kill)$/;
    is_pending($t->http('DELETE', $uri), "$name: delete");
    is_pending($t->http('DELETE', $uri), "$name: delete retried");
    like($t->http('DELETE', $uri)->{body}, qr/nothing was deleted/,
        "$name: unreachable, nothing was deleted") if $cut;
    $deleted{"$name cut"} = $cut;
}

# after the fault: nothing of the three authors within 2 s, nor 5 s later,
# read all along; the writes retried are 204
sub effects_hold {
    my ($name, $r, @a) = @_;

    my $id = $deleted{$name};
    my $uri = "/users/${name}d$RUN/posts/$id";
    my $ids;
    is($t->http('DELETE', $uri)->{status}, 204,
        "$name: the delete refused while unreachable, made now")
        if $deleted{"$name cut"};
    ok($t->wait_for(2, sub { ($ids = ids_shown($r)) && !$ids->{$id} }),
        "$name: the deleted post gone within 2 s");

    # 204 while its writes are still pending, 404 once done
    like($t->http('DELETE', $uri)->{status}, qr/^(204|404)$/,
        "$name: the delete retried: 204 or 404");
    ok($t->wait_for(3, sub { $t->http('DELETE', $uri)->{status} == 404 }),
        "$name: then 404, as for any deleted post");
    is(shown_of($r, "${name}d$RUN"), 1, "$name: the other post is there");

    my $t0 = time;
    my $n = -1;
    ok($t->wait_for(2, sub { ($n = shown_of($r, @a)) == 0 }),
        "$name: none of the three authors' posts within 2 s")
        or diag("$n shown after " . sprintf('%.1f', time - $t0) . ' s');

    my $end = time + 5;
    my $worst = 0;
    while (time < $end) {
        my $k = shown_of($r, @a);
        $worst = $k if $k != 0 && $worst == 0;
        sleep 0.2;
    }
    is($worst, 0, "$name: still none after 5 s of reads");

    is($t->http('DELETE', "/users/$r/following/$a[0]")->{status}, 204,
        "$name: the unfollow retried: 204");
    is(put("/users/$a[1]/blocks/$r")->{status}, 204,
        "$name: the block retried: 204");
    is(put("/users/$r/mutes/$a[2]")->{status}, 204,
        "$name: the mute retried: 204");
    is(shown_of($r, @a), 0, "$name: and none shown");
}

sub pending_shown {
    my ($name) = @_;
    my $e;
    ok($t->wait_for(3, sub { ($e = node()->{effects}) && $e->{pending} > 0 }),
        "$name: /status shows effects pending")
        or diag(explain($e));
    my $m = $t->get('/metrics')->{body} // '';
    like($m, qr/^feed_effects_pending [1-9]/m,
        "$name: /metrics shows them too");
    like($m, qr/^feed_effects_oldest_age_seconds (?!0\.000)\d+\.\d{3}$/m,
        "$name: with the age of the oldest");
}

sub none_pending {
    my ($name) = @_;
    my $e;
    ok($t->wait_for(3, sub { ($e = node()->{effects}) && $e->{pending} == 0 }),
        "$name: none pending afterwards") or diag(explain($e));
    my $m = $t->get('/metrics')->{body} // '';
    like($m, qr/^feed_effects_pending 0$/m, "$name: /metrics agrees");
    like($m, qr/^feed_effects_oldest_age_seconds 0\.000$/m,
        "$name: no age");
}

ok($t->wait_for(5, \&redis_up), 'redis up');

# ---------------------------------------------------------------- BUSY --

{
    my ($r, @a) = setup('busy');

    $t->redis('CONFIG', 'SET', 'busy-reply-threshold', '100');
    $t->spawn('script', 'redis-cli', '-p', $t->port('redis'), 'EVAL',
        'while true do end', '0');
    ok($t->wait_for(3, sub { !defined eval { $t->redis('PING') }
        && $@ =~ /BUSY/ }), 'busy: redis answers BUSY')
        or diag($@);

    writes_refused('busy', $r, @a);
    pending_shown('busy');

    $t->redis('SCRIPT', 'KILL');
    ok($t->wait_for(3, sub { defined eval { $t->redis('PING') } }),
        'busy: the script killed');
    $t->stop_proc('script', 'TERM');

    effects_hold('busy', $r, @a);
    none_pending('busy');
}

# ----------------------------------------------------------------- OOM --

{
    my ($r, @a) = setup('oom');

    $t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    $t->redis('CONFIG', 'SET', 'maxmemory', '1');
    ok(!defined eval { $t->redis('SET', "oom$RUN", 'x') } && $@ =~ /OOM/,
        'oom: redis refuses writes') or diag($@);

    writes_refused('oom', $r, @a);

    $t->redis('CONFIG', 'SET', 'maxmemory', '0');
    effects_hold('oom', $r, @a);
}

# ------------------------------------------ unreachable, then a reload --

{
    my ($r, @a) = setup('reload');

    $t->stop_proc('redisproxy', 'TERM');
    ok($t->wait_for(5, sub { !redis_up() }), 'reload: redis unreachable');

    writes_refused('reload', $r, @a);
    ok($t->reload, 'reload: nginx reloaded while redis is unreachable');

    $t->start_proxy('redisproxy', $t->port('redis'));
    ok($t->wait_for(5, \&redis_up_all), 'reload: redis reachable again');
    effects_hold('reload', $r, @a);
}

# --------------------------------- unreachable, then workers SIGKILLed --

{
    my ($r, @a) = setup('kill');

    $t->stop_proc('redisproxy', 'TERM');
    ok($t->wait_for(5, sub { !redis_up() }), 'kill: redis unreachable');

    writes_refused('kill', $r, @a);

    my @old = $t->worker_pids;
    $killed{$_} = 1 for @old;
    kill 'KILL', @old;
    ok($t->wait_for(5, sub {
        my @now = $t->worker_pids;
        @now == 2 && !grep { $killed{$_} } @now
    }), 'kill: both workers SIGKILLed and started again');

    $t->start_proxy('redisproxy', $t->port('redis'));
    ok($t->wait_for(5, \&redis_up_all), 'kill: redis reachable again');
    effects_hold('kill', $r, @a);
    none_pending('kill');
}

# the end: a graceful stop, error.log clean but for the killed workers

ok($t->stop, 'nginx stopped gracefully');
my @bad = grep {
    !(/\[alert\].* worker process (\d+) exited on signal 9/ && $killed{$1})
} $t->bad_log_lines;
ok(!@bad, 'no other alert in error.log') or diag(join "\n", @bad);
$t->cleanup;
$t->no_sanitizer_reports;

done_testing;
