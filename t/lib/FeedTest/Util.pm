package FeedTest::Util;

# Helpers shared by the test files: summaries of responses for diagnostics,
# JSON type checks, the shape of posts and timeline pages, requests in
# flight together, /status of the workers, /metrics parsed, Redis calls,
# and the fanout's stream, group and cached timelines.  Those that need the
# harness take the FeedTest instance first.  Those that assert report the
# caller's line.

use strict;
use warnings;

use Exporter qw(import);
use B ();
use JSON::PP ();
use Test::More;
use Time::HiRes ();

our @EXPORT_OK = qw(
    $STREAM $GROUP $HIT
    short enc is_hit now_ms is_str json_int tag dupes summary first_diff
    is_error post_problems tl_uri tl_page_problems
    status_all statuses fsum
    parallel failed_answers follow_each read_each none_failed
    post post_start post_end post_end_tagged
    rd tl_key copies copies_summary all_n group_info wait_settled
    tl_ids tl_walk tl_walk_is tl_firsts tl_firsts_are
    node_counts node_moved node_moved_is node_acked
    workers_up server_conf behind_proxy metrics_scrape metrics_val seen_held
    read_state_is entry_id entry_json entry_of post_key
    seed_chunks ids_page ids_once mongo_log_size chunk_finds
);

# the posts' stream and the fanout's consumer group (the defaults)
our $STREAM = 'feed:posts';
our $GROUP = 'feed';

# a hit: from Redis (HIT) or from the worker's copy that Redis tracks
# (LOCAL, feed_cache_tracking); tests that mean the round trip itself say
# HIT, or turn tracking off
our $HIT = qr/^(?:HIT|LOCAL)\z/;

my $OID = qr/^[0-9a-f]{24}\z/;

my $JSON = JSON::PP->new->utf8->canonical;

# ---------------------------------------------------- values and responses --

# a response on one line: status, error, time taken, the headers that
# matter here, the body's first 300 bytes
sub short {
    my ($r) = @_;
    my $h = $r->{headers} || {};
    my $b = defined $r->{body} ? $r->{body} : '';
    $b = substr($b, 0, 300) . '...' if length $b > 300;
    return "status $r->{status}"
        . ($r->{error} ? " ($r->{error})" : '')
        . sprintf(' (%.3fs)', $r->{elapsed} // 0)
        . ', content-type ' . ($h->{'content-type'} // '(none)')
        . ', x-feed-cache ' . ($h->{'x-feed-cache'} // '(none)')
        . (defined $h->{'retry-after'}
            ? ", retry-after $h->{'retry-after'}" : '')
        . ($h->{location} ? ", location $h->{location}" : '')
        . ($h->{link} ? ", link $h->{link}" : '')
        . ", body: $b";
}

sub enc { $JSON->encode($_[0]) }

# true when a response (or its X-Feed-Cache value) is a hit: HIT or LOCAL
sub is_hit {
    my ($r) = @_;
    my $v = ref $r ? $r->{headers}{'x-feed-cache'} : $r;
    return defined $v && $v =~ $HIT;
}

sub now_ms { Time::HiRes::time() * 1000 }

sub is_str { defined $_[0] && !ref $_[0] && length $_[0] }

# a JSON integer as decoded (IV/NV, never a string): check before any use
sub json_int {
    my ($v) = @_;
    return 0 unless defined $v && !ref $v;
    my $f = B::svref_2object(\$v)->FLAGS;
    return 0 unless $f & (B::SVp_IOK | B::SVp_NOK);
    return 0 if $f & B::SVp_POK;
    return $v == int($v);
}

# a decoded JSON value with its JSON types made explicit, so that is_deeply
# tells 1 from "1" from true; to be taken before anything stringifies it
sub tag {
    my ($v) = @_;
    return 'null' unless defined $v;
    return 'bool:' . ($v ? 'true' : 'false') if JSON::PP::is_bool($v);
    return { map { $_ => tag($v->{$_}) } keys %$v } if ref $v eq 'HASH';
    return [ map { tag($_) } @$v ] if ref $v eq 'ARRAY';
    return 'ref:' . ref $v if ref $v;
    my $f = B::svref_2object(\$v)->FLAGS;
    return 'str:' . $v if $f & B::SVp_POK;
    return 'num:' . (0 + $v);
}

# the values given more than once
sub dupes {
    my %n;
    $n{$_}++ for @_;
    return sort grep { $n{$_} > 1 } keys %n;
}

sub first_diff {
    my ($got, $want) = @_;
    for my $i (0 .. ($#$got > $#$want ? $#$got : $#$want)) {
        my ($g, $w) = ($got->[$i] // '(none)', $want->[$i] // '(none)');
        return "first difference at $i: got $g, want $w" if $g ne $w;
    }
    return 'no difference';
}

# how two lists of ids differ, for a diagnostic
sub summary {
    my ($got, $want) = @_;
    my %w = map { $_ => 1 } @$want;
    my %g = map { $_ => 1 } @$got;
    my @extra = grep { !$w{$_} } @$got;
    my @missing = grep { !$g{$_} } @$want;
    my @d = dupes(@$got);
    return sprintf('got %d, want %d; %d missing (%s), %d unexpected (%s), '
        . '%d twice (%s); %s', scalar @$got, scalar @$want,
        scalar @missing, join(' ', grep defined, @missing[0 .. 4]),
        scalar @extra, join(' ', grep defined, @extra[0 .. 4]),
        scalar @d, join(' ', grep defined, @d[0 .. 4]),
        first_diff($got, $want));
}

# a JSON error with this status and code (code undef: any)
sub is_error {
    my ($r, $status, $code, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $ok = $r->{status} == $status
        && ($r->{headers}{'content-type'} // '') =~ m{^application/json}
        && ref $r->{json} eq 'HASH'
        && is_str($r->{json}{error})
        && (!defined $code || $r->{json}{error} eq $code)
        && is_str($r->{json}{message});
    ok($ok, "$name: $status " . ($code // 'JSON error') . ' {error, message}')
        or diag(short($r));
    return $ok;
}

# ------------------------------------------------------- posts, timelines --

# the shape of a post as the API returns it; returns a list of problems.
# author => the author it must have (else: any string); from, to => the
# request's time (ms): ts within it, give or take 3 s
sub post_problems {
    my ($j, %w) = @_;
    my @p;

    return ('not a JSON object') unless ref $j eq 'HASH';

    my @extra = grep { !/^(id|author|body|ts|data)$/ } sort keys %$j;
    push @p, "unexpected fields: @extra" if @extra;
    push @p, 'ts is not a JSON integer' unless json_int($j->{ts});
    push @p, 'id is not 24 lowercase hex: ' . ($j->{id} // 'none')
        unless is_str($j->{id}) && $j->{id} =~ $OID;
    if (defined $w{author}) {
        push @p, 'author is ' . ($j->{author} // 'none')
            . ", want $w{author}"
            unless is_str($j->{author}) && $j->{author} eq $w{author};
    } else {
        push @p, 'author is not a string' unless is_str($j->{author});
    }
    push @p, 'body is not a non-empty string'
        unless is_str($j->{body});
    push @p, 'data is present but not an object'
        if exists $j->{data} && ref $j->{data} ne 'HASH';
    if (defined $w{from} && json_int($j->{ts})) {
        push @p, sprintf('ts %s not within the request (%.0f .. %.0f)',
            $j->{ts}, $w{from}, $w{to})
            if $j->{ts} < $w{from} - 3000 || $j->{ts} > $w{to} + 3000;
    }

    return @p;
}

sub tl_uri {
    my ($uid, %q) = @_;
    my @q = map { "$_=$q{$_}" }
        grep { defined $q{$_} } qw(limit max_id since_id unseen);
    return "/users/$uid/timeline" . (@q ? '?' . join('&', @q) : '');
}

# the shape of one home timeline page; returns a list of problems
sub tl_page_problems {
    my ($r, $uid, $limit) = @_;
    my @p;

    return ('not 200: ' . short($r)) unless $r->{status} == 200;
    push @p, 'content-type ' . ($r->{headers}{'content-type'} // '(none)')
        unless ($r->{headers}{'content-type'} // '') =~ m{^application/json}i;
    my $j = $r->{json};
    return (@p, 'not a JSON object: ' . short($r)) unless ref $j eq 'HASH';
    return (@p, 'items is not an array: ' . short($r))
        unless ref $j->{items} eq 'ARRAY';
    my @extra = grep { !/^(items|next)$/ } sort keys %$j;
    push @p, "unexpected fields: @extra" if @extra;

    my $n = 0;
    for my $it (@{$j->{items}}) {
        push @p, map { "item $n: $_" } post_problems($it);
        $n++;
    }
    my @ids = map { ref $_ eq 'HASH' ? $_->{id} // '' : '' } @{$j->{items}};
    for my $i (1 .. $#ids) {
        push @p, "item $i ($ids[$i]) not older than item " . ($i - 1)
            . " ($ids[$i-1])" unless $ids[$i] lt $ids[$i - 1];
    }
    push @p, scalar(@ids) . " items, more than limit $limit"
        if @ids > $limit;

    my $cache = $r->{headers}{'x-feed-cache'} // '';
    push @p, "X-Feed-Cache '$cache'"
        unless $cache =~ /^(HIT|MISS|DEEP|BYPASS|LOCAL)$/;

    if (!exists $j->{next}) {
        push @p, 'no next field';
    } elsif (defined $j->{next}) {
        push @p, "next '$j->{next}' is not a post id"
            unless is_str($j->{next}) && $j->{next} =~ $OID;
        my $link = $r->{headers}{link} // '';
        if ($link =~ /^\s*<([^>]*)>\s*;\s*rel="?next"?\s*$/) {
            my $u = $1;
            push @p, "Link <$u> is not for /users/$uid/timeline"
                unless $u =~ m{^(?:https?://[^/]+)?/users/\Q$uid\E/timeline\?};
            push @p, "Link <$u> has not max_id=$j->{next}"
                unless $u =~ /[?&]max_id=\Q$j->{next}\E(&|$)/;
            push @p, "Link <$u> has not limit=$limit"
                unless $u =~ /[?&]limit=\Q$limit\E(&|$)/
                    || ($limit == 20 && $u !~ /[?&]limit=/);
        } else {
            push @p, "next is not null but no Link rel=next: '$link'";
        }
    } else {
        push @p, "next is null but a Link header: $r->{headers}{link}"
            if defined $r->{headers}{link};
    }
    push @p, 'response: ' . short($r) if @p;
    return @p;
}

# the ids of a timeline page's items ([] when it has none)
sub tl_ids {
    my ($r) = @_;
    return [] unless ref $r->{json} eq 'HASH'
        && ref $r->{json}{items} eq 'ARRAY';
    return [ map { ref $_ eq 'HASH' ? $_->{id} // '' : '' }
        @{ $r->{json}{items} } ];
}

# the pages of $uid's home timeline from the first to the one whose next
# is null, each reached by its predecessor's Link header: the ids and the
# items (tag()ged) of all pages, X-Feed-Cache of each page, and the pages'
# problems (tl_page_problems; more pages than $o{most}, 200 by default).
# $o{unseen}: pages with unseen=1, whose Link must keep it
sub tl_walk {
    my ($t, $uid, $limit, %o) = @_;
    my $w = { ids => [], items => [], caches => [], problems => [] };
    my $uri = tl_uri($uid, limit => $limit, unseen => $o{unseen});

    while (defined $uri) {
        if (@{$w->{caches}} >= ($o{most} || 200)) {
            push @{$w->{problems}}, "more than $o{most} pages";
            last;
        }
        my $r = $t->get($uri);
        my @p = tl_page_problems($r, $uid, $limit);
        push @p, "Link without unseen=1: $r->{headers}{link}"
            if $o{unseen} && defined $r->{headers}{link}
                && $r->{headers}{link} !~ /[?&]unseen=1[&>]/;
        if (@p) {
            push @{$w->{problems}}, map { "$uri: $_" } @p;
            last;
        }
        push @{$w->{caches}}, $r->{headers}{'x-feed-cache'};
        push @{$w->{items}}, @{ tag($r->{json})->{items} };
        push @{$w->{ids}}, @{ tl_ids($r) };
        $uri = defined $r->{json}{next}
            ? ($r->{headers}{link} =~ /<(?:https?:\/\/[^\/]+)?([^>]*)>/)[0]
            : undef;
    }
    return $w;
}

# a walk of every page (tl_walk, with %o) checked: every post of @$want
# once, in order, every page but the last full; the pages' X-Feed-Cache
# counted
sub tl_walk_is {
    my ($t, $uid, $limit, $want, $name, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $w = tl_walk($t, $uid, $limit, most => 100, %o);
    my $n = scalar @{ $w->{ids} };
    Test::More::ok(!@{ $w->{problems} }, "$name: pages well formed")
        or Test::More::diag(join "\n", @{ $w->{problems} }[0 .. 2]);

    # full pages: as few as the posts need (the last one may be empty)
    my $pages = @{ $w->{caches} };
    my $full = int(($n + $limit - 1) / $limit);
    Test::More::ok($pages == $full
        || ($pages == $full + 1 && $n % $limit == 0),
        "$name: $pages pages of $limit for $n posts, all full but the last");
    Test::More::is(join(' ', @{ $w->{ids} }), join(' ', @$want),
        "$name: every visible post once, newest first ($n)")
        or Test::More::diag(first_diff($w->{ids}, $want) . '; pages: '
            . join(', ', map { $_ // '' } @{ $w->{caches} }));
    my %c;
    $c{$_ // ''}++ for @{ $w->{caches} };
    return \%c;
}

# a user's first page, $n times, 4 at a time (both workers of a node),
# $query added ('&unseen=1'): [status, X-Feed-Cache, ids, body] each
sub tl_firsts {
    my ($t, $uid, $n, $limit, $query) = @_;
    my @r = parallel($t, 4, map { [ 'GET',
        "/users/$uid/timeline?limit=" . ($limit || 10) . ($query // '') ] }
        1 .. $n);
    return map { [ $_->{status}, $_->{headers}{'x-feed-cache'} // '',
        join(' ', @{ tl_ids($_) }), $_->{body} ] } @r;
}

# 12 first pages of 10 ($query added) are the newest of @$want, each
# X-Feed-Cache $cache when given: a string, or a pattern ($HIT: hits)
sub tl_firsts_are {
    my ($t, $uid, $want, $cache, $name, $query) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $w = join ' ', grep { defined } @$want[0 .. 9];
    my @bad = grep { $_->[0] != 200 || $_->[2] ne $w
        || ($cache && (ref $cache ? $_->[1] !~ $cache : $_->[1] ne $cache)) }
        tl_firsts($t, $uid, 12, 10, $query);
    my $label = !$cache ? '' : ref $cache
        ? ($cache == $HIT ? 'hits' : "$cache") . ', ' : "$cache, ";
    Test::More::ok(!@bad, "$name: 12 first pages of 10, $label"
        . 'as visible')
        or Test::More::diag("got $bad[0][0] $bad[0][1] $bad[0][2]\nwant $w\n"
            . substr($bad[0][3] // '', 0, 300));
}

# a configuration of conf/ as behind a proxy on this host: nginx takes the
# client's address from the X-Forwarded-For of requests from 127.0.0.1
# (the realip module), so that a test's request comes from the address it
# names there; each of @trusted added to the trusted addresses of the
# rate limits' geo block
sub behind_proxy {
    my ($conf, @trusted) = @_;
    my $realip = "    set_real_ip_from 127.0.0.1;\n"
        . "    real_ip_header X-Forwarded-For;\n";
    $conf =~ s/^(http \{\n)/$1$realip/m
        or die "behind_proxy: no http block\n";
    for my $addr (@trusted) {
        $conf =~ s/^([ \t]*)(# trusted\n)/$1$2$1$addr 0;\n/m
            or die "behind_proxy: no trusted addresses in the geo block\n";
    }
    return $conf;
}

# the http server most tests run: the graph, posts, timelines (with
# X-Feed-Cache), the fallback (internal unless open => 1) and /status
sub server_conf {
    my (%o) = @_;
    my $conf = <<'EOF';
    server {
        listen 127.0.0.1:%%PORT_HTTP%% reuseport;
        location ~ ^/users/([^/]+)/following/([^/]+)$ { feed_follow $1 $2; }
        location ~ ^/users/([^/]+)/posts$ { feed_posts $1; }
        location ~ ^/users/([^/]+)/posts/([^/]+)$ { feed_user_post $1 $2; }
        location ~ ^/users/([^/]+)/timeline$ {
            feed_timeline $1;
            add_header X-Feed-Cache $feed_cache_status always;
        }
        location /_feed/timeline {
            internal;
            subrequest_output_buffer_size 16m;
            feed_timeline_source;
        }
        location = /status { feed_status; }
    }
EOF

    # open => 1: the fallback may be asked directly too
    $conf =~ s/^\s*internal;\n//m if $o{open};
    return $conf;
}

# ----------------------------------------------------------------- status --

# the node's counters in /status (all the workers together), flat:
# "requests", "fanout.deliveries", "pull.listed", ...; {} without an answer
sub node_counts {
    my ($t) = @_;
    my $j = $t->get('/status', timeout => 5)->{json};
    my $n = ref $j eq 'HASH' && ref $j->{node} eq 'HASH' ? $j->{node} : {};
    my %c;
    for my $k (keys %$n) {
        if (ref $n->{$k} eq 'HASH') {
            $c{"$k.$_"} = $n->{$k}{$_}
                for grep { !ref $n->{$k}{$_} } keys %{ $n->{$k} };
        } elsif (!ref $n->{$k}) {
            $c{$k} = $n->{$k};
        }
    }
    return \%c;
}

# how far each counter moved since node_counts() answered $c0
sub node_moved {
    my ($t, $c0) = @_;
    my $c = node_counts($t);
    return { map { $_ => ($c->{$_} // 0) - ($c0->{$_} // 0) } keys %$c };
}

# a test: the counters of %$want moved by as much since $c0, no more
sub node_moved_is {
    my ($t, $c0, $want, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $d = node_moved($t, $c0);
    is_deeply({ map { $_ => $d->{$_} // 0 } keys %$want }, $want,
        "$name: node " . join(', ', map { "$_ +$want->{$_}" }
            sort keys %$want)) or diag('moved: ' . $JSON->encode($d));
}

# a test: every stream entry fanned out and acknowledged, and the node's
# fanout.acked $n more than in $c0 (it moves a hair after the XACK)
sub node_acked {
    my ($t, $c0, $n, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    wait_settled($t, $name);
    ok($t->wait_for(3, sub { node_moved($t, $c0)->{'fanout.acked'} >= $n }),
        "$name: $n entries acknowledged (node fanout.acked)")
        or diag($JSON->encode(node_counts($t)));
}

# $n workers answer /status, each with Redis and MongoDB up, reading the
# stream
sub workers_up {
    my ($t, $n) = @_;
    my $st = statuses($t);
    return keys %$st == $n && !grep {
        !($_->{redis}{up} && $_->{mongo}{up} && $_->{fanout}{reading})
    } values %$st;
}

# true when $what (redis, mongo) is up in every answer to $o{tries} (6)
# requests for /status, spread over the workers; up => 0: down in every one
sub status_all {
    my ($t, $what, %o) = @_;
    my $up = $o{up} // 1;
    for (1 .. ($o{tries} || 6)) {
        my $j = $t->get('/status', timeout => $o{timeout} || 5)->{json}
            or return 0;
        return 0 unless $j->{$what} && !!$j->{$what}{up} == !!$up;
    }
    return 1;
}

# /status of every worker (pid => JSON): reuseport spreads the
# connections, so a few dozen requests reach them all.  verbose => 1: a
# diag naming the workers not reached (old ones shutting down never are)
sub statuses {
    my ($t, %o) = @_;
    my %want = map { $_ => 1 } $t->worker_pids;
    my %got;
    for (1 .. 200) {
        my $j = $t->get('/status', timeout => 5)->{json};
        $got{$j->{pid}} = $j if ref $j eq 'HASH' && $want{$j->{pid} // 0};
        return \%got if keys %got == keys %want;
    }
    diag('status: reached workers ' . join(' ', sort keys %got)
        . ' of ' . join(' ', sort keys %want)) if $o{verbose};
    return \%got;
}

# a fanout counter summed over the workers of statuses()
sub fsum {
    my ($st, $k) = @_;
    my $s = 0;
    $s += $_->{fanout}{$k} // 0 for values %$st;
    return $s;
}

# ---------------------------------------------------------------- metrics --

# /metrics parsed by Prometheus' own parser (Debian's
# python3-prometheus-client), not by patterns
my $PROM_PARSE = <<'PY';
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    out.append({'name': f.name, 'type': f.type, 'help': f.documentation,
                'samples': [[s.name, s.labels, s.value] for s in f.samples]})
print(json.dumps(out))
PY

# a scrape of $uri (/metrics), parsed: { status, type, fams => [{ name,
# type, help, samples => [[name, labels, value], ...] }, ...], error }
sub metrics_scrape {
    my ($t, $uri) = @_;
    my $r = $t->get($uri // '/metrics', timeout => 5);
    my $m = { status => $r->{status},
        type => $r->{headers}{'content-type'} // '', fams => [] };
    return { %$m, error => short($r) } if $r->{status} != 200;

    my $f = $t->dir . '/scrape.txt';
    open my $fh, '>', $f or die "$f: $!\n";
    print $fh $r->{body};
    close $fh;

    my $py = $t->dir . '/parse.py';
    unless (-e $py) {
        open my $ph, '>', $py or die "$py: $!\n";
        print $ph $PROM_PARSE;
        close $ph;
    }

    my $out = `/usr/bin/python3 '$py' '$f' 2>&1`;
    return { %$m, error => "parser: $out" } if $?;
    $m->{fams} = eval { $JSON->decode($out) }
        or return { %$m, error => "parser output: $out" };
    return $m;
}

# a sample's value in a scrape: name, then its labels; undef when absent
sub metrics_val {
    my ($m, $name, %labels) = @_;
    for my $f (@{$m->{fams}}) {
        SAMPLE: for my $s (@{$f->{samples}}) {
            next unless $s->[0] eq $name
                && keys %{$s->[1]} == keys %labels;
            for (keys %labels) {
                next SAMPLE unless ($s->[1]{$_} // '') eq $labels{$_};
            }
            return $s->[2];
        }
    }
    return undef;
}

# --------------------------------------------------- requests in parallel --

# requests, $batch at a time: [method, uri, body, {headers}] (a body is
# JSON); the responses in order
sub parallel {
    my ($t, $batch, @reqs) = @_;
    my @res;
    while (my @b = splice(@reqs, 0, $batch)) {
        my @h = map {
            $t->http_start($_->[0], $_->[1],
                defined $_->[2] ? (body => $_->[2]) : (),
                headers => {
                    defined $_->[2]
                        ? ('Content-Type' => 'application/json') : (),
                    %{$_->[3] || {}} })
        } @b;
        push @res, map { $t->http_end($_) } @h;
    }
    return @res;
}

# "$keys->[$i]: <response>" for each of @res not answered $status
sub failed_answers {
    my ($status, $keys, @res) = @_;
    return map { "$keys->[$_]: " . short($res[$_]) }
        grep { $res[$_]{status} != $status } 0 .. $#res;
}

# each of @users follows $target, 50 at a time; the failures (not 204)
sub follow_each {
    my ($t, $target, @users) = @_;
    my @res = parallel($t, 50,
        map { [ 'PUT', "/users/$_/following/$target" ] } @users);
    return failed_answers(204, \@users, @res);
}

# reads each user's timeline once, 50 at a time: their cache exists
# afterwards; the responses (an array), then the failures (not 200)
sub read_each {
    my ($t, @users) = @_;
    my @res = parallel($t, 50, map { [ 'GET', "/users/$_/timeline" ] }
        @users);
    return (\@res, failed_answers(200, \@users, @res));
}

# a test that none of a batch failed: how many did, and the first
sub none_failed {
    my ($bad, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    ok(!@$bad, $name) or diag(scalar(@$bad) . " failed, first: $bad->[0]");
    return !@$bad;
}

# ------------------------------------------------------------------ posts --

# starts a post by $uid (with $data when given); post_end() collects it
sub post_start {
    my ($t, $uid, $body, $data) = @_;
    return $t->http_start('POST', "/users/$uid/posts",
        body => $JSON->encode({ body => $body,
            defined $data ? (data => $data) : () }),
        headers => { 'Content-Type' => 'application/json' });
}

# the new post's id; nothing unless a 201 with an id: then a failed test
# "$name: 201 with an id" (only a diag with quiet => 1) and the response.
# keep => \%posts: the 201's JSON kept in it by id
sub post_end {
    my ($t, $h, $name, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $r = $t->http_end($h);
    if ($r->{status} == 201 && ref $r->{json} eq 'HASH'
        && ($r->{json}{id} // '') =~ $OID)
    {
        $o{keep}{$r->{json}{id}} = $r->{json} if $o{keep};
        return $r->{json}{id};
    }
    if ($o{quiet}) {
        diag("$name: " . short($r));
    } else {
        fail("$name: 201 with an id");
        diag(short($r));
    }
    return;
}

# post_end(), with the 201 tag()ged: (id, tag), or nothing
sub post_end_tagged {
    my ($t, $h, $name) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my %keep;
    my $id = post_end($t, $h, $name, keep => \%keep) or return;
    return ($id, tag($keep{$id}));
}

# a post by $uid, {"body": $body}: as post_end()
sub post {
    my ($t, $uid, $body, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    return post_end($t, post_start($t, $uid, $body), "post by $uid", %o);
}

# ------------------------------------------------------------ read state --

# the read-state locations of conf/nginx.conf (docs/timeline.md), on a
# configuration of conf/: $uid hides its newest post (left out of the
# first page, in its list) and shows it again; sets its read marker at
# the third newest (GET answers it); GET .../unread counts 2, and a first
# page says X-Feed-Unread: 2; sends the newest as seen (a page with
# unseen=1 begins with the second, a plain one with it).  @$ids: the
# newest posts of $uid's home timeline, newest first, at least 3, none
# hidden nor seen, and no marker yet.  %o: port, and headers for every
# request (an identity).  A location missing answers 404: each step fails.
sub read_state_is {
    my ($t, $uid, $ids, $name, %o) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $req = sub {
        my ($method, $uri, $body) = @_;
        my %h = (%{ $o{headers} || {} },
            defined $body ? ('Content-Type' => 'application/json') : ());
        return $t->http($method, $uri, headers => \%h,
            defined $body ? (body => enc($body)) : (),
            $o{port} ? (port => $o{port}) : ());
    };
    my $first = sub {
        my $r = $req->('GET', "/users/$uid/timeline?limit=3$_[0]");
        return ($r, $r->{status} == 200 ? tl_ids($r)->[0] // '' : '');
    };
    my ($new, $mark) = @$ids[0, 2];
    my ($r, $top);

    $r = $req->('PUT', "/users/$uid/hidden/$new");
    ($top) = ($first->(''))[1];
    my $l = $req->('GET', "/users/$uid/hidden");
    my $listed = ref $l->{json} eq 'HASH' && ref $l->{json}{items} eq 'ARRAY'
        && grep { ref $_ eq 'HASH' && ($_->{id} // '') eq $new }
            @{ $l->{json}{items} };
    ok($r->{status} == 204 && $top eq $ids->[1] && $l->{status} == 200
        && $listed, "$name: a hidden post left out, in the list")
        or diag(short($r) . "\nfirst $top\n" . short($l));
    $r = $req->('DELETE', "/users/$uid/hidden/$new");
    ($top) = ($first->(''))[1];
    ok($r->{status} == 204 && $top eq $new, "$name: shown again")
        or diag(short($r) . "\nfirst $top");

    $r = $req->('PUT', "/users/$uid/timeline/marker",
        { last_read_id => $mark, force => JSON::PP::true });
    my $g = $req->('GET', "/users/$uid/timeline/marker");
    ok($r->{status} == 200 && $g->{status} == 200
        && ($g->{json}{last_read_id} // '') eq $mark,
        "$name: the read marker set, and read") or diag(short($r) . "\n"
            . short($g));
    $r = $req->('GET', "/users/$uid/timeline/unread");
    ok($r->{status} == 200 && ref $r->{json} eq 'HASH'
        && ($r->{json}{count} // -1) == 2 && defined $r->{json}{more}
        && !$r->{json}{more}, "$name: 2 unread") or diag(short($r));
    ($r) = $first->('');
    is($r->{headers}{'x-feed-unread'}, 2, "$name: X-Feed-Unread: 2")
        or diag(short($r));

    $r = $req->('POST', "/users/$uid/seen", [ $new ]);
    ($top) = ($first->('&unseen=1'))[1];
    my ($plain) = ($first->(''))[1];
    ok($r->{status} == 204 && $top eq $ids->[1] && $plain eq $new,
        "$name: a post seen, left out of an unseen=1 page only")
        or diag(short($r) . "\nunseen first $top, plain first $plain");
}

# ------------------------------------------- Redis: fanout, cached lists --

# which of @$ids the seen filters of $uid hold, asked with the library the
# read scripts include (scripts/lib/seen.lua) by $redis->(@command): a
# hash of those ids
sub seen_held {
    my ($redis, $uid, $ids) = @_;
    return {} unless @$ids;
    my $dir = FeedTest->root . '/ngx_feed_module/scripts';
    my $lua = `sh $dir/keys2h -lua $dir/keys key_seen_parts key_seen_bits`;
    open my $f, '<', "$dir/lib/seen.lua" or die "$dir/lib/seen.lua: $!\n";
    $lua .= do { local $/; <$f> };
    $lua .= <<'EOF';
local f, out = seen_of(KEYS[1], ARGV), {}
for i = 1, #ARGV do if f[i] then out[#out + 1] = ARGV[i] end end
return out
EOF
    my $held = $redis->('EVAL', $lua, 1, "feed:sn:{$uid}", @$ids);
    return { map { $_ => 1 } @{ $held || [] } };
}

# A timeline list's entry (feed:tl, feed:pl, feed:tlq): the post id's 12
# bytes, then its JSON in embed mode; the end mark is 12 zero bytes.
# entry_id gives the id in hex as the API does (24 zeroes for the end).
sub entry_id { unpack('H24', substr($_[0] // '', 0, 12)) }
sub entry_json { length($_[0] // '') > 12 ? substr($_[0], 12) : '' }
sub entry_of { pack('H24', $_[0]) . ($_[1] // '') }

# a post's JSON key in link mode, feed:p:<the id's 12 bytes>
sub post_key { 'feed:p:' . pack('H24', $_[0]) }

# a Redis command's reply; undef on any error
sub rd { my $t = shift; my @r = eval { $t->redis(@_) }; $@ ? undef : $r[0] }

sub tl_key { "feed:tl:{$_[0]}" }

# per key: -1 when the list does not exist, else how many of its entries
# are for post $id; one round trip for up to 500 users
my $COPIES_LUA = <<'LUA';
local out = {}
for i = 1, #KEYS do
  if redis.call('exists', KEYS[i]) == 0 then
    out[i] = -1
  else
    local n = 0
    for _, e in ipairs(redis.call('lrange', KEYS[i], 0, -1)) do
      if string.sub(e, 1, 12) == ARGV[1] then n = n + 1 end
    end
    out[i] = n
  end
end
return out
LUA

# user => copies of post $id in their cached timeline (-1: no list);
# undef when Redis does not answer
sub copies {
    my ($t, $id, @users) = @_;
    my %c;
    while (my @b = splice(@users, 0, 500)) {
        my $r = rd($t, 'EVAL', $COPIES_LUA, scalar @b,
            (map { tl_key($_) } @b), pack('H24', $id));
        return undef unless ref $r eq 'ARRAY';
        @c{@b} = @$r;
    }
    return \%c;
}

# a summary of copies(): "x0: 2 (f007 f123), x1: 198"
sub copies_summary {
    my ($c) = @_;
    return 'redis unreachable' unless $c;
    my %by;
    push @{$by{$c->{$_}}}, $_ for sort keys %$c;
    return join ', ', map {
        my $k = $_;
        ($k == -1 ? 'no list' : "x$k") . ': ' . scalar(@{$by{$k}})
            . ($k != 1 ? ' (' . join(' ', grep defined,
                @{$by{$k}}[0 .. 5]) . ')' : '')
    } sort { $a <=> $b } keys %by;
}

# every user of copies() has $n copies
sub all_n {
    my ($c, $n) = @_;
    return 0 unless $c;
    return !grep { $_ != $n } values %$c;
}

# the group as XINFO GROUPS has it
sub group_info {
    my ($t) = @_;
    my $g = rd($t, 'XINFO', 'GROUPS', $STREAM);
    return undef unless ref $g eq 'ARRAY';
    for my $x (@$g) {
        my %h = @$x;
        return \%h if $h{name} eq $GROUP;
    }
    return undef;
}

sub last_id {
    my ($t) = @_;
    my $s = rd($t, 'XINFO', 'STREAM', $STREAM) or return '';
    my %h = @$s;
    return $h{'last-generated-id'};
}

# every entry of the stream read by the group and acknowledged
sub settled {
    my ($t) = @_;
    my $g = group_info($t) or return 0;
    return $g->{pending} == 0 && $g->{'last-delivered-id'} eq last_id($t);
}

sub wait_settled {
    my ($t, $name, $timeout) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my $ok = $t->wait_for($timeout || 10, sub { settled($t) });
    ok($ok, "$name: every stream entry read and acknowledged")
        or diag('group: ' . $JSON->encode(group_info($t) // {})
            . ', last id ' . last_id($t) . ', pending: ' . $JSON->encode(
                rd($t, 'XPENDING', $STREAM, $GROUP, '-', '+', 20)));
    return $ok;
}

# A reader's chunks of authors for the rebuild's deadline (issue 34):
# each author, the reader first, a post 1 to 50 minutes old, interleaved
# across the chunks, and one two hours old, straight into the stand-in;
# ids of the time, the run and a count.  Returns id -> author and the ids,
# newest first.
sub seed_chunks {
    my ($t, $reader, $authors, $now) = @_;
    my ($n, @docs, %by) = (0);
    for my $i (0 .. @$authors) {
        my $author = $i ? $authors->[$i - 1] : $reader;
        for my $age (60 + ($i * 37) % 3000, 7200 + $i) {
            my $id = sprintf('%08x%08x%08x', $now - $age, $$ & 0xffffff,
                ++$n);
            $by{$id} = $author;
            push @docs, qq({"_id": {"\$oid": "$id"}, "author": "$author", )
                . qq("body": "p$n", "ts": ${\ (($now - $age) * 1000)}});
        }
    }
    $t->mongo_insert('posts', @docs);
    return (\%by, [ sort { $b cmp $a } keys %by ]);
}

# the first $limit of ids (newest first) below $max, if given
sub ids_page {
    my ($ids, $limit, $max) = @_;
    my @p = grep { !defined $max || $_ lt $max } @$ids;
    return [ @p[0 .. ($limit < @p ? $limit : @p) - 1] ];
}

# no id twice
sub ids_once { my %s; !grep { $s{$_}++ } @{ $_[0] } }

# how many commands the stand-in logged so far
sub mongo_log_size { scalar(my @c = $_[0]->mongo_commands) }

# the finds of $coll the stand-in logged since command $n0; of posts (no
# $coll), a rebuild's chunks' (by authors), not its other reads
sub chunk_finds {
    my ($t, $n0, $coll) = @_;
    my @c = $t->mongo_commands;
    return grep { ($_->{cmd} // '') eq 'find'
        && ($_->{coll} // '') eq ($coll // 'posts')
        && ($coll || ref(($_->{filter} || {})->{author}) eq 'HASH') }
        @c[$n0 .. $#c];
}

1;
