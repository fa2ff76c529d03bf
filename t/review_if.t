#!/usr/bin/perl

# feed_status answers in an "if" block of its location as at 4b2a715 (its
# handler is the location's; the if block's configuration is merged from
# it), and its 405 is as it was: no Allow header.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;

my $t = FeedTest->new;

$t->write_conf(<<'EOF2')->run;
worker_processes 1;
events { worker_connections 128; }
http {
    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status {
            feed_status;
            if ($arg_x) { add_header X-If 1; }
        }
    }
}
EOF2

my $r = $t->get('/status?x=1', timeout => 5);
is($r->{status}, 200, 'status in an if block answers');
is($r->{headers}{'x-if'}, '1', 'the if block applied');

$r = $t->get('/status', timeout => 5);
is($r->{status}, 200, 'status answers');

$r = $t->http('POST', '/status', body => 'x');
is($r->{status}, 405, 'POST status is 405');
is($r->{json}{message}, 'only GET and HEAD are allowed', 'its wording');
ok(!exists $r->{headers}{allow}, 'no Allow header, as before');

$t->done;
