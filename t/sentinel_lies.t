#!/usr/bin/perl

# Sentinels that point elsewhere than at a primary: a stand-in sentinel
# (a few lines of RESP here) answers SENTINEL get-master-addr-by-name with
# what the test writes in a file.
#
#   - a replica (a real redis-server, --replicaof the primary): the
#     worker's ROLE at login says "slave", it logs that this is not the
#     primary, drops the connection and asks again, and logs into it
#     again after twice as long each time (it was every 50 ms), the
#     warning once a connection; Redis is not up, reads answer from
#     MongoDB (BYPASS), nothing is written there;
#   - then the primary: the worker moves to it, Redis up, hits;
#   - then an invalid address (port 0): logged, the last primary kept;
#   - then an error reply: logged as not known, the last primary kept;
#   - +switch-master to an invalid address, or of another name: the last
#     primary kept.
# The error paths of ngx_http_feed_redis_sentinel.c's ROLE check and its
# address check, which real sentinels do not take.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use IO::Select;
use POSIX ();
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::Util qw(statuses);

my $t = FeedTest->new;

$t->start_mongo unless FeedTest::real_mongo();
$t->start_redis;
$t->start_redis(name => 'redis2',
    args => ['--replicaof', '127.0.0.1', $t->port('redis')]);

my $answer = $t->dir . '/sentinel-answer';

# what the stand-in sentinel answers: "host port", or "-ERR ..."
sub tell_primary {
    my ($what) = @_;
    open my $f, '>', "$answer.tmp" or die "$answer: $!\n";
    print $f $what;
    close $f;
    rename "$answer.tmp", $answer or die "$answer: $!\n";
}

# the stand-in: SENTINEL get-master-addr-by-name answered from the file,
# SUBSCRIBE confirmed and held, INFO as a sentinel's, anything else +OK
sub fake_sentinel {
    my ($port) = @_;
    my $pid = fork() // die "fork: $!\n";
    return $pid if $pid;

    my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port",
        Listen => 16, ReuseAddr => 1) or POSIX::_exit(1);
    my $sel = IO::Select->new($l);
    my (%buf, %sub);
    my $parent = getppid();
    while (getppid() == $parent) {
        # a failover told: "$answer.push" to every subscriber, once
        if (open my $pf, '<', "$answer.push") {
            my $m = <$pf> // '';
            close $pf;
            unlink "$answer.push";
            syswrite($_, "*3\r\n\$7\r\nmessage\r\n\$14\r\n+switch-master"
                . "\r\n\$" . length($m) . "\r\n$m\r\n") for values %sub;
        }
        for my $s ($sel->can_read(0.1)) {
            if ($s == $l) {
                my $c = $l->accept or next;
                $sel->add($c);
                $buf{fileno $c} = '';
                next;
            }
            my $n = sysread($s, my $b, 65536);
            if (!$n) {
                delete $sub{fileno $s};
                delete $buf{fileno $s};
                $sel->remove($s);
                close $s;
                next;
            }
            $buf{fileno $s} .= $b;
            while ($buf{fileno $s} =~ s/^\*(\d+)\r\n((?:\$\d+\r\n.*?\r\n)*)//s)
            {
                my ($argc, $body) = ($1, $2);
                my @a = $body =~ /\$\d+\r\n(.*?)\r\n/gs;
                my $cmd = uc($a[0] // '');
                my $out;
                if ($cmd eq 'SENTINEL') {
                    open my $f, '<', $answer;
                    my $w = $f ? <$f> // '' : '';
                    if ($w =~ /^-/) {
                        $out = "$w\r\n";
                    } else {
                        my ($h, $p) = split ' ', $w;
                        $out = "*2\r\n\$" . length($h) . "\r\n$h\r\n\$"
                            . length($p) . "\r\n$p\r\n";
                    }
                } elsif ($cmd eq 'SUBSCRIBE') {
                    $sub{fileno $s} = $s;
                    $out = "*3\r\n\$9\r\nsubscribe\r\n\$" . length($a[1])
                        . "\r\n$a[1]\r\n:1\r\n";
                } elsif ($cmd eq 'PING') {
                    $out = "+PONG\r\n";
                } elsif ($cmd eq 'INFO') {
                    my $i = "# Server\r\nredis_mode:sentinel\r\nrun_id:"
                        . ('5e' x 20) . "\r\n";
                    $out = '$' . length($i) . "\r\n$i\r\n";
                } else {
                    $out = "+OK\r\n";
                }
                syswrite($s, $out);
            }
        }
    }
    POSIX::_exit(0);
}

my $sport = $t->port('sentinel');
tell_primary('127.0.0.1 ' . $t->port('redis2'));
my $fake = fake_sentinel($sport);
$t->wait_port($sport) or die "the stand-in sentinel did not start\n";

$t->write_conf(<<"EOF2")->run;
worker_processes 1;
%%FEED_THREAD_POOL%%
events { worker_connections 64; }
http {
    feed_redis sentinel=liar 127.0.0.1:$sport;
    %%FEED_MONGO%%

@{[ FeedTest::Util::server_conf() ]}
}
EOF2

my $p2 = $t->port('redis2');
my $p1 = $t->port('redis');
sub status { (values %{ statuses($t) })[0] // {} }

# ------------------------------------------------ a replica as primary --

my $slave = qq(redis 127.0.0.1:$p2 is a slave, not the primary of "liar");
ok($t->wait_for(10, sub { $t->error_log =~ /\[warn\].*\Q$slave\E/ }),
    'a replica told: the log says it is not the primary');
my $st = status();
isnt($st->{redis}{state}, 'up', 'a replica told: redis not up');
my $r = $t->get('/users/nobody/timeline');
is($r->{status}, 200, 'a replica told: a read, 200');
is($r->{headers}{'x-feed-cache'}, 'BYPASS', 'a replica told: from MongoDB');
# logged into again, twice as long each time up to 2 s: it was every 50 ms
# (three connections: about 60 logins a second)
my $logins = sub {
    scalar(() = $t->error_log =~ /is a slave, not the primary/g) };
sleep 4;
my $asked = $logins->();
sleep 4;
my $again = $logins->() - $asked;
ok($again >= 1 && $again <= 12, "a replica told: logged into again, "
    . "slowly ($again times in 4 s, 3 connections)");
my $warned = () = $t->error_log
    =~ /\[warn\].*is a slave, not the primary/g;
ok($warned <= 3, "a replica told: said once a connection ($warned), "
    . 'then quietly (info)');
is($t->redis('DBSIZE'), 0, 'a replica told: nothing written on the primary');

# --------------------------------------------------------- the primary --

tell_primary("127.0.0.1 $p1");
ok($t->wait_for(10, sub { ((status()->{redis} // {})->{state} // '') eq 'up' }),
    'the primary told: redis up');
my $moved = qq(redis primary "liar" moved from 127.0.0.1:$p2 to )
    . "127.0.0.1:$p1 (asked)";
like($t->error_log, qr/\Q$moved\E/,
    'the primary told: the log says it moved there');
$t->get('/users/nobody/timeline') for 1 .. 2;
$r = $t->get('/users/nobody/timeline');
like($r->{headers}{'x-feed-cache'} // '', qr/^(HIT|LOCAL|MISS)$/,
    'the primary told: reads from the cache ('
    . ($r->{headers}{'x-feed-cache'} // 'none') . ')');

# ------------------------------------------ an invalid address, an error --

# the stand-in restarted: the worker's connections to it are made again,
# and it is asked again
sub restart_sentinel {
    kill 'TERM', $fake;
    waitpid($fake, 0);
    $fake = fake_sentinel($sport);
    $t->wait_port($sport) or die "the stand-in sentinel did not start\n";
}

tell_primary('127.0.0.1 0');
restart_sentinel();
ok($t->wait_for(10, sub { $t->error_log
    =~ /redis sentinel told an invalid primary "127\.0\.0\.1:0"/ }),
    'port 0 told: the log says it is invalid');
ok($t->wait_for(10, sub { ((status()->{redis} // {})->{state} // '') eq 'up' }),
    'port 0 told: the last primary kept, redis up');
is(status()->{redis}{sentinel}{primary}, "127.0.0.1:$p1",
    'port 0 told: status shows the last primary');

tell_primary('-ERR no such master');
restart_sentinel();
my $unknown = "redis sentinel 127.0.0.1:$sport does not know the primary "
    . '"liar": ERR no such master';
ok($t->wait_for(10, sub { $t->error_log =~ /\Q$unknown\E/ }),
    'an error told: the log says so');
ok($t->wait_for(10, sub { ((status()->{redis} // {})->{state} // '') eq 'up' }),
    'an error told: the last primary kept, redis up');

# a failover heard (+switch-master) to an invalid address, then one of
# another name: neither followed
my $invalid = sub {
    scalar(() = $t->error_log =~ /told an invalid primary "127\.0\.0\.1:0"/g) };
my $n0 = $invalid->();
sub push_switch {
    open my $f, '>', "$answer.push.tmp" or die "$answer: $!\n";
    print $f $_[0];
    close $f;
    rename "$answer.push.tmp", "$answer.push" or die "$answer: $!\n";
}
push_switch("liar 127.0.0.1 $p1 127.0.0.1 0");
ok($t->wait_for(5, sub { $invalid->() > $n0 }),
    '+switch-master to port 0: the log says it is invalid');
push_switch("other 127.0.0.1 $p1 127.0.0.1 $p2");
ok($t->wait_for(5, sub { !-e "$answer.push" }),
    'another name\'s failover told');
sleep 1;
is(status()->{redis}{sentinel}{primary}, "127.0.0.1:$p1",
    '+switch-master: the last primary kept');
is(status()->{redis}{state}, 'up', '+switch-master: redis up');
unlike($t->error_log, qr/moved from 127\.0\.0\.1:$p1/,
    '+switch-master: no move logged');

$t->done;
kill 'TERM', $fake;
waitpid($fake, 0);
