#!/usr/bin/perl

# The harness stops what a test started even when the test is killed: a
# test file (or bench/run.pl) stopped by SIGTERM or SIGINT left its
# redis-server and MongoDB stand-in running before.

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
$| = 1;
print join(' ', $t->pid('redis'), $t->pid('mongo')), "\n";
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
    is(scalar @servers, 2, "$sig: the test started redis and the stand-in");
    kill $sig, $pid;
    waitpid($pid, 0);
    ok($? != 0, "$sig: the test exited with a failure");
    ok(gone(@servers), "$sig: its servers stopped with it")
        or kill 'KILL', @servers;
    close $fh;
}

done_testing();
