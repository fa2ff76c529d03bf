#!/usr/bin/perl

# A partial rebuild shared across nodes: two nginx nodes (one worker each)
# on one Redis and one MongoDB stand-in, feed_timeline_rebuild_deadline
# 1s.  A reader of 640 authors (four chunks, as in t/timeline_deadline.t)
# who mutes three of them; the stand-in's fail point feedDelayAuthors
# holds the finds of the reader's chunk 4 s.
#
#   - the first page read on node A, and, once A holds the rebuild lock,
#     on node B twice (one read polls the lock, the other waits for it in
#     the worker): one rebuild (one read of the follows, four chunk
#     finds), every answer PARTIAL with the newest posts of the chunks
#     read (the others', on an idle machine) less the muted authors'
#     (node B's filters are the ones the rebuild shipped),
#     node A's and node B's first pages the same bytes, node B's page of
#     10 the first 10 of them; node B answered within a poll of node A,
#     not after a second deadline of its own;
#   - the lock holds the page for a moment, "partial\n<limit>\n<filters>
#     \n<JSON>": a new read that did not wait for it takes the lock and
#     rebuilds (a second read of the follows), PARTIAL again: the page is
#     no cache;
#   - an unread count on node B polling while node A rebuilds: 503 once
#     the rebuild is partial (a partial page tells no count), within a
#     poll of node A's answer, no rebuild of its own; a page read of node
#     B beside it gets node A's page (whichever of the two polls, the
#     other waits for it in the worker);
#   - the delay off: the next read on node B is whole (MISS), cached, and
#     node A reads it from the cache.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(summary short tl_ids seed_chunks ids_page ids_once
    mongo_log_size chunk_finds);

plan(skip_all => 'the stand-in\'s fail point and command log needed')
    if FeedTest::real_mongo();

my $A = FeedTest->new;
my $B = FeedTest->new;
$A->start_redis;
$A->start_mongo;
$A->port('http');
$B->set_port($_, $A->port($_)) for qw(redis mongo);
$B->port('http') == $_ and die "port taken twice\n" for values %{$A->{ports}};

my $DEADLINE = 1;
# a read of node B that rebuilt on its own would end a deadline after
# node A's; one that answered node A's page ends within a poll or so,
# longer on a loaded machine
my $AFTER = 0.7;

my $CONF = <<'EOF';
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_redis_timeout 5s;
    feed_mongo_timeout 10s;
    feed_cache_size 50;
    feed_timeline_window 1h;
    feed_timeline_rebuild_deadline 1s;
    feed_timeline_rebuild_parallel 4;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/mutes/([^/]+)$ { feed_mute $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location ~ ^/users/([^/]+)/timeline/unread$ {
            feed_timeline_unread $1;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 4m;
            feed_timeline_source;
        }
    }
}
EOF

$A->write_conf($CONF)->run;
$B->write_conf($CONF)->run;

my $now = int time;
my $P = 'n' . int(rand 1e6);
my $R = "${P}r";
my @authors = map { "${P}a$_" } 1 .. 640;
$A->mongo_insert('follows', map { qq({"src": "$R", "dst": "$_", )
    . qq("status": 1, "created": {"\$date": 0}}) } @authors);
my ($by, $all) = seed_chunks($A, $R, \@authors, $now);
my %by = %$by;
my @all = @$all;
is(scalar @all, 1282, '1282 posts, 641 within the hour');

# the authors of the three newest posts but the reader's, muted
my @muted;
for my $id (@all) {
    my $a = $by{$id};
    push @muted, $a unless $a eq $R || grep { $_ eq $a } @muted;
    last if @muted == 3;
}
is(join(' ', map { $A->http('PUT', "/users/$R/mutes/$_")->{status} }
    @muted), '204 204 204', 'three authors muted');
my %muted = map { $_ => 1 } @muted;

sub log_size { mongo_log_size($A) }
sub finds { chunk_finds($A, @_) }

sub lock_of { $A->redis('GET', "feed:lock:{$R}") }

# waits until a rebuild holds the reader's lock (a token, no page)
sub lock_held {
    return $A->wait_for(10, sub {
        my $l = lock_of();
        defined $l && $l ne '' && $l ne 'failed' && $l !~ /^partial\n/ });
}

sub start {
    my ($node, $uri) = @_;
    my $h = $node->http_start('GET', $uri, timeout => 20);
    return $h;
}

# the answer and when it ended
sub end {
    my ($node, $h) = @_;
    my $r = $node->http_end($h);
    $r->{ended} = $h->{start} + $r->{elapsed};
    return $r;
}

sub cache { $_[0]->{status} . ' ' . ($_[0]->{headers}{'x-feed-cache'} // '') }

# ------------------------------------------- one rebuild, two nodes --

$A->mongo_delay_authors(ms => 4000, authors => [ $R ]);
my $n0 = log_size();
my $ha = start($A, "/users/$R/timeline?limit=20");
ok(lock_held(), 'node A leads the rebuild: it holds the lock');
my $hb = start($B, "/users/$R/timeline?limit=20");
my $hb2 = start($B, "/users/$R/timeline?limit=10");
my $ra = end($A, $ha);
# the page in the lock, read while it is there (a second from node A's
# answer), not after node B's answers
my $lock = '';
$A->wait_for(3, sub { ($lock = lock_of() // '') =~ /^partial\n/ });
my $rb = end($B, $hb);
my $rb2 = end($B, $hb2);

my @f = finds($n0);
my ($slow) = grep { grep { $_ eq $R } @$_ }
    map { $_->{filter}{author}{'$in'} || [] } @f;
my %slow = map { $_ => 1 } @{ $slow || [] };
my @rest = grep { !$slow{ $by{$_} } && !$muted{ $by{$_} } } @all;
my %rest = map { $_ => 1 } @rest;

# a partial page of the chunks read: 20 posts, newest first, once each,
# none of the held chunk nor of the muted authors; on an idle machine
# the others' 20 newest (a loaded one may miss another chunk too)
sub page_of_rest_ok {
    my ($name, $r) = @_;
    my $ids = tl_ids($r);
    my @bad = grep { !$rest{$_} } @$ids;
    ok(@$ids == 20 && !@bad && ids_once($ids)
        && join(' ', @$ids) eq join(' ', sort { $b cmp $a } @$ids),
        "$name: 20 posts of the chunks read, newest first, once each, "
        . 'none of the muted authors')
        or diag(summary($ids, ids_page(\@rest, 20)));
    note("$name: " . (join(' ', @$ids) eq join(' ', @{ ids_page(\@rest, 20) })
        ? 'the others\' 20 newest' : 'a chunk more was late'));
}
ok(grep({ !$slow{$_} } @muted), 'a muted author among the chunks read: '
    . join(' ', map { $slow{$_} ? "$_ held" : $_ } @muted));

is(join(' ', map { cache($_) } $ra, $rb, $rb2),
    '200 PARTIAL 200 PARTIAL 200 PARTIAL',
    'node A and node B (twice): PARTIAL')
    or diag(join "\n", map { short($_) } $ra, $rb, $rb2);
page_of_rest_ok('node A', $ra);
is($rb->{body}, $ra->{body}, 'node B: the same page, byte for byte');
is_deeply(tl_ids($rb2), ids_page(tl_ids($ra), 10),
    'node B, limit 10, waiting in the worker: the first 10 of it')
    or diag(summary(tl_ids($rb2), ids_page(tl_ids($ra), 10)));
is(scalar(finds($n0, 'follows')), 1, 'one rebuild: one read of the follows');
is(scalar(@f), 4, 'one rebuild: four chunk finds');
ok($ra->{elapsed} >= $DEADLINE - 0.05 && $ra->{elapsed} < $DEADLINE + 1.5,
    sprintf('node A at the deadline: %.2f s (held 4 s)', $ra->{elapsed}));
ok($rb->{elapsed} < $DEADLINE + 1.5, sprintf('node B within the deadline '
    . 'and a margin: %.2f s', $rb->{elapsed}));
ok($rb->{ended} - $ra->{ended} < $AFTER
    && $rb2->{ended} - $ra->{ended} < $AFTER,
    sprintf('node B within a poll of node A: %.3f s, %.3f s after it, not '
        . 'a deadline of its own', $rb->{ended} - $ra->{ended},
        $rb2->{ended} - $ra->{ended}));

# the page in the lock, as the rebuild had it: 50 posts asked, the
# filters, the JSON of the fallback's answer
my ($limit, $filters, $json) = split /\n/, ($lock =~ /^partial\n(.*)/s)[0]
    // '', 3;
my $doc = eval { FeedTest::json_decode($json // '') } || {};
is($limit // '', 50, 'the lock holds the page: the 50 posts asked for')
    or diag(substr($lock, 0, 200));
is(join(' ', sort map { substr($_, 1) } split / /, $filters // ''),
    join(' ', sort @muted), 'the lock holds the filters applied');
ok($doc->{partial} && @{ $doc->{items} || [] } > 20,
    'the lock holds the fallback\'s answer, partial');
unlike($json // '', qr/\n|": /, 'its JSON compact');

# ---------------------------------- a new read rebuilds: no cache --

# (the page held longer than its moment, so that the read meets it)
$A->redis('PEXPIRE', "feed:lock:{$R}", 20000);
$n0 = log_size();
my $rn = end($B, start($B, "/users/$R/timeline?limit=20"));
is(cache($rn), '200 PARTIAL', 'a new read, the page in the lock: PARTIAL');
is(scalar(finds($n0, 'follows')), 1,
    'a new read: a rebuild of its own (a read of the follows)');
ok($rn->{elapsed} >= $DEADLINE - 0.05, sprintf('a new read: waited its '
    . 'own deadline, %.2f s', $rn->{elapsed}));
page_of_rest_ok('a new read', $rn);
like(lock_of() // '', qr/^partial\n50\n/,
    'its own page in the lock now');
$A->redis('DEL', "feed:lock:{$R}");

# ------------------------------- an unread count polling: 503 --

$n0 = log_size();
$ha = start($A, "/users/$R/timeline?limit=20");
ok(lock_held(), 'node A rebuilds again: it holds the lock');
my $hc = $B->http_start('GET', "/users/$R/timeline/unread", timeout => 20);
# (a page read beside it: one polls, the other waits for it in the worker)
sleep 0.1;
$hb = start($B, "/users/$R/timeline?limit=20");
$ra = end($A, $ha);
my $rc = end($B, $hc);
$rb = end($B, $hb);
is(cache($ra), '200 PARTIAL', 'node A: PARTIAL');
is($rc->{status}, 503, 'node B\'s unread count, polling: 503')
    or diag(short($rc));
is(cache($rb), '200 PARTIAL', 'node B\'s page read beside it: PARTIAL');
is($rb->{body}, $ra->{body}, 'the page of node A');
ok($rc->{ended} - $ra->{ended} < $AFTER, sprintf('node B\'s count within a '
    . 'poll of node A: %.3f s after it', $rc->{ended} - $ra->{ended}));
is(scalar(finds($n0, 'follows')), 1, 'the count rebuilt nothing');

# ------------------------------------------------- the delay off --

$A->mongo_delay_authors_off;
# the held finds end
sleep 4;
$A->redis('DEL', "feed:lock:{$R}");

# (a loaded machine may still answer a chunk past the deadline: that page
# is partial, not cached, and the next read rebuilds again)
my @whole = grep { !$muted{ $by{$_} } } @all;
my ($r, $tries) = (undef, 0);
do {
    $r = end($B, start($B, "/users/$R/timeline?limit=20"));
} while (cache($r) eq '200 PARTIAL' && ++$tries < 5);
is(cache($r), '200 MISS', 'the delay off: node B rebuilds, MISS');
is_deeply(tl_ids($r), ids_page(\@whole, 20),
    'the delay off: the whole page, less the muted authors\'')
    or diag(summary(tl_ids($r), ids_page(\@whole, 20)));
is($A->redis('EXISTS', "feed:tl:{$R}"), 1, 'the delay off: cached');
$r = end($A, start($A, "/users/$R/timeline?limit=20"));
like(cache($r), qr/^200 (HIT|LOCAL)$/, 'node A reads it from the cache');
is_deeply(tl_ids($r), ids_page(\@whole, 20), 'the same page');

$B->finish;
$A->done;
