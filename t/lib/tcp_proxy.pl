#!/usr/bin/perl

# tcp_proxy.pl LISTEN_PORT TARGET_PORT: relays loopback TCP connections, so
# a test can cut a server off (kill the proxy) while it keeps running.

use strict;
use warnings;

use IO::Socket::INET;
use IO::Select;
use POSIX qw(WNOHANG);

my ($listen, $target) = @ARGV;

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

    while (my @ready = $sel->can_read) {
        for my $from (@ready) {
            my $to = $from == $c ? $u : $c;
            my $n = sysread($from, my $buf, 65536);
            exit 0 unless $n;
            syswrite($to, $buf) or exit 0;
        }
    }
    exit 0;
}
