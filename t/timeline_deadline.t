#!/usr/bin/perl

# A rebuild's chunks of authors in parallel under one deadline (issue 34):
# feed_timeline_rebuild_deadline 500ms, feed_timeline_rebuild_parallel 4,
# feed_timeline_window 1h.  A reader of 640 authors (four chunks: the
# reader and 199, 200, 200, 41), each with a post of the last hour and one
# two hours old; the stand-in's fail point feedDelayAuthors holds the
# finds of the reader's chunk 2 s (a slow shard of posts).
#
#   - one chunk held: the first page within the deadline (0.5 s, well
#     under the 2 s), 200, X-Feed-Cache: PARTIAL, exactly the newest posts
#     of the other chunks, once each; the four chunks' finds received
#     before the held one could answer (in parallel); not cached
#     (feed:tl:{reader} absent); the next page by max_id exact and
#     partial too; /status and /metrics count the partial pages and the
#     late chunks, and feed_timeline_reads_total{cache="PARTIAL"};
#   - three readers at once while it is held: one rebuild (one read of
#     the follows), the same partial page for all three; an unread count
#     then: 503, not a count of a partial page; a count that leads the
#     rebuild: 503, and a page read waiting for it gets the partial page;
#     Redis out of memory as the rebuild ends: PARTIAL, and the lock gone
#     (it could not hold the page), not held until it expires;
#   - the delay off: the next read rebuilds the whole page (MISS), cached,
#     then HIT; the page after the partial page's last, whole;
#   - a reader of one chunk, held 1 s: no chunk answered by the deadline,
#     so the page waits for it (a page of nothing tells nothing), whole;
#   - feed_timeline_rebuild_parallel 1 (a reload): the held chunk alone is
#     asked; past the deadline the page is made as soon as it answers,
#     partial (the others were not asked); the next read is whole;
#   - feed_mongo_timeout 300ms and no deadline, a chunk held 2 s: its find
#     fails at its maxTimeMS, the page of the three others, PARTIAL, not
#     cached (a failing chunk is missing as a late one is); every chunk
#     failing while Redis is out of memory: 503, the lock gone (it could
#     not say 'failed'), not held until it expires;
#   - feed_timeline_store capped, a reader without a document: the model
#     falls back to fanout on read in its thread, one chunk after another
#     under the same deadline: the held chunk stopped at it (maxTimeMS),
#     the next one waited for (none read yet), the others not asked;
#     PARTIAL, and no document made of it: the next read, the delay off,
#     is whole.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(summary short tl_ids metrics_scrape metrics_val
    seed_chunks ids_page ids_once mongo_log_size chunk_finds);

plan(skip_all => 'the stand-in\'s fail point and command log needed')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;
    feed_cache_size 50;
    feed_timeline_window 1h;
    feed_timeline_rebuild_deadline 500ms;
    feed_timeline_rebuild_parallel @@PARALLEL@@;
    feed_timeline_store @@STORE@@;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
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
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
    }
}
EOF

(my $conf = $CONF) =~ s/\@\@PARALLEL\@\@/4/;
$conf =~ s/\@\@STORE\@\@/read/;
$t->write_conf($conf)->run;

my $now = int time;
my $P = 'd' . int(rand 1e6);
my @readers = map { "$P$_" } qw(r q s t u);
my @authors = map { "${P}a$_" } 1 .. 640;
$t->mongo_insert('follows', map { my $r = $_; map { qq({"src": "$r", )
    . qq("dst": "$_", "status": 1, "created": {"\$date": 0}}) } @authors }
    @readers[0 .. 1]);
$t->mongo_insert('follows', map { qq({"src": "$readers[2]", "dst": "$_", )
    . qq("status": 1, "created": {"\$date": 0}}) } @authors[0 .. 9]);
$t->mongo_insert('follows', map { my $r = $_; map { qq({"src": "$r", )
    . qq("dst": "$_", "status": 1, "created": {"\$date": 0}}) } @authors }
    @readers[3 .. 4]);

# each author (the reader too) a recent post and an old one; %by: id ->
# author
my ($by, $all) = seed_chunks($t, $readers[0], \@authors, $now);
my %by = %$by;
my @all = @$all;
is(scalar @all, 1282, '1282 posts, 641 within the hour');

sub log_size { mongo_log_size($t) }
sub finds { chunk_finds($t, @_) }



sub read_tl {
    my ($user, $args) = @_;
    my $t0 = time;
    my $r = $t->get("/users/$user/timeline?limit=20"
        . ($args ? "&$args" : ''), timeout => 15);
    return ($r, tl_ids($r), time - $t0, $r->{headers}{'x-feed-cache'} // '');
}

sub cached { $t->redis('EXISTS', "feed:tl:{$_[0]}") }

# ---------------------------------------------- the chunks, held one --

my $R = $readers[0];
my $held0 = $t->mongo_delay_authors(ms => 2000, authors => [ $R ]);
my $n0 = log_size();
my ($r, $ids, $dt, $cache) = read_tl($R);

my @f = finds($n0);
my @chunks = map { $_->{filter}{author}{'$in'} || [] } @f;
is(join(' ', sort { $b <=> $a } map { scalar @$_ } @chunks),
    '200 200 200 41', 'four chunks, one find each');
my ($slow) = grep { grep { $_ eq $R } @$_ } @chunks;
my %slow = map { $_ => 1 } @{ $slow || [] };
my @rest = grep { !$slow{ $by{$_} } } @all;
isnt("@{ ids_page(\@rest, 20) }", "@{ ids_page(\@all, 20) }",
    'the held chunk has posts among the 20 newest');

is("$r->{status} $cache", '200 PARTIAL', 'a chunk held: 200, PARTIAL')
    or diag(short($r));
is_deeply($ids, ids_page(\@rest, 20),
    'a chunk held: the 20 newest posts of the others')
    or diag(summary($ids, ids_page(\@rest, 20)));
ok(ids_once($ids), 'no post twice');
ok($dt >= 0.45 && $dt < 1.5, sprintf('answered at the deadline: %.2f s '
    . '(held 2 s)', $dt));

my ($held) = grep { grep { $_ eq $R } @{ $_->{filter}{author}{'$in'} } } @f;
my $spread = @f ? $f[-1]{ts} - $f[0]{ts} : 99;
ok(@f == 4 && $held && !grep({ $_->{ts} >= $held->{ts} + 2 } @f),
    sprintf('in parallel: the four finds received within %.3f s, before '
        . 'the held one could answer', $spread));
ok(!grep({ !$_->{maxTimeMS} || $_->{maxTimeMS} > 5000 } @f),
    'each find stops at feed_mongo_timeout: maxTimeMS '
    . join(' ', map { $_->{maxTimeMS} // 'none' } @f));
is(cached($R), 0, 'the partial page not cached');

my $max = $ids->[-1];
($r, $ids, $dt, $cache) = read_tl($R, "max_id=$max");
is("$r->{status} $cache", '200 PARTIAL', 'the next page, held: PARTIAL');
is_deeply($ids, ids_page(\@rest, 20, $max),
    'the next page by max_id: the others\' 20 next')
    or diag(summary($ids, ids_page(\@rest, 20, $max)));

my $m = metrics_scrape($t);
is(metrics_val($m, 'feed_timeline_reads_total', cache => 'PARTIAL'), 2,
    'feed_timeline_reads_total{cache="PARTIAL"} 2');
is(metrics_val($m, 'feed_timeline_rebuild_partial_total'), 2,
    'feed_timeline_rebuild_partial_total 2');
is(metrics_val($m, 'feed_timeline_rebuild_late_chunks_total'), 2,
    'feed_timeline_rebuild_late_chunks_total 2');
my $st = $t->get('/status')->{json} || {};
is(($st->{node}{mongo}{rebuild_partial} // 'none') . ' '
    . ($st->{node}{mongo}{rebuild_late_chunks} // 'none'), '2 2',
    '/status: mongo.rebuild_partial 2, rebuild_late_chunks 2');

# --------------------------------------------- three readers at once --

my $Q = $readers[1];
$t->mongo_delay_authors(ms => 2000, authors => [ $Q ]);
$n0 = log_size();
my @h = map { $t->http_start('GET', "/users/$Q/timeline?limit=20",
    timeout => 15) } 1 .. 3;
my @res = map { $t->http_end($_) } @h;
is(join(' ', map { "$_->{status} " . ($_->{headers}{'x-feed-cache'} // '')
    } @res), join(' ', ('200 PARTIAL') x 3), 'three at once: each PARTIAL');
my ($qslow) = grep { grep { $_ eq $Q } @$_ }
    map { $_->{filter}{author}{'$in'} || [] } finds($n0);
my %qslow = map { $_ => 1 } @{ $qslow || [] };
my @qrest = grep { $by{$_} ne $R && !$qslow{ $by{$_} } } @all;
is_deeply([ map { tl_ids($_) } @res ], [ (ids_page(\@qrest, 20)) x 3 ],
    'three at once: the same page, the others\' 20 newest');
is(scalar(finds($n0, 'follows')), 1, 'three at once: one rebuild');

# an unread count cannot be told from a partial page
$r = $t->get("/users/$Q/timeline/unread", timeout => 15);
is($r->{status}, 503, 'an unread count, its rebuild partial: 503')
    or diag(short($r));

# an unread count that leads the rebuild: 503, and a page read waiting
# for it in the worker gets its partial page (not the count's 503)
$n0 = log_size();
my $hc = $t->http_start('GET', "/users/$Q/timeline/unread", timeout => 15);
ok($t->wait_for(5, sub { finds($n0) >= 4 }), 'a count leads the rebuild');
my $hp = $t->http_start('GET', "/users/$Q/timeline?limit=20", timeout => 15);
my ($rc, $rp) = map { $t->http_end($_) } $hc, $hp;
is($rc->{status}, 503, 'a count leading a partial rebuild: 503')
    or diag(short($rc));
is("$rp->{status} " . ($rp->{headers}{'x-feed-cache'} // ''),
    '200 PARTIAL', 'the page read waiting for it: PARTIAL')
    or diag(short($rp));
is_deeply(tl_ids($rp), ids_page(\@qrest, 20),
    'the page read waiting for it: the others\' 20 newest');
is(scalar(finds($n0, 'follows')), 1, 'the count and the read: one rebuild');

# Redis out of memory while a rebuild runs: the lock cannot say how it
# ended (a SET refused), so it goes, rather than holding the next reads
# back until feed_cache_lock_timeout
$t->redis('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
my ($token, $lock);
sub rebuild_token {
    $t->wait_for(5, sub {
        my $l = $t->redis('GET', "feed:lock:{$Q}");
        defined $l && $l !~ /^(failed|partial\n)/ ? $l : undef });
}
# the lock once the rebuild let it go: its unlock is sent as it answers,
# and may reach Redis after the answer reached the test (Redis still out
# of memory meanwhile: the SET refused)
sub lock_after {
    my ($token) = @_;
    my $l;
    $t->wait_for(3, sub {
        $l = $t->redis('GET', "feed:lock:{$Q}") // 'none';
        $l ne ($token // '') });
    return $l;
}
my $ho = $t->http_start('GET', "/users/$Q/timeline?limit=20", timeout => 15);
ok($token = rebuild_token(), 'OOM: a rebuild runs');
$t->redis('CONFIG', 'SET', 'maxmemory', '1');
my $ro = $t->http_end($ho);
$lock = lock_after($token);
$t->redis('CONFIG', 'SET', 'maxmemory', '0');
is("$ro->{status} " . ($ro->{headers}{'x-feed-cache'} // ''), '200 PARTIAL',
    'OOM as the rebuild ends: PARTIAL') or diag(short($ro));
isnt($lock, $token // 'no token', 'OOM: the lock released, not left held');

# ---------------------------------------------------- the delay off --

ok($t->mongo_delay_authors_off > $held0, 'the delay off');
sleep 2;

($r, $ids, $dt, $cache) = read_tl($R);
is("$r->{status} $cache", '200 MISS', 'the delay off: rebuilt, MISS');
is_deeply($ids, ids_page(\@all, 20), 'the delay off: the whole page')
    or diag(summary($ids, ids_page(\@all, 20)));
is(cached($R), 1, 'the delay off: cached');
($r, $ids, $dt, $cache) = read_tl($R);
like("$r->{status} $cache", qr/^200 (HIT|LOCAL)$/, 'and read from it');
is_deeply($ids, ids_page(\@all, 20), 'the same page');
($r, $ids) = read_tl($R, "max_id=$max");
is_deeply($ids, ids_page(\@all, 20, $max),
    'the page after the partial one\'s last, whole')
    or diag(summary($ids, ids_page(\@all, 20, $max)));

# ------------------------------------ one chunk, none by the deadline --

my $S = $readers[2];
$t->mongo_delay_authors(ms => 1000, authors => [ $S ]);
($r, $ids, $dt, $cache) = read_tl($S);
$t->mongo_delay_authors_off;
my %ten = map { $_ => 1 } @authors[0 .. 9];
my @mine = grep { $ten{ $by{$_} } } @all;
is("$r->{status} $cache", '200 MISS',
    'one chunk held past the deadline: waited for, MISS');
is_deeply($ids, ids_page(\@mine, 20), 'one chunk held: the whole page');
ok($dt >= 0.95, sprintf('one chunk held: waited %.2f s', $dt));
is(cached($S), 1, 'one chunk held: cached');

# --------------------------------- feed_timeline_rebuild_parallel 1 --

($conf = $CONF) =~ s/\@\@PARALLEL\@\@/1/;
$conf =~ s/\@\@STORE\@\@/read/;
$t->write_conf($conf)->reload;

my $T = $readers[3];
$t->mongo_delay_authors(ms => 1000, authors => [ $T ]);
$n0 = log_size();
($r, $ids, $dt, $cache) = read_tl($T);
$t->mongo_delay_authors_off;
sleep 0.3;
@f = finds($n0);
my %first = map { $_ => 1 } @{ $f[0]{filter}{author}{'$in'} || [] };
is(scalar(@f) . ' ' . ($first{$T} ? 'held' : 'other'), '1 held',
    'parallel 1: the held chunk asked alone, first');
is("$r->{status} $cache", '200 PARTIAL',
    'parallel 1: past the deadline, made once it answered: PARTIAL');
ok($dt >= 0.95 && $dt < 1.8, sprintf('parallel 1: %.2f s', $dt));
my @theirs = grep { $by{$_} ne $R } @all;
is_deeply($ids, ids_page([ grep { $first{ $by{$_} } } @theirs ], 20),
    'parallel 1: the held chunk\'s posts');
($r, $ids, $dt, $cache) = read_tl($T);
is("$r->{status} $cache", '200 MISS', 'parallel 1: the next read, whole');
is_deeply($ids, ids_page(\@theirs, 20), 'parallel 1: the whole page')
    or diag(summary($ids, ids_page(\@theirs, 20)));

# ------------------------- a model's fanout on read, in one thread --

($conf = $CONF) =~ s/\@\@PARALLEL\@\@/4/;
$conf =~ s/\@\@STORE\@\@/capped/;
$t->write_conf($conf)->reload;

my $U = $readers[4];
$t->mongo_delay_authors(ms => 2000, authors => [ $U ]);
$n0 = log_size();
($r, $ids, $dt, $cache) = read_tl($U);
@f = finds($n0);

# one after another in the model's thread: the held chunk stopped at the
# deadline (maxTimeMS), none read yet, so the next one waited for; past
# the deadline with a chunk read, the others not asked (as the read model
# with feed_timeline_rebuild_parallel 1); those asked while a few ms were
# left are read too
my %uread = map { $_ => 1 } map { @{ $_->{filter}{author}{'$in'} } }
    @f[1 .. $#f];
my @uwant = grep { $uread{ $by{$_} } } @all;
is("$r->{status} $cache", '200 PARTIAL', 'capped, a chunk held: PARTIAL')
    or diag(short($r));
ok(@f >= 2 && @f < 4 || @f == 4 && $f[3]{ts} - $f[0]{ts} < 0.6,
    'capped: the held chunk, then the next one after the deadline, no '
    . 'more: ' . join(' ', map { sprintf('%.3f', $_->{ts} - $f[0]{ts}) } @f));
ok(@f && grep({ $_ eq $U } @{ $f[0]{filter}{author}{'$in'} }),
    'capped: the held chunk asked first');
is_deeply($ids, ids_page(\@uwant, 20),
    'capped, a chunk held: the newest 20 of the chunks read after it')
    or diag(summary($ids, ids_page(\@uwant, 20)));
ok($dt < 1.5, sprintf('capped: answered after the deadline, %.2f s', $dt));
ok(@f && $f[0]{maxTimeMS} && $f[0]{maxTimeMS} <= 500,
    'capped: the held chunk\'s find had the time left, maxTimeMS '
    . (@f ? $f[0]{maxTimeMS} // 'none' : 'no find'));
$t->mongo_delay_authors_off;

($r, $ids, $dt, $cache) = read_tl($U);
is("$r->{status} $cache", '200 MISS',
    'capped, the delay off: MISS (no document made of the partial page)');
is_deeply($ids, ids_page([ grep { $by{$_} ne $R } @all ], 20),
    'capped, the delay off: the whole page');

# ------------------------------------------------- a chunk failing --

# feed_mongo_timeout 300ms, no deadline: the held chunk's find fails at
# its maxTimeMS (the stand-in answers 50, as mongod would), the others
# answer: the page of the three others, PARTIAL, not cached

($conf = $CONF) =~ s/\@\@PARALLEL\@\@/4/;
$conf =~ s/\@\@STORE\@\@/read/;
# (the lock held 10 s at most, not the default 1.6 s, so that a lock left
# held is still there when the OOM check below looks)
$conf =~ s/feed_mongo_timeout 5s/feed_mongo_timeout 300ms;
    feed_cache_lock_timeout 10s/;
$conf =~ s/feed_timeline_rebuild_deadline 500ms/feed_timeline_rebuild_deadline 0/;
$t->write_conf($conf)->reload;

$t->mongo_delay_authors(ms => 2000, authors => [ $Q ]);
$n0 = log_size();
($r, $ids, $dt, $cache) = read_tl($Q);
$t->mongo_delay_authors_off;
is("$r->{status} $cache", '200 PARTIAL', 'a chunk failing: PARTIAL')
    or diag(short($r));
is_deeply($ids, ids_page(\@qrest, 20),
    'a chunk failing: the three others\' 20 newest')
    or diag(summary($ids, ids_page(\@qrest, 20)));
ok($dt < 1.5, sprintf('a chunk failing: at its maxTimeMS, %.2f s', $dt));
is(cached($Q), 0, 'a chunk failing: not cached');

# every chunk failing, Redis out of memory as it does: 503, and the lock
# gone (it could not say 'failed'), not held until it expires
$t->mongo_delay_authors(ms => 2000, authors => [ $Q, @authors ]);
my $hf = $t->http_start('GET', "/users/$Q/timeline?limit=20", timeout => 15);
ok($token = rebuild_token(), 'OOM: a rebuild runs');
$t->redis('CONFIG', 'SET', 'maxmemory', '1');
my $rf = $t->http_end($hf);
$lock = lock_after($token);
$t->redis('CONFIG', 'SET', 'maxmemory', '0');
$t->mongo_delay_authors_off;
is($rf->{status}, 503, 'every chunk failing: 503') or diag(short($rf));
isnt($lock, $token // 'no token', 'OOM as a rebuild fails: the lock '
    . 'released, not left held');

$t->done;
