#!/usr/bin/perl

# The list of Redis keys, ngx_feed_module/scripts/keys: each key once,
# each documented in docs/storage.md's Redis section (its table, or the
# channels below it) and nothing documented there that the list lacks;
# scripts/keys2h makes a macro of each, and the scripts' key_<name>() and
# key_<name>_parts() make each key of its parts and read them back, in a
# real Redis; a malformed list or a key the list lacks fails the build.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use File::Temp qw(tempdir);
use Test::More;

use FeedTest;

my $root = "$FindBin::Bin/..";
my $scripts = "$root/ngx_feed_module/scripts";
my $list = "$scripts/keys";
my $tmp = tempdir(CLEANUP => 1);

sub slurp {
    local (@ARGV, $/) = @_;
    return scalar <>;
}

sub spew {
    my ($f, $text) = @_;
    open(my $fh, '>', $f) or die "$f: $!";
    print $fh $text;
    close $fh;
}

# ------------------------------------------------------------- the list --

my (@keys, %seen);

for (split /\n/, slurp($list)) {
    next if /^#/ || !/\S/;

    my ($name, $format, $owner, @what) = split;

    like($name, qr/^[A-Z][A-Z0-9_]*$/, "$name is a name");
    ok(@what, "$name says what it is");
    ok(!$seen{$name}++, "$name once");
    ok(!$seen{$format}++, "$format once");

    push @keys, { name => $name, format => $format };
}

ok(@keys > 10, 'the keys are listed');

# a key as the docs write it: <copy> is nothing on a single Redis, the
# master's tag on a cluster
sub written {
    my ($format) = @_;
    return $format unless $format =~ /<copy>/;
    return map { (my $f = $format) =~ s/<copy>/$_/; $f } '', '{<tag>}';
}

my %listed = map { $_ => 1 } map { written($_->{format}) } @keys;

# ------------------------------------------------------------- the docs --

my $doc = slurp("$root/docs/storage.md");
my ($redis) = $doc =~ /^## Redis\n(.*?)(?=^## |\z)/ms;
ok($redis, 'docs/storage.md has a Redis section');

# the keys of the table (the first cell of each row), then those the text
# after it names: the channels
my (%table, %text);
my ($rows, $after) = $redis =~ /^((?:\|[^\n]*\n)+)(.*)/ms;

for my $row (split /\n/, $rows) {
    my ($cell) = $row =~ /^\|([^|]*)\|/;
    $table{$_} = 1 for $cell =~ /`(feed:[^`]*)`/g;
}

$text{$_} = 1 for $after =~ /`(feed:[^`]*)`/g;

ok(keys %table > 10, 'the table names keys');

for my $key (sort keys %listed) {
    ok($table{$key} || $text{$key}, "$key is documented");
}

for my $key (sort keys %table, keys %text) {
    ok($listed{$key}, "$key, documented, is listed");
}

ok($redis =~ m{ngx_feed_module/scripts/keys}, 'the docs name the list');

# ----------------------------------------------------------- the macros --

is(system('sh', "$scripts/keys2h", "$tmp/keys.h", $list), 0, 'keys2h');
my $h = slurp("$tmp/keys.h");

for my $k (@keys) {
    (my $prefix = $k->{format}) =~ s/<.*//;
    like($h, qr/^#define NGX_HTTP_FEED_KEY_$k->{name} +"\Q$prefix\E"$/m,
        "NGX_HTTP_FEED_KEY_$k->{name} is \"$prefix\"");
}

spew("$tmp/bad", "TIMELINE feed:tl:{<user>} _timeline_cache.c a\n"
    . "TIMELINE feed:tn:{<user>} _timeline_cache.c b\n");
isnt(system("sh $scripts/keys2h $tmp/bad.h $tmp/bad 2>/dev/null"), 0,
    'a name twice fails the run');
ok(!-e "$tmp/bad.h" && !-e "$tmp/bad.h.tmp", 'and leaves nothing');

spew("$tmp/bad", "TIMELINE feed:tl:{<user>} timeline_cache a\n");
isnt(system("sh $scripts/keys2h $tmp/bad.h $tmp/bad 2>/dev/null"), 0,
    'an owner that is no file fails the run');

# ---------------------------------------------------- the scripts' keys --

mkdir "$tmp/s";
mkdir "$tmp/s/lib";
system('cp', $list, "$tmp/s/keys") == 0 or die;

sub lua2h {
    spew("$tmp/s/x.lua", "--[[\n  KEYS[1] a\n]]\n" . shift);
    unlink "$tmp/out.h";
    return system("sh $scripts/lua2h $tmp/out.h $tmp/s 2>/dev/null");
}

is(lua2h("-- \@include keys\nreturn key_timeline(KEYS[1])\n"), 0,
    'a script naming a key');
my $s = slurp("$tmp/out.h");
like($s, qr/local function key_timeline\(user\)/, 'has its key');
unlike($s, qr/key_kept_pages/, 'and no other');
ok(!-e "$tmp/out.h.tmp.keys", 'no scratch files');

isnt(lua2h("-- \@include keys\nreturn key_nosuch(KEYS[1])\n"), 0,
    'a key the list lacks fails the run');
ok(!-e "$tmp/out.h" && !-e "$tmp/out.h.tmp.keys", 'and leaves nothing');

isnt(lua2h("return key_timeline(KEYS[1])\n"), 0,
    'a key without "-- @include keys" fails the run');

isnt(lua2h("-- \@include keys\nreturn key_watch_heartbeat_parts('')\n"), 0,
    'parts not apart cannot be read back');

# each key made of its parts, and its parts read back, by Redis's Lua

my %part = (user => 'ann', author => 'bob', id => '0' x 24, copy => '{7}',
    gen => '1',
    pid => '123', msec => '456');

my $t = FeedTest->new;
$t->start_redis;

for my $k (@keys) {
    my $name = lc $k->{name};
    my @parts = $k->{format} =~ /<([a-z]+)>/g;
    (my $key = $k->{format}) =~ s/<([a-z]+)>/$part{$1}/g;
    my $args = join ', ', map { "'$part{$_}'" } @parts;
    my $apart = @parts && $k->{format} !~ />\</;

    my @names = ("key_$name", $apart ? ("key_${name}_parts") : ());
    my $lua = `sh $scripts/keys2h -lua $list @names`;
    is($?, 0, "keys2h -lua $k->{name}");

    $lua .= "local k = key_$name($args)\n";
    $lua .= $apart ? "return {k, key_${name}_parts(k)}\n" : "return {k}\n";

    my $r = $t->redis('EVAL', $lua, 0);
    is_deeply($r, [$key, $apart ? (map { $part{$_} } @parts) : ()],
        "$k->{format}: $key" . ($apart ? ', and back' : ''));
}

for my $copy ('', '{7}') {
    my $lua = `sh $scripts/keys2h -lua $list key_pull_list_parts`;
    my $r = $t->redis('EVAL', $lua
        . "return {key_pull_list_parts(ARGV[1])}", 0, "feed:pl$copy:{bob}");
    is_deeply($r, [$copy, 'bob'], "the copy '$copy' of a list read back");
}

done_testing();
