package FeedTest::SSE;

# The clients of the live timelines' tests (GET /users/{uid}/timeline/stream,
# text/event-stream), t/sse_clients.t tests them against a stand-in server:
#
#   - this package: an SSE client in Perl, core modules only, that shows
#     what went on the wire (status, headers, chunked or not, comments);
#   - node_client(): the npm eventsource package (t/js/sse_client.mjs, make
#     sse-deps), what a JavaScript application would use, reconnects and
#     Last-Event-ID included;
#   - browser(): Debian's headless Chromium on a page of browser_page(), the
#     browser's own EventSource (make browser-deps).
#
#   my $s = FeedTest::SSE->open(port => $p,
#       path => '/users/ann/timeline/stream',
#       headers => { 'Last-Event-ID' => $id }, timeout => 5);
#   is($s->status, 200);
#   like($s->header('content-type'), qr{^text/event-stream});
#   my $ev = $s->next_event(timeout => 3);   # undef: none in time, or ended
#   is($ev->{event}, 'update'); is($ev->{id}, $post_id);
#   my $post = FeedTest::json_decode($ev->{data});
#
# An answer other than 200 is read whole: $s->body (dechunked).
#
# Parsing follows the WHATWG EventSource rules (HTML, "9.2.6 Interpreting
# an event stream"): lines end with CRLF, LF or CR; a leading BOM dropped; a
# line starting with ':' is a comment; "field: value" loses one space after
# the colon; a line without a colon is a field with an empty value; data
# lines are joined with "\n"; an id with a NUL is ignored; retry only when
# all digits; unknown fields ignored; an event not ended by a blank line
# when the stream ends is dropped.  One deviation, on purpose: the spec
# dispatches a block only when it had a data line, so "event: reset" then
# a blank line, with no "data:" line, is nothing to a browser or to the npm
# client; this client also returns such a block when its event type is not
# empty, so that a test can see what the server sent (and say, with the
# other clients, that it would be lost: send "data:" with every event).
#
# Data are kept as the bytes sent (UTF-8), ready for FeedTest::json_decode.

use strict;
use warnings;

use IO::Socket::INET;
use IO::Select;
use Socket qw(SOL_SOCKET SO_RCVBUF IPPROTO_TCP TCP_NODELAY
    pack_sockaddr_in inet_aton);
use Errno qw(EINTR EAGAIN EWOULDBLOCK EINPROGRESS);
use POSIX qw(WNOHANG);
use File::Temp qw(tempdir);
use JSON::PP ();
use Time::HiRes qw(time sleep);

my $ROOT = do {
    (my $d = __FILE__) =~ s{/t/lib/FeedTest/SSE\.pm$}{};
    $d = '.' if $d eq __FILE__;
    $d;
};

# ------------------------------------------------------------ the client --

# port, host (127.0.0.1), path, headers => {...}, timeout (5: to connect
# and to read the status line and headers), rcvbuf => bytes: SO_RCVBUF set
# before connect (the window stays that small), for a client that does not
# read.  Returns the client; status 0 and error when there was no answer.
sub open {
    my ($class, %o) = @_;

    my $host = $o{host} || '127.0.0.1';
    my $port = $o{port} or die "FeedTest::SSE->open: port needed\n";
    my $path = $o{path} || '/';
    my $timeout = $o{timeout} || 5;

    my $self = bless {
        status => 0, headers => {}, head => '', error => undef,
        rbuf => '', body => '', text => '', mode => 'close',
        ended => 0, eof => 0, reset => 0, bom_checked => 0, cr => 0,
        queue => [], data => undef, type => '', block_id => undef,
        block_retry => undef, last_id => '', retry => undef,
        comments => 0, last_comment => undef,
    }, $class;

    my $s = IO::Socket::INET->new(Proto => 'tcp')
        or return $self->_fail("socket: $!");
    if ($o{rcvbuf}) {
        setsockopt($s, SOL_SOCKET, SO_RCVBUF, $o{rcvbuf})
            or return $self->_fail("SO_RCVBUF: $!");
    }

    # connect with a timeout of our own: the option Timeout of
    # IO::Socket::INET needs PeerAddr, set before the socket exists
    $s->blocking(0);
    my $addr = pack_sockaddr_in($port, inet_aton($host));
    unless (connect($s, $addr)) {
        return $self->_fail("connect: $!") unless $! == EINPROGRESS;
        IO::Select->new($s)->can_write($timeout)
            or return $self->_fail('connect: timed out');
        my $err = getsockopt($s, SOL_SOCKET, Socket::SO_ERROR());
        $err = unpack('i', $err) if defined $err;
        return $self->_fail('connect: ' . ($! = $err)) if $err;
    }
    setsockopt($s, IPPROTO_TCP, TCP_NODELAY, 1);
    $self->{sock} = $s;

    my $h = $o{headers} || {};
    my $req = "GET $path HTTP/1.1\r\nHost: $host:$port\r\n";
    $req .= "Accept: text/event-stream\r\n"
        unless grep { lc eq 'accept' } keys %$h;
    $req .= "Cache-Control: no-cache\r\n"
        unless grep { lc eq 'cache-control' } keys %$h;
    $req .= "$_: $h->{$_}\r\n" for sort keys %$h;
    $req .= "\r\n";

    my $end = time + $timeout;
    while (length $req) {
        my $n = syswrite($s, $req);
        if (!defined $n) {
            return $self->_fail("write: $!")
                unless $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
            IO::Select->new($s)->can_write($end - time > 0 ? $end - time : 0)
                or return $self->_fail('write: timed out');
            next;
        }
        substr($req, 0, $n, '');
    }

    # the status line and the headers
    while (1) {
        if ($self->{rbuf} =~ /\r?\n\r?\n/) {
            my $i = $-[0];
            $self->{head} = substr($self->{rbuf}, 0, $i);
            substr($self->{rbuf}, 0, $+[0], '');
            last;
        }
        return $self->_fail('no complete response head'
            . ($self->{eof} ? ' before the connection closed'
                : " within ${timeout}s"))
            if $self->{eof} || !$self->_read($end);
    }

    $self->{head_done} = 1;
    my ($line, @lines) = split /\r?\n/, $self->{head};
    return $self->_fail("not an HTTP status line: $line")
        unless $line =~ m{^HTTP/(1\.[01]) (\d{3})};
    $self->{version} = $1;
    $self->{status} = $2 + 0;
    for (@lines) {
        next unless /^([^:\s]+):[ \t]*(.*?)[ \t]*$/;
        my $k = lc $1;
        $self->{headers}{$k} = exists $self->{headers}{$k}
            ? "$self->{headers}{$k}, $2" : $2;
    }

    my $te = $self->{headers}{'transfer-encoding'} // '';
    if ($te =~ /\bchunked\b/i) {
        $self->{mode} = 'chunked';
    } elsif (defined $self->{headers}{'content-length'}) {
        $self->{mode} = 'length';
        $self->{left} = $self->{headers}{'content-length'} + 0;
    }

    $self->_decode;

    # not a stream: the whole body
    if ($self->{status} != 200) {
        my $bend = time + $timeout;
        while (!$self->{ended}) {
            last unless $self->_read($bend);
        }
    }

    return $self;
}

sub _fail {
    my ($self, $err) = @_;
    $self->{error} = $err;
    $self->{ended} = 1;
    CORE::close $self->{sock} if $self->{sock};
    delete $self->{sock};
    return $self;
}

sub status { $_[0]{status} }
sub error { $_[0]{error} }
sub headers { $_[0]{headers} }
sub header { $_[0]{headers}{lc $_[1]} }
sub head { $_[0]{head} }

# the body received so far, dechunked (for a stream: all its text)
sub body { $_[0]{body} }

# 'chunked', 'length' (Content-Length) or 'close' (ends with the
# connection)
sub framing { $_[0]{mode} }
sub comments { $_[0]{comments} }
sub last_comment { $_[0]{last_comment} }

# the spec's last event ID: the last id field seen, kept across events
sub last_id { $_[0]{last_id} }

# the reconnection time the server last set (retry:), undef if never
sub retry { $_[0]{retry} }

# the body is over: its last chunk, its length, or the connection closed
sub ended { $_[0]{ended} }

# the connection was reset (ECONNRESET) rather than closed
sub reset_by_server { $_[0]{reset} }

sub close {
    my ($self) = @_;
    CORE::close $self->{sock} if $self->{sock};
    delete $self->{sock};
    $self->{ended} = 1;
    return 1;
}

sub DESTROY { my $s = $_[0]{sock}; CORE::close $s if $s }

# one read into rbuf, waiting until $end at most; false on timeout or end
sub _read {
    my ($self, $end) = @_;

    my $s = $self->{sock} or return 0;
    return 0 if $self->{eof};

    my $left = $end - time;
    $left = 0 if $left < 0;
    return 0 unless IO::Select->new($s)->can_read($left);

    my $n = sysread($s, my $buf, 65536);
    if (!defined $n) {
        return 1 if $! == EINTR || $! == EAGAIN || $! == EWOULDBLOCK;
        $self->{reset} = 1 if $!{ECONNRESET};
        $self->{read_error} = "$!";
        $n = 0;
    }
    if ($n == 0) {
        $self->{eof} = 1;
        $self->_decode;
        $self->{ended} = 1;
        return 0;
    }

    $self->{rbuf} .= $buf;
    $self->_decode;
    return 1;
}

# rbuf (as received) into text (the body), then text into events
sub _decode {
    my ($self) = @_;
    return unless $self->{head_done};
    my $new = '';

    if ($self->{mode} eq 'chunked') {
        while (!$self->{ended}) {
            if (!defined $self->{chunk}) {
                last unless $self->{rbuf} =~ s/^([0-9a-fA-F]+)[^\r\n]*\r?\n//;
                $self->{chunk} = hex $1;
                if ($self->{chunk} == 0) {
                    # the last chunk: trailers up to a blank line, ignored
                    $self->{ended} = 1;
                    last;
                }
            }
            my $take = length $self->{rbuf};
            $take = $self->{chunk} if $take > $self->{chunk};
            $new .= substr($self->{rbuf}, 0, $take, '');
            $self->{chunk} -= $take;
            last if $self->{chunk} > 0;
            last unless $self->{rbuf} =~ s/^\r?\n//;
            $self->{chunk} = undef;
        }
    } elsif ($self->{mode} eq 'length') {
        my $take = length $self->{rbuf};
        $take = $self->{left} if $take > $self->{left};
        $new = substr($self->{rbuf}, 0, $take, '');
        $self->{left} -= $take;
        $self->{ended} = 1 if $self->{left} == 0;
    } else {
        $new = $self->{rbuf};
        $self->{rbuf} = '';
    }

    $self->{body} .= $new;
    return unless $self->{status} == 200 && length $new;

    $self->{text} .= $new;
    $self->_parse;
}

# complete lines of text, as the spec reads them
sub _parse {
    my ($self) = @_;

    unless ($self->{bom_checked}) {
        return if length $self->{text} < 3
            && "\xEF\xBB\xBF" =~ /^\Q$self->{text}\E/ && !$self->{ended};
        $self->{text} =~ s/^\xEF\xBB\xBF//;
        $self->{bom_checked} = 1;
    }

    while (length $self->{text}) {
        # the LF of a CRLF whose CR ended the previous read
        if ($self->{cr}) {
            $self->{cr} = 0;
            substr($self->{text}, 0, 1, '') if substr($self->{text}, 0, 1)
                eq "\n";
            next;
        }
        last unless $self->{text} =~ /\r\n|\r|\n/;
        my ($at, $to, $eol) = ($-[0], $+[0], $&);
        my $line = substr($self->{text}, 0, $at);
        substr($self->{text}, 0, $to, '');
        # a CR last in the text: an LF may follow in the next read
        $self->{cr} = 1 if $eol eq "\r" && !length $self->{text};
        $self->_line($line);
    }
}

sub _line {
    my ($self, $line) = @_;

    if ($line eq '') {
        $self->_dispatch;
        return;
    }

    if (substr($line, 0, 1) eq ':') {
        $self->{comments}++;
        ($self->{last_comment} = substr($line, 1)) =~ s/^ //;
        return;
    }

    my ($field, $value) = ($line, '');
    if ((my $i = index($line, ':')) >= 0) {
        $field = substr($line, 0, $i);
        $value = substr($line, $i + 1);
        $value =~ s/^ //;
    }

    if ($field eq 'event') {
        $self->{type} = $value;
    } elsif ($field eq 'data') {
        push @{ $self->{data} }, $value;
    } elsif ($field eq 'id') {
        unless ($value =~ /\0/) {
            $self->{last_id} = $value;
            $self->{block_id} = $value;
        }
    } elsif ($field eq 'retry') {
        if ($value =~ /^[0-9]+$/) {
            $self->{retry} = $value + 0;
            $self->{block_retry} = $value + 0;
        }
    }
    # any other field is ignored
}

sub _dispatch {
    my ($self) = @_;

    # the spec: a block without data is not an event; here one with an
    # event type is, with data '' (see the top of this file)
    if ($self->{data} || length $self->{type}) {
        push @{ $self->{queue} }, {
            event => length $self->{type} ? $self->{type} : 'message',
            data => join("\n", @{ $self->{data} || [] }),
            id => $self->{block_id},
            last_event_id => $self->{last_id},
            retry => $self->{block_retry},
            has_data => $self->{data} ? 1 : 0,
        };
    }

    $self->{data} = undef;
    $self->{type} = '';
    $self->{block_id} = undef;
    $self->{block_retry} = undef;
}

# the next event: {event ('message' when the block had no event field),
# data (its lines joined with "\n"), id (the block's id field, undef
# without one), last_event_id (the spec's lastEventId: the last id so far),
# retry (the block's retry field, or undef), has_data (0: no data line,
# the deviation above)}; undef when none came within timeout (3 s), or
# when the stream ended first
sub next_event {
    my ($self, %o) = @_;

    my $end = time + ($o{timeout} // 3);
    while (1) {
        return shift @{ $self->{queue} } if @{ $self->{queue} };
        return undef if $self->{ended};
        return undef unless $self->_read($end) || @{ $self->{queue} };
    }
}

# events until $cb->($event, [events so far]) is true for one, the stream
# ended, or timeout (5 s) passed; returns those events, the one $cb took
# last (check it, or $s->matched: true when $cb took one)
sub events_until {
    my ($self, $cb, %o) = @_;

    my $end = time + ($o{timeout} // 5);
    my @got;
    $self->{matched} = 0;
    while (1) {
        my $left = $end - time;
        last if $left <= 0 && !@{ $self->{queue} };
        my $ev = $self->next_event(timeout => $left > 0 ? $left : 0)
            or last;
        push @got, $ev;
        if ($cb->($ev, \@got)) {
            $self->{matched} = 1;
            last;
        }
    }
    return @got;
}

sub matched { $_[0]{matched} }

# the events already received, without waiting
sub pending_events {
    my ($self) = @_;
    while ($self->{sock} && !$self->{eof}
        && IO::Select->new($self->{sock})->can_read(0))
    {
        $self->_read(time);
    }
    my @q = @{ $self->{queue} };
    $self->{queue} = [];
    return @q;
}

# true once the server ended the stream (closed the connection, or sent
# the last chunk) within timeout (5 s); what came meanwhile is kept for
# next_event
sub wait_closed {
    my ($self, %o) = @_;
    my $end = time + ($o{timeout} // 5);
    while (!$self->{ended}) {
        last unless $self->_read($end);
    }
    return $self->{ended} ? 1 : 0;
}

# for a client that did not read (rcvbuf => 4096): reads what the kernel
# holds and what the server still sends, and tells whether the server
# closed (or reset) the connection: true at its end, false when nothing
# came for idle (0.3 s) or timeout (2 s) passed
sub closed_by_server {
    my ($self, %o) = @_;
    my $end = time + ($o{timeout} // 2);
    my $idle = $o{idle} // 0.3;
    while (!$self->{ended}) {
        my $until = time + $idle;
        $until = $end if $until > $end;
        last unless $self->_read($until);
    }
    return $self->{eof} || ($self->{ended} && !$self->{error}) ? 1 : 0;
}

# ------------------------------------------------- the npm eventsource --

my $JS = "$ROOT/t/js";

# what node_client() needs: the command's error, or '' when it is there
sub node_missing {
    return 'node not found' unless -x '/usr/bin/node' || `which node`;
    return "$JS/node_modules/eventsource missing: make sse-deps"
        unless -d "$JS/node_modules/eventsource";
    return '';
}

# node t/js/sse_client.mjs $url $seconds in the background, its standard
# output to a file (dir => where, a new temporary directory otherwise);
# returns a handle: ->lines (each line printed so far, decoded: {type =>
# 'open'}, {type => 'error', ...}, {type => 'update', id, data,
# lastEventId}), ->wait_for(sub { ... }, timeout), ->wait (its exit
# status), ->kill
sub node_client {
    my (%o) = @_;

    my $url = $o{url} or die "node_client: url needed\n";
    my $dir = $o{dir} || tempdir('feed-sse-XXXXXX', TMPDIR => 1,
        CLEANUP => !$ENV{FEED_TEST_KEEP});
    my $n = ++$FeedTest::SSE::Proc::N;
    my $out = "$dir/node-sse-$n.out";
    my $err = "$dir/node-sse-$n.err";

    my @cmd = ('node', "$JS/sse_client.mjs", $url, $o{seconds} // 10);
    my $p = FeedTest::SSE::Proc->start(\@cmd, $out, $err, 'node');
    $p->{seconds} = $o{seconds} // 10;
    return $p;
}

# ------------------------------------------------------ headless Chromium --

our $CHROMIUM = $ENV{FEED_CHROMIUM} || '/usr/bin/chromium';

sub browser_missing {
    return -x $CHROMIUM ? '' : "$CHROMIUM missing: make browser-deps";
}

# the page for browser(): opens new EventSource($stream) and reports each
# open, error and event (types: message, update, delete, reset, or
# events => [...]) as one JSON object {type, data, lastEventId,
# readyState}: on the console, which browser() reads from Chromium's
# stderr, and, given report => URL, POSTed there too (text/plain: a simple
# request, no CORS preflight, so any origin will do) for a server to log
sub browser_page {
    my (%o) = @_;
    my $stream = $o{stream} || '/users/ann/timeline/stream';
    my $report = $o{report} // '';
    my @types = @{ $o{events} || [qw(message update delete reset)] };

    my $js = JSON::PP->new->ascii;
    my $cfg = $js->encode({ stream => $stream, report => $report,
        types => \@types });

    return <<"EOF";
<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>feed stream</title></head>
<body><pre id="log"></pre><script>
var cfg = $cfg;
function report(o) {
    var line = JSON.stringify(o);
    console.log('FEEDSSE ' + line);
    document.getElementById('log').textContent += line + '\\n';
    if (cfg.report) {
        fetch(cfg.report, { method: 'POST', body: line, mode: 'no-cors',
            keepalive: true }).catch(function () {});
    }
}
var es = new EventSource(cfg.stream);
es.onopen = function () { report({ type: 'open' }); };
es.onerror = function () {
    report({ type: 'error', readyState: es.readyState });
};
cfg.types.forEach(function (t) {
    es.addEventListener(t, function (e) {
        report({ type: e.type, data: e.data, lastEventId: e.lastEventId });
    });
});
report({ type: 'page' });
</script></body></html>
EOF
}

# the page written to a file (file => path, and browser_page's options),
# for nginx to serve from a root: location = /page.html { root ...; }
# (a "return 200 '...'" would need the page's quotes escaped)
sub browser_page_file {
    my (%o) = @_;
    my $file = delete $o{file} or die "browser_page_file: file needed\n";
    CORE::open(my $fh, '>', $file) or die "$file: $!\n";
    print $fh browser_page(%o);
    CORE::close $fh;
    return $file;
}

# Chromium headless on $url for $seconds (or until ->kill), a profile of
# its own in dir (a new temporary directory otherwise); the handle's
# ->lines are what the page reported (browser_page), read from Chromium's
# console log on its stderr
sub browser {
    my (%o) = @_;

    my $url = $o{url} or die "browser: url needed\n";
    my $dir = $o{dir} || tempdir('feed-sse-XXXXXX', TMPDIR => 1,
        CLEANUP => !$ENV{FEED_TEST_KEEP});
    my $n = ++$FeedTest::SSE::Proc::N;
    my $profile = "$dir/chromium-$n";
    mkdir $profile;

    # --headless (the new headless mode in this Chromium); the flags off
    # the network: this machine has none, and Chromium would try Google's
    # hosts at every start; --enable-logging=stderr puts console.log on
    # stderr ("INFO:CONSOLE"), the page's reports
    my @cmd = ($CHROMIUM, '--headless', '--disable-gpu',
        ($> == 0 ? '--no-sandbox' : ()),
        '--disable-dev-shm-usage', '--disable-quic', '--no-first-run',
        '--no-default-browser-check', '--disable-background-networking',
        '--disable-component-update', '--disable-sync',
        '--disable-extensions', '--mute-audio', '--disable-crash-reporter',
        '--enable-logging=stderr', '--v=0',
        "--user-data-dir=$profile", $url);

    my $p = FeedTest::SSE::Proc->start(\@cmd, "$dir/chromium-$n.out",
        "$dir/chromium-$n.err", 'browser');
    $p->{seconds} = $o{seconds} // 10;
    $p->{deadline} = time + $p->{seconds};
    return $p;
}

package FeedTest::SSE::Proc;

# a client started by node_client or browser: its own process group, its
# output in files

use strict;
use warnings;
use POSIX qw(WNOHANG);
use JSON::PP ();
use Time::HiRes qw(time sleep);

our $N = 0;
my %LIVE;

sub start {
    my ($class, $cmd, $out, $err, $kind) = @_;

    my $pid = fork() // die "fork: $!\n";
    if ($pid == 0) {
        setpgrp(0, 0);
        open STDIN, '<', '/dev/null';
        open STDOUT, '>', $out or POSIX::_exit(126);
        open STDERR, '>', $err or POSIX::_exit(126);
        exec @$cmd or POSIX::_exit(127);
    }

    my $self = bless { owner => $$, pid => $pid, out => $out, err => $err,
        kind => $kind, cmd => $cmd }, $class;
    $LIVE{$pid} = $self;
    return $self;
}

sub pid { $_[0]{pid} }
sub out_file { $_[0]{out} }
sub err_file { $_[0]{err} }

sub _slurp {
    my ($f) = @_;
    CORE::open(my $fh, '<', $f) or return '';
    local $/;
    return <$fh> // '';
}

sub stdout { _slurp($_[0]{out}) }
sub stderr { _slurp($_[0]{err}) }

# what it printed so far, decoded: one hash a line (a line cut short, not
# yet ended by its newline, is left for the next call); for the browser,
# the page's reports out of Chromium's console log:
#   [pid:tid:date:INFO:CONSOLE:line] "FEEDSSE {...}", source: URL (line)
sub lines {
    my ($self) = @_;
    my @out;
    if ($self->{kind} eq 'browser') {
        for (split /\n/, $self->stderr) {
            next unless /:INFO:CONSOLE[^\]]*\] "FEEDSSE (.*)", source: /;
            my $j = eval { JSON::PP->new->decode($1) } or next;
            push @out, $j;
        }
        return @out;
    }
    my $text = $self->stdout;
    $text =~ s/[^\n]*\z//;
    for (split /\n/, $text) {
        my $j = eval { JSON::PP->new->decode($_) };
        push @out, $j // { type => 'unparsed', line => $_ };
    }
    return @out;
}

# polls lines() until $cb->(@lines) is true or timeout (5 s) passed;
# returns the lines when true, an empty list otherwise
sub wait_for {
    my ($self, $cb, $timeout) = @_;
    my $end = time + ($timeout // 5);
    while (1) {
        my @l = $self->lines;
        return @l if $cb->(@l);
        return () if time > $end;
        sleep 0.05;
    }
}

sub running {
    my ($self) = @_;
    return 0 if defined $self->{status};
    my $r = waitpid($self->{pid}, WNOHANG);
    return 1 if $r == 0;
    $self->{status} = $?;
    delete $LIVE{$self->{pid}};
    return 0;
}

# waits for its exit (timeout: its seconds and 5 more, or 10 s); the exit
# status ($?), or undef if it still runs
sub wait {
    my ($self, $timeout) = @_;
    my $end = time + ($timeout // ($self->{seconds} // 5) + 5);
    while ($self->running) {
        return undef if time > $end;
        sleep 0.05;
    }
    return $self->{status};
}

# TERM to its process group (Chromium's helpers with it), KILL after 3 s
sub kill {
    my ($self) = @_;
    return $self->{status} unless $self->running;
    CORE::kill('TERM', -$self->{pid});
    my $end = time + 3;
    while ($self->running) {
        if (time > $end) {
            CORE::kill('KILL', -$self->{pid});
            waitpid($self->{pid}, 0);
            $self->{status} = $?;
            delete $LIVE{$self->{pid}};
            last;
        }
        sleep 0.05;
    }
    # what the group left (Chromium's zygote may outlive the browser)
    CORE::kill('KILL', -$self->{pid});
    return $self->{status};
}

# a test that ends, or dies, leaves none running
END {
    my $rc = $?;
    $_->kill for grep { $_->{owner} == $$ } values %LIVE;
    $? = $rc;
}

1;
