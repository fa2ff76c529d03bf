package FeedCluster;

# A real Redis Cluster for a test: redis-server --cluster-enabled yes on
# loopback ports the test's FeedTest picks, made one cluster by
# redis-cli --cluster create.  Nodes are named c1, c2, ...; the first
# `masters` start as masters, the others as their replicas.

use strict;
use warnings;

use Time::HiRes qw(time sleep);
use FeedTest::Util ();

sub start {
    my ($class, $t, %o) = @_;

    my $masters = $o{masters} || 3;
    my $replicas = $o{replicas} // 0;
    my $n = $masters * (1 + $replicas);

    # args => [...]: more options of every redis-server
    my $self = bless { t => $t, names => [], timeout => $o{node_timeout}
        || 1000, args => $o{args} || [] }, $class;

    for my $i (1 .. $n) {
        my $name = "c$i";
        push @{$self->{names}}, $name;
        $self->start_node($name);
    }

    my @addrs = map { '127.0.0.1:' . $t->port($_) } @{$self->{names}};

    my $out = `redis-cli --cluster create @addrs --cluster-replicas $replicas --cluster-yes 2>&1`;
    die "redis-cli --cluster create failed:\n$out" if $?;

    $self->wait_ok(20) or die "the cluster did not become ok\n";

    return $self;
}

sub start_node {
    my ($self, $name) = @_;

    my $t = $self->{t};
    my $port = $t->port($name);
    my $dir = $t->dir . "/$name";
    mkdir $dir;

    $t->spawn($name, '/usr/bin/redis-server', '--port', $port,
        '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
        '--dir', $dir, '--daemonize', 'no', '--loglevel', 'warning',
        '--cluster-enabled', 'yes',
        '--cluster-config-file', "$dir/nodes.conf",
        '--cluster-port', $t->port("${name}bus"),
        '--cluster-replica-validity-factor', 0,
        '--cluster-node-timeout', $self->{timeout}, @{$self->{args}});

    my $end = time + 10;
    while (time < $end) {
        my $r = eval { $self->cmd($name, 'PING') };
        return $port if defined $r && $r eq 'PONG';
        sleep 0.02;
    }

    die "redis-server $name did not start on $port\n";
}

sub names { @{$_[0]{names}} }

# a node more, a master without slots (so in no map yet), once every node
# knows it
sub add_node {
    my ($self, $name) = @_;

    $self->start_node($name);
    my $t = $self->{t};
    my ($any) = $self->alive_names;
    $self->cmd($any, 'CLUSTER', 'MEET', '127.0.0.1', $self->port($name),
        $t->port("${name}bus"));
    push @{$self->{names}}, $name;

    my $id = $self->node_id($name);
    return $t->wait_for(10, sub {
        !grep { (eval { $self->cmd($_, 'CLUSTER', 'NODES') } // '')
            !~ /^$id \S+ (?:myself,)?master - \d+ \d+ \d+ connected/m }
            $self->alive_names;
    }) && $self->wait_ok(10);
}

# a node's clients served on a new port, as when its pod restarts with
# another address: CONFIG SET port (the cluster's bus port stays), the new
# one announced to the cluster, and the clients of the old port dropped
# once every node names the new one; the new port
sub move_port {
    my ($self, $name, $new_name) = @_;

    my $t = $self->{t};
    my $old = $self->port($name);
    my $new = $t->port($new_name);

    $t->redis_cmd_port($old, undef, 'CONFIG', 'SET', 'port', $new);
    $t->redis_cmd_port($new, undef, 'CONFIG', 'SET',
        'cluster-announce-port', $new);
    $t->set_port($name, $new);

    return $new;
}

# the clients of a node that came through a port it no longer serves
sub drop_clients {
    my ($self, $name, $old) = @_;
    return $self->cmd($name, 'CLIENT', 'KILL', 'LADDR', "127.0.0.1:$old");
}

sub port { $_[0]{t}->port($_[1]) }

sub seeds {
    my ($self, $n) = @_;
    my @names = @{$self->{names}};
    @names = @names[0 .. $n - 1] if $n;
    return join ' ', map { '127.0.0.1:' . $self->port($_) } @names;
}

sub cmd {
    my ($self, $name, @cmd) = @_;
    return $self->{t}->redis_cmd_port($self->port($name), undef, @cmd);
}

# every node alive says cluster_state:ok and agrees on who owns the slots
sub wait_ok {
    my ($self, $timeout) = @_;

    return $self->{t}->wait_for($timeout || 10, sub {
        for my $name ($self->alive_names) {
            my $info = eval { $self->cmd($name, 'CLUSTER', 'INFO') } // '';
            return 0 unless $info =~ /cluster_state:ok/;
            return 0 unless $info =~ /cluster_slots_assigned:16384/;
            my $repl = eval { $self->cmd($name, 'INFO', 'replication') }
                // '';
            return 0 if $repl =~ /role:slave/
                && $repl !~ /master_link_status:up/;
        }
        my %maps = map { ($self->slots_text($_) // 'none') => 1 }
            $self->alive_names;
        return keys %maps == 1;
    });
}

sub alive_names {
    my ($self) = @_;
    return grep { $self->{t}->alive($_) } @{$self->{names}};
}

# CLUSTER SLOTS as text, masters only: "first-last:port ..."
sub slots_text {
    my ($self, $name) = @_;
    my $r = eval { $self->cmd($name, 'CLUSTER', 'SLOTS') } or return undef;
    return join ' ', sort map { "$_->[0]-$_->[1]:$_->[2][1]" } @$r;
}

# the name of the master owning a key now
sub master_of {
    my ($self, $key) = @_;

    my ($any) = $self->alive_names;
    my $slot = $self->cmd($any, 'CLUSTER', 'KEYSLOT', $key);
    my $r = $self->cmd($any, 'CLUSTER', 'SLOTS');

    for my $range (@$r) {
        next unless $slot >= $range->[0] && $slot <= $range->[1];
        my $port = $range->[2][1];
        my ($name) = grep { $self->port($_) == $port } @{$self->{names}};
        return $name;
    }

    return undef;
}

sub node_id {
    my ($self, $name) = @_;
    return $self->cmd($name, 'CLUSTER', 'MYID');
}

# a command on the master owning its key
sub key_cmd {
    my ($self, $key, @cmd) = @_;
    return $self->cmd($self->master_of($key), @cmd);
}

# moves a slot with its keys from one master to another, as
# redis-cli --cluster reshard does, one slot
sub move_slot {
    my ($self, $slot, $from, $to) = @_;
    $self->open_slot($slot, $from, $to);
    $self->end_move($slot, $from, $to);
}

# the first half of a move: the slot importing on $to, migrating on $from,
# and of its keys only @keys moved (MIGRATE)
sub open_slot {
    my ($self, $slot, $from, $to, @keys) = @_;

    $self->cmd($to, 'CLUSTER', 'SETSLOT', $slot, 'IMPORTING',
        $self->node_id($from));
    $self->cmd($from, 'CLUSTER', 'SETSLOT', $slot, 'MIGRATING',
        $self->node_id($to));

    $self->cmd($from, 'MIGRATE', '127.0.0.1', $self->port($to), '', 0,
        5000, 'KEYS', @keys) if @keys;
}

# the rest: the slot's other keys moved, then the slot given to $to
sub end_move {
    my ($self, $slot, $from, $to) = @_;

    while (1) {
        my $keys = $self->cmd($from, 'CLUSTER', 'GETKEYSINSLOT', $slot, 100);
        last unless @$keys;
        $self->cmd($from, 'MIGRATE', '127.0.0.1', $self->port($to), '', 0,
            5000, 'KEYS', @$keys);
    }

    my $tid = $self->node_id($to);
    $self->cmd($_, 'CLUSTER', 'SETSLOT', $slot, 'NODE', $tid)
        for $to, $from, grep { $_ ne $to && $_ ne $from } $self->masters;
}

# how many times a post is in a user's cached timeline
sub in_list {
    my ($self, $user, $id) = @_;
    my $l = eval { $self->key_cmd("feed:tl:{$user}", 'LRANGE',
        "feed:tl:{$user}", 0, -1) } || [];
    return scalar grep { FeedTest::Util::entry_id($_) eq $id } @$l;
}

# the master of each user's timeline (user => name), and how many users
# each master has (name => count)
sub spread {
    my ($self, @users) = @_;
    my %node = map { $_ => $self->master_of("feed:tl:{$_}") } @users;
    my %per;
    $per{$node{$_}}++ for @users;
    return (\%node, \%per);
}

# the http server of the cluster tests (FeedTest::Util::server_conf())
sub server_conf { FeedTest::Util::server_conf() }

# whether each of the statuses() of an nginx's workers ($workers of them)
# maps $masters masters, all up
sub mapped {
    my ($st, $workers, $masters) = @_;
    return keys %$st == $workers
        && !grep { ($_->{redis}{cluster}{masters_up} // 0) != $masters }
            values %$st;
}

sub masters {
    my ($self) = @_;
    my ($any) = $self->alive_names;
    my $r = $self->cmd($any, 'CLUSTER', 'SLOTS');
    my %ports = map { $_->[2][1] => 1 } @$r;
    return grep { $ports{$self->port($_)} } @{$self->{names}};
}

1;
