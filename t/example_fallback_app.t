#!/usr/bin/perl

# conf/app-fallback.conf, the example with an application behind the
# timeline fallback, with tools/fallback-app as the application, on real
# Redis and MongoDB:
#
#   - nginx -t accepts it;
#   - the application answers the fallback contract (docs/timeline.md) on
#     its own: the user's posts and their followees', newest first, no
#     deleted post, no one else's, limit, max_id and since_id, each post
#     as GET /posts/{id} shows it; 400 for bad arguments;
#   - through nginx: a first read is a MISS the application rebuilt (it
#     was asked), the next a HIT (it was not), later first pages hits from
#     Redis or the worker's copy (HIT or LOCAL), the pages past the cache's
#     end come from it (DEEP, asked with max_id), and walking the pages
#     visits every post once, in order; a post made later reaches the
#     cached timeline by fanout;
#   - the read state: a hidden post, the read marker, unread counts and
#     X-Feed-Unread, seen posts and unseen=1;
#   - the application gone: a miss answers 503 with Retry-After, hits
#     (HIT or LOCAL) go on.
#
# Only the ports are changed, and feed_cache_size (800 in the file) is 5
# here: a timeline longer than the cache takes a few posts, not 801.
# Posts are long (2,500 characters) so that the application's answer to a
# rebuild is larger than proxy_buffer_size.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Util qw(short tag tl_ids tl_walk summary post read_state_is
    parallel);

my $t = FeedTest->new;
my $APP_LOG = $t->dir . '/app.out';

$t->start_backends;

$t->spawn('app', $FeedTest::PYTHON, $t->root . '/tools/fallback-app',
    '--port', $t->port('app'), '--mongo-uri', $t->mongo_uri);
ok($t->wait_port($t->port('app'), 20), 'tools/fallback-app listens')
    or BAIL_OUT('no application');

my $conf = $t->conf_file('app-fallback.conf',
    ports => { 8080 => 'http', 9001 => 'app' });
$conf =~ s/^(\s*feed_cache_size\s+)800;/${1}5;/m
    or die "app-fallback.conf: no feed_cache_size 800\n";
$t->write_conf($conf);

my ($ok, $out) = $t->test_conf;
ok($ok, 'nginx -t accepts conf/app-fallback.conf') or diag($out);

$t->run;

# ---------------------------------------------------------------- data --

# reader follows w1 and w2; nobody follows x; one post is deleted
for my $w (qw(w1 w2)) {
    is($t->http('PUT', "/users/reader/following/$w")->{status}, 204,
        "reader follows $w");
}

my $long = "\x{e9}" x 2500;
my (@mine, $deleted);
for my $i (1 .. 4) {
    for my $u (qw(w1 w2 reader x)) {
        next if $u eq 'reader' && $i > 1;
        my $id = post($t, $u, "$u $i $long") or next;
        push @mine, $id unless $u eq 'x';
    }
}
$deleted = $mine[1];
my $del = $t->http('DELETE', "/users/" . author_of($deleted)
    . "/posts/$deleted");
is($del->{status}, 204, 'a post deleted') or diag(short($del));

sub author_of {
    my $r = $t->get("/posts/$_[0]");
    return $r->{json} ? $r->{json}{author} : '';
}

my @want = reverse grep { $_ ne $deleted } @mine;
is(scalar @want, 8, '8 posts in reader\'s timeline');

# ----------------------------------------------- the application alone --

sub app {
    my ($query) = @_;
    return $t->get("/internal/timeline?$query", port => $t->port('app'));
}

sub app_ids { [ map { $_->{id} } @{ $_[0]{json}{items} || [] } ] }

my $r = app('user=reader&limit=100');
is("@{ app_ids($r) }", "@want", 'app: every post, newest first')
    or diag(summary(app_ids($r), \@want));
my %api = map { $_ => tag($t->get("/posts/$_")->{json}) } @want;
is_deeply([ map { tag($_) } @{ $r->{json}{items} || [] } ],
    [ map { $api{$_} } @want ], 'app: each post as the posts API shows it');
is("@{ app_ids(app('user=reader&limit=3')) }", "@want[0 .. 2]",
    'app: limit');
is("@{ app_ids(app(qq(user=reader&limit=3&max_id=$want[2]))) }",
    "@want[3 .. 5]", 'app: max_id, exclusive');
is("@{ app_ids(app(qq(user=reader&limit=20&since_id=$want[4]))) }",
    "@want[0 .. 3]", 'app: since_id, exclusive');
is("@{ app_ids(app(qq(user=reader&max_id=$want[1]&since_id=$want[5]))) }",
    "@want[2 .. 4]", 'app: both');
is(app('user=x&limit=100')->{json}{items}[0]{author}, 'x',
    "app: another user's own posts");
is(scalar @{ app_ids(app('user=nobody')) }, 0, 'app: a user with nothing');
is(app($_)->{status}, 400, "app: 400 for $_") for 'user=a%20b',
    'user=a&limit=0', 'user=a&max_id=zz';

# --------------------------------------------------------- through nginx --

sub app_asked {
    open my $fh, '<', $APP_LOG or return ();
    return grep { m{GET /internal/timeline\?} } <$fh>;
}

my $n0 = () = app_asked();
$r = $t->get('/users/reader/timeline?limit=3');
is("$r->{status} " . ($r->{headers}{'x-feed-cache'} // ''), '200 MISS',
    'the first read: MISS') or diag(short($r));
is("@{ tl_ids($r) }", "@want[0 .. 2]", 'its posts');
my @asked = app_asked();
splice(@asked, 0, $n0);
ok((grep { /user=reader/ && !/max_id/ } @asked),
    'the application rebuilt it') or diag("asked: @asked");

my $n1 = () = app_asked();
$r = $t->get('/users/reader/timeline?limit=3');
is("$r->{status} " . ($r->{headers}{'x-feed-cache'} // ''), '200 HIT',
    'the next read: HIT') or diag(short($r));
is(scalar(() = app_asked()), $n1, 'the application was not asked');

my $w = tl_walk($t, 'reader', 3);
ok(!@{$w->{problems}}, 'every page well formed')
    or diag(join "\n", @{$w->{problems}});
is("@{$w->{ids}}", "@want", 'the walk: every post once, in order')
    or diag(summary($w->{ids}, \@want));
# the first page a hit (read 3: the worker's copy, or Redis)
like("@{$w->{caches}}", qr/^(?:HIT|LOCAL) DEEP DEEP\z/,
    'the pages past the cache: DEEP');
like($t->get('/metrics')->{body},
    qr/^feed_timeline_reads_total\{cache="DEEP"\} [1-9]/m,
    '/metrics counted the DEEP pages');
ok((grep { /user=reader/ && /max_id=/ } app_asked()),
    'the application answered a deep page');

# fanout still delivers into the cached timeline
my $new = post($t, 'w2', 'fresh');
$r = $t->wait_for(5, sub {
    my $r = $t->get('/users/reader/timeline?limit=3');
    return (tl_ids($r)->[0] // '') eq ($new // 'none') ? $r : undef;
}) || $t->get('/users/reader/timeline?limit=3');
# into the cached timeline: a hit, from Redis or the worker's copy
my $first = $new // 'none';
like((tl_ids($r)->[0] // '') . ' ' . ($r->{headers}{'x-feed-cache'} // ''),
    qr/^\Q$first\E (?:HIT|LOCAL)\z/, 'a new post delivered by fanout')
    or diag(short($r));

# the read state: a hidden post, the read marker, unread counts, seen
# posts; the writes' burst refilled first (10 a second)
sleep 2.1;
read_state_is($t, 'reader', [ $new // 'none', @want[0 .. 1] ], 'read state');

# the application gone: a miss is 503, hits go on
$t->stop_proc('app');
$r = $t->get('/users/w1/timeline');
is("$r->{status} " . ($r->{json} && $r->{json}{error} // '') . ' '
    . ($r->{headers}{'retry-after'} // ''), '503 unavailable 1',
    'the application gone: a miss 503, Retry-After') or diag(short($r));
$r = $t->get('/users/reader/timeline?limit=3');
like("$r->{status} " . ($r->{headers}{'x-feed-cache'} // ''),
    qr/^200 (?:HIT|LOCAL)\z/, 'a hit answered all the same')
    or diag(short($r));

# this host is not rate-limited (geo): a burst of writes past the
# burst of 20, none refused
my @burst = parallel($t, 30,
    map { ['PUT', "/users/burst$_/following/fauthor"] } 1 .. 60);
is(scalar(grep { $_->{status} == 429 } @burst), 0,
    'loopback: 60 follows at once, none answered 429')
    or diag(join ' ', map { $_->{status} } @burst);

$t->done;
