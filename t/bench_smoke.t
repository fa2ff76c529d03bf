#!/usr/bin/perl

# make bench, a smoke run with tiny sizes (FEED_BENCH_QUICK=1): it installs
# what its peers need, runs every part against real nginx, Redis and the
# stand-in (the peers' answers are checked byte for byte against the
# module's inside), prints every table, and leaves docs/benchmarks.md
# alone.  No speed is asserted here: see docs/benchmarks.md.

use strict;
use warnings;

use FindBin;
use Test::More;
use Digest::MD5 ();

my $ROOT = "$FindBin::Bin/..";
my $DOC = "$ROOT/docs/benchmarks.md";

sub md5 {
    open my $fh, '<', $_[0] or return '';
    binmode $fh;
    return Digest::MD5->new->addfile($fh)->hexdigest;
}

my $before = md5($DOC);
my $out = `cd $ROOT && FEED_BENCH_QUICK=1 bash bench/run 2>&1`;
my $rc = $? >> 8;

is($rc, 0, 'bench/run exits 0') or diag($out =~ /^(sanitizer report: .*)/ms
    ? $1 : substr($out, -2000));

for my $h ('## 1. Hot path', '## 2. The event loop', '## 3. Stampede',
    '## 4. Fanout', '## 5. Memory', '## 6. Pull authors',
    '## 8. Timelines kept in MongoDB', '## 9. Read filters',
    '## 12. Local hits', '## 13. Live timelines')
{
    like($out, qr/^\Q$h\E/m, "prints \"$h\"");
}

# part 8: every model with a store wrote the followers of the post (the
# cache model in one statement for the page)
for my $m (qw(cache time_buckets size_buckets capped)) {
    my $statements = $m eq 'cache' ? qr/[1-9]\d*/ : qr/[1-9]\d+/;
    like($out, qr/^\| \Q$m\E \| 10 \| [1-9]\d* \| $statements \| /m,
        "part 8: ${m}'s writes counted");
}
for my $m (qw(time_buckets size_buckets)) {
    like($out, qr/^\| \Q$m\E, `feed_timeline_bucket_keep 3` \| [1-9]/m,
        "part 8: ${m}'s bytes with feed_timeline_bucket_keep");
}

my @rates = $out =~ /^\| hit, limit \d+, (?:link|embed) \| \d+ \| (\d+) /mg;
is(scalar(@rates), 4, 'four hot path rows: limit 20 and 50, link and embed');
ok(!grep({ $_ == 0 } @rates), 'the module answered in every hot path run');
# part 9: both readers' pages were measured
like($out, qr/^\|\ first\ page,\ limit\ 20 [^|]* \|\ [1-9]\d*\ \| [^|]+ \|
    \ [1-9]\d*\ \| [^|]+ \|\ \*\*(?!0\.00)[\d.]+\*\*\ \|/mx,
    'part 9: the first pages, with and without filters');
like($out, qr/ratio \*\*(?!0\.00)[\d.]+\*\*/i,
    'an event loop ratio, not 0');
like($out, qr/: 100 answered 200, all identical; MongoDB rebuilds: \*\*1\*\*/,
    'stampede: 100 cold reads, identical answers, one rebuild');
like($out, qr/^\| 500 \| all \|/m, 'fanout: the post reached all 500');
like($out, qr/^\| link \| \d+ \| \d+ \| \*\*[\d.]+\*\*/m, 'memory, link');

# part 6 (FEED_BENCH_QUICK: threshold 100; authors of 20, 200, 600 followers)
like($out, qr/^\| 20 \| 1: push \| 20 \|/m, 'pull: a push post reached all 20');
like($out, qr/^\| 600 \| 1: switch [^|]*\| 600 \|/m,
    'pull: the switch post reached all 600');
like($out, qr/^\| 600 \| 2: pull \| 0 \|/m, 'pull: the pull post, no delivery');
my @hot = $out =~ /^\| (?:first|deep) \| (?:0|5|20) \| \d+ \| [\d, ]+ \| \*\*(\d+)\*\*/mg;
is(scalar(@hot), 6, 'hot path rows: first and deep pages, 0, 5, 20 pull authors');
ok(!grep({ $_ == 0 } @hot), 'the module answered in every pull hot path run');
like($out, qr/for 2 posts: 40 sightings, 0 missed/, 'every follower saw the pulled posts');
# part 12: local hits, round trips and the static file measured, and the
# probe saw every post and every delete
my @local = $out =~ /^\| (?:20|50) \| module, local hits \(tracking on\) \| \d+ \| [\d, ]+ \| \*\*(\d+)\*\*/mg;
is(scalar(@local), 2, 'part 12: local hit rows, limit 20 and 50');
ok(!grep({ $_ == 0 } @local), 'part 12: the module answered in every run');
like($out, qr/^\| one \| post → visible \| 2 \| [^|]+ \| [^|]+ \| [^|]+ \| 0 \|/m,
    'part 12: both posts seen on one node');
like($out, qr/^\| two \(A → B\) \| delete → gone \| 2 \| [^|]+ \| [^|]+ \| [^|]+ \| 0 \|/m,
    'part 12: both deletes seen on the second node');
# part 13: every stream got the post, both rounds
my @got = $out =~ /^\| [12] \| [^\n]* \| (\d+) of 1000 \| \d+, \d+ ms \|$/mg;
is("@got", '1000 1000', 'part 13: the post reached all 1000 streams, twice');
is(md5($DOC), $before, 'docs/benchmarks.md left alone');

done_testing;
