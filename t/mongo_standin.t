#!/usr/bin/perl
# Tests tools/mongod-standin (the MongoDB stand-in built from mockupdb +
# mongomock) with tools/mongo-check.c, a libmongoc 1.23 client printing TAP.
# Core Perl modules only.
use strict;
use warnings;

use FindBin;
use File::Spec;
use File::Temp qw(tempdir);
use IO::Select;
use IO::Socket::INET;
use JSON::PP;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(time sleep);

my $root    = File::Spec->rel2abs("$FindBin::Bin/..");
my $standin = "$root/tools/mongod-standin";
my $checkc  = "$root/tools/mongo-check.c";

plan skip_all => '/usr/bin/python3 with mockupdb and mongomock needed'
  unless system('/usr/bin/python3 -c "import mockupdb, mongomock" 2>/dev/null') == 0;
plan skip_all => 'libmongoc-1.0 (pkg-config) needed'
  unless system('pkg-config --exists libmongoc-1.0') == 0;

my $tmp = tempdir('mongo-standin-XXXXXX', TMPDIR => 1, CLEANUP => 1);
my %children;    # pid => name, everything we started
my %pipes;       # pid => stdout pipe (dropping it would wait for the child)

END {
    my $status = $?;
    kill 'TERM', keys %children;
    my $deadline = time + 5;
    while (%children && time < $deadline) {
        for my $pid (keys %children) {
            delete $children{$pid} if waitpid($pid, WNOHANG) != 0;
        }
        sleep 0.05 if %children;
    }
    kill 'KILL', keys %children;
    waitpid($_, 0) for keys %children;
    $? = $status;
}

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0,
                                  Proto => 'tcp', Listen => 1)
      or die "cannot bind: $!";
    my $port = $s->sockport;
    close $s;
    return $port;
}

sub uri {
    my ($port) = @_;
    return "mongodb://127.0.0.1:$port/?serverSelectionTimeoutMS=2000&connectTimeoutMS=1000";
}

# Start the stand-in; return (pid, port) once it printed "ready <port>".
sub start_standin {
    my ($name, @args) = @_;
    my $port = free_port();
    my $err  = "$tmp/$name.stderr";
    my $pid  = open(my $out, '-|') // die "fork: $!";
    if (!$pid) {
        open STDERR, '>>', $err or die "stderr: $!";
        exec $standin, '--port', $port, @args or die "exec $standin: $!";
    }
    $children{$pid} = $name;
    $pipes{$pid}    = $out;
    my $sel = IO::Select->new($out);
    my $line = '';
    if ($sel->can_read(15)) {
        $line = <$out> // '';
    }
    chomp $line;
    is($line, "ready $port", "$name: stand-in says ready on port $port")
      or diag(slurp($err));
    return ($pid, $port);
}

sub stop_standin {
    my ($pid, $name) = @_;
    my $t0 = time;
    kill 'TERM', $pid;
    my $done = 0;
    while (time - $t0 < 10) {
        if (waitpid($pid, WNOHANG) == $pid) { $done = 1; last }
        sleep 0.02;
    }
    my $code = $?;
    delete $children{$pid} if $done;
    ok($done && $code == 0, sprintf('%s: SIGTERM exits cleanly in %.2fs (status %d)',
                                   $name, time - $t0, $code >> 8));
}

sub slurp {
    my ($f) = @_;
    open my $fh, '<', $f or return '';
    local $/;
    return scalar <$fh>;
}

# Run mongo-check; return (exit status, output).
sub check {
    my @args = @_;
    my $out = qx{"$tmp/mongo-check" @{[ map { "'$_'" } @args ]} 2>&1};
    return ($? >> 8, $out);
}

sub tap_passes {
    my ($name, $status, $out) = @_;
    my @bad = grep { /^not ok/ } split /\n/, $out;
    ok($status == 0 && !@bad && $out =~ /^1\.\.\d+$/m, $name)
      or diag($out);
}

sub metric {
    my ($out, $key) = @_;
    return $out =~ /^# \Q$key\E=(\d+)/m ? $1 : -1;
}

# ---------------------------------------------------------------------------

my $cc = "cc '$checkc' \$(pkg-config --cflags --libs libmongoc-1.0) -o '$tmp/mongo-check' 2>&1";
my $cc_out = qx{$cc};
ok($? == 0, 'mongo-check.c compiles') or BAIL_OUT("cannot build mongo-check: $cc_out");

# Main instance: log, dbpath and a (missing, so 0 ms) latency file.
my $log    = "$tmp/commands.log";
my $dbpath = "$tmp/db";
my $latf   = "$tmp/latency";
my @main_args = ('--log', $log, '--dbpath', $dbpath, '--latency-file', $latf);
my ($pid, $port) = start_standin('main', @main_args);

tap_passes('mongo-check: full libmongoc check passes', check(uri($port)));

# The log: one JSON object per line, each with cmd/db/coll/filter.
my @entries;
my $json_ok = 1;
for my $line (split /\n/, slurp($log)) {
    my $e = eval { decode_json($line) };
    $json_ok = 0 unless $e && exists $e->{cmd} && exists $e->{db}
      && exists $e->{coll} && exists $e->{filter};
    push @entries, $e if $e;
}
ok($json_ok && @entries > 50,
   'log: ' . scalar(@entries) . ' JSON lines, all with cmd/db/coll/filter');
my %by_cmd;
$by_cmd{ $_->{cmd} }++ for @entries;
ok(($by_cmd{find} // 0) > 10 && ($by_cmd{getMore} // 0) > 3,
   sprintf("log: finds (%d) and getMores (%d) recorded",
           $by_cmd{find} // 0, $by_cmd{getMore} // 0));
ok(scalar(grep { $_->{cmd} eq 'find' && ($_->{coll} // '') eq 'items'
                   && ref $_->{filter} eq 'HASH' } @entries),
   'log: find entry carries collection and filter');

# Latency file: re-read on every command.
{
    my ($st, $out) = check(uri($port), 'latency');
    ok($st == 0 && metric($out, 'ping2_ms') < 150, 'no latency file: fast ping')
      or diag($out);
    open my $fh, '>', $latf or die;
    print $fh "250\n";
    close $fh;
    ($st, $out) = check(uri($port), 'latency');
    my $p = metric($out, 'ping2_ms');
    ok($st == 0 && $p >= 240, "latency file 250: ping takes ${p}ms") or diag($out);
    unlink $latf;
}

# Persistence across SIGTERM + restart with the same --dbpath.
tap_passes('persist-write', check(uri($port), 'persist-write'));
stop_standin($pid, 'main');
ok(-s "$dbpath/standin-data.bson", 'data file written on SIGTERM');
($pid, $port) = start_standin('main-restarted', @main_args);
tap_passes('persist-read after restart', check(uri($port), 'persist-read'));

# --latency-ms: pings delayed, handshake not, connections delayed concurrently.
{
    my ($lpid, $lport) = start_standin('latency', '--latency-ms', 300);
    my ($st, $out) = check(uri($lport), 'latency');
    my ($first, $second, $par) = map { metric($out, $_) } qw(ping_ms ping2_ms parallel_ms);
    ok($st == 0, 'latency mode runs') or diag($out);
    ok($second >= 290, "ping delayed by --latency-ms 300 (${second}ms)");
    ok($first >= 290 && $first < 580,
       "first ping incl. handshake ${first}ms: isMaster/hello not delayed");
    ok($par >= 290 && $par < 800,
       "4 concurrent pings on 4 connections took ${par}ms (not serialized)");
    stop_standin($lpid, 'latency');
}

# The lookups done without a scan (a filter naming one _id; $in of many
# strings) answer as the scans do, and serverStatus counts commands, write
# statements and the documents they wrote, per namespace.
{
    my $py = <<'PY';
import sys, json
from pymongo import MongoClient
c = MongoClient(sys.argv[1]).fast
c.t.drop()
c.t.insert_many([{'_id': {'u': 'u%d' % i, 's': i % 3}, 'u': 'u%d' % i,
                  'tags': ['t%d' % i, 'x'], 'n': i} for i in range(40)]
                + [{'_id': 'plain', 'u': 'u0', 'tags': 'x', 'n': -1}])
many = ['u%d' % i for i in range(0, 40, 2)] + ['nobody']
tags = ['t%d' % i for i in range(0, 20)]
c.t.update_one({'_id': {'u': 'u1', 's': 1}, 'n': {'$lt': 5}},
               {'$inc': {'n': 100}})
c.t.update_one({'_id': {'u': 'u2', 's': 2}, 'n': {'$gt': 5}},
               {'$inc': {'n': 100}})
st = c.command('serverStatus')['standin']
print(json.dumps({
  'id': [d['n'] for d in c.t.find({'_id': {'u': 'u1', 's': 1}})],
  'id_order': len(list(c.t.find({'_id': {'s': 1, 'u': 'u1'}}))),
  'id_eq': [d['u'] for d in c.t.find({'_id': {'$eq': {'u': 'u3', 's': 0}}})],
  'id_str': [d['n'] for d in c.t.find({'_id': 'plain', 'n': -1})],
  'id_miss': len(list(c.t.find({'_id': 'plain', 'n': 0}))),
  'in': len(list(c.t.find({'u': {'$in': many}}))),
  'in_array': len(list(c.t.find({'tags': {'$in': tags}}))),
  'nin': len(list(c.t.find({'u': {'$nin': many}}))),
  'u2': c.t.find_one({'_id': {'u': 'u2', 's': 2}})['n'],
  'commands': st['commands'].get('fast.t', 0),
  'statements': st['statements'].get('fast.t', 0),
  'written': st['written'].get('fast.t', 0)}))
PY
    open(my $fh, '-|', '/usr/bin/python3', '-c', $py, uri($port))
        or die "python3: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh;
    my $r = eval { decode_json($out) } // {};
    ok(%$r, 'fast lookups: the script ran') or diag($out);
    is_deeply($r->{id}, [101], 'a filter naming an _id: its document, updated');
    is($r->{id_order}, 0, 'an _id of the same fields in another order: none');
    is_deeply($r->{id_eq}, ['u3'], '_id by $eq');
    is_deeply($r->{id_str}, [-1], 'a string _id and another condition');
    is($r->{id_miss}, 0, 'an _id whose other condition fails: none');
    is($r->{u2}, 2, 'an update whose other condition fails: not applied');
    is($r->{in}, 21, '$in of 21 strings: 20 users, and u0 twice');
    is($r->{in_array}, 20, '$in of 20 strings on an array field');
    is($r->{nin}, 20, '$nin of 21 strings');
    is($r->{statements}, 43, 'serverStatus: 43 write statements');
    is($r->{written}, 42, 'serverStatus: 42 documents written');
    ok($r->{commands} >= 4, "serverStatus: $r->{commands} commands");
}

# A find of the common form (plain equalities, an $or, a sort on plain
# fields, an inclusion projection) is done without mongomock's general
# machinery (fast_find): each one answers as the same find through the
# general path ($eq, which only that path takes), documents of every
# shape included: arrays, missing fields, mixed kinds.  (A boolean is not
# among them: mongomock finds true equal to 1, mongod and fast_find do
# not.)
{
    my $py = <<'PY';
import sys, json, datetime
from pymongo import MongoClient
from bson import json_util
c = MongoClient(sys.argv[1]).fastfind
c.f.drop()
t0 = datetime.datetime(2026, 1, 1)
docs = [{'dst': 'star', 'status': 1, 'src': 'u%03d' % i,
         'created': t0 + datetime.timedelta(seconds=i % 7),
         'n': i % 3, 'tags': ['a', 'b'] if i % 5 == 0 else 'a'}
        for i in range(60)]
docs += [{'dst': ['star', 'moon'], 'status': 1, 'src': 'arr',
          'created': t0, 'n': 1, 'tags': 'a'},
         {'dst': 'star', 'status': 1.0, 'src': 'float', 'created': t0,
          'n': 2, 'tags': 'a'},
         {'dst': 'star', 'src': 'nostatus', 'created': t0, 'n': 0,
          'tags': 'a'},
         {'dst': 'moon', 'status': 1, 'src': 'other', 'created': t0,
          'n': 0, 'tags': 'a'},
         {'dst': 'star', 'status': 1, 'src': 'nocreated', 'n': 5,
          'tags': 'a'},
         {'dst': 'star', 'status': 2, 'src': 'strtime', 'created': 'x',
          'n': 0, 'tags': 'a'}]
c.f.insert_many(docs)
after = {'$or': [{'created': {'$lt': t0 + datetime.timedelta(seconds=4)}},
                 {'created': t0 + datetime.timedelta(seconds=4),
                  'src': {'$lt': 'u030'}}]}
cases = [
  ({'dst': 'star', 'status': 1}, None, None),
  ({'dst': 'star', 'status': 1}, [('src', -1)], {'src': 1, '_id': 0}),
  ({'dst': 'star', 'status': 1, 'created': {'$exists': True}},
   [('created', -1), ('src', -1)], {'src': 1, 'created': 1, '_id': 0}),
  (dict({'dst': 'star', 'status': 1}, **after),
   [('created', -1), ('src', -1)], {'src': 1, 'created': 1, '_id': 0}),
  ({'dst': 'star', 'n': 0}, [('created', -1)], {'src': 1}),
  ({'dst': 'star'}, [('created', 1), ('src', 1)], {'src': 1, '_id': 0}),
  ({'dst': 'star', 'n': 1}, [('n', 1), ('src', -1)], {'tags': 1, 'src': 1}),
  ({'tags': 'b'}, [('src', 1)], {'src': 1, '_id': 0}),
  ({}, [('src', 1)], {'_id': 0, 'tags': 0}),
]
def eq_form(flt):
    return {k: v if k.startswith('$') or isinstance(v, dict) else {'$eq': v}
            for k, v in flt.items()}
def fast():
    return c.command('serverStatus')['standin']['fast'].get('fastfind.f', 0)
out = []
for flt, sort, proj in cases:
    kw = {'sort': sort} if sort else {}
    f0 = fast()
    a = list(c.f.find(flt, proj, **kw))
    f1 = fast()
    b = list(c.f.find(eq_form(flt), proj, **kw))
    f2 = fast()
    for d in a + b:
        d.pop('_id', None)
    if not sort:
        a.sort(key=lambda d: d['src'])
        b.sort(key=lambda d: d['src'])
    out.append({'same': a == b, 'n': len(a), 'fast': f1 - f0,
                'general': f2 - f1, 'a': json_util.dumps(a[:3]),
                'b': json_util.dumps(b[:3])})
print(json.dumps(out))
PY
    open(my $fh, '-|', '/usr/bin/python3', '-c', $py, uri($port))
        or die "python3: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh;
    my $r = eval { decode_json($out) } // [];
    is(scalar @$r, 9, 'fast finds: the script ran') or diag($out);
    my @names = ('equalities', 'a sort and a projection',
        'an operator: the general path', 'the cursor\'s $or',
        'a sort field of two kinds: the general path',
        'a sort field missing: the general path',
        'a sort on a number then a string', 'equality with an array',
        'an exclusion projection: the general path');
    my @fast = (1, 1, 0, 1, 0, 0, 1, 1, 0);
    for my $i (0 .. $#names) {
        my $c = $r->[$i] || {};
        ok($c->{same} && $c->{n} > 0,
            "fast finds: $names[$i]: the same $c->{n} documents")
            or diag("$c->{a}\n$c->{b}");
        is($c->{fast} // -1, $fast[$i], "fast finds: $names[$i]: "
            . ($fast[$i] ? 'fast' : 'general'));
        is($c->{general} // -1, 0, "fast finds: $names[$i]: \$eq general");
    }
}

# The failCommand fail point: what libmongoc sees of it (mongo-check), then
# through the harness's helpers (t/lib/FeedTest.pm), as the tests use them.
tap_passes('failpoint: times, skip, errorCode, closeConnection, '
    . 'blockConnection, writeConcernError, off', check(uri($port), 'failpoint'));
{
    use lib "$FindBin::Bin/lib";
    require FeedTest;
    my $ft = FeedTest->new;
    $ft->{ports}{mongo} = $port;

    my $n0 = $ft->mongo_fail_point(mode => {times => 1, skip => 1},
        failCommands => ['find'], namespace => 'feed.fp', errorCode => 2);
    ok(defined $n0 && $n0 >= 0, "helper: set, fired $n0 times before");
    $ft->mongo_insert('fp', '{"_id": 1}');
    my @first = eval { $ft->mongo_find('fp') };
    my @second = eval { $ft->mongo_find('fp') };
    my $err = $@;
    my @third = eval { $ft->mongo_find('fp') };
    ok(@first == 1 && !@second && $err && @third == 1,
        'helper: {times: 1, skip: 1}: the second find of feed.fp fails')
        or diag("first @first, second @second ($err), third @third");
    ok($ft->mongo_wait_fail_point($n0 + 1, 1), 'helper: waited for the hit');
    ok(!$ft->mongo_wait_fail_point($n0 + 2, 0.2),
        'helper: a hit that does not come: false after the timeout');

    $ft->mongo_fail_point(failCommands => ['insert'], closeConnection => 1);
    ok(!eval { $ft->mongo_insert('fp', '{"_id": 2}'); 1 },
        'helper: closeConnection given as a Perl truth: the insert fails');
    is($ft->mongo_fail_point_off, $n0 + 2, 'helper: off, 2 hits in all');
    my @all = $ft->mongo_find('fp');
    is(scalar @all, 1, 'helper: off: finds pass, the closed insert not run');

    ok(!eval { $ft->mongo_fail_point(failCommands => ['find']); 1 },
        'helper: a fail point with nothing to do is refused');
}

# The stand-in's own fail point feedDelayAuthors, through the helpers: the
# finds of posts naming a delayed author, as a string, in $in, in $and or
# $or, are held (others, and other collections, not), each on its own
# connection while the others are answered; a shorter maxTimeMS fails the
# find at it; its modes and waitForFailPoint count the finds held.
{
    my $ft = FeedTest->new;
    $ft->{ports}{mongo} = $port;
    $ft->mongo_insert('posts', map { qq({"author": "$_", "body": "b"}) }
        qw(d1 d2 x));
    $ft->mongo_insert('notposts', '{"author": "d1"}');

    for my $bad ([authors => [], ms => 100], [authors => ['d1']],
                 [authors => ['d1'], ms => -1], [authors => [1], ms => 100],
                 [authors => 'd1', ms => 100])
    {
        my %o = @$bad;
        ok(!eval { $ft->mongo_delay_authors(%o); 1 },
            'delay: refused: ' . JSON::PP->new->canonical->encode(\%o));
    }
    ok(!eval { $ft->mongo_admin_command(undef, ['configureFailPoint',
        'feedDelayAuthors', 'mode', 'alwaysOn', 'data',
        {authors => ['d1'], blockTimeMs => 100}]); 1 },
        'delay: refused: a misspelt field');

    my $n0 = $ft->mongo_delay_authors(ms => 800, authors => [qw(d1 d2)]);
    is($n0, 0, 'delay: set, held no find before');
    my $r = timed_finds($port, 0,
        ['posts', {author => 'd1'}],
        ['posts', {author => {'$in' => [qw(x d2)]}}],
        ['posts', {'$and' => [{author => {'$in' => ['d2']}}]}],
        ['posts', {'$or' => [{author => 'x'}, {author => 'd1'}]}],
        ['posts', {author => 'x'}],
        ['posts', {author => {'$in' => [qw(x y)]}}],
        ['notposts', {author => 'd1'}],
        ['posts', {author => 'd1'}, 200]);
    my @held = map { !/^error/ && $_ >= 0.75 ? 'held' : $_ } @$r[0 .. 3];
    is("@held", 'held held held held',
        'delay: a string, $in, $and, $or: held 800 ms') or diag("@$r");
    ok((grep { !/^error/ && $_ < 0.4 } @$r[4 .. 6]) == 3,
        'delay: other authors, another collection: not held')
        or diag("@$r");
    is($r->[7], 'error 50', 'delay: maxTimeMS 200: MaxTimeMSExpired');
    ok($ft->mongo_wait_delay_authors($n0 + 5, 1),
        'delay: waitForFailPoint counted 5 finds held');
    ok(!$ft->mongo_wait_delay_authors($n0 + 6, 0.2),
        'delay: a sixth not yet');

    $r = timed_finds($port, 1, ['posts', {author => 'd1'}],
        map { ['posts', {author => 'x'}] } 1 .. 3);
    ok($r->[0] >= 0.75 && !(grep { $_ >= 0.4 } @$r[1 .. 3]),
        'delay: a held find does not hold up finds on another connection')
        or diag("@$r");

    $ft->mongo_delay_authors(ms => 800, authors => ['d1'],
        mode => {times => 1});
    $r = timed_finds($port, 0, map { ['posts', {author => 'd1'}] } 1 .. 2);
    ok($r->[0] >= 0.75 && $r->[1] < 0.4, 'delay: {times: 1}: the first')
        or diag("@$r");
    $ft->mongo_delay_authors(ms => 800, authors => ['d1'],
        mode => {skip => 1});
    $r = timed_finds($port, 0, map { ['posts', {author => 'd1'}] } 1 .. 2);
    ok($r->[0] < 0.4 && $r->[1] >= 0.75, 'delay: {skip: 1}: the second')
        or diag("@$r");
    is($ft->mongo_delay_authors_off, $n0 + 8, 'delay: off, 8 held in all');
    $r = timed_finds($port, 0, ['posts', {author => 'd1'}]);
    ok($r->[0] < 0.4, 'delay: off: not held') or diag("@$r");
}

# finds timed in one process, each [collection, filter, maxTimeMS]: one
# after another, or ($beside) the first on a connection of its own and the
# others 0.1 s later on another; their seconds, or "error <code>"
sub timed_finds {
    my ($port, $beside, @finds) = @_;
    my $py = <<'PY';
import json, sys, threading, time
from pymongo import MongoClient
from pymongo.errors import OperationFailure
uri, beside, finds = sys.argv[1], sys.argv[2] == '1', json.loads(sys.argv[3])
clients = [MongoClient(uri), MongoClient(uri)]
for c in clients:
    c.admin.command('ping')             # connected before the clock
def timed(i, c):
    coll, flt = finds[i][:2]
    t0 = time.monotonic()
    try:
        list(c.feed[coll].find(flt, max_time_ms=(finds[i] + [None])[2]))
        out[i] = round(time.monotonic() - t0, 3)
    except OperationFailure as e:
        out[i] = 'error %s' % e.code
out = [None] * len(finds)
first = threading.Thread(target=timed, args=(0, clients[0]))
first.start()
if beside:
    time.sleep(0.1)
else:
    first.join()
for i in range(1, len(finds)):
    timed(i, clients[1])
first.join()
print(json.dumps(out))
PY
    open(my $fh, '-|', '/usr/bin/python3', '-c', $py, uri($port), $beside,
        encode_json(\@finds)) or die "python3: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh;
    return eval { decode_json($out) } // [];
}

stop_standin($pid, 'main-restarted');
done_testing();
