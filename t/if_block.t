#!/usr/bin/perl

# A feed_* location with an "if" block inside: a request the block matches
# still runs the location's handler (nginx keeps the content handler), and
# the block's configuration takes the handler's settings from the location
# (the worker crashed on a NULL handler table before).  feed_status's 405
# keeps its wording and says the methods in Allow.

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
is($r->{headers}{allow}, 'GET, HEAD', 'Allow says the methods');

$t->done;
