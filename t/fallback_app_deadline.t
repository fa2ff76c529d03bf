#!/usr/bin/perl
# tools/fallback-app's chunks in parallel under one deadline (issue 34),
# against the MongoDB stand-in: a reader of 640 authors (four chunks of
# the $in: the reader and 199, 200, 200, 41), each with a post of the
# last hour and one two hours old, a window of one hour, --deadline 500;
# the stand-in's fail point feedDelayAuthors holds the finds of one
# chunk's authors 2 s (a slow shard), or of all (a slow MongoDB), and
# failCommand fails finds of posts.  As the module's rebuild
# (ngx_http_feed_timeline_chunks.c): when no chunk has answered by the
# deadline, the page is made when the first one answers; a chunk that fails
# is missing as a late one is; 503 only when no chunk answered.
#
#   - every chunk answering: the whole page, no "partial";
#   - one chunk held: the answer within the deadline (0.5 s, well under
#     the 2 s), "partial": true, exactly the other chunks' newest posts,
#     once each; the command log shows the four chunks' queries received
#     before the held one could answer (in parallel), each find with the
#     time left of --timeout (4.5 s), not of the deadline, as its maxTimeMS;
#     the next page by max_id too;
#   - the window's second step under the same deadline: the held chunk's
#     older posts missing, its recent ones there;
#   - the fail point off: the same pages whole, without "partial";
#   - --parallel 1: the held chunk, asked alone, waited for past the
#     deadline: the page at 2 s is its posts, partial, the others never
#     asked;
#   - --deadline 0: the held chunk waited for, the whole page;
#   - --deadline 0 --timeout 1000: the held find fails at its maxTimeMS
#     (50 MaxTimeMSExpired), the page partial of the others at 1 s;
#   - every chunk held 2 s, --deadline 500 --timeout 1000: all fail past
#     the deadline, 503 at 1 s;
#   - every chunk held 1 s, --deadline 500: no empty page at the deadline,
#     the page at 1 s of the chunk(s) that answered first, exactly;
#   - one chunk's find failing (failCommand): partial, exactly the others'
#     newest, the older step asked of those three; every chunk's: 503.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(summary seed_chunks ids_page ids_once);

plan(skip_all => 'the stand-in\'s fail point and command log needed')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_mongo;

my $now = int time;
my @authors = map { "da$_" } 1 .. 640;
$t->mongo_insert('follows', map { qq({"src": "dr", "dst": "$_", )
    . qq("status": 1, "created": {"\$date": 0}}) } @authors);

# each author (the reader too) a recent post and an old one; %by: id ->
# author
my ($by, $all) = seed_chunks($t, 'dr', \@authors, $now);
my %by = %$by;
my @all = @$all;
is(scalar @all, 1282, '1282 posts, 641 within the hour');

sub start_app {
    my (@opts) = @_;
    $t->stop_proc('app', 'TERM') if $t->pid('app');
    $t->spawn('app', $FeedTest::PYTHON, $t->root . '/tools/fallback-app',
        '--port', $t->port('app'), '--mongo-uri', $t->mongo_uri,
        '--window', 3600, @opts);
    ok($t->wait_port($t->port('app'), 20), "app listens, @opts");
}

# the answer, its ids and the seconds it took
sub app {
    my $t0 = time;
    my $r = $t->get("/internal/timeline?user=dr&$_[0]",
                    port => $t->port('app'));
    return ($r, [ map { $_->{id} } @{ $r->{json}{items} || [] } ],
            time - $t0);
}

sub partial_is {
    my ($r, $want, $name) = @_;
    my $p = $r->{json}{partial};
    my $got = !defined $p ? 'none' : JSON::PP::is_bool($p) && $p ? 'true'
            : "$p";
    is("$r->{status} $got", '200 ' . ($want ? 'true' : 'none'),
        "$name: " . ($want ? '"partial": true' : 'no "partial"'));
}

# the posts finds logged since command $n0
sub finds {
    my ($n0) = @_;
    my @c = $t->mongo_commands;
    return grep { ($_->{cmd} // '') eq 'find' && ($_->{coll} // '') eq 'posts' }
        @c[$n0 .. $#c];
}

sub log_size { scalar(my @c = $t->mongo_commands) }

# $n finds, each with a maxTimeMS from $lo to $hi
sub max_times_ok {
    my ($f, $n, $lo, $hi, $name) = @_;
    ok(@$f == $n && !grep({ !$_->{maxTimeMS} || $_->{maxTimeMS} < $lo
        || $_->{maxTimeMS} > $hi } @$f),
        "$name: " . join(' ', map { $_->{maxTimeMS} // 'none' } @$f));
}

# the app's stderr since byte $_[0]
sub app_log {
    open my $fh, '<', $t->dir . '/app.out' or return '';
    seek $fh, $_[0] // 0, 0;
    local $/;
    return scalar <$fh>;
}



start_app('--deadline', 500);

# --------------------------------------------------- the chunks, whole --

my $n0 = log_size();
my ($r, $ids) = app('limit=30');
is_deeply($ids, ids_page(\@all, 30), 'all answering: the 30 newest');
partial_is($r, 0, 'all answering');
my @chunks = map { $_->{filter}{author}{'$in'} } finds($n0);
is(join(' ', sort { $b <=> $a } map { scalar @$_ } @chunks),
    '200 200 200 41', 'four chunks, one query each');
my ($slow) = grep { grep { $_ eq 'dr' } @$_ } @chunks;
my %slow = map { $_ => 1 } @$slow;
is(scalar keys %slow, 200, 'the reader\'s chunk: 200 authors');

my @rest = grep { !$slow{ $by{$_} } } @all;
my @slowp = grep { $slow{ $by{$_} } } @all;

# each author's chunk (an index in @chunks), the chunks whose posts a
# page has, and the posts (of a list) of given chunks
my %chunk_of;
for my $c (0 .. $#chunks) { $chunk_of{$_} = $c for @{ $chunks[$c] } }
sub chunks_in { my %c = map { $chunk_of{ $by{$_} } => 1 } @{ $_[0] };
    sort keys %c }
sub of_chunks { my ($from, @c) = @_; my %c = map { $_ => 1 } @c;
    [ grep { $c{ $chunk_of{ $by{$_} } } } @$from ] }
my @recent = @all[0 .. 640];
isnt("@{ ids_page(\@rest, 30) }", "@{ ids_page(\@all, 30) }",
    'the reader\'s chunk has posts among the 30 newest');

# ------------------------------------------------ one chunk held 2 s --

my $held0 = $t->mongo_delay_authors(ms => 2000, authors => $slow);
$n0 = log_size();
my $dt;
($r, $ids, $dt) = app('limit=30');
partial_is($r, 1, 'a chunk held');
is_deeply($ids, ids_page(\@rest, 30),
    'a chunk held: the 30 newest posts of the others')
    or diag(summary($ids, ids_page(\@rest, 30)));
ok(ids_once($ids), 'no post twice');
ok($dt >= 0.45 && $dt < 1.5, sprintf('answered at the deadline: %.2f s '
    . '(held 2 s)', $dt));
my @f = finds($n0);
is(scalar @f, 4, 'four queries');
my ($held) = grep { grep { $_ eq 'dr' } @{ $_->{filter}{author}{'$in'} } }
    @f;
my $spread = $f[-1]{ts} - $f[0]{ts};
my $answer = $held ? $held->{ts} + 2 : 0;
ok(@f == 4 && !grep({ $_->{ts} >= $answer } @f), sprintf('in parallel: '
    . 'the four received within %.3f s, before the held one could answer',
    $spread));
max_times_ok(\@f, 4, 4000, 4500, 'each find has the time left of --timeout '
    . '(4500 ms), not of the deadline, as its maxTimeMS');

my $max = $ids->[-1];
($r, $ids) = app("limit=30&max_id=$max");
partial_is($r, 1, 'the next page, held');
is_deeply($ids, ids_page(\@rest, 30, $max),
    'the next page by max_id: the others\' 30 next')
    or diag(summary($ids, ids_page(\@rest, 30, $max)));

# ----------------------- the window's second step, under the deadline --

# the held chunk's first find (the recent posts) let through, its second
# (the older ones) held
$t->mongo_delay_authors(ms => 2000, authors => $slow, mode => {skip => 1});
$n0 = log_size();
($r, $ids, $dt) = app('limit=700');
my @want = (@recent, grep { $_ lt $recent[-1] } @rest)[0 .. 699];
partial_is($r, 1, 'the older step held');
is_deeply($ids, \@want, 'the older step held: every recent post, then '
    . 'the others\' older ones') or diag(summary($ids, \@want));
ok($dt < 1.5, sprintf('answered within the one deadline: %.2f s', $dt));
@f = finds($n0);
my @newer = grep { !exists $_->{filter}{_id}{'$lte'} } @f;
my @older = grep { exists $_->{filter}{_id}{'$lte'} } @f;
is(scalar(@newer) . ' ' . scalar(@older), '4 4',
    'four queries newer than the edge, then four at or below it');
my ($least) = sort { $a <=> $b } map { $_->{maxTimeMS} } @newer;
ok(@older && !grep({ $_->{maxTimeMS} >= $least || $_->{maxTimeMS} < 4000 }
    @older), 'the older step has what the newer one left of the 5000 ms: '
    . join(' ', map { $_->{maxTimeMS} } @newer, @older));

# ------------------------------------------------------ the delay off --

is($t->mongo_delay_authors_off, $held0 + 3, 'held 3 finds in all');
($r, $ids) = app('limit=30');
partial_is($r, 0, 'the delay off');
is_deeply($ids, ids_page(\@all, 30), 'the delay off: the whole page');
($r, $ids) = app("limit=30&max_id=$max");
partial_is($r, 0, 'the delay off, by max_id');
is_deeply($ids, ids_page(\@all, 30, $max),
    'the delay off: the page after the partial one\'s last, whole')
    or diag(summary($ids, ids_page(\@all, 30, $max)));

# ------------------------------------------------------- --parallel 1 --

start_app('--deadline', 500, '--parallel', 1);
$t->mongo_delay_authors(ms => 2000, authors => $slow);
$n0 = log_size();
($r, $ids, $dt) = app('limit=30');
partial_is($r, 1, '--parallel 1');
is_deeply($ids, ids_page(\@slowp, 30), '--parallel 1: the reader\'s chunk, '
    . 'asked first and held, waited for past the deadline: its 30 newest')
    or diag(summary($ids, ids_page(\@slowp, 30)));
ok($dt >= 1.9 && $dt < 3, sprintf('--parallel 1: the page when it '
    . 'answered, %.2f s (held 2 s, deadline 0.5 s)', $dt));
sleep 0.3;
is(scalar(finds($n0)), 1, '--parallel 1: the others never asked');

# -------------------------------------------------------- --deadline 0 --

start_app('--deadline', 0);
$n0 = log_size();
($r, $ids, $dt) = app('limit=30');
partial_is($r, 0, '--deadline 0');
is_deeply($ids, ids_page(\@all, 30), '--deadline 0: the whole page');
ok($dt >= 1.9, sprintf('--deadline 0: the held chunk waited for, %.2f s',
    $dt));
max_times_ok([ finds($n0) ], 4, 4000, 4500, '--deadline 0: each find has '
    . 'the time left of --timeout as its maxTimeMS');

# ------------------------------------- a find failing at its maxTimeMS --

start_app('--deadline', 0, '--timeout', 1000);
my $log0 = length app_log();
$n0 = log_size();
($r, $ids, $dt) = app('limit=30');
partial_is($r, 1, '--timeout 1000, a chunk held 2 s');
is_deeply($ids, ids_page(\@rest, 30), '--timeout 1000: the held chunk failed, '
    . 'missing: the 30 newest posts of the others')
    or diag(summary($ids, ids_page(\@rest, 30)));
ok($dt >= 0.9 && $dt < 1.7, sprintf('--timeout 1000: the page when the held '
    . 'find failed, %.2f s', $dt));
max_times_ok([ finds($n0) ], 4, 800, 1000, '--timeout 1000: each find\'s '
    . 'maxTimeMS the time left of it');
like(app_log($log0),
    qr/partial: 1 chunk\(s\) of dr missing, 1 failed \(mongodb: .*\b50\b/,
    '--timeout 1000: the app logs the chunk failed, 50 MaxTimeMSExpired');

# every chunk held past its maxTimeMS: waited for past the deadline, and
# none answered
start_app('--deadline', 500, '--timeout', 1000);
$t->mongo_delay_authors(ms => 2000, authors => ['dr', @authors]);
($r, $ids, $dt) = app('limit=30');
is("$r->{status} " . ($r->{json}{error} // ''), '503 unavailable',
    'every chunk failing at its maxTimeMS: 503');
ok($dt >= 0.9 && $dt < 1.7, sprintf('every chunk held: waited for past the '
    . 'deadline (0.5 s) until they failed (1 s): %.2f s', $dt));

# ---------------------------------- every chunk held: MongoDB slow whole --

start_app('--deadline', 500);
$t->mongo_delay_authors(ms => 1000, authors => ['dr', @authors]);
$n0 = log_size();
($r, $ids, $dt) = app('limit=641');
my @in = chunks_in($ids);
is($r->{status}, 200, 'every chunk held 1 s: 200, not 503');
ok(@in >= 1, 'every chunk held: not an empty page at the deadline: the '
    . 'posts of ' . scalar(@in) . ' chunk(s)');
is_deeply($ids, of_chunks(\@recent, @in), 'every chunk held: exactly the '
    . 'recent posts of the chunk(s) that answered first')
    or diag(summary($ids, of_chunks(\@recent, @in)));
partial_is($r, @in < 4, 'every chunk held, ' . scalar(@in) . ' of 4 in it');
ok($dt >= 0.95 && $dt < 1.7, sprintf('every chunk held 1 s: the page when '
    . 'the first answered, %.2f s (deadline 0.5 s)', $dt));
is(scalar(finds($n0)), 4, 'every chunk held: four finds, no older step');
$t->mongo_delay_authors_off;

# ------------------------------------------------------ a chunk failing --

my $fp0 = $t->mongo_fail_point(mode => {times => 1}, failCommands => ['find'],
    namespace => 'feed.posts', errorCode => 1);
$n0 = log_size();
($r, $ids) = app('limit=641');
@in = chunks_in($ids);
partial_is($r, 1, 'a chunk\'s find failing');
is(scalar @in, 3, 'a chunk failing: the three others\' posts in the page');
is_deeply($ids, ids_page(of_chunks(\@all, @in), 641), 'a chunk failing: '
    . 'exactly the newest posts of the three others, past the window too')
    or diag(summary($ids, ids_page(of_chunks(\@all, @in), 641)));
@f = finds($n0);
is(scalar(grep { exists $_->{filter}{_id}{'$lte'} } @f), 3,
    'a chunk failing: the older step asks the three that answered');
is($t->mongo_fail_point_off, $fp0 + 1, 'the fail point hit once');

$t->mongo_fail_point(failCommands => ['find'], namespace => 'feed.posts',
    errorCode => 1);
($r) = app('limit=30');
is("$r->{status} " . ($r->{json}{error} // ''), '503 unavailable',
    'every chunk\'s find failing: 503');
$t->mongo_fail_point_off;

$t->done;
