package FeedSentinel;

# Redis with Sentinel for a test: a primary ("redis", the port FeedTest
# gives it), a replica ("redis2") and three sentinels ("s1".."s3", Debian's
# redis-sentinel) monitoring it as `name` (feedmaster), quorum 2, on
# loopback ports the test's FeedTest picks.  A primary is seen down after
# down_after ms (1000), so a failover takes 1-3 s.

use strict;
use warnings;

use Time::HiRes qw(time sleep);

sub start {
    my ($class, $t, %o) = @_;

    my $self = bless { t => $t, name => $o{name} || 'feedmaster',
        down_after => $o{down_after} || 1000,
        sentinels => [qw(s1 s2 s3)] }, $class;

    $t->start_redis;
    $t->start_redis(name => 'redis2',
        args => ['--replicaof', '127.0.0.1', $t->port('redis')]);

    $self->start_sentinel($_) for @{$self->{sentinels}};

    $self->wait_ready(20) or die "the sentinels did not become ready\n";

    return $self;
}

sub name { $_[0]{name} }

# the sentinels as feed_redis takes them
sub addrs {
    my ($self) = @_;
    return join ' ', map { '127.0.0.1:' . $self->{t}->port($_) }
        @{$self->{sentinels}};
}

sub start_sentinel {
    my ($self, $s) = @_;

    my $t = $self->{t};
    my $conf = $t->dir . "/$s.conf";

    # its own file: a sentinel writes what it learns into it, and starts
    # again from it
    unless (-e $conf) {
        my $port = $t->port($s);
        my $primary = $t->port('redis');
        open my $f, '>', $conf or die "$conf: $!\n";
        print $f <<"EOF";
port $port
bind 127.0.0.1
daemonize no
dir ${\ $t->dir}
loglevel warning
logfile ""
sentinel monitor $self->{name} 127.0.0.1 $primary 2
sentinel down-after-milliseconds $self->{name} $self->{down_after}
sentinel failover-timeout $self->{name} 5000
sentinel parallel-syncs $self->{name} 1
EOF
        close $f;
    }

    $t->spawn($s, '/usr/bin/redis-sentinel', $conf);
    $t->wait_port($t->port($s)) or die "sentinel $s did not start\n";
}

sub stop_sentinel { $_[0]{t}->stop_proc($_[1], 'TERM') }

# a command to a sentinel: its reply, undef on error
sub cmd {
    my ($self, $s, @cmd) = @_;
    my @r = eval { $self->{t}->redis_cmd_port($self->{t}->port($s), undef,
        @cmd) };
    return $@ ? undef : $r[0];
}

# the primary's port as the first sentinel that answers says
sub primary_port {
    my ($self) = @_;
    for my $s (@{$self->{sentinels}}) {
        my $r = $self->cmd($s, 'SENTINEL', 'get-master-addr-by-name',
            $self->{name});
        return $r->[1] if ref $r eq 'ARRAY' && @$r == 2;
    }
    return undef;
}

# every sentinel knows a replica that is connected and in sync and the
# two other sentinels, and a failover could be authorized; the replica
# has every write of the primary (a failover of a replica still loading
# would lose writes the primary acknowledged: Redis replicates them
# asynchronously)
sub wait_ready {
    my ($self, $timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        my $ok = $self->in_sync;
        for my $s (@{$self->{sentinels}}) {
            my $m = $self->cmd($s, 'SENTINEL', 'master', $self->{name});
            my %m = ref $m eq 'ARRAY' ? @$m : ();
            my $rs = $self->cmd($s, 'SENTINEL', 'replicas', $self->{name});
            my $good = grep {
                my %r = ref $_ eq 'ARRAY' ? @$_ : ();
                ($r{flags} // '') eq 'slave'
                    && ($r{'master-link-status'} // '') eq 'ok'
            } @{ ref $rs eq 'ARRAY' ? $rs : [] };
            my $q = $self->cmd($s, 'SENTINEL', 'ckquorum', $self->{name});
            $ok = 0 unless $good
                && ($m{'num-other-sentinels'} // 0) >= 2
                && defined $q && $q =~ /^OK/;
        }
        return 1 if $ok;
        sleep 0.2;
    }
    return 0;
}

# the primary has a replica online that acknowledged its stream within
# the last second (replicas acknowledge each second; nginx's workers
# write each second, so the offsets are rarely equal)
sub in_sync {
    my ($self) = @_;
    my $p = $self->primary_port or return 0;
    my $info = eval { $self->{t}->redis_cmd_port($p, undef, 'INFO',
        'replication') } // '';
    return scalar grep { /state=online,offset=(\d+),lag=(\d+)/
        && $1 > 0 && $2 <= 1 } $info =~ /^slave\d+:(.*)$/mg;
}

# SENTINEL FAILOVER by hand, through sentinel $s: the new primary's port.
# Asked again while refused (a replica not good to promote yet, a
# failover in progress) or when one said OK did not happen (aborted).
sub failover {
    my ($self, $s, $timeout) = @_;
    my $old = $self->primary_port;
    my $end = time + ($timeout // 30);
    my $r;

    while (time < $end) {
        $r = eval { $self->{t}->redis_cmd_port($self->{t}->port($s // 's1'),
            undef, 'SENTINEL', 'FAILOVER', $self->{name}) };
        $r = $@ || 'no answer' unless defined $r;
        if ($r eq 'OK') {
            my $p = $self->wait_moved($old, 8);
            return $p if defined $p;
        }
        sleep 0.5;
    }
    die "SENTINEL FAILOVER: $r\n";
}

# the primary the sentinels tell is another than $old: its port
sub wait_moved {
    my ($self, $old, $timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        my $p = $self->primary_port;
        return $p if defined $p && $p != $old;
        sleep 0.1;
    }
    return undef;
}

1;
