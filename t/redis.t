#!/usr/bin/perl

# Redis plumbing as seen through feed_status: up; down within the timeout
# after redis-server is killed or hangs, without hanging any request; up
# again after it returns, without a reload; AUTH, SELECT, unix sockets.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(status_all);

my $t = FeedTest->new;
my $dir = $t->dir;

$t->start_redis;
$t->start_redis(name => 'redisauth', password => 's3cret',
    unixsocket => "$dir/redis.sock");

# the sanitizer's build on a busy machine can take 400 ms over a reply,
# and a connection that times out is made again: not the one counted
my $TIMEOUT = $FeedTest::ASAN ? '800ms' : '400ms';

$t->write_conf(<<"EOF")->run;
worker_processes 2;
events { worker_connections 128; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    feed_redis_connect_timeout 300ms;
    feed_redis_timeout $TIMEOUT;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; }
        location = /plain { return 200 "plain\\n"; }
    }
}
EOF

sub status {
    my $r = $t->get('/status', @_);
    return $r->{json} || {};
}

# every worker agrees: asks a few times (requests spread over workers)
sub all_say {
    my ($up, $n) = @_;
    return status_all($t, 'redis', up => $up, tries => $n, timeout => 10);
}

my $r = $t->get('/status');
is($r->{status}, 200, 'status 200');
like($r->{headers}{'content-type'}, qr{^application/json}, 'json');
ok($r->{json}{redis}{configured}, 'redis configured');
ok($t->wait_for(5, sub { all_say(1) }), 'redis up in every worker');
is(status()->{redis}{state}, 'up', 'state up');
ok(status()->{redis}{commands} >= 1, 'commands counted');

# one persistent connection per worker, shared by concurrent requests

my @many = map { $t->http_start('GET', '/status') } 1 .. 40;
my @answers = map { $t->http_end($_) } @many;
is(scalar(grep { $_->{status} == 200 && $_->{json}{redis}{up} } @answers),
    40, '40 concurrent requests answered over the shared connections');

# the workers' connections for requests: not the one subscribed to the
# pull authors' versions, whose last command is SUBSCRIBE; a request
# connection's last may be a heartbeat's PUBLISH
my $list = $t->redis('CLIENT', 'LIST');
my $nginx_clients = () = $list =~ /cmd=(?:ping|auth|select|publish)\b/g;
is($nginx_clients, 2, 'exactly one connection per worker');

$r = $t->http('POST', '/status', body => 'x');
is($r->{status}, 405, 'POST status is 405');
is($r->{json}{error}, 'method_not_allowed', 'json error code');
like($r->{headers}{'content-type'}, qr{^application/json}, 'error is json');

# killed: the connection drops, status says down at once

$t->stop_proc('redis', 'KILL');

my $start = time;
ok($t->wait_for(3, sub { all_say(0) }), 'down after redis-server killed');
ok(time - $start < 2, 'down within the timeout');

$r = $t->get('/status', timeout => 5);
ok($r->{elapsed} < 1, 'status does not hang while redis is down');
is($t->get('/plain')->{status}, 200, 'other locations answer');
# a kill while a heartbeat's PUBLISH is unread by the server resets the
# connection instead of closing it; a write after it breaks the pipe
like(status()->{redis}{last_error} // '',
    qr/refused|closed|lost|reset by peer|broken pipe/i, 'last_error says why');

# back: reconnects by itself with backoff, no reload

$t->start_redis;
ok($t->wait_for(5, sub { all_say(1) }), 'up again after restart');
# (one /status may be slow on a loaded machine: asked again for a while)
ok($t->wait_for(5, sub { (status()->{redis}{reconnects} // 0) >= 1 }),
    'reconnect counted');

# hung (SIGSTOP): the command timeout notices, no request hangs longer

$t->signal('redis', 'STOP');

$r = $t->get('/status', timeout => 5);
ok($r->{status} == 200 && !$r->{json}{redis}{up}, 'hung redis reported down');
ok($r->{elapsed} < 1.5, 'within the command timeout')
    or diag("took $r->{elapsed}");
ok($t->wait_for(4, sub { all_say(0) }), 'every worker sees it down');
ok(status()->{redis}{timeouts} + status()->{redis}{errors} >= 1,
    'timeouts counted');

my @slow = map { $t->get('/status', timeout => 5)->{elapsed} } 1 .. 4;
ok(!grep({ $_ > 1.5 } @slow), 'no status request waits past the timeout')
    or diag("@slow");

$t->signal('redis', 'CONT');
ok($t->wait_for(6, sub { all_say(1) }), 'up again after SIGCONT');

# graceful reload keeps working

ok($t->reload, 'reloaded');
ok($t->wait_for(5, sub { all_say(1) }), 'up after reload');

$t->stop;
ok(!$t->bad_log_lines, 'no alerts so far') or diag($t->error_log);

# AUTH + SELECT over a unix socket

$t->redis_cmd_port($t->port('redisauth'), 's3cret', 'SET', 'probe', 'db0');

$t->write_conf(<<"EOF")->run;
worker_processes 1;
events { worker_connections 128; }
http {
    feed_redis unix:$dir/redis.sock password=s3cret db=5;
    feed_redis_timeout 500ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; }
    }
}
EOF

ok($t->wait_for(5, sub { status()->{redis}{up} }), 'up with AUTH over unix');
is(status()->{redis}{address}, "unix:$dir/redis.sock", 'address reported');

my $clients = $t->redis_cmd_port($t->port('redisauth'), 's3cret',
    'CLIENT', 'LIST');
like($clients, qr/db=5/, 'nginx selected db 5');

$t->stop;

# wrong password: reported down with the reason, never up

$t->write_conf(<<"EOF")->run;
worker_processes 1;
events { worker_connections 128; }
http {
    feed_redis 127.0.0.1:%%PORT_REDISAUTH%% password=wrong;
    feed_redis_timeout 500ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; }
    }
}
EOF

sleep 0.5;
my $s = status();
ok(!$s->{redis}{up}, 'wrong password: down');
like($t->error_log, qr/redis login to .* failed/, 'login failure logged');

$t->done;
