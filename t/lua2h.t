#!/usr/bin/perl

# scripts/lua2h fails, and leaves nothing behind, when a script includes a
# library that is not there or numbers its keys wrong; it makes the same
# header as before otherwise.

use strict;
use warnings;

use FindBin;
use File::Temp qw(tempdir);
use Test::More;

my $lua2h = "$FindBin::Bin/../ngx_feed_module/scripts/lua2h";
my $dir = tempdir(CLEANUP => 1);

mkdir "$dir/s";
mkdir "$dir/s/lib";

sub script {
    open(my $fh, '>', "$dir/s/x.lua") or die $!;
    print $fh @_;
    close $fh;
}

script("--[[\n  KEYS[1] a\n]]\n-- \@include nosuch\nreturn 1\n");
isnt(system("sh $lua2h $dir/out.h $dir/s 2>/dev/null"), 0,
    'a missing include fails the run');
ok(!-e "$dir/out.h", 'no header');
ok(!-e "$dir/out.h.tmp" && !-e "$dir/out.h.tmp.names", 'no scratch files');

script("--[[\n  KEYS[2] a\n]]\nreturn 1\n");
isnt(system("sh $lua2h $dir/out.h $dir/s 2>/dev/null"), 0,
    'keys numbered wrong fail the run');
ok(!-e "$dir/out.h.tmp" && !-e "$dir/out.h.tmp.names", 'no scratch files');

open(my $fh, '>', "$dir/s/lib/one.lua") or die $!;
print $fh "local ONE = 1\n";
close $fh;

script("--[[\n  KEYS[1] a\n  ARGV[1] b\n]]\n-- \@include one\nreturn ONE\n");
is(system("sh $lua2h $dir/out.h $dir/s"), 0, 'a good script');
open($fh, '<', "$dir/out.h") or die $!;
my $h = do { local $/; <$fh> };
like($h, qr/"local ONE = 1\\n"/, 'its include expanded');
like($h, qr/NGX_HTTP_FEED_SCRIPT_X_ARG_B = 0/, 'its argument named');
ok(!-e "$dir/out.h.tmp.names", 'no scratch files');

done_testing;
