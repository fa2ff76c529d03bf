#!/usr/bin/perl

# tcp_proxy.pl LISTEN_PORT TARGET_PORT [DELAY_MS [MODE]]: relays loopback
# TCP connections, so a test can cut a server off (kill the proxy) while it
# keeps running, or make every byte take DELAY_MS longer each way (order
# kept): races that are microseconds wide become wide enough to hit.
#
# MODE "hold": a connection whose client sent a SUBSCRIBE command can be
# stalled as a half-open socket would be: on SIGUSR1 the server's bytes to
# its client are held (the client's still go through), on SIGUSR2 they are
# relayed again, those held first, in order.  Each connection has a
# process of its own, in the proxy's process group: signal the group
# (kill -USR1, -PID); the listening process ignores both signals.
#
# MODE "hold-replies": the same, for the connections that did not send a
# SUBSCRIBE: a client's commands reach the server, their replies are held
# (a read out while a subscription hears of a change meanwhile).

use strict;
use warnings;

use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time);
use POSIX qw(WNOHANG);

my ($listen, $target, $delay, $mode) = @ARGV;
$delay = ($delay || 0) / 1000;
$mode //= '';
die "unknown mode '$mode'\n"
    unless $mode eq '' || $mode eq 'hold' || $mode eq 'hold-replies';
my $holds = $mode ne '';

my ($holding, $subscriber) = (0, 0);

$SIG{TERM} = sub { kill 'KILL', -$$; exit 0 };
$SIG{CHLD} = sub { 1 while waitpid(-1, WNOHANG) > 0 };
if ($holds) {
    $SIG{USR1} = sub { $holding = 1 };
    $SIG{USR2} = sub { $holding = 0 };
}

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
    $holding = 0;
    my $u = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$target")
        or exit 0;
    my $sel = IO::Select->new($c, $u);
    my %held = ($c => [], $u => []);   # per destination: [due, bytes]

    # the server's bytes to a subscribed client (or to the others) wait
    # while holding
    my $stalled = sub { $_[0] == $c && $holding
        && ($mode eq 'hold' ? $subscriber : !$subscriber) };

    while (1) {
        my $next;
        for my $to ($c, $u) {
            next if $stalled->($to);
            my $q = $held{$to};
            while (@$q && $q->[0][0] <= time) {
                syswrite($to, (shift @$q)->[1]) or exit 0;
            }
            $next = $q->[0][0]
                if @$q && (!defined $next || $q->[0][0] < $next);
        }

        # a signal interrupts the wait: no more than 50 ms while holding
        my $wait = defined $next ? ($next - time > 0 ? $next - time : 0)
            : undef;
        $wait = 0.05 if $holds && (!defined $wait || $wait > 0.05);
        my @ready = $sel->can_read($wait);

        for my $from (@ready) {
            my $to = $from == $c ? $u : $c;
            my $n = sysread($from, my $buf, 65536);
            if (!$n) {
                for my $to ($c, $u) {
                    syswrite($to, $_->[1]) for @{ $held{$to} };
                }
                exit 0;
            }
            $subscriber = 1 if $holds && $from == $c
                && $buf =~ /\$9\r\nSUBSCRIBE\r\n/i;
            if ($delay || $stalled->($to) || @{ $held{$to} }) {
                push @{ $held{$to} }, [ time + $delay, $buf ];
            } else {
                syswrite($to, $buf) or exit 0;
            }
        }
    }
}
