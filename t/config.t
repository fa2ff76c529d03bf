#!/usr/bin/perl

# The module loads; "nginx -t" rejects each malformed directive with a
# message that names it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;

my $t = FeedTest->new;

sub conf {
    my ($main, $http, $loc, $server) = @_;
    $main ||= '';
    $http ||= '';
    $loc ||= '';
    $server ||= '';
    return <<"EOF";
$main
events { worker_connections 64; }
http {
    $http
    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location = /status { feed_status; $loc }
        $server
    }
}
EOF
}

my ($ok, $out);

# a good configuration, every directive used

$t->write_conf(conf('thread_pool feed threads=2;',
    'feed_redis 127.0.0.1:6379 password=secret db=3;
    feed_redis_connect_timeout 250ms;
    feed_redis_timeout 2s;
    feed_mongo_uri "mongodb://127.0.0.1:27017/?appname=x";
    feed_mongo_database social;
    feed_mongo_timeout 1500ms;
    feed_thread_pool feed;'));
($ok, $out) = $t->test_conf;
ok($ok, 'full configuration accepted') or diag($out);

$t->write_conf(conf('', 'feed_redis unix:/run/redis/redis.sock;'));
($ok, $out) = $t->test_conf;
ok($ok, 'unix socket address accepted') or diag($out);

$t->write_conf(conf('', 'feed_redis localhost;'));
($ok, $out) = $t->test_conf;
ok($ok, 'host name without port accepted') or diag($out);

# a cluster: several seed nodes, or one and the word "cluster"

for my $v ('127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002',
           '127.0.0.1:7000 cluster password=secret')
{
    $t->write_conf(conf('', "feed_redis $v;"));
    ($ok, $out) = $t->test_conf;
    ok($ok, "cluster seeds accepted: $v") or diag($out);
}

for my $v ('read', 'cache', 'capped',
           "capped;\n    feed_timeline_capped_size 200000",
           "time_buckets;\n    feed_timeline_bucket_time 1h",
           "size_buckets;\n    feed_timeline_bucket_size 1000",
           "size_buckets;\n    feed_timeline_bucket_keep 10",
           "time_buckets;\n    feed_timeline_bucket_keep 0")
{
    $t->write_conf(conf('', "feed_timeline_store $v;"));
    ($ok, $out) = $t->test_conf;
    ok($ok, "feed_timeline_store $v accepted") or diag($out);
}

# pull authors on a cluster: their lists have a copy on each master
$t->write_conf(conf('', "feed_redis 127.0.0.1:7000 cluster;\n"
    . "    feed_pull_threshold 100;"));
($ok, $out) = $t->test_conf;
ok($ok, 'feed_pull_threshold accepted with a cluster') or diag($out);

for my $v ('feed:posts partitions=1', 'q maxlen=100 partitions=64',
           'q partitions=8 maxlen=5')
{
    $t->write_conf(conf('', "feed_stream $v;"));
    ($ok, $out) = $t->test_conf;
    ok($ok, "feed_stream $v accepted") or diag($out);
}

for my $v ('off', '1', '250000') {
    $t->write_conf(conf('', "feed_pull_threshold $v;"));
    ($ok, $out) = $t->test_conf;
    ok($ok, "feed_pull_threshold $v accepted") or diag($out);
}

for my $v ('off', '0', '30d', '1h', '90s') {
    $t->write_conf(conf('', "feed_timeline_window $v;"));
    ($ok, $out) = $t->test_conf;
    ok($ok, "feed_timeline_window $v accepted") or diag($out);
}

$t->write_conf(conf());
($ok, $out) = $t->test_conf;
ok($ok, 'module loads with no feed configuration') or diag($out);

# the shipped configuration is valid as it is

$t->write_conf($t->shipped_conf);
($ok, $out) = $t->test_conf;
ok($ok, 'shipped conf/nginx.conf accepted') or diag($out);

# each malformed directive, and what the message must say

my @bad = (
    [ 'feed_redis 127.0.0.1:99999;',          qr/feed_redis.*127\.0\.0\.1:99999|invalid port.*feed_redis/ ],
    [ 'feed_redis 127.0.0.1:6379 passwd=x;',  qr/invalid parameter "passwd=x" in "feed_redis"/ ],
    [ 'feed_redis 127.0.0.1:6379 db=x;',      qr/invalid database index "db=x" in "feed_redis"/ ],
    [ 'feed_redis 127.0.0.1:6379 db=-1;',     qr/invalid database index "db=-1" in "feed_redis"/ ],
    [ 'feed_redis 127.0.0.1:6379 password=;', qr/invalid parameter "password=" in "feed_redis"/ ],
    [ 'feed_redis no.such.host.invalid;',     qr/feed_redis/ ],
    [ 'feed_redis 127.0.0.1:6379/path;',      qr/in "feed_redis" address "127\.0\.0\.1:6379\/path"/ ],
    [ 'feed_redis;',                          qr/invalid number of arguments in "feed_redis"/ ],
    [ "feed_redis 127.0.0.1;\n    feed_redis 127.0.0.1;",
                                              qr/"feed_redis" directive is duplicate/ ],
    [ 'feed_redis 127.0.0.1:7000 cluster db=2;',
                                              qr/"feed_redis" of a cluster cannot select a database: a cluster has only db=0/ ],
    [ 'feed_redis 127.0.0.1:7000 127.0.0.1:7001 db=1;',
                                              qr/"feed_redis" of a cluster cannot select a database/ ],
    [ 'feed_redis unix:/tmp/r.sock 127.0.0.1:7000;',
                                              qr/"feed_redis" of a cluster needs TCP addresses, not "unix:\/tmp\/r\.sock"/ ],
    [ 'feed_redis cluster;',                  qr/"feed_redis" directive needs an address/ ],
    [ 'feed_timeline_store buckets;',         qr/invalid value "buckets" in "feed_timeline_store" directive, it must be "read", "time_buckets", "size_buckets", "cache" or "capped"/ ],
    [ 'feed_cache_mode embedded;',            qr/invalid value "embedded" in "feed_cache_mode" directive, it must be "link" or "embed"/ ],
    [ "feed_cache_mode link;\n    feed_cache_mode embed;",
                                              qr/"feed_cache_mode" directive is duplicate/ ],
    [ 'feed_timeline_bucket_time 0;',         qr/"feed_timeline_bucket_time" must be positive|must be positive/ ],
    [ 'feed_timeline_bucket_size 0;',         qr/value must be between 1 and 1000/ ],
    [ 'feed_timeline_bucket_size 1001;',      qr/value must be between 1 and 1000/ ],
    [ 'feed_timeline_capped_size 0;',         qr/value must be between 1 and 200000/ ],
    [ 'feed_timeline_capped_size 200001;',    qr/value must be between 1 and 200000/ ],
    [ 'feed_timeline_bucket_keep -1;',        qr/"feed_timeline_bucket_keep" directive invalid number/ ],
    [ 'feed_timeline_bucket_keep 1000001;',   qr/value must be between 0 and 1000000/ ],
    [ 'feed_timeline_bucket_size many;',      qr/"feed_timeline_bucket_size" directive invalid number/ ],
    [ 'feed_timeline_store cache read;',      qr/invalid number of arguments in "feed_timeline_store"/ ],
    [ 'feed_stream s partitions=0;',          qr/invalid parameter "partitions=0" in "feed_stream"/ ],
    [ 'feed_stream s partitions=65;',         qr/invalid parameter "partitions=65" in "feed_stream"/ ],
    [ 'feed_stream s partitions=x;',          qr/invalid parameter "partitions=x" in "feed_stream"/ ],
    [ 'feed_stream s maxlen=5 partitions=2 x;', qr/invalid number of arguments in "feed_stream"|invalid parameter "x" in "feed_stream"/ ],
    [ "feed_redis 127.0.0.1:7000 cluster;\n    feed_cache_mode link;",
                                              qr/"feed_cache_mode link" cannot be used with a redis cluster: use "embed"/ ],
    [ 'feed_redis 127.0.0.1:7000 127.0.0.1:99999;',
                                              qr/feed_redis.*127\.0\.0\.1:99999|invalid port.*feed_redis/ ],
    [ 'feed_redis_timeout 0;',                qr/"feed_redis_timeout" directive must be positive/ ],
    [ 'feed_redis_timeout abc;',              qr/"feed_redis_timeout" directive invalid value/ ],
    [ 'feed_redis_connect_timeout -1s;',      qr/"feed_redis_connect_timeout" directive invalid value/ ],
    [ 'feed_mongo_uri "http://x";',           qr/invalid MongoDB URI "http:\/\/x" in "feed_mongo_uri"/ ],
    [ 'feed_mongo_uri "mongodb://";',         qr/invalid MongoDB URI .* in "feed_mongo_uri"/ ],
    [ 'feed_mongo_uri a b;',                  qr/invalid number of arguments in "feed_mongo_uri"/ ],
    [ "feed_mongo_uri mongodb://h/;\n    feed_mongo_database a.b;",
                                              qr/invalid database name "a\.b" in "feed_mongo_database"/ ],
    [ "feed_mongo_uri mongodb://h/;\n    feed_mongo_database \"\";",
                                              qr/invalid database name "" in "feed_mongo_database"/ ],
    [ 'feed_mongo_timeout 0ms;',              qr/"feed_mongo_timeout" directive must be positive/ ],
    [ "feed_mongo_uri mongodb://h/;\n    feed_thread_pool nosuch;",
                                              qr/unknown thread pool "nosuch"/ ],
    [ 'feed_identity;',                       qr/invalid number of arguments in "feed_identity"/ ],
    [ 'feed_pull_threshold 0;',               qr/invalid feed_pull_threshold "0": a number of followers, or off/ ],
    [ 'feed_pull_threshold many;',            qr/invalid feed_pull_threshold "many"/ ],
    [ 'feed_pull_threshold -5;',              qr/invalid feed_pull_threshold "-5"/ ],
    [ "feed_pull_threshold 5;\n    feed_pull_threshold 6;",
                                              qr/"feed_pull_threshold" directive is duplicate/ ],
    [ 'feed_timeline_window soon;',           qr/invalid feed_timeline_window "soon": a time \(30d\), 0 or off/ ],
    [ 'feed_timeline_window -1d;',            qr/invalid feed_timeline_window "-1d"/ ],
    [ "feed_timeline_window 1d;\n    feed_timeline_window 2d;",
                                              qr/"feed_timeline_window" directive is duplicate/ ],
    (map { [ "feed_seen_error $_;",           qr/"feed_seen_error" must be a rate from 0.0082 \(at most 10 bits per id\) to 0.5, or 0.82% to 50%, not "\Q$_\E"/ ] }
        '0.001', '0.8', 'x', '1', '0.5%', '%'),
    [ "feed_seen_error 1%;\n    feed_seen_error 2%;",
                                              qr/"feed_seen_error" directive is duplicate/ ],
    [ 'feed_seen_capacity 0;',                qr/value must be between 1 and 1000000/ ],
    [ 'feed_seen_capacity 1000001;',          qr/value must be between 1 and 1000000/ ],
);

for my $case (@bad) {
    my ($line, $re) = @$case;
    $t->write_conf(conf('', $line));
    ($ok, $out) = $t->test_conf;
    ok(!$ok, "rejected: $line");
    like($out, qr/\[emerg\].*$re/, "message for: $line");
}

# the seen filters' sizes at their bounds

for my $ok_line ("feed_seen_error 0.0082;\n    feed_seen_capacity 1000000;",
    "feed_seen_error 50%;\n    feed_seen_capacity 1;")
{
    $t->write_conf(conf('', $ok_line));
    ($ok, $out) = $t->test_conf;
    ok($ok, "accepted: $ok_line") or diag($out);
}

# directives in the wrong context

$t->write_conf(conf('', '', 'feed_redis 127.0.0.1;'));
($ok, $out) = $t->test_conf;
ok(!$ok, 'feed_redis in a location rejected');
like($out, qr/"feed_redis" directive is not allowed here/, 'context message');

$t->write_conf(conf('', 'feed_status;'));
($ok, $out) = $t->test_conf;
ok(!$ok, 'feed_status at http level rejected');
like($out, qr/"feed_status" directive is not allowed here/,
    'feed_status context message');

# graph locations need MongoDB, and their arguments

$t->write_conf(conf('', '', '',
    'location /f { feed_follow $arg_a $arg_b; }'));
($ok, $out) = $t->test_conf;
ok(!$ok, 'feed_follow without feed_mongo_uri rejected');
like($out, qr/need "feed_mongo_uri"/, 'message names feed_mongo_uri');

for my $bad ('feed_follow $arg_a;', 'feed_following;',
    'feed_followers a b;')
{
    $t->write_conf(conf('', 'feed_mongo_uri mongodb://h/;', '',
        "location /f { $bad }"));
    ($ok, $out) = $t->test_conf;
    ok(!$ok, "rejected: $bad");
    like($out, qr/invalid number of arguments in "feed_follow/,
        "message for: $bad");
}

$t->write_conf(conf('', 'feed_mongo_uri mongodb://h/;', '',
    'location /f { feed_following $arg_a; feed_followers $arg_a; }'));
($ok, $out) = $t->test_conf;
ok(!$ok, 'two handlers in one location rejected');
like($out, qr/"feed_followers" directive is duplicate/, 'duplicate message');

$t->write_conf(conf('', '', 'feed_status x;'));
($ok, $out) = $t->test_conf;
ok(!$ok, 'feed_status with an argument rejected');
like($out, qr/invalid number of arguments in "feed_status"/,
    'feed_status arguments message');

$t->no_sanitizer_reports;
done_testing();
