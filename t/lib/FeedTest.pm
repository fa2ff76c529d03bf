package FeedTest;

# A small nginx-tests style harness: real nginx, redis-server and the
# MongoDB stand-in on loopback ports picked at run time, in a private
# directory.  nginx is always stopped gracefully (SIGQUIT) and every test
# file ends with the error.log check (no [alert], [emerg], open socket).
#
# FEED_TEST_ASAN=1 (make test-asan): FEED_MODULE is a sanitizer build; every
# nginx command runs with its sanitizer runtime preloaded and writes any
# report into the test's directory, and a report fails the test file.

use strict;
use warnings;

use Exporter qw(import);
use File::Temp qw(tempdir);
use File::Path qw(make_path remove_tree);
use IO::Socket::INET;
use IO::Select;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time sleep);
use JSON::PP;
use Test::More;

our @EXPORT_OK = qw(json_decode);

my $ROOT = $ENV{FEED_ROOT} || do {
    my $d = __FILE__;
    $d =~ s{/t/lib/FeedTest\.pm$}{};
    $d = '.' if $d eq __FILE__;
    $d;
};

our $MODULE = $ENV{FEED_MODULE} || "$ROOT/build/ngx_http_feed_module.so";
our $NGINX = $ENV{FEED_NGINX} || '/usr/sbin/nginx';
our $PYTHON = '/usr/bin/python3';
our $STANDIN = "$ROOT/tools/mongod-standin";
our $ASAN = $ENV{FEED_TEST_ASAN};

my @ALL;

sub new {
    my ($class, %opts) = @_;

    my $dir = tempdir('feed-test-XXXXXX', TMPDIR => 1,
        CLEANUP => !$ENV{FEED_TEST_KEEP});
    chmod 0755, $dir;
    make_path("$dir/tmp");

    my $self = bless {
        dir => $dir, ports => {}, procs => {}, %opts,
    }, $class;

    push @ALL, $self;
    return $self;
}

sub dir { $_[0]{dir} }
sub root { $ROOT }

# a free loopback port per name, stable within one test file

sub port {
    my ($self, $name) = @_;

    return $self->{ports}{$name} if $self->{ports}{$name};

    for (1 .. 50) {
        my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
            LocalPort => 0, Proto => 'tcp', Listen => 1, ReuseAddr => 0)
            or next;
        my $p = $s->sockport;
        close $s;
        next if grep { $_ == $p } values %{$self->{ports}};
        return $self->{ports}{$name} = $p;
    }

    die "no free port\n";
}

# a process of that name serves on a new port now (a Redis moved to one)
sub set_port {
    my ($self, $name, $port) = @_;
    $self->{ports}{$name} = $port;
}

# processes

sub spawn {
    my ($self, $name, @cmd) = @_;

    my $log = "$self->{dir}/$name.out";
    my $pid = fork();
    die "fork: $!\n" unless defined $pid;

    my %env = $cmd[0] eq '/usr/bin/redis-server' ? redis_locale() : ();

    if ($pid == 0) {
        open STDIN, '<', '/dev/null';
        open STDOUT, '>>', $log;
        open STDERR, '>&', \*STDOUT;
        setpgrp(0, 0);
        @ENV{keys %env} = values %env;
        exec @cmd or POSIX::_exit(127);
    }

    $self->{procs}{$name} = $pid;
    return $pid;
}

# Every redis-server runs in a locale whose collation is not byte order,
# en_US.UTF-8 (made once for the tests, in build/locale): Redis's Lua
# compares strings by it, and the module's scripts must not order ids
# with "<" (scripts/lib/ids.lua; t/timeline_ids.t checks the locale is in
# effect).  Without localedef's sources (Debian's locales), the C locale.
sub redis_locale {
    my $dir = "$ROOT/build/locale";
    my $loc = "$dir/en_US.UTF-8";
    unless (-f "$loc/LC_COLLATE") {
        my $tmp = "$dir/tmp.$$";
        make_path($tmp);
        system("localedef -i en_US -f UTF-8 $tmp/en_US.UTF-8 "
            . '>/dev/null 2>&1');
        # another test may have made it meanwhile: theirs stays
        rename("$tmp/en_US.UTF-8", $loc)
            if -f "$tmp/en_US.UTF-8/LC_COLLATE" && !-e $loc;
        remove_tree($tmp);
    }
    return -f "$loc/LC_COLLATE" ? (LOCPATH => $dir, LC_ALL => 'en_US.UTF-8')
                                : ();
}

sub pid { $_[0]{procs}{$_[1]} }

sub alive {
    my ($self, $name) = @_;
    my $pid = $self->{procs}{$name} or return 0;
    return waitpid($pid, WNOHANG) == 0;
}

sub stop_proc {
    my ($self, $name, $sig, $timeout) = @_;

    my $pid = delete $self->{procs}{$name} or return;
    $sig ||= 'TERM';
    $timeout ||= 10;

    kill 'CONT', $pid;
    kill $sig, $pid;

    my $end = time + $timeout;
    while (time < $end) {
        return 1 if waitpid($pid, WNOHANG) != 0;
        sleep 0.02;
    }

    diag("$name (pid $pid) did not exit on SIG$sig, killing");
    kill 'KILL', $pid;
    waitpid($pid, 0);
    return 0;
}

sub signal {
    my ($self, $name, $sig) = @_;
    kill $sig, $self->{procs}{$name};
}

sub wait_port {
    my ($self, $port, $timeout) = @_;

    my $end = time + ($timeout || 10);
    while (time < $end) {
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
            Proto => 'tcp');
        return 1 if $s;
        sleep 0.02;
    }
    return 0;
}

# redis-server

# args => [...]: more options of redis-server; returns once it answers PING
sub start_redis {
    my ($self, %o) = @_;

    my $name = $o{name} || 'redis';
    my $port = $self->port($name);
    my @args = ('--port', $port, '--bind', '127.0.0.1', '--save', '',
        '--appendonly', 'no', '--dir', $self->{dir},
        '--daemonize', 'no', '--loglevel', 'warning');

    push @args, '--requirepass', $o{password} if $o{password};
    push @args, '--unixsocket', $o{unixsocket}, '--unixsocketperm', '777'
        if $o{unixsocket};
    push @args, @{$o{args}} if $o{args};

    $self->spawn($name, '/usr/bin/redis-server', @args);

    # wait => seconds: a dataset being loaded answers LOADING meanwhile
    my $end = time + ($o{wait} || 10);
    while (time < $end) {
        my $r = eval { $self->redis_cmd_port($port, $o{password}, 'PING') };
        return $port if defined $r && $r eq 'PONG';
        sleep 0.02;
    }

    die "redis-server did not start on $port\n";
}

sub stop_redis { $_[0]->stop_proc($_[1] || 'redis', 'TERM') }

sub redis {
    my ($self, @cmd) = @_;
    return $self->redis_cmd_port($self->port('redis'),
        $self->{redis_password}, @cmd);
}

# $port: a port on 127.0.0.1, or "host:port"
sub redis_cmd_port {
    my ($self, $port, $password, @cmd) = @_;

    my $peer = $port =~ /:/ ? $port : "127.0.0.1:$port";
    my $s = IO::Socket::INET->new(PeerAddr => $peer,
        Proto => 'tcp', Timeout => 5) or die "redis connect: $!\n";

    my @out;
    for my $c ($password ? (['AUTH', $password]) : (), \@cmd) {
        my $req = '*' . scalar(@$c) . "\r\n";
        $req .= '$' . length($_) . "\r\n$_\r\n" for @$c;
        print $s $req;
        push @out, _resp_read($s);
    }

    close $s;
    return $out[-1];
}

sub _resp_read {
    my ($s) = @_;

    local $/ = "\r\n";
    my $line = <$s>;
    die "redis: connection closed\n" unless defined $line;
    chomp $line;

    my ($t, $v) = (substr($line, 0, 1), substr($line, 1));

    return $v if $t eq '+';
    return $v + 0 if $t eq ':';
    die "redis error: $v\n" if $t eq '-';

    if ($t eq '$') {
        return undef if $v < 0;
        my $buf = '';
        while (length($buf) < $v + 2) {
            my $n = read($s, $buf, $v + 2 - length($buf), length($buf));
            die "redis: short read\n" unless $n;
        }
        return substr($buf, 0, $v);
    }

    if ($t eq '*') {
        return undef if $v < 0;
        return [ map { _resp_read($s) } 1 .. $v ];
    }

    die "redis: bad reply '$line'\n";
}

# a TCP relay to a server: killing it cuts the server off while it runs on;
# $mode "hold": subscribed connections stalled on SIGUSR1 to the proxy's
# process group, relayed again on SIGUSR2 (t/lib/tcp_proxy.pl); "hold-
# replies": the others' replies held so

sub start_proxy {
    my ($self, $name, $target, $delay_ms, $mode) = @_;

    my $port = $self->port($name);
    (my $script = __FILE__) =~ s/FeedTest\.pm$/tcp_proxy.pl/;

    $self->spawn($name, $^X, $script, $port, $target, $delay_ms || 0,
        $mode ? $mode : ());

    return $port if $self->wait_port($port);
    die "proxy $name did not start on $port\n";
}

# the MongoDB stand-in, or a real MongoDB given FEED_TEST_MONGO_URI

sub real_mongo { $ENV{FEED_TEST_MONGO_URI} }

sub start_mongo {
    my ($self, %o) = @_;

    my $name = $o{name} || 'mongo';
    my $port = $self->port($name);

    make_path("$self->{dir}/$name-db");

    my @cmd = ($PYTHON, $STANDIN, '--port', $port,
        '--log', "$self->{dir}/$name-commands.log",
        '--dbpath', "$self->{dir}/$name-db",
        '--latency-file', "$self->{dir}/$name-latency");
    push @cmd, '--latency-ms', $o{latency_ms} if $o{latency_ms};
    push @cmd, @{$o{args}} if $o{args};

    $self->spawn($name, @cmd);

    # wait => seconds: a large --dbpath file takes a while to load
    return $port if $self->wait_port($port, $o{wait} || 20);
    die "mongo stand-in did not start on $port\n";
}

sub stop_mongo { $_[0]->stop_proc($_[1] || 'mongo', 'TERM') }

# what %%FEED_BACKENDS%% points at: Redis, and the stand-in unless
# FEED_TEST_MONGO_URI names a real MongoDB (a test that needs the stand-in
# itself, its command log, its latency, to stop it, calls start_mongo)
sub start_backends {
    my ($self) = @_;
    $self->start_redis;
    $self->start_mongo unless real_mongo();
    return $self;
}

sub mongo_latency {
    my ($self, $ms, $name) = @_;
    $name ||= 'mongo';
    my $f = "$self->{dir}/$name-latency";
    open my $fh, '>', "$f.new" or die "$f: $!\n";
    print $fh "$ms\n";
    close $fh;
    rename "$f.new", $f;
}

sub mongo_commands {
    my ($self, $name) = @_;
    $name ||= 'mongo';
    open my $fh, '<', "$self->{dir}/$name-commands.log" or return ();
    my @cmds;
    while (<$fh>) {
        my $c = eval { decode_json($_) } or next;
        push @cmds, $c;
    }
    return @cmds;
}

# documents written straight into MongoDB, as another application sharing
# the database would: extended JSON strings, through Debian's pymongo

sub mongo_insert {
    my ($self, $coll, @docs) = @_;

    my $py = <<'PY';
import sys
from bson import json_util
from pymongo import MongoClient
uri, coll = sys.argv[1], sys.argv[2]
db = MongoClient(uri, serverSelectionTimeoutMS=5000).get_default_database('feed')
db[coll].insert_many([json_util.loads(d) for d in sys.argv[3:]])
PY

    my $pid = fork() // die "fork: $!\n";
    if ($pid == 0) {
        exec($PYTHON, '-c', $py, $self->mongo_uri, $coll, @docs)
            or POSIX::_exit(127);
    }
    waitpid($pid, 0);
    die "mongo_insert into $coll failed\n" if $?;
}

# the documents of a collection matching a filter (extended JSON), read
# through Debian's pymongo: decoded, ObjectIds as {'$oid' => hex}

sub mongo_find {
    my ($self, $coll, $filter) = @_;

    my $py = <<'PY';
import sys
from bson import json_util
from pymongo import MongoClient
uri, coll, flt = sys.argv[1], sys.argv[2], sys.argv[3]
db = MongoClient(uri, serverSelectionTimeoutMS=5000).get_default_database('feed')
try:
    print(json_util.dumps(list(db[coll].find(json_util.loads(flt)))))
except Exception as e:
    sys.exit('mongo_find: %s' % e)
PY

    open(my $fh, '-|', $PYTHON, '-c', $py, $self->mongo_uri, $coll,
        $filter // '{}') or die "mongo_find: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh or die "mongo_find in $coll failed\n";
    return @{ decode_json($out) };
}

# mongod's failCommand fail point (docs/mongo-standin.md#fail-points), set
# through Debian's pymongo on the admin database: mode => 'alwaysOn' (the
# default), 'off', {times => N}, {skip => N}, {times => N, skip => M}; the
# other keys are its data (or data => {...}), the flags given as Perl
# truths:
#
#   $t->mongo_fail_point(mode => {times => 1, skip => 1},
#       failCommands => ['update'], namespace => 'feed.follow_counts',
#       errorCode => 6);
#   $t->mongo_fail_point(failCommands => [qw(find insert update)],
#       blockConnection => 1, blockTimeMS => 5000);
#
# returns the number of times the fail point fired before this call;
# mongo => 'name' for another stand-in than 'mongo'

my %FP_FLAGS = map { $_ => 1 } qw(closeConnection blockConnection
    failAllCommands failInternalCommands);

sub mongo_fail_point {
    my ($self, %spec) = @_;

    my $name = delete $spec{mongo};
    my $mode = delete $spec{mode} // 'alwaysOn';
    my $data = delete $spec{data} // {%spec};
    $data = { map { $_ => $FP_FLAGS{$_}
        ? ($data->{$_} ? JSON::PP::true : JSON::PP::false) : $data->{$_} }
        keys %$data };

    return $self->mongo_set_point($name, 'failCommand', $mode, $data);
}

sub mongo_fail_point_off {
    my ($self, $name) = @_;
    return $self->mongo_fail_point(mode => 'off', mongo => $name);
}

# waits until the fail point fired $times times in all (the count
# mongo_fail_point returns, plus the hits awaited); false after $timeout s
sub mongo_wait_fail_point {
    my ($self, $times, $timeout, $name) = @_;
    return $self->mongo_wait_point($name, 'failCommand', $times, $timeout);
}

# the stand-in's own fail point feedDelayAuthors (docs/mongo-standin.md
# #fail-points): every find of posts naming one of the authors (author:
# "u" or {$in: [...]}) is held ms before it runs, as a slow shard would;
# mode as mongo_fail_point's, alwaysOn by default.  A real MongoDB has no
# such fail point: a test using it skips there.
#
#   my $n = $t->mongo_delay_authors(ms => 2000, authors => [qw(u1 u2)]);
#   $t->mongo_wait_delay_authors($n + 1, 5);    # one find held since
#   $t->mongo_delay_authors_off;
#
# returns the number of finds it held before this call; mongo => 'name'
# for another stand-in than 'mongo'
sub mongo_delay_authors {
    my ($self, %o) = @_;
    my $mode = $o{mode} // 'alwaysOn';
    return $self->mongo_set_point($o{mongo}, 'feedDelayAuthors', $mode,
        { authors => $o{authors}, blockTimeMS => $o{ms} });
}

sub mongo_delay_authors_off {
    my ($self, $name) = @_;
    return $self->mongo_delay_authors(mode => 'off', mongo => $name);
}

# waits until feedDelayAuthors held $times finds in all; false after
# $timeout s
sub mongo_wait_delay_authors {
    my ($self, $times, $timeout, $name) = @_;
    return $self->mongo_wait_point($name, 'feedDelayAuthors', $times,
        $timeout);
}

# configureFailPoint $point: its count before
sub mongo_set_point {
    my ($self, $name, $point, $mode, $data) = @_;
    my $r = $self->mongo_admin_command($name, ['configureFailPoint',
        $point, 'mode', $mode, $mode eq 'off' ? () : ('data', $data)]);
    return $r->{count};
}

sub mongo_wait_point {
    my ($self, $name, $point, $times, $timeout) = @_;
    my $r = eval { $self->mongo_admin_command($name, ['waitForFailPoint',
        $point, 'timesEntered', $times,
        'maxTimeMS', int(($timeout // 10) * 1000)]) };
    return $r && $r->{ok};
}

# a command (a list of field, value: its order kept) on the admin database;
# its reply decoded, or a die with the server's error
sub mongo_admin_command {
    my ($self, $name, $fields) = @_;

    my $py = <<'PY';
import sys
from bson import json_util
from bson.son import SON
from pymongo import MongoClient
from pymongo.errors import PyMongoError
uri, fields = sys.argv[1], json_util.loads(sys.argv[2])
cmd = SON(zip(fields[0::2], fields[1::2]))
c = MongoClient(uri, serverSelectionTimeoutMS=5000, retryReads=False)
try:
    print(json_util.dumps(c.admin.command(cmd)))
except PyMongoError as e:
    sys.exit('%s: %s' % (next(iter(cmd)), e))
PY

    open(my $fh, '-|', $PYTHON, '-c', $py, $self->mongo_uri($name),
        JSON::PP->new->canonical->encode($fields))
        or die "mongo_admin_command: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh or die "mongo_admin_command $fields->[0] failed\n";
    return decode_json($out);
}

sub mongo_uri {
    my ($self, $name) = @_;
    return $self->real_mongo_uri if real_mongo();
    return 'mongodb://127.0.0.1:' . $self->port($name || 'mongo') . '/';
}

# the real MongoDB's URI; with FeedTest->new(fresh_mongo => 1), a database
# of this instance's own in it (feed_t<pid>_<n>, dropped at cleanup), for
# the tests that need to know every document there is

my $FRESH = 0;

sub real_mongo_uri {
    my ($self) = @_;
    my $uri = real_mongo();
    return $uri unless $self->{fresh_mongo};
    $self->{mongo_db} //= 'feed_t' . $$ . '_' . $FRESH++;
    $uri =~ m{^(mongodb(?:\+srv)?://[^/?]+)/?[^?]*(\?.*)?$}
        or die "FEED_TEST_MONGO_URI: not a mongodb:// URI: $uri\n";
    return "$1/$self->{mongo_db}" . ($2 // '');
}

sub drop_fresh_mongo {
    my ($self) = @_;
    return unless real_mongo() && $self->{mongo_db};
    system($PYTHON, '-c', 'import sys; from pymongo import MongoClient; '
        . 'c = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000); '
        . 'c.drop_database(c.get_default_database())',
        $self->real_mongo_uri);
    delete $self->{mongo_db};
}

# nginx

# the lines most configurations share, each written where its placeholder
# stands on a line of its own (with its indentation); a test that needs
# something else (more threads, another Redis) writes its own lines:
#
#   %%FEED_THREAD_POOL%%  main: the pool of feed_thread_pool, 4 threads
#   %%FEED_BACKENDS%%     http: feed_redis on the test's Redis ("redis"),
#                         then %%FEED_MONGO%%
#   %%FEED_MONGO%%        http: feed_mongo_uri on the test's MongoDB,
#                         feed_thread_pool feedtp
my %CONF_LINES = (
    FEED_THREAD_POOL => [ 'thread_pool feedtp threads=4;' ],
    FEED_BACKENDS => [ 'feed_redis 127.0.0.1:%%PORT_REDIS%%;',
        '%%FEED_MONGO%%' ],
    FEED_MONGO => [ 'feed_mongo_uri "%%MONGO_URI%%";',
        'feed_thread_pool feedtp;' ],
);

sub _conf_lines {
    my ($indent, $name) = @_;
    return join "\n", map {
        /^%%(\w+)%%$/ ? _conf_lines($indent, $1) : "$indent$_"
    } @{$CONF_LINES{$name}};
}

sub write_conf {
    my ($self, $conf, $file) = @_;

    $file ||= 'nginx.conf';
    my $dir = $self->{dir};

    $conf =~ s/^([ \t]*)%%(FEED_[A-Z_]+)%%[ \t]*$/
        $CONF_LINES{$2} ? _conf_lines($1, $2)
            : die "write_conf: unknown placeholder %%$2%%\n"/gme;
    die "write_conf: $1 not on a line of its own\n"
        if $conf =~ /(%%FEED_[A-Z_]+%%)/;

    $conf =~ s/%%PORT_(\w+)%%/$self->port(lc $1)/ge;
    $conf =~ s/%%TESTDIR%%/$dir/g;
    $conf =~ s/%%MONGO_URI%%/$self->mongo_uri/ge;
    $conf =~ s/%%MONGO_URI_(\w+)%%/$self->mongo_uri(lc $1)/ge;

    my $globals = "load_module $MODULE;\n"
        . "daemon off;\n"
        . "pid $dir/nginx.pid;\n"
        . "error_log $dir/error.log "
        . ($ENV{FEED_TEST_DEBUG} ? 'debug' : 'info') . ";\n"
        . ($> == 0 ? "user root;\n" : '')
        . ($ENV{FEED_TEST_CORE}
            ? "worker_rlimit_core 2g;\nworking_directory $dir;\n" : '');

    my $http = "\n    access_log "
        . ($self->{no_access_log} ? 'off' : "$dir/access.log") . ";\n"
        . join('', map { "    ${_}_temp_path $dir/tmp/$_;\n" }
            qw(client_body proxy fastcgi uwsgi scgi));

    $conf =~ s/^(\s*http\s*\{)/$1$http/m;

    open my $fh, '>', "$dir/$file" or die "$file: $!\n";
    print $fh $globals, $conf;
    close $fh;

    $self->{conf} = "$dir/$file";
    return $self;
}

# conf/nginx.conf as shipped, on this test's ports: only its listen, Redis
# and MongoDB addresses are replaced (load_module comes from write_conf)
sub shipped_conf {
    my ($self) = @_;
    return $self->conf_file('nginx.conf', ports => { 8080 => 'http' });
}

# a configuration of conf/ (nginx.conf, the examples) for write_conf, on
# this test's ports and servers: its load_module line dropped; each
# "listen [address:]port" and "127.0.0.1:port" (an upstream's server) of
# a port in %$ports on 127.0.0.1 and the test's port of that name; every
# access_log and error_log file in the test's directory; feed_redis on
# $o{redis} (addresses, the test's Redis by default) and feed_mongo_uri on
# the test's MongoDB, unless $o{as_written} (for nginx -t only: the file's
# own addresses, never connected to).  A listen of a port not in %$ports
# is an error: the test would bind it.
sub conf_file {
    my ($self, $file, %o) = @_;

    open my $fh, '<', "$ROOT/conf/$file" or die "conf/$file: $!\n";
    my $conf = do { local $/; <$fh> };
    close $fh;

    my $ports = $o{ports} || {};
    my $port = sub {
        my ($p) = @_;
        my $name = $ports->{$p} or die "conf/$file: port $p not given\n";
        return '127.0.0.1:%%PORT_' . uc($name) . '%%';
    };

    $conf =~ s/^load_module .*$//m;
    $conf =~ s/^(\s*listen\s+)(?:\S+:)?(\d+)\b/$1 . $port->($2)/gme;
    $conf =~ s/\b127\.0\.0\.1:(\d+)\b/
        $ports->{$1} ? $port->($1) : "127.0.0.1:$1"/ge;
    $conf =~ s{^(\s*(?:access|error)_log\s+)/\S*/([^/\s;]+)}
        {$1%%TESTDIR%%/$2}gm;

    return $conf if $o{as_written};

    my $redis = $o{redis} // '127.0.0.1:%%PORT_REDIS%%';
    $conf =~ s/^(\s*feed_redis\s+)[^;]*;/$1$redis;/m;
    $conf =~ s/^(\s*feed_mongo_uri\s+)[^;]*;/${1}"%%MONGO_URI%%";/m;

    return $conf;
}

sub nginx_cmd {
    my ($self, @args) = @_;
    return ($self->sanitizer_env(@args), $NGINX, '-p', "$self->{dir}/",
        '-c', $self->{conf}, '-e', "$self->{dir}/error.log", @args);
}

# sanitizers (FEED_TEST_ASAN=1); docs/testing.md has the reasons

# the libasan the module was linked with: Debian's nginx is not built with
# ASan, so its runtime must be the first library loaded (LD_PRELOAD)
my $LIBASAN;

sub libasan {
    return $LIBASAN if $LIBASAN;
    my ($lib) = map { m{=>\s*(\S*/libasan\.so[.\d]*)} ? $1 : () }
        `ldd $MODULE 2>/dev/null`;
    die "FEED_TEST_ASAN=1: $MODULE is not linked with libasan "
        . "(make test-asan builds one)\n" unless $lib;
    return $LIBASAN = $lib;
}

# "env NAME=value ..." before an nginx command: nginx only, never the
# servers or tools a test starts; new(asan_options => '...') and then
# FEED_TEST_ASAN_OPTIONS add to, or override, ASan's options.  UBSan and
# ASan get the same log_path: gcc's libubsan sets libasan's report path
# when it starts.  Commands that only parse the configuration (-t, -s) exit
# without freeing what nginx allocated for it, so leaks are checked in the
# server's processes only.
sub sanitizer_env {
    my ($self, @args) = @_;
    return () unless $ASAN;

    my $log = "log_path=$self->{dir}/asan";
    my $leaks = (grep { /^-[ts]$/ } @args) ? 0 : 1;
    my $more = join ':', grep { $_ }
        $self->{asan_options}, $ENV{FEED_TEST_ASAN_OPTIONS};

    return ('/usr/bin/env', 'LD_PRELOAD=' . libasan(),
        "ASAN_OPTIONS=$log:detect_odr_violation=0:fast_unwind_on_malloc=0"
            . ":detect_leaks=$leaks" . ($more ? ":$more" : ''),
        "UBSAN_OPTIONS=$log:print_stacktrace=1:halt_on_error=0");
}

# a sanitizer's first line in a log; what follows it up to the next nginx
# log line is its report
my $SANITIZER_LINE =
    qr/^==\d+==(?:ERROR|WARNING): \w+Sanitizer|: runtime error: /;

# the sanitizer reports written so far and not yet shown: the report files
# (asan.PID), and the reports written to nginx's stderr (error.log, or
# nginx.out before nginx opened its log), where UBSan always writes and ASan
# too once UBSan has started in a worker: nginx has overwritten the
# environment it would read its options from by then
sub sanitizer_reports {
    my ($self) = @_;
    my @out;

    for my $f (sort glob("$self->{dir}/asan.*")) {
        next if $self->{sanitizer_seen}{$f}++;
        my $r = module_leaks(_read_from($f, 0));
        push @out, "$f:\n$r" if $r =~ /\S/;
    }

    for my $f (map { "$self->{dir}/$_" } qw(error.log nginx.out)) {
        my $text = _read_from($f, $self->{sanitizer_offset}{$f} // 0);
        $self->{sanitizer_offset}{$f} += length $text;

        my ($in, @reports);
        for (split /\n/, $text) {
            $in = 0 if m{^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \[};
            if (/$SANITIZER_LINE/) {
                push @reports, '';
                $in = 1;
            }
            $reports[-1] .= "$_\n" if $in;
        }
        @reports = grep { /\S/ } map { module_leaks($_) } @reports;
        push @out, join '', "$f:\n", @reports if @reports;
    }

    return @out;
}

# a report with, of its leaks, only those allocated by the module's code
# (a frame in an ngx_http_feed_* function): nginx does not free everything
# it allocated before a process exits, and that is not ours to report
sub module_leaks {
    my ($text) = @_;
    return $text unless $text =~ /ERROR: LeakSanitizer/;

    my @leaks = grep { /^(?:Direct|Indirect) leak/ && /in ngx_http_feed_/ }
        split /\n\n/, $text;
    return @leaks ? join("\n\n", 'LeakSanitizer:', @leaks) . "\n" : '';
}

sub _read_from {
    my ($file, $offset) = @_;
    open my $fh, '<', $file or return '';
    seek $fh, $offset, 0;
    local $/;
    return <$fh> // '';
}

# a test of its own under FEED_TEST_ASAN=1: no sanitizer report so far
sub no_sanitizer_reports {
    my ($self) = @_;
    return unless $ASAN;
    my @r = $self->sanitizer_reports;
    ok(!@r, 'no sanitizer reports') or diag(join "\n", @r);
}

# nginx -t: returns (ok, output)

sub test_conf {
    my ($self) = @_;
    my @cmd = $self->nginx_cmd('-t');
    my $out = `@cmd 2>&1`;
    return ($? == 0, $out);
}

# starts nginx and waits for its "http" port (and any other named ones)

sub run {
    my ($self, @names) = @_;

    $self->spawn('nginx', $self->nginx_cmd);

    for my $name ('http', @names) {
        next unless $self->{ports}{$name};
        $self->wait_port($self->{ports}{$name})
            or die "nginx did not listen on $name\n";
    }

    $self->{nginx_up} = 1;
    return $self;
}

sub worker_pids {
    my ($self) = @_;
    my $master = $self->pid('nginx') or return ();
    my @pids = map { /(\d+)/ ? $1 : () }
        `ps -o pid= --ppid $master 2>/dev/null`;
    return @pids;
}

sub reload {
    my ($self, $timeout) = @_;

    my %old = map { $_ => 1 } $self->worker_pids;
    $self->signal('nginx', 'HUP');

    my $end = time + ($timeout || 10);
    while (time < $end) {
        my @now = $self->worker_pids;
        return 1 if @now && !grep { $old{$_} } @now;
        sleep 0.05;
    }
    return 0;
}

# a master that had to be killed leaves its workers behind: they go too
sub stop {
    my ($self) = @_;
    return 1 unless $self->{procs}{nginx};
    $self->{nginx_up} = 0;
    my @workers = $self->worker_pids;
    return 1 if $self->stop_proc('nginx', 'QUIT', 20);
    kill 'KILL', @workers if @workers;
    return 0;
}

sub error_log {
    my ($self) = @_;
    open my $fh, '<', "$self->{dir}/error.log" or return '';
    local $/;
    return <$fh>;
}

sub bad_log_lines {
    my ($self) = @_;
    return grep { /\[(alert|emerg)\]|open socket .* left/ }
        split /\n/, $self->error_log;
}

# what a crashed worker said before it died (an assert of a library goes
# to stderr, not to error.log), and where its core file is
sub crash_output {
    my ($self, @bad) = @_;
    return () unless grep { /exited on signal/ } @bad;
    my @out;
    if (open my $fh, '<', "$self->{dir}/nginx.out") {
        my @lines = <$fh>;
        chomp @lines;
        splice(@lines, 0, @lines - 20) if @lines > 20;
        push @out, 'nginx stderr:', @lines if @lines;
    }
    push @out, "core files: $_" for glob "$self->{dir}/core*";
    return @out;
}

# a failed test file shows the last errors and warnings of error.log: CI
# prints what prove printed, and the test's directory is gone by then
sub failure_context {
    my ($self) = @_;
    return if Test::More->builder->is_passing;
    open my $fh, '<', "$self->{dir}/error.log" or return;
    my @lines = grep { /\[(?:error|warn|crit)\]/ } <$fh>;
    chomp @lines;
    splice(@lines, 0, @lines - 40) if @lines > 40;
    diag(join "\n", 'last errors in error.log:', @lines) if @lines;
}

# stops nginx gracefully, then asserts error.log is clean; the last
# instance of a test file: done(), which ends the test too
sub finish {
    my ($self) = @_;

    ok($self->stop, 'nginx stopped gracefully');

    my @bad = $self->bad_log_lines;
    ok(!@bad, 'no alerts in error.log') or diag(join "\n", @bad,
        $self->crash_output(@bad));
    $self->failure_context;

    $self->cleanup;
    $self->no_sanitizer_reports;
}

sub done {
    my ($self) = @_;
    $self->finish;
    done_testing();
}

sub cleanup {
    my ($self) = @_;
    # nginx first: a worker whose MongoDB or Redis went first would wait
    # for its calls to time out before it exits
    for my $name (sort { ($b eq 'nginx') <=> ($a eq 'nginx') }
        keys %{$self->{procs}})
    {
        $self->stop_proc($name, $name eq 'nginx' ? 'QUIT' : 'TERM', 10);
    }
    $self->drop_fresh_mongo;
}

# a test file or the bench stopped by a signal (Ctrl-C, kill) still stops
# the servers it started: the signal becomes an exit, which runs END; a
# forked child of the file leaves them to it
my $OWNER = $$;
my %SIGNO = (HUP => 1, INT => 2, TERM => 15);

for my $sig (keys %SIGNO) {
    $SIG{$sig} = sub {
        POSIX::_exit(128 + $SIGNO{$sig}) unless $$ == $OWNER;
        exit 128 + $SIGNO{$sig};
    };
}

# a report no test has shown (a test file that died, an instance without
# done) still fails the test file
END {
    my $rc = $?;
    $_->cleanup for @ALL;
    my @r = $ASAN ? map { $_->sanitizer_reports } @ALL : ();
    if (@r) {
        diag(join "\n", 'sanitizer reports:', @r);
        $rc ||= 1;
    }
    $? = $rc;
}

# HTTP

# starts a request without waiting: http_end() collects the response

sub http_start {
    my ($self, $method, $uri, %o) = @_;

    my $port = $o{port} || $self->port('http');
    my $body = $o{body};
    my $headers = $o{headers} || {};

    my $req = "$method $uri HTTP/1.1\r\nHost: localhost\r\n"
        . "Connection: close\r\n";
    $req .= "$_: $headers->{$_}\r\n" for sort keys %$headers;
    $req .= "Content-Length: " . length($body) . "\r\n"
        if defined $body && !exists $headers->{'Content-Length'};
    $req .= "\r\n";
    $req .= $body if defined $body;

    # raw => the bytes to send as they are, for malformed requests
    $req = $o{raw} if defined $o{raw};

    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
        Proto => 'tcp', Timeout => 10);

    my $h = { sock => $s, start => time, timeout => $o{timeout} || 10 };
    $h->{error} = "connect: $!" unless $s;
    $s->syswrite($req) if $s;

    return $h;
}

sub http_end {
    my ($self, $h) = @_;

    my $s = $h->{sock}
        or return { status => 0, error => $h->{error}, raw => '' };

    my $raw = '';
    my $sel = IO::Select->new($s);

    while (1) {
        my $left = $h->{timeout} - (time - $h->{start});
        last if $left <= 0 || !$sel->can_read($left);
        my $n = $s->sysread(my $buf, 65536);
        last unless $n;
        $raw .= $buf;
    }

    close $s;

    my $res = parse_response($raw);
    $res->{elapsed} = time - $h->{start};
    return $res;
}

sub http {
    my ($self, $method, $uri, %o) = @_;

    return $self->http_end($self->http_start($method, $uri, %o));
}

# a request as a client makes it after MongoDB came back: sent again while
# answered 503, for up to 10 s.  Each pooled MongoDB client of before the
# restart may fail its first command on its old socket (the stand-in is a
# standalone server without sessions, so the driver retries nothing), and
# a 503 is what the client is told to retry.
sub http_retried {
    my ($self, $method, $uri, %o) = @_;

    my $r;
    my $until = Time::HiRes::time() + 10;

    while (1) {
        $r = $self->http($method, $uri, %o);
        last if $r->{status} != 503 || Time::HiRes::time() > $until;
        Test::More::note("$method $uri: 503, again");
        Time::HiRes::sleep(0.2);
    }

    return $r;
}

sub parse_response {
    my ($raw) = @_;

    my $res = { raw => $raw, status => 0, headers => {}, body => '' };
    my ($head, $body) = split /\r\n\r\n/, $raw, 2;
    return $res unless defined $head && $head =~ m{^HTTP/1\.[01] (\d+)};

    $res->{status} = $1;

    for my $line (split /\r\n/, $head) {
        next unless $line =~ /^([^:]+):\s*(.*)$/;
        my $k = lc $1;
        $res->{headers}{$k} = exists $res->{headers}{$k}
            ? "$res->{headers}{$k}, $2" : $2;
    }

    $body = '' unless defined $body;

    if (($res->{headers}{'transfer-encoding'} || '') =~ /chunked/i) {
        my $out = '';
        while ($body =~ s/^([0-9a-fA-F]+)\r\n//) {
            my $n = hex $1;
            last if $n == 0;
            $out .= substr($body, 0, $n, '');
            $body =~ s/^\r\n//;
        }
        $body = $out;
    }

    $res->{body} = $body;
    $res->{json} = eval { json_decode($body) }
        if ($res->{headers}{'content-type'} || '') =~ m{application/json};

    return $res;
}

sub get { my ($self, $uri, %o) = @_; $self->http('GET', $uri, %o) }

sub json_decode {
    my ($text) = @_;
    return JSON::PP->new->utf8->allow_nonref->decode($text);
}

# polls $code until it returns true or $timeout seconds pass
sub wait_for {
    my ($self, $timeout, $code) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        my $r = $code->();
        return $r if $r;
        sleep 0.05;
    }
    return $code->();
}

1;
