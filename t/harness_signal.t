#!/usr/bin/perl

# The harness stops what a test started even when the test is killed: a
# test file (or bench/run.pl) stopped by SIGTERM or SIGINT left its
# redis-server and MongoDB stand-in running before.  nginx goes first: a
# worker whose MongoDB went before it waited for its calls to time out.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);

my $script = <<'PERL';
use strict;
use warnings;
use FeedTest;
my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;
$t->write_conf(<<'EOF')->run;
events { }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    feed_mongo_uri "%%MONGO_URI%%";
    server { listen 127.0.0.1:%%PORT_HTTP%%; }
}
EOF
# the order the servers are stopped in
my $stop = \&FeedTest::stop_proc;
no warnings 'redefine';
*FeedTest::stop_proc = sub { print "stop $_[1]\n"; goto &$stop };
$| = 1;
print join(' ', $t->pid('redis'), $t->pid('mongo'), $t->pid('nginx')), "\n";
sleep 60;
PERL

sub gone {
    my (@pids) = @_;
    my $end = time + 15;
    while (time < $end) {
        return 1 unless grep { kill 0, $_ } @pids;
        sleep 0.1;
    }
    return 0;
}

for my $sig (qw(TERM INT)) {
    my $pid = open(my $fh, '-|') // die "fork: $!\n";
    if ($pid == 0) {
        exec($^X, "-I$FindBin::Bin/lib", '-e', $script) or exit 127;
    }
    my $line = <$fh> // '';
    my @servers = $line =~ /(\d+)/g;
    is(scalar @servers, 3,
        "$sig: the test started redis, the stand-in and nginx");
    kill $sig, $pid;
    my @stops = map { /^stop (\w+)/ ? $1 : () } <$fh>;
    waitpid($pid, 0);
    ok($? != 0, "$sig: the test exited with a failure");
    ok(gone(@servers), "$sig: its servers stopped with it")
        or kill 'KILL', @servers;
    is($stops[0] // '', 'nginx', "$sig: nginx stopped first");
    close $fh;
}

done_testing();
