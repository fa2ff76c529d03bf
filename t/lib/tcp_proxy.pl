#!/usr/bin/perl

# tcp_proxy.pl LISTEN_PORT TARGET_PORT [DELAY_MS]: relays loopback TCP
# connections, so a test can cut a server off (kill the proxy) while it
# keeps running, or make every byte take DELAY_MS longer each way (order
# kept): races that are microseconds wide become wide enough to hit.

use strict;
use warnings;

use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time);
use POSIX qw(WNOHANG);

my ($listen, $target, $delay) = @ARGV;
$delay = ($delay || 0) / 1000;

$SIG{TERM} = sub { kill 'KILL', -$$; exit 0 };
$SIG{CHLD} = sub { 1 while waitpid(-1, WNOHANG) > 0 };

my $srv = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$listen",
    Listen => 64, ReuseAddr => 1) or die "listen $listen: $!\n";

while (1) {
    my $c = $srv->accept or next;

    my $pid = fork();
    next unless defined $pid;

    if ($pid) {
        close $c;
        next;
    }

    close $srv;
    my $u = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$target")
        or exit 0;
    my $sel = IO::Select->new($c, $u);
    my %held = ($c => [], $u => []);   # per destination: [due, bytes]

    while (1) {
        my $next;
        for my $to ($c, $u) {
            my $q = $held{$to};
            while (@$q && $q->[0][0] <= time) {
                syswrite($to, (shift @$q)->[1]) or exit 0;
            }
            $next = $q->[0][0]
                if @$q && (!defined $next || $q->[0][0] < $next);
        }

        my @ready = $sel->can_read(defined $next
            ? ($next - time > 0 ? $next - time : 0) : undef);

        for my $from (@ready) {
            my $to = $from == $c ? $u : $c;
            my $n = sysread($from, my $buf, 65536);
            if (!$n) {
                for my $to ($c, $u) {
                    syswrite($to, $_->[1]) for @{ $held{$to} };
                }
                exit 0;
            }
            if ($delay) {
                push @{ $held{$to} }, [ time + $delay, $buf ];
            } else {
                syswrite($to, $buf) or exit 0;
            }
        }
    }
}
