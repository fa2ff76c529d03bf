#!/usr/bin/perl

# The clients of the live timelines' tests (t/lib/FeedTest/SSE.pm), against
# a stand-in event-stream server of this file (forked, on a loopback port,
# one process a connection; what it sends is chosen by the path), not the
# module:
#
#   - FeedTest::SSE, the Perl client: events parsed as the spec says
#     (multi-line data, LF, CRLF and CR line ends, a CRLF cut between two
#     reads, a BOM, comments, ids kept across events, an id with a NUL
#     ignored, retry, a field without a colon, unknown fields, "event:
#     reset" without data returned all the same), a body ended by the
#     connection's close and a chunked one (chunks cut inside lines), the
#     request's Last-Event-ID and query sent, a 503 with its JSON body
#     (Content-Length, chunked, up to the close), a client that does not
#     read (rcvbuf) told the server closed, or that it did not;
#   - node_client, the npm eventsource package: the events, an "event:
#     reset" without data not seen and one with "data:" seen, the
#     reconnection after the server closed with Last-Event-ID (the stand-in
#     says what it got), a 503 an error with no reconnection;
#   - browser, headless Chromium: a page of browser_page() (served by the
#     stand-in) gets an event sent before and one sent after it connected,
#     and reports them on its console and by POST.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use IO::Socket::INET;
use IO::Select;
use Socket qw(SOL_SOCKET SO_SNDBUF IPPROTO_TCP TCP_NODELAY);
use POSIX ();
use Time::HiRes qw(time sleep);
use FeedTest;
use FeedTest::SSE;

my $t = FeedTest->new;
my $dir = $t->dir;
my $port = $t->port('sse');
my $base = "http://127.0.0.1:$port";

# ------------------------------------------------------- the stand-in --

my $OWNER = $$;
my $SERVER = server($port);
END { stop_server() }

sub stop_server {
    return unless $SERVER && $$ == $OWNER;
    kill 'TERM', -$SERVER;
    waitpid($SERVER, 0);
    $SERVER = undef;
}

# the stand-in: a process group of its own (stopped whole), a child for
# each connection; requests, with their Last-Event-ID, logged to
# $dir/requests.log
sub server {
    my ($port) = @_;

    my $l = IO::Socket::INET->new(LocalAddr => '127.0.0.1',
        LocalPort => $port, Listen => 64, ReuseAddr => 1, Proto => 'tcp')
        or die "listen on $port: $!\n";

    my $pid = fork() // die "fork: $!\n";
    if ($pid) {
        close $l;
        return $pid;
    }

    setpgrp(0, 0);
    $SIG{CHLD} = 'IGNORE';
    $SIG{TERM} = sub { POSIX::_exit(0) };
    while (1) {
        my $c = $l->accept or next;
        my $kid = fork();
        if (defined $kid && $kid == 0) {
            close $l;
            eval { serve($c) };
            POSIX::_exit(0);
        }
        close $c;
    }
}

sub log_request {
    my ($line) = @_;
    open my $fh, '>>', "$dir/requests.log" or return;
    print $fh "$line\n";
    close $fh;
}

sub requests {
    open my $fh, '<', "$dir/requests.log" or return ();
    chomp(my @l = <$fh>);
    return @l;
}

sub serve {
    my ($c) = @_;

    setsockopt($c, IPPROTO_TCP, TCP_NODELAY, 1);
    $c->autoflush(1);

    my $head = '';
    while ($head !~ /\r\n\r\n/) {
        my $n = sysread($c, $head, 4096, length $head) or return;
    }
    my ($method, $uri) = $head =~ m{^(\S+) (\S+)} or return;
    my %h = map { /^([^:]+):\s*(.*?)\r?$/ ? (lc $1 => $2) : () }
        split /\r\n/, $head;
    my $leid = $h{'last-event-id'};
    log_request("$method $uri last-event-id="
        . (defined $leid ? $leid : '(none)'));

    my $w = sub {
        my $n = syswrite($c, $_[0]);
        die "client gone\n" unless defined $n && $n == length $_[0];
    };

    # a piece at a time, each written on its own
    my $pieces = sub { for (@_) { $w->($_); sleep 0.03 } };

    my $sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        . "Cache-Control: no-cache\r\n";
    my $chunk = sub { sprintf('%x', length $_[0]) . "\r\n$_[0]\r\n" };

    if ($uri eq '/page.html') {
        my $b = FeedTest::SSE::browser_page(stream => '/stream/browser',
            report => '/_report');
        $w->("HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
            . 'Content-Length: ' . length($b) . "\r\n"
            . "Connection: close\r\n\r\n$b");
        return;
    }

    if ($method eq 'POST' && $uri eq '/_report') {
        my ($body) = $head =~ /\r\n\r\n(.*)\z/s;
        while (length $body < ($h{'content-length'} // 0)) {
            sysread($c, $body, 4096, length $body) or last;
        }
        log_request("report: $body");
        $w->("HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        return;
    }

    if ($uri eq '/stream/basic') {
        # up to the close, no Content-Length, no chunks
        $w->("${sse}Connection: close\r\n\r\n");
        $pieces->(
            "\xEF\xBB\xBF: hello\n\n",
            # LF; multi-line data; one space only removed
            "event: update\nid: 1\ndata: {\"n\":1,\ndata:  \"s\":\"two\"}\n\n",
            # CRLF, the CR and the LF in two writes
            "event: update\r\nid: 2\r\ndata: x\r",
            "\ndata: y\r\n\r\n",
            # CR only
            "event: delete\rdata: 1\r\r",
            # a comment between events, retry, a field without a colon,
            # an unknown field, data: without a space
            ": keep-alive\n",
            "retry: 1500\nfoo: bar\ndata\ndata:z\n\n",
            # no id: the last id stays; an id with a NUL is ignored
            "event: update\nid: 3\0x\ndata: no id\n\n",
            # no data line: dispatched here (the deviation), not by the
            # others
            "event: reset\n\n",
            "event: reset\ndata:\n\n",
            # retry not all digits: ignored
            "retry: 2s\nid\ndata: empty id\n\n",
            # not ended by a blank line: dropped at the close
            "event: update\ndata: cut",
        );
        return;
    }

    if ($uri eq '/stream/chunked') {
        $w->("${sse}Transfer-Encoding: chunked\r\n\r\n");
        $pieces->(
            $chunk->(": chunked\n\nevent: upd"),
            $chunk->("ate\nid: c1\r"),
            $chunk->("\ndata: {\"a\":"),
            # a chunk's size line and its data in two writes
            "f\r\n", "1}\n\ndata: two\r", "\n\r\n",
            $chunk->("\n"),
            $chunk->("event: update\nid: c2\ndata: last\n\n"),
            "0\r\n\r\n",
        );
        # the connection stays: the last chunk ended the body
        sleep 3;
        return;
    }

    if ($uri =~ m{^/stream/echo}) {
        $w->("${sse}Transfer-Encoding: chunked\r\n\r\n");
        $w->($chunk->("event: echo\nid: e1\ndata: "
            . ($leid // '(none)') . " $uri\n\n"));
        sleep 1;
        $w->("0\r\n\r\n");
        return;
    }

    if ($uri =~ m{^/stream/busy(?:-(\w+))?$}) {
        my $b = '{"error":"too_many_streams","message":"this worker '
            . 'serves feed_stream_max streams"}';
        my $s = "HTTP/1.1 503 Service Unavailable\r\n"
            . "Content-Type: application/json\r\nRetry-After: 1\r\n";
        if (!$1) {
            $w->("${s}Content-Length: " . length($b) . "\r\n\r\n");
            $pieces->(substr($b, 0, 10), substr($b, 10));
            sleep 2;    # kept alive: the length ends the body
        } elsif ($1 eq 'chunked') {
            $w->("${s}Transfer-Encoding: chunked\r\n\r\n");
            $pieces->($chunk->(substr($b, 0, 7)), $chunk->(substr($b, 7)),
                "0\r\n\r\n");
            sleep 2;
        } else {
            $w->("${s}Connection: close\r\n\r\n");
            $pieces->(substr($b, 0, 20), substr($b, 20));
        }
        return;
    }

    if ($uri eq '/stream/slow') {
        # a client that does not read: events until a write waits more
        # than 1 s, then the connection closed, as a server drops it
        setsockopt($c, SOL_SOCKET, SO_SNDBUF, 16384);
        $w->("${sse}Transfer-Encoding: chunked\r\n\r\n");
        $c->blocking(0);
        my $ev = 'event: update' . "\n" . 'data: ' . ('x' x 1000) . "\n\n";
        my $sel = IO::Select->new($c);
        my $sent = 0;
        my $end = time + 20;
        OUT: while (time < $end) {
            my $buf = $chunk->($ev);
            while (length $buf) {
                last OUT unless $sel->can_write(1);
                my $n = syswrite($c, $buf);
                next unless $n;
                substr($buf, 0, $n, '');
                $sent += $n;
            }
        }
        log_request("slow: closed after $sent bytes");
        close $c;
        return;
    }

    if ($uri eq '/stream/hold') {
        $w->("${sse}Transfer-Encoding: chunked\r\n\r\n");
        $w->($chunk->("data: one\n\n"));
        for (1 .. 100) { sleep 0.1; $w->($chunk->(": ping\n")); }
        return;
    }

    if ($uri eq '/stream/drop') {
        # the first connection: two events, then closed; the next one
        # says what Last-Event-ID it came with
        $w->("${sse}Connection: close\r\n\r\n");
        if (!defined $leid) {
            $pieces->("retry: 300\n\n",
                "event: update\nid: d1\ndata: first\n\n",
                "event: reset\n\n",
                "event: update\nid: d2\ndata: second\ndata: line\n\n",
                ": bye\n\n");
            return;
        }
        $pieces->("event: reset\ndata:\n\n",
            "event: update\nid: d3\ndata: resumed after $leid\n\n");
        for (1 .. 100) { sleep 0.1; $w->(": ping\n"); }
        return;
    }

    if ($uri eq '/stream/browser') {
        # one event now, the next once the test saw the first arrive
        $w->("${sse}Transfer-Encoding: chunked\r\n\r\n");
        $w->($chunk->(": hello\n\nevent: update\nid: b1\n"
            . "data: {\"n\":\"before\"}\n\n"));
        my $end = time + 30;
        while (time < $end && !-e "$dir/browser-go") {
            sleep 0.05;
        }
        $w->($chunk->("event: update\nid: b2\ndata: {\"n\":\"after\"}\n"
            . "data: second line\n\n"));
        for (1 .. 300) { sleep 0.1; $w->($chunk->(": ping\n")); }
        return;
    }

    $w->("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
        . "Connection: close\r\n\r\n");
}

ok($t->wait_port($port), 'the stand-in listens');

# ---------------------------------------------------- the Perl client --

{
    my $s = FeedTest::SSE->open(port => $port, path => '/stream/basic');
    is($s->status, 200, 'basic: 200');
    like($s->header('content-type'), qr{^text/event-stream},
        'basic: content-type');
    is($s->framing, 'close', 'basic: a body up to the close');

    my @e;
    while (my $ev = $s->next_event(timeout => 3)) { push @e, $ev }
    my @brief = map { [ $_->{event}, $_->{id}, $_->{data} ] } @e;

    is_deeply(\@brief, [
        [ 'update', 1, qq({"n":1,\n "s":"two"}) ],
        [ 'update', 2, "x\ny" ],
        [ 'delete', undef, '1' ],
        [ 'message', undef, "\nz" ],
        [ 'update', undef, 'no id' ],
        [ 'reset', undef, '' ],
        [ 'reset', undef, '' ],
        [ 'message', '', 'empty id' ],
    ], 'basic: the events, in order, parsed as the spec says')
        or diag(explain(\@e));

    is($e[2]{last_event_id}, '2', 'an event without id: the last id kept');
    is($e[4]{last_event_id}, '2', 'an id with a NUL ignored');
    is($e[3]{retry}, 1500, 'retry on its event');
    is($s->retry, 1500, 'retry: 2s ignored');
    is($e[5]{has_data}, 0, 'event: reset without data: returned, no data');
    is($e[6]{has_data}, 1, 'event: reset then data:: data ""');
    is($s->last_id, '', 'id without a value: the last id is ""');
    is($s->comments, 2, 'two comments counted');
    is($s->last_comment, 'keep-alive', 'the last comment kept');
    ok($s->ended, 'basic: ended with the connection');
    ok($s->wait_closed(timeout => 1), 'basic: wait_closed');
    like($s->body, qr/data: cut\z/, 'the body has all that was sent');
    $s->close;
}

{
    my $s = FeedTest::SSE->open(port => $port, path => '/stream/chunked');
    is($s->status, 200, 'chunked: 200');
    is($s->framing, 'chunked', 'chunked: Transfer-Encoding: chunked');
    my @e = $s->events_until(sub { $_[0]{id} && $_[0]{id} eq 'c2' },
        timeout => 5);
    ok($s->matched, 'chunked: events until c2');
    is_deeply([ map { [ $_->{event}, $_->{id}, $_->{data} ] } @e ], [
        [ 'update', 'c1', '{"a":1}' ],
        [ 'message', undef, 'two' ],
        [ 'update', 'c2', 'last' ],
    ], 'chunked: events cut across chunks') or diag(explain(\@e));
    is($s->comments, 1, 'chunked: the comment');
    my $t0 = time;
    ok($s->wait_closed(timeout => 2), 'chunked: the last chunk ends it');
    ok(time - $t0 < 1, 'chunked: without waiting for the close');
    is($s->next_event(timeout => 0.2), undef, 'chunked: no more events');
    $s->close;
}

{
    my $s = FeedTest::SSE->open(port => $port,
        path => '/stream/echo?since_id=abc',
        headers => { 'Last-Event-ID' => '65a1b2c3d4e5f60718293a4b' });
    my $ev = $s->next_event(timeout => 3);
    is($ev && $ev->{data}, '65a1b2c3d4e5f60718293a4b '
        . '/stream/echo?since_id=abc', 'Last-Event-ID and the query sent');
    is($s->last_id, 'e1', 'last_id');
    ok($s->wait_closed(timeout => 3), 'echo: ended');
}

for my $v ('', '-chunked', '-close') {
    my $s = FeedTest::SSE->open(port => $port, path => "/stream/busy$v",
        timeout => 3);
    my $name = "503$v";
    is($s->status, 503, "$name: status");
    is($s->header('content-type'), 'application/json',
        "$name: content-type");
    my $j = eval { FeedTest::json_decode($s->body) };
    is($j && $j->{error}, 'too_many_streams', "$name: the JSON body whole")
        or diag($s->body);
    ok($s->ended, "$name: the body ended");
    is($s->next_event(timeout => 0.1), undef, "$name: no events");
}

{
    my $s = FeedTest::SSE->open(port => $port, path => '/nothing/here');
    is($s->status, 404, '404: status');
    is($s->body, '', '404: empty body');

    my $gone = $t->port('gone');
    $s = FeedTest::SSE->open(port => $gone, path => '/', timeout => 1);
    is($s->status, 0, 'nothing listening: status 0');
    like($s->error // '', qr/connect/, 'nothing listening: the error');
}

{
    # a client that does not read: the server finds its writes blocked
    # and closes; what the kernel held is read, then the end
    my $s = FeedTest::SSE->open(port => $port, path => '/stream/slow',
        rcvbuf => 4096);
    is($s->status, 200, 'slow: 200');
    ok($t->wait_for(15, sub { grep { /^slow: closed/ } requests() }),
        'slow: the stand-in found the client not reading and closed');
    ok($s->closed_by_server(timeout => 5), 'slow: closed_by_server');
    my $n = () = $s->pending_events;
    my ($sent) = map { /after (\d+) bytes/ ? $1 : () } requests();
    ok($n > 0 && length($s->body) <= $sent,
        "slow: $n events read after the close, of $sent bytes sent");

    $s = FeedTest::SSE->open(port => $port, path => '/stream/hold',
        rcvbuf => 4096);
    ok(!$s->closed_by_server(timeout => 1),
        'hold: not closed_by_server while the server keeps it');
    ok($s->comments > 0, 'hold: the pings read meanwhile');
    $s->close;
}

# ------------------------------------------------- the npm eventsource --

SKIP: {
    my $why = FeedTest::SSE::node_missing();
    if ($why) {
        fail("npm eventsource: $why");
        skip $why, 6;
    }

    my $n = FeedTest::SSE::node_client(url => "$base/stream/drop",
        seconds => 8, dir => $dir);
    my @l = $n->wait_for(sub { grep { ($_->{id} // '') eq 'd3' } @_ }, 8);
    ok(@l, 'node: reconnected, got d3') or diag(explain([ $n->lines ]),
        $n->stderr);

    my @brief = map { join ' ', grep { defined } $_->{type}, $_->{id},
        defined $_->{data} ? "<$_->{data}>" : () } @l;
    is_deeply([ grep { !/^error/ } @brief ], [
        'open', 'update d1 <first>', "update d2 <second\nline>",
        'open', 'reset  <>', 'update d3 <resumed after d2>',
    ], 'node: events, reset without data not seen, reconnected')
        or diag(explain(\@l));
    ok((grep { $_->{type} eq 'error' && $_->{readyState} == 0 } @l),
        'node: an error when the server closed, reconnecting');
    is_deeply([ map { /last-event-id=(\S+)/ ? $1 : () }
        grep { m{^GET /stream/drop} } requests() ], [ '(none)', 'd2' ],
        'node: sent Last-Event-ID d2 on reconnection');

    $n->kill;

    $n = FeedTest::SSE::node_client(url => "$base/stream/busy",
        seconds => 2, dir => $dir);
    is($n->wait, 0, 'node: exits after its seconds');
    is_deeply([ map { [ $_->{type}, $_->{code}, $_->{readyState} ] }
        $n->lines ], [ [ 'error', 503, 2 ] ],
        'node: 503: an error, closed, no reconnection')
        or diag(explain([ $n->lines ]));
}

# ------------------------------------------------------ headless Chromium --

SKIP: {
    my $why = FeedTest::SSE::browser_missing();
    if ($why) {
        fail("browser: $why");
        skip $why, 4;
    }

    my $b = FeedTest::SSE::browser(url => "$base/page.html", seconds => 20,
        dir => $dir);
    my @l = $b->wait_for(sub { grep { ($_->{lastEventId} // '') eq 'b1' }
        @_ }, 15);
    ok(@l, 'browser: the page connected, got b1')
        or diag(substr($b->stderr, -3000));

    open my $go, '>', "$dir/browser-go" or die;
    close $go;
    @l = $b->wait_for(sub { grep { ($_->{lastEventId} // '') eq 'b2' } @_ },
        10);
    ok(@l, 'browser: got b2, sent after it connected')
        or diag(substr($b->stderr, -3000));

    is_deeply([ map { [ $_->{type}, $_->{lastEventId}, $_->{data} ] }
        grep { $_->{type} =~ /^(?:page|open|update)$/ } @l ], [
        [ 'page', undef, undef ], [ 'open', undef, undef ],
        [ 'update', 'b1', '{"n":"before"}' ],
        [ 'update', 'b2', qq({"n":"after"}\nsecond line) ],
    ], 'browser: what the page reported') or diag(explain(\@l));

    ok(grep({ m{^GET /stream/browser last-event-id=\(none\)} } requests()),
        'browser: its EventSource asked the stream');
    ok($t->wait_for(5, sub { grep { /^report: .*"lastEventId":"b2"/ }
        requests() }), 'browser: the page POSTed its reports too')
        or diag(join "\n", requests());

    $b->kill;
}

stop_server();
done_testing();
