#!/usr/bin/perl

# The source tree's layering (docs/architecture.md): core, then stores,
# then features, then the wiring, each calling downward only.  A file's
# layer is its folder: ngx_feed_module/core/, stores/, features/, and the
# wiring at the top (ngx_http_feed_module.c).
#
#   - a file includes the headers of its own layer and of those below it,
#     never one above;
#   - a file uses no function or variable defined in a layer above its
#     own, as the object files tell (nm): the one exception is the module
#     object, ngx_http_feed_module, which every layer looks its
#     configuration up with, as nginx's modules do;
#   - each MongoDB collection and Redis key is named by its owner alone:
#     as a string, or through a macro that holds it, however the string is
#     put together from adjacent literals.  The keys and their owners are
#     those of the list the build makes their macros of
#     (ngx_feed_module/scripts/keys): NGX_HTTP_FEED_KEY_<NAME>, in the
#     generated ngx_http_feed_keys.h, the one place that defines them all.
#
# Reads the sources and the objects of the build under test; runs nothing.

use strict;
use warnings;

use FindBin;
use File::Basename qw(basename dirname);
use Test::More;

my $root = "$FindBin::Bin/..";
my $dir = "$root/ngx_feed_module";

my %rank = (core => 1, stores => 2, features => 3, wiring => 4);

# names that belong to one file only: the collections here, the keys'
# prefixes from the list of keys below
my %owner = (
    'follows'        => 'stores/ngx_http_feed_follows_store.c',
    'follow_counts'  => 'stores/ngx_http_feed_follows_store.c',
    'posts'          => 'stores/ngx_http_feed_posts_store.c',
    'idempotency'    => 'stores/ngx_http_feed_idempotency_store.c',
    'cache_effects'  => 'stores/ngx_http_feed_effects_store.c',
    'markers'        => 'stores/ngx_http_feed_markers_store.c',
    'timeline_cache' => 'stores/ngx_http_feed_model_cache.c',
    'timeline_time'  => 'stores/ngx_http_feed_model_time.c',
    'timeline_capped' => 'stores/ngx_http_feed_model_capped.c',
    'timeline_size'  => 'stores/ngx_http_feed_model_size.c',
);

# collections are whole strings; a key's name starts one, and ends where
# its tag, separator or id starts ("feed:pv" is not "feed:pvc")
my %collection = map { $_ => 1 } keys %owner;

# the build under test: nginx's objs/addon/<folder>/ has its objects and
# the headers it generates
my $module = $ENV{FEED_MODULE} || "$root/build/ngx_http_feed_module.so";
my $objs = dirname($module) . '/nginx/objs/addon';

# ------------------------------------------------------------ the files --

my %layer;      # path under ngx_feed_module/ => layer
my %path_of;    # file name => path under ngx_feed_module/

for my $l (qw(core stores features)) {
    opendir(my $dh, "$dir/$l") or die "$dir/$l: $!";
    $layer{"$l/$_"} = $l for grep { /\.[ch]$/ } readdir($dh);
    closedir($dh);
}

opendir(my $dh, $dir) or die "$dir: $!";
$layer{$_} = 'wiring' for grep { /\.[ch]$/ } readdir($dh);
closedir($dh);

ok(keys %layer > 40, 'the sources are there');

for my $path (sort keys %layer) {
    my $name = basename($path);
    ok(!exists $path_of{$name}, "$name is in one folder");
    $path_of{$name} = $path;
    like($name, qr/^ngx_http_feed_\w+\.[ch]$/, "$path is named for the module");
}

# the generated headers of the scripts' names and of the keys are core's
sub layer_of {
    my ($name) = @_;
    return 'core' if $name eq 'ngx_http_feed_scripts.h'
                     || $name eq 'ngx_http_feed_keys.h';
    my $path = $path_of{$name};
    return $path ? $layer{$path} : undef;
}

sub slurp {
    my ($f) = @_;
    open(my $fh, '<', $f) or die "$f: $!";
    local $/;
    return <$fh>;
}

# code only: comments may name anything; adjacent literals joined, as the
# compiler joins them
sub code_of {
    my ($text) = @_;
    $text =~ s{/\*.*?\*/}{}gs;
    1 while $text =~ s/"((?:[^"\\\n]|\\.)*)"\s*"((?:[^"\\\n]|\\.)*)"/"$1$2"/g;
    return $text;
}

my %code = map { $_ => code_of(slurp("$dir/$_")) } keys %layer;

# ------------------------------------------------------------- includes --

for my $path (sort keys %layer) {
    my $mine = $layer{$path};
    my @up;

    while ($code{$path} =~ /^#include\s+"(ngx_http_feed_\w+\.h)"/mg) {
        my $theirs = layer_of($1);

        if (!defined $theirs) {
            push @up, "$1 (no such header)";

        } elsif ($rank{$theirs} > $rank{$mine}) {
            push @up, "$1 ($theirs)";
        }
    }

    ok(!@up, "$path ($mine) includes nothing above it")
        or diag("includes @up");
}

# ------------------------------------------------------- strings owned --

# the macros that hold an owned string: each key's, named by the list of
# keys, and those in the sources and in the headers the build generates
my %holds;      # owned string => [macro names]

# "<NAME> <format> <owner> <what it is>": the key's name is its format up
# to its first variable part, less the separators it ends with ("feed:tl"
# of "feed:tl:{<user>}"); its owner, a file name without its prefix
my $keys = "$dir/scripts/keys";
my $nkeys = 0;

for (split /\n/, slurp($keys)) {
    next if /^#/ || !/\S/;

    my ($macro, $format, $file) = split;
    (my $name = $format) =~ s/<.*//;
    $name =~ s/[:{]+$//;

    my $path = $path_of{"ngx_http_feed$file"};
    ok($path, "the owner of $format, $file, is a source file") or next;

    ok(!exists $owner{$name}, "$name has one owner");
    $owner{$name} = $path;
    push @{ $holds{$name} }, "NGX_HTTP_FEED_KEY_$macro";
    $nkeys++;
}

ok($nkeys > 10, "the keys are listed in $keys");

sub owned_in {
    my ($name, $text) = @_;
    my $in = $collection{$name} ? qr/"\Q$name\E"/ : qr/"\Q$name\E(?![a-z])/;
    return $text =~ $in;
}

my @generated = glob("$objs/ngx_feed_module/ngx_http_feed_*.h");

for my $text ((map { $code{$_} } sort keys %layer),
    map { code_of(slurp($_)) } @generated)
{
    while ($text =~ /^#define\s+(\w+)[ \t]+(.*(?:\\\n.*)*)$/mg) {
        my ($macro, $value) = ($1, $2);

        for my $name (keys %owner) {
            push @{ $holds{$name} }, $macro
                if owned_in($name, $value)
                   && !grep { $_ eq $macro } @{ $holds{$name} || [] };
        }
    }
}

for my $path (sort keys %layer) {
    my @bad;

    for my $name (sort keys %owner) {
        next if $path eq $owner{$name};

        push @bad, "\"$name\"" if owned_in($name, $code{$path});

        for my $macro (@{ $holds{$name} || [] }) {
            push @bad, "$macro ($name)" if $code{$path} =~ /\b$macro\b/;
        }
    }

    ok(!@bad, "$path names only what it owns") or diag(
        join "\n", map { "$_ belongs to another file" } @bad);
}

# -------------------------------------------------------------- symbols --

SKIP: {
    skip("no objects in $objs: the module was built elsewhere", 2)
        unless -d $objs;

    my (%defines, %uses);

    for my $path (grep { /\.c$/ } sort keys %layer) {
        (my $o = basename($path)) =~ s/\.c$/.o/;
        my $folder = $layer{$path} eq 'wiring' ? 'ngx_feed_module'
                   : $layer{$path};
        my $obj = "$objs/$folder/$o";

        ok(-f $obj, "$path has its object") or next;

        for (`nm -P $obj`) {
            my ($sym, $type) = split;
            next unless defined $type;

            # what the compiler adds (a sanitizer build's __odr_asan.*)
            next if $sym =~ /^__|\./;

            if ($type eq 'U') {
                push @{ $uses{$path} }, $sym;

            } elsif ($type =~ /^[TDBRCV]$/) {
                ok(!exists $defines{$sym}, "$sym is defined once")
                    or diag("by $defines{$sym} and $path");
                $defines{$sym} = $path;
            }
        }
    }

    for my $path (sort keys %uses) {
        my $mine = $layer{$path};
        my @up;

        for my $sym (@{ $uses{$path} }) {
            my $def = $defines{$sym} or next;     # nginx's, a library's
            next if $sym eq 'ngx_http_feed_module';
            push @up, "$sym ($def)"
                if $rank{$layer{$def}} > $rank{$mine};
        }

        ok(!@up, "$path ($mine) uses nothing defined above it")
            or diag(join "\n", @up);
    }

    # the wiring defines the module object and its configuration's hooks
    my @wired = grep { $layer{$defines{$_}} eq 'wiring' } keys %defines;
    is_deeply([sort @wired], [sort qw(ngx_http_feed_module
        ngx_http_feed_main_conf_unset ngx_http_feed_main_conf_defaults)],
        'the wiring exports the module and its defaults only');
}

# ---------------------------------------------------------------- docs --

# docs/architecture.md's file map: a section per folder, every file of the
# folder named in its section (`_name.c/.h`, `_name.c`, `_name.h`), and no
# file named that the folder lacks; its list of the read's states is the
# enum's
{
    my $doc = slurp("$root/docs/architecture.md");
    my %section;
    my %folder_of = (core => 'core', stores => 'stores',
        features => 'features', wiring => 'wiring');

    while ($doc =~ /^### (\w+) \(`ngx_feed_module\/[^`]*`\)\n(.*?)(?=^##|\z)/msg) {
        $section{$1} = $2;
    }

    is_deeply([sort keys %section], [sort keys %folder_of],
        'architecture.md maps each folder');

    my %named;
    for my $l (keys %section) {
        # a table row's first cell names its files
        for my $cell ($section{$l} =~ /^\| ([^|]+) \|/mg) {
            while ($cell =~ /`_(\w+)\.([ch](?:\/\.h)?)`/g) {
                my ($base, $ext) = ($1, $2);
                $named{"$l:ngx_http_feed_$base.c"} = 1 if $ext =~ /^c/;
                $named{"$l:ngx_http_feed_$base.h"} = 1 if $ext =~ /h$/;
            }
        }
    }

    for my $path (sort keys %layer) {
        my $l = $layer{$path};
        my $key = "$l:" . basename($path);
        ok(delete $named{$key}, "architecture.md names $path in $l");
    }

    ok(!%named, 'architecture.md names no file that is not there')
        or diag(join "\n", sort keys %named);

    my $h = slurp("$dir/features/ngx_http_feed_timeline_read.h");
    my @states = map { lc } $h =~ /\bNGX_HTTP_FEED_TL_([A-Z]+)\b/g;
    my ($list) = $doc =~ /the read as a state machine \(([^)]*)\)/;
    is(join(' ', sort(split /, /, $list // '')),
        join(' ', sort @states), 'architecture.md lists every state');
}

done_testing();
