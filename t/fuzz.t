#!/usr/bin/perl

# The libFuzzer targets (fuzz/, docs/fuzzing.md): built, then each run for
# a few seconds from its checked-in seeds (t/fuzz/<target>/), which hold
# the inputs of the defects they found.  Any crash, sanitizer report or
# broken check of a target fails it.  FUZZ_TEST_SECONDS: how long each runs.

use strict;
use warnings;

use FindBin;
use File::Path qw(remove_tree);
use Test::More;

my $root = "$FindBin::Bin/..";
my $seconds = $ENV{FUZZ_TEST_SECONDS} || 3;
my @targets = qw(post_input cursor timeline_args fallback redis_reply
    redis_cluster str_hash json_squeeze);

my $out = `make -C $root -s fuzz-build 2>&1`;
is($?, 0, 'the fuzz targets build') or diag($out);

for my $target (@targets) {
    my $corpus = "$root/build/fuzz/test/$target";

    # a fresh corpus: each run starts from the seeds alone
    remove_tree($corpus, "$corpus.artifacts");

    $out = `sh $root/tools/fuzz-run $root/build/fuzz/bin/$target \\
                $root/t/fuzz/$target $corpus -max_total_time=$seconds 2>&1`;
    my $rc = $?;

    my ($runs) = $out =~ /(\d+) executions/;
    my $seeds = () = glob("$root/t/fuzz/$target/*");

    is($rc, 0, "$target: no crash, no report") or diag($out);
    cmp_ok($runs || 0, '>', $seeds, "$target: ran past its $seeds seeds")
        or diag($out);
}

done_testing();
