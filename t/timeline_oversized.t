#!/usr/bin/perl

# A rebuild whose answer is larger than the fallback location's
# subrequest_output_buffer_size.  nginx failed the client's request with
# the subrequest (the connection closed, no answer), the rebuild lock was
# deleted rather than marked failed, and every reader redid the full
# rebuild.  Now:
#
#   - the cache is made of as many posts as fit (a warning says to raise
#     the buffer); the first read is a 200 MISS, the next ones hits (HIT,
#     or LOCAL once a read came after the rebuild: the worker's copy), and a
#     walk over all pages shows every post once (past the cache's end
#     from the fallback, page by page);
#   - readers waiting for that rebuild get the same pages;
#   - a buffer too small for even one post: 503 + Retry-After in JSON,
#     never a dropped connection; the next reader too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(short post tl_uri tl_page_problems rd $HIT);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run('tiny');
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 3s;
    feed_cache_size 200;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16k;
            feed_timeline_source;
        }
    }

    server {
        listen 127.0.0.1:%%PORT_TINY%%;
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 256;
            feed_timeline_source;
        }
    }
}
EOF

my $P = 'ov' . int(rand 1e6);
my ($READER, $AUTHOR) = ("${P}reader", "${P}author");

is($t->http('PUT', "/users/$_/following/$AUTHOR")->{status}, 204,
    "$_ follows the author") for $READER, "${P}other";

# 100 posts of about 500 bytes: some 50k in all, a page of 20 about 10k
my @ids;
for my $i (1 .. 100) {
    my $id = post($t, $AUTHOR, sprintf('%03d ', $i) . ('x' x 400),
        quiet => 1);
    push @ids, $id if $id;
}
is(scalar @ids, 100, '100 posts');
my @want = reverse @ids;

# the first read leads the rebuild; three more wait for it

my @h = map { $t->http_start('GET', tl_uri($READER), timeout => 10) } 1 .. 4;
my @res = map { $t->http_end($_) } @h;

for my $i (0 .. $#res) {
    my @p = tl_page_problems($res[$i], $READER, 20);
    ok(!@p, "reader $i: a well-formed 200 page") or diag(join "\n", @p);
    is_deeply([ map { $_->{id} } @{$res[$i]{json}{items} || []} ],
        [ @want[0 .. 19] ], "reader $i: the newest 20 posts");
}
is($res[0]{headers}{'x-feed-cache'}, 'MISS', 'the leader: MISS');

like($t->error_log, qr/rebuilt with \d+ posts instead of 200: raise sub/,
    'the smaller rebuild logged, with what to do');

my $n = rd($t, 'LLEN', "feed:tl:{$READER}") // 0;
ok($n > 0 && $n < 100, "the cache holds what fitted ($n entries)");

my $r = $t->get(tl_uri($READER));
# a hit: HIT, or LOCAL when one of the three came after the rebuild
like($r->{headers}{'x-feed-cache'} // '', $HIT, 'the next read: a hit')
    or diag(short($r));

# every post once, past the cache's end too

my (@got, @bad);
my $uri = tl_uri($READER, limit => 20);
for my $page (1 .. 20) {
    my $x = $t->get($uri);
    my @p = tl_page_problems($x, $READER, 20);
    if (@p) {
        push @bad, "page $page: @p";
        last;
    }
    push @got, map { $_->{id} } @{$x->{json}{items}};
    last unless defined $x->{json}{next};
    ($uri) = $x->{headers}{link} =~ /<([^>]*)>/;
}
ok(!@bad, 'a walk by 20: every page well-formed') or diag(join "\n", @bad);
is_deeply(\@got, \@want, 'a walk by 20: every post once, newest first');

# not even one post fits

for my $i (1, 2) {
    my $x = $t->get(tl_uri("${P}other"), port => $t->port('tiny'));
    is($x->{status}, 503, "a buffer too small for one post, read $i: 503")
        or diag(short($x));
    is($x->{json}{error}, 'unavailable', "read $i: a JSON error");
    ok(defined $x->{headers}{'retry-after'}, "read $i: Retry-After");
}

$t->done;
