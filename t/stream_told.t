#!/usr/bin/perl

# Live timelines: deliveries told to the streams' readers (the fanout
# publishes each batch with the users it reached while a worker streams;
# ngx_http_feed_timeline_live.c, ngx_http_feed_stream_told.c), in link and
# embed mode, one worker, a single Redis.
#
#   - no stream anywhere: no live mark, nothing published on feed:tlc;
#   - a stream open: feed:live set, a post published once per batch with
#     the users it reached ("<user> ...\n<id><JSON>");
#   - a post to 30 streaming followers: each stream gets it, and Redis runs
#     no read of theirs for it (EVALSHA calls: the delivery's batches, not
#     one per follower), feed_stream_told_total counts 30;
#   - a reader with filters (a mute) reads instead: its muted author's post
#     is not sent, another author's is;
#   - the live mark deleted under the streams (a lapse): a post delivered
#     meanwhile is untold, and still sent once the worker sees the lapse
#     (the readers read again);
#   - the data of a told post is the post as the timeline's page has it;
#   - a malformed message on feed:tlc: a warning, nothing sent;
#   - the streams gone and the mark expired, a new stream's mark is a new
#     era, not a lapse.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use FeedTest;
use FeedTest::SSE;
use FeedTest::Util ();

plan(skip_all => 'the MongoDB stand-in needed: a fresh database')
    if FeedTest::real_mongo();

my $FOLLOWERS = 30;

for my $mode ('link', 'embed') {
    run_mode($mode);
}

done_testing();


sub run_mode {
    my ($mode) = @_;

    my $t = FeedTest->new;
    $t->start_redis;
    $t->start_mongo;

    $t->write_conf(<<"EOF2")->run;
worker_processes 1;
thread_pool feedtp threads=4;
events { worker_connections 1024; }
http {
    feed_redis 127.0.0.1:%%PORT_REDIS%%;
    %%FEED_MONGO%%
    feed_cache_mode $mode;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_stream_heartbeat 1s;

    server {
        listen 127.0.0.1:%%PORT_HTTP%%;
        location ~ ^/users/([^/]+)/following/([^/]+)\$ { feed_follow \$1 \$2; }
        location ~ ^/users/([^/]+)/mutes/([^/]+)\$ { feed_mute \$1 \$2; }
        location ~ ^/users/([^/]+)/posts\$ { feed_posts \$1; }
        location ~ ^/users/([^/]+)/timeline/stream\$ {
            feed_timeline_stream \$1;
        }
        location ~ ^/users/([^/]+)/timeline\$ { feed_timeline \$1; }
        location /_feed/timeline { internal; feed_timeline_source; }
        location = /status { feed_status; }
        location = /metrics { feed_metrics; }
    }
}
EOF2

    ok($t->wait_for(10, sub {
        my $j = $t->get('/status')->{json} or return 0;
        $j->{redis}{up} && $j->{mongo}{up} && $j->{pull}{watch}
            && $j->{pull}{watch}{tracking} && $j->{pull}{watch}{subscribed};
    }), "$mode: nginx up, the watch subscribed and tracking");

    my $port = $t->port('http');

    my $post = sub {
        my ($a, $body) = @_;
        my $r = $t->http('POST', "/users/$a/posts",
            headers => { 'Content-Type' => 'application/json' },
            body => qq({"body": "$body"}));
        die "post: $r->{status}\n" unless $r->{status} == 201;
        return $r->{json}{id};
    };
    my $first = sub {
        my $i = $t->get("/users/$_[0]/timeline?limit=1")->{json}{items};
        return $i && @$i ? $i->[0]{id} : '';
    };
    my $stat = sub {
        my $m = $t->get('/metrics')->{body};
        return $m =~ /^$_[0] (\d+)/m ? $1 : 0;
    };
    my $evalsha = sub {
        my $info = $t->redis('INFO', 'commandstats');
        return $info =~ /^cmdstat_evalsha:calls=(\d+)/m ? $1 : 0;
    };

    my @users = map { "f$_" } 1 .. $FOLLOWERS;
    for my $u (@users, 'mia') {
        $t->http('PUT', "/users/$u/following/bob")->{status} == 204
            or die "follow\n";
    }
    $t->http('PUT', '/users/mia/following/cat')->{status} == 204
        or die "follow\n";
    my $p0 = $post->('bob', 'before');
    ok($t->wait_for(5, sub {
        !grep { $first->($_) ne $p0 } @users, 'mia' }),
        "$mode: the followers' timelines cached");

    # ------------------------------------------------- no stream yet --

    my $sub = subscriber($t->port('redis'), "feed:tlc");
    is($t->redis('EXISTS', 'feed:live'), 0, "$mode: no live mark");
    my $p1 = $post->('bob', 'nobody streams');
    ok($t->wait_for(5, sub { $first->('f1') eq $p1 }), "$mode: delivered");
    is(scalar messages($sub, 0.5), 0,
        "$mode: no stream, nothing told");

    # ------------------------------------------------ streams opened --

    my %s = map { ($_ => FeedTest::SSE->open(port => $port,
        path => "/users/$_/timeline/stream")) } @users;
    is(scalar(grep { $s{$_}->status == 200 } @users), $FOLLOWERS,
        "$mode: $FOLLOWERS streams");
    ok($t->wait_for(5, sub {
        my $st = $t->get('/status')->{json}{streams};
        $st->{readers} == $FOLLOWERS
            && $t->redis('EXISTS', 'feed:live') == 1 }),
        "$mode: $FOLLOWERS readers, the live mark set");
    sleep 1.5;

    my ($reads, $told) = ($t->get('/status')->{json}{streams}{reads},
        $stat->('feed_stream_told_total'));
    my $calls = $evalsha->();

    my $p2 = $post->('bob', 'told');
    my $all = 1;
    for my $u (@users) {
        my $e = $s{$u}->next_event(timeout => 3);
        $all = 0 unless $e && $e->{event} eq 'update' && $e->{id} eq $p2;
    }
    ok($all, "$mode: every stream got the post");

    my @m = messages($sub, 1);
    is(scalar @m, 1, "$mode: told once (one batch)");
    my ($who, $what) = split /\n/, $m[0] // '', 2;
    is(join(' ', sort split / /, $who // ''),
        join(' ', sort @users, 'mia'),
        "$mode: with every user it reached") or diag($who);
    is(substr($what // '', 0, 24), $p2, "$mode: and the post's id");

    sleep 0.5;
    is($t->get('/status')->{json}{streams}{reads} - $reads, 0,
        "$mode: no reader read");
    is($stat->('feed_stream_told_total') - $told, $FOLLOWERS,
        "$mode: feed_stream_told_total counts $FOLLOWERS");
    my $used = $evalsha->() - $calls;
    ok($used < 10, "$mode: Redis ran $used scripts, not one per follower");
    is($t->get('/status')->{json}{pull}{watch}{deliveries}, 1,
        "$mode: status: the watch heard one delivery told");

    # (a page read keeps the page: the user's reader reads once for it)
    my ($item) = @{ $t->get('/users/f1/timeline?limit=1')->{json}{items} };
    is_deeply(FeedTest::json_decode(substr($what // '', 24)), $item,
        "$mode: and its JSON as the page has it");

    # ---------------------------------------- a reader with filters --

    is($t->http('PUT', '/users/mia/mutes/cat')->{status}, 204,
        "$mode: mia mutes cat");
    my $sm = FeedTest::SSE->open(port => $port,
        path => '/users/mia/timeline/stream');
    is($sm->status, 200, "$mode: mia streams");
    sleep 1;
    $reads = $t->get('/status')->{json}{streams}{reads};
    my $pc = $post->('cat', 'muted');
    my $pb = $post->('bob', 'not muted');
    my @e;
    my $end = time + 3;
    while (time < $end) {
        my $e = $sm->next_event(timeout => $end - time) or last;
        push @e, $e;
        last if ($e->{id} // '') eq $pb;
    }
    is(join(' ', map { $_->{id} // '' } @e), $pb,
        "$mode: mia gets bob's post, not cat's");
    ok($t->get('/status')->{json}{streams}{reads} > $reads,
        "$mode: her reader read for it");
    for my $u (@users) {
        $s{$u}->events_until(sub { ($_[0]{id} // '') eq $pb }, timeout => 3);
    }

    # --------------------------------------------- the mark lapses --

    # (the list read in Redis: a page read would make the reader read)
    is($t->redis('DEL', 'feed:live'), 1, "$mode: the live mark deleted");
    my $p3 = $post->('bob', 'untold');
    ok($t->wait_for(5, sub {
        FeedTest::Util::entry_id($t->redis('LINDEX', 'feed:tl:{f2}', 0))
            eq $p3 }),
        "$mode: delivered untold");
    my $e3 = $s{f2}->next_event(timeout => 5);
    ok($e3 && ($e3->{id} // '') eq $p3,
        "$mode: sent once the lapse is seen")
        or diag(explain($e3));
    like($t->error_log, qr/feed live mark "feed:live" lapsed/,
        "$mode: the lapse in the error log");
    is($t->redis('EXISTS', 'feed:live'), 1, "$mode: the mark set again");

    # a message not made by the fanout: left in the log, nothing sent
    ok($t->redis('PUBLISH', 'feed:tlc', "f1 f2 no post") >= 1,
        "$mode: a malformed message published");
    ok($t->wait_for(3, sub {
        $t->error_log =~ /a delivery told malformed, ignored/ }),
        "$mode: ignored, with a warning");
    is($s{f2}->next_event(timeout => 0.5), undef,
        "$mode: nothing sent for it");

    # the streams gone, the worker forgets the mark's era: one made again
    # later (the mark expired meanwhile) is a first, not a lapse
    $_->close for values(%s), $sm;
    ok($t->wait_for(5, sub {
        $t->get('/status')->{json}{streams}{readers} == 0 }),
        "$mode: the streams gone, no reader left");
    $t->redis('DEL', 'feed:live');
    my $s1 = FeedTest::SSE->open(port => $port,
        path => '/users/f1/timeline/stream');
    ok($t->wait_for(5, sub { $t->redis('EXISTS', 'feed:live') == 1 }),
        "$mode: a new stream sets the mark");
    sleep 1;
    my $p4 = $post->('bob', 'after');
    my $e4 = $s1->next_event(timeout => 5);
    is($e4 && $e4->{id}, $p4, "$mode: the new stream gets the next post");
    my @lapsed = $t->error_log =~ /feed live mark "feed:live" lapsed/g;
    is(scalar @lapsed, 1, "$mode: no lapse told for the new era");
    $s1->close;
    close $sub;
    $t->finish;
}


# a connection subscribed to a channel
sub subscriber {
    my ($port, $channel) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port",
        Proto => 'tcp', Timeout => 5) or die "redis: $!\n";
    print $s "*2\r\n\$9\r\nSUBSCRIBE\r\n\$" . length($channel)
        . "\r\n$channel\r\n";
    FeedTest::_resp_read($s);
    return $s;
}

# the messages heard within $wait seconds
sub messages {
    my ($s, $wait) = @_;
    my @m;
    my $end = time + $wait;
    while ((my $left = $end - time) > 0) {
        my $rin = '';
        vec($rin, fileno($s), 1) = 1;
        last unless select(my $rout = $rin, undef, undef, $left);
        my $r = FeedTest::_resp_read($s);
        push @m, $r->[2] if ref $r && $r->[0] eq 'message';
    }
    return @m;
}
