#!/usr/bin/perl

# The fanout group's consumers that are gone are deleted.  Every worker is
# a consumer "<host>:<pid>" of the group "feed" of feed:posts; with
# feed_fanout_claim_idle 1s, each deletes, along with its claims, the
# consumers of its host whose process is gone, once nothing is pending:
#
#   - two ghosts (consumers named after processes that exited): the idle
#     one goes; the one holding an entry keeps it until a worker claims it
#     (acknowledged once, delivered once), then goes too;
#   - the live workers' consumers stay, reading on;
#   - after a reload, the old workers' consumers go; posts still reach
#     the caches.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();
use FeedTest;
use FeedTest::Util qw(entry_id entry_json entry_of post_key);
use FeedTest::Util qw(post);

my $t = FeedTest->new;

$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF');
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 1024; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 2s;
    feed_mongo_timeout 2s;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_fanout_claim_idle 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ { feed_timeline $1; }
        location /_feed/timeline {
            internal;
            feed_timeline_source;
        }
    }
}
EOF

$t->run;

my $RUN = $$ . int(time);
my ($STREAM, $GROUP) = ('feed:posts', 'feed');

# consumer name => [pending, idle ms]
sub consumers {
    my %c;
    for my $e (@{ $t->redis('XINFO', 'CONSUMERS', $STREAM, $GROUP) || [] }) {
        my %f = @$e;
        $c{ $f{name} } = [ $f{pending}, $f{idle} ];
    }
    return \%c;
}

my ($author, $reader) = ("ca$RUN", "cr$RUN");
is($t->http('PUT', "/users/$reader/following/$author")->{status}, 204,
    'follow');
is($t->get("/users/$reader/timeline")->{status}, 200, 'reader has a cache');

sub delivered {
    my ($id) = @_;
    return $t->wait_for(5, sub {
        entry_id($t->redis('LINDEX', "feed:tl:{$reader}", 0)) eq $id
    });
}

# Redis 7.0 lists a consumer once it was served an entry
my @workers = sort { $a <=> $b } $t->worker_pids;
my $id;
for my $i (1 .. 6) {
    $id = post($t, $author, "warm-up $i", quiet => 1);
    delivered($id);
}

my ($host) = map { /^(.*):\d+$/ ? $1 : () } keys %{ consumers() };
ok(defined $host, 'a worker consumer named <host>:<pid>')
    or diag(explain(consumers()));
$host //= 'localhost';

# all listed consumers are workers of this nginx
sub strangers {
    my ($pids) = @_;
    my %live = map { ("$host:$_" => 1) } @$pids;
    return grep { !$live{$_} } keys %{ consumers() };
}

ok(!strangers(\@workers), 'only workers of ours are consumers');

# ------------------------------------------------------------- ghosts --

# two processes of this host that are gone
my @dead = map {
    my $pid = fork // die "fork: $!";
    POSIX::_exit(0) unless $pid;
    waitpid($pid, 0);
    $pid;
} 1 .. 2;
my ($idle, $busy) = map { "$host:$_" } @dead;

$t->redis('XGROUP', 'CREATECONSUMER', $STREAM, $GROUP, $idle);

# an entry read by a ghost that never acknowledges it: added and read in
# one step, before the workers blocked on the stream get it
my $held = $t->redis('EVAL', "redis.call('xadd', KEYS[1], '*', "
    . "unpack(ARGV, 3)) return redis.call('xreadgroup', 'group', ARGV[1], "
    . "ARGV[2], 'count', 1, 'streams', KEYS[1], '>')", 1, $STREAM,
    $GROUP, $busy, 'type', 'post', 'id', $id, 'author', $author);
ok(ref $held && @$held, 'the busy ghost holds an entry');

my $c = consumers();
ok($c->{$idle} && $c->{$busy}, 'both ghosts listed');

my $t0 = time;
ok($t->wait_for(10, sub { !consumers()->{$idle} }),
    sprintf('the idle ghost deleted (%.1fs)', time - $t0));

ok($t->wait_for(10, sub { !consumers()->{$busy} }),
    sprintf('the busy ghost deleted once its entry was claimed (%.1fs)',
        time - $t0));

# the ghost goes as soon as a worker holds its entry; the worker then
# reads the followers and delivers before it acknowledges
my $pending;
$t->wait_for(5, sub {
    $pending = $t->redis('XPENDING', $STREAM, $GROUP);
    $pending->[0] == 0;
});
is($pending->[0], 0, 'its entry acknowledged by a worker');
is(scalar(grep { $_ eq $id }
        map { entry_id($_) }
        @{ $t->redis('LRANGE', "feed:tl:{$reader}", 0, -1) }), 1,
    'the post is in the cache once');

ok(!strangers(\@workers), 'only workers of ours are consumers');

# ------------------------------------------------------------- reload --

my @old = grep { consumers()->{"$host:$_"} } @workers;
ok(@old, 'consumers of the workers before the reload: ' . scalar(@old));

$t->reload;
my @new;
ok($t->wait_for(10, sub {
    @new = sort { $a <=> $b } $t->worker_pids;
    @new == 2 && !grep { my $n = $_; grep { $_ == $n } @workers } @new
}), 'reloaded: new workers');

$t0 = time;
ok($t->wait_for(10, sub { !strangers(\@new) }),
    sprintf('the old workers\' consumers deleted (%.1fs)', time - $t0))
    or diag(explain(consumers()));

$id = post($t, $author, 'after the reload', quiet => 1);
ok(delivered($id), 'a post after the reload delivered');
ok(!strangers(\@new), 'only the new workers are consumers');

$t->done;
