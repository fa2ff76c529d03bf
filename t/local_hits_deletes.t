#!/usr/bin/perl

# Local hits and deletes: a worker keeps the last ids deleted (told on
# feed:dlc) and searches its copies for them, instead of asking Redis for
# every copy after any delete.  One worker, link mode, two readers of two
# authors, each answered LOCAL:
#
#   - a post of the other author deleted: the first reader's copy does
#     not have it, and its next reads stay LOCAL (answered_without_redis
#     grows by each), while the second reader's page loses the post;
#   - a post on the first reader's page deleted: its next read is not
#     LOCAL, the post never shows after the 204, and LOCAL resumes;
#   - a reader with a read marker (X-Feed-Unread: the count may have
#     counted a post deleted off its page): any delete makes the next
#     read ask Redis, the count right;
#   - more deletes than the worker keeps (300 > 256) since a copy was
#     searched: the copy asks Redis, the page right.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use FeedTest;

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $t = FeedTest->new;
$t->start_redis;
$t->start_mongo;

$t->write_conf(<<'EOF2')->run;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode link;
    feed_fanout on;
    feed_fanout_block 200ms;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ {
            feed_user_post $1 $2;
        }
        location ~ ^/users/([^/]+)/timeline/marker$ {
            feed_timeline_marker $1;
        }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
    }
}
EOF2

ok($t->wait_for(10, sub {
    my $j = $t->get('/status')->{json} or return 0;
    $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch}
        && $j->{pull}{watch}{tracking};
}), 'nginx up, the watch tracking');

my %posts;
sub post {
    my ($a, $body) = @_;
    my $r = $t->http('POST', "/users/$a/posts",
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"body": "$body"}));
    die "post: $r->{status}\n" unless $r->{status} == 201;
    push @{ $posts{$a} }, $r->{json}{id};
    return $r->{json}{id};
}

sub ids { return map { $_->{id} } @{ $_[0]{json}{items} || [] } }
sub page { return $t->get("/users/$_[0]/timeline?limit=5") }
sub local_count {
    return $t->get('/status')->{json}{local_pages}{answered_without_redis};
}

# a reader's page answered LOCAL, within 3 s
sub warm {
    my ($u) = @_;
    return $t->wait_for(3, sub {
        (page($u)->{headers}{'x-feed-cache'} // '') eq 'LOCAL' });
}

for (['ra', 'a'], ['rb', 'b'], ['rm', 'a'], ['rm', 'b']) {
    is($t->http('PUT', "/users/$_->[0]/following/$_->[1]")->{status}, 204,
        "$_->[0] follows $_->[1]");
}
for my $i (1 .. 8) { post('a', "a $i"); post('b', "b $i"); }
ok($t->wait_for(5, sub { (ids(page('ra')))[0] eq $posts{a}[-1]
    && (ids(page('rb')))[0] eq $posts{b}[-1] }), 'the posts fanned out');

ok(warm('ra'), 'ra answered LOCAL');
ok(warm('rb'), 'rb answered LOCAL');

# ------------------------------- a post not on the page: still LOCAL --

my $gone = $posts{b}[-1];
is($t->http('DELETE', "/users/b/posts/$gone")->{status}, 204,
    "b's newest post deleted");
my $n0 = local_count();
my @c = map { page('ra')->{headers}{'x-feed-cache'} // '' } 1 .. 5;
is("@c", 'LOCAL LOCAL LOCAL LOCAL LOCAL',
    'ra\'s copy has no post of b: its reads stay LOCAL');
is(local_count() - $n0, 5, 'answered_without_redis + 5');
ok(!grep({ $_ eq $gone } ids(page('rb'))), 'rb\'s page lost the post');

# --------------------------------- a post on the page: Redis, gone --

ok(warm('ra'), 'ra LOCAL again');
$gone = $posts{a}[-1];
is($t->http('DELETE', "/users/a/posts/$gone")->{status}, 204,
    "a's newest post (on ra's page) deleted");
my $r = page('ra');
isnt($r->{headers}{'x-feed-cache'}, 'LOCAL',
    'ra\'s copy has it: the next read asks Redis');
ok(!grep({ $_ eq $gone } ids($r)), 'and the post is gone');
ok(warm('ra'), 'LOCAL again');
ok(!grep({ $_ eq $gone } ids(page('ra'))), 'without the post');

# ------------------------- a copy answering an unread count: Redis --

my @rm = ids(page('rm'));
is($t->http('PUT', '/users/rm/timeline/marker',
    headers => { 'Content-Type' => 'application/json' },
    body => qq({"last_read_id": "$rm[2]"}))->{status}, 200,
    'rm\'s marker two posts below the head');
ok(warm('rm'), 'rm answered LOCAL');
is(page('rm')->{headers}{'x-feed-unread'}, '2', 'X-Feed-Unread: 2');
my $old = $posts{a}[0];
is($t->http('DELETE', "/users/a/posts/$old")->{status}, 204,
    'a post far below rm\'s page deleted');
$r = page('rm');
isnt($r->{headers}{'x-feed-cache'}, 'LOCAL',
    'rm\'s copy answers a count: the next read asks Redis');
is($r->{headers}{'x-feed-unread'}, '2', 'the count right');

# ------------------------------ more deletes than the worker keeps --

ok(warm('ra'), 'ra LOCAL');
my @many = map { post('c', "c $_") } 1 .. 300;
my $deleted = 0;
while (my @part = splice(@many, 0, 50)) {
    my @h = map { $t->http_start('DELETE', "/users/c/posts/$_",
        timeout => 15) } @part;
    $deleted += grep { $_->{status} == 204 } map { $t->http_end($_) } @h;
}
is($deleted, 300, '300 posts of an author nobody follows deleted');
$r = page('ra');
isnt($r->{headers}{'x-feed-cache'}, 'LOCAL',
    'more deletes since ra\'s copy was searched than the worker keeps: '
    . 'the next read asks Redis');
is((ids($r))[0], $posts{a}[-2], 'the page right');
ok(warm('ra'), 'LOCAL again');

$t->done;
