#!/usr/bin/perl

# feed_timeline_source asked directly (an ordinary location: one may open
# it to an application) and as the timeline's fallback: arguments it
# refuses get one 400 JSON error.  It answered the 400, then went on to
# run its MongoDB task and answer again: "[alert] header already sent",
# and as a fallback an answer broken off.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short post);

my $t = FeedTest->new;

$t->start_backends;

$t->write_conf(<<'EOF')->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location /_feed/timeline {
            subrequest_output_buffer_size 1m;
            feed_timeline_source;
        }
    }
}
EOF

my $P = 'ts' . int(rand 1e6);

is($t->http('PUT', "/users/${P}r/following/${P}a")->{status}, 204,
    'a follow');
my $id = post($t, "${P}a", 'a post');
ok($id, 'a post');

my $r = $t->get("/_feed/timeline?user=${P}r&limit=5");
is($r->{status}, 200, 'asked directly: 200') or diag(short($r));
is_deeply([ map { $_->{id} } @{$r->{json}{items} || []} ], [ $id ],
    'asked directly: the post');

for my $case (
    [ 'user=bad%20id', 'invalid_user_id' ],
    [ 'limit=5', 'invalid_user_id' ],
    [ "user=${P}r&limit=0", 'invalid_limit' ],
    [ "user=${P}r&limit=100001", 'invalid_limit' ],
    [ "user=${P}r&max_id=xyz", 'invalid_post_id' ],
    [ "user=${P}r&since_id=" . ('A' x 24), 'invalid_post_id' ])
{
    my ($args, $code) = @$case;
    my $x = $t->get("/_feed/timeline?$args");
    is($x->{status}, 400, "$args: 400") or diag(short($x));
    is($x->{json}{error}, $code, "$args: $code, once")
        or diag(short($x));
}

$t->done;
