#!/usr/bin/perl

# A rebuild's chunks that cannot be posted to the thread pool (its queue
# full) are missing from the page as a late or failing one is (issue 34):
# one thread, a queue of one, feed_timeline_rebuild_parallel 4, no
# deadline and no window, so that nothing but the queue leaves a chunk
# out.  A reader of 640 authors (four chunks, as in
# t/timeline_deadline.t): the four chunks are posted at once, the thread
# runs one and the queue holds one, so at least two cannot be posted.
#
#   - the first page: 200, X-Feed-Cache: PARTIAL, exactly the newest posts
#     of the chunks whose finds MongoDB received (the command log), once
#     each; fewer than four finds; not cached; the next read rebuilds;
#   - a read whose every chunk (or its follows) could not be posted, as
#     the worker's own background tasks take the pool too, may answer
#     503, and then no chunk was asked (a page of nothing is no page);
#   - the pool with room again (a reload: threads=4): the whole page, MISS,
#     cached.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(summary short tl_ids seed_chunks ids_page ids_once
    mongo_log_size chunk_finds);

plan(skip_all => 'the stand-in\'s command log needed')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

my $CONF = <<'EOF';
worker_processes 1;
thread_pool feedtp @@POOL@@;
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;
    feed_cache_size 50;
    feed_timeline_window 0;
    feed_timeline_rebuild_deadline 0;
    feed_timeline_rebuild_parallel 4;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 4m;
            feed_timeline_source;
        }
    }
}
EOF

sub conf {
    (my $conf = $CONF) =~ s/\@\@POOL\@\@/$_[0]/;
    return $conf;
}

$t->write_conf(conf('threads=1 max_queue=1'))->run;

my $P = 'qc' . int(rand 1e6);
my $R = "${P}r";
my @authors = map { "${P}a$_" } 1 .. 640;
$t->mongo_insert('follows', map { qq({"src": "$R", "dst": "$_", )
    . qq("status": 1, "created": {"\$date": 0}}) } @authors);
my ($by, $all) = seed_chunks($t, $R, \@authors, int time);
my %by = %$by;
my @all = @$all;
is(scalar @all, 1282, '1282 posts of 641 authors');

sub cached { $t->redis('EXISTS', "feed:tl:{$R}") }

# a read, and the chunks whose finds MongoDB received meanwhile
sub read_tl {
    my $n0 = mongo_log_size($t);
    my $r = $t->get("/users/$R/timeline?limit=20", timeout => 15);
    my @f = chunk_finds($t, $n0);
    return ($r, \@f, $r->{headers}{'x-feed-cache'} // '');
}

# until two reads answer partial (each partial page is rebuilt by the
# next read): a 503 now and then is the worker's own tasks taking the
# pool, and then no chunk was asked
my ($partial, $other) = (0, '');
for my $try (1 .. 10) {
    my ($r, $f, $cache) = read_tl();
    next if $r->{status} == 503 && !@$f;
    if ("$r->{status} $cache" ne '200 PARTIAL') {
        $other .= "$r->{status} $cache, " . scalar(@$f) . ' finds; ';
        next;
    }
    $partial++;
    my %asked = map { $_ => 1 }
        map { @{ $_->{filter}{author}{'$in'} || [] } } @$f;
    my @got = grep { $asked{ $by{$_} } } @all;
    ok(@$f >= 1 && @$f < 4, 'a queue of one: ' . scalar(@$f)
        . ' of four chunks asked');
    my $ids = tl_ids($r);
    is_deeply($ids, ids_page(\@got, 20),
        'the newest posts of the chunks asked')
        or diag(summary($ids, ids_page(\@got, 20)));
    ok(ids_once($ids), 'no post twice');
    is(cached(), 0, 'the partial page not cached');
    last if $partial == 2;
}
is($partial, 2, 'two reads answered PARTIAL, each rebuilt') or diag($other);
is($other, '', 'every read PARTIAL, or 503 with no chunk asked');

# the pool with room again: whole, cached
$t->write_conf(conf('threads=4'))->reload;
my ($r, $f, $cache);
ok($t->wait_for(10, sub {
    ($r, $f, $cache) = read_tl();
    "$r->{status} $cache" eq '200 MISS' }), 'room in the pool: MISS')
    or diag(short($r));
is_deeply(tl_ids($r), ids_page(\@all, 20), 'the whole page')
    or diag(summary(tl_ids($r), ids_page(\@all, 20)));
is(scalar @$f, 4, 'four chunks asked');
is(cached(), 1, 'cached');

$t->done;
