#!/usr/bin/perl

# The source tree's layering (docs/architecture.md): core, then stores,
# then features, then the wiring, each calling downward only.  A file may
# include the headers of its own layer and of those below it, never one
# above; every source file has a layer; and each MongoDB collection and
# Redis key prefix is named by its owner alone.  Reads the sources, runs
# nothing.

use strict;
use warnings;

use FindBin;
use Test::More;

my $dir = "$FindBin::Bin/../ngx_feed_module";

my %rank = (core => 1, store => 2, feature => 3, wiring => 4);

# every file's layer, by its name without ngx_http_feed_ and extension
my %layer = (
    module          => 'core',      # the .h: conf and shared types
    redis           => 'core',
    redis_script    => 'core',
    redis_slot      => 'core',
    redis_cluster   => 'core',
    mongo           => 'core',
    json            => 'core',
    args            => 'core',
    errors          => 'core',
    util            => 'core',
    gauges          => 'core',
    hide            => 'core',

    follows_store   => 'store',
    filters_store   => 'store',
    posts_store     => 'store',
    idempotency_store => 'store',
    effects_store   => 'store',
    timeline_cache  => 'store',
    timeline_local  => 'store',
    timeline_pull   => 'store',
    timeline_watch  => 'store',
    timeline_watch_set => 'store',
    timelines_store => 'store',
    timelines_time  => 'store',
    timelines_capped => 'store',
    timelines_size  => 'store',
    timelines_bulk  => 'store',
    authors_store   => 'store',
    counts          => 'store',
    filters_store   => 'store',

    graph           => 'feature',
    graph_task      => 'feature',
    filters         => 'feature',
    effects         => 'feature',
    effects_sweep   => 'feature',
    post            => 'feature',
    post_input      => 'feature',
    post_idempotency => 'feature',
    post_task       => 'feature',
    outbox          => 'feature',
    timeline        => 'feature',
    timeline_read   => 'feature',   # the .h: the read's context
    timeline_fallback => 'feature',
    timeline_source => 'feature',
    timeline_stored => 'feature',
    fanout          => 'feature',
    fanout_task     => 'feature',
    fanout_consumers => 'feature',
    fanout_lease    => 'feature',
    fanout_entry    => 'feature',   # the .h: entries in flight
    fanout_pull     => 'feature',
    fanout_queue    => 'feature',
    status          => 'feature',
    metrics         => 'feature',
    pull            => 'feature',
    schema          => 'feature',
);

# names that belong to one file only: collections and key prefixes
my %owner = (
    '"follows"'       => 'follows_store.c',
    '"follow_counts"' => 'follows_store.c',
    '"posts"'         => 'posts_store.c',
    '"idempotency"'   => 'idempotency_store.c',
    '"cache_effects"' => 'effects_store.c',
    '"timeline_cache"' => 'timelines_store.c',
    '"timeline_time"' => 'timelines_time.c',
    '"timeline_capped' => 'timelines_capped.c',
    '"timeline_size"' => 'timelines_size.c',
    '"feed:tl'        => 'timeline_cache.c',
    '"feed:lock:'     => 'timeline_cache.c',
    '"feed:p:'        => 'timeline_cache.c',
    '"feed:deleting'  => 'timeline_cache.c',
    '"feed:cnt:'      => 'counts.c',
    '"feed:pl:'       => 'timeline_pull.c',
    '"feed:pv:'       => 'timeline_pull.c',
    '"feed:pvc'       => 'timeline_watch.c',
    '"feed:pvh:'      => 'timeline_watch.c',
);

sub layer_of {
    my ($file) = @_;

    (my $name = $file) =~ s/^ngx_http_feed_//;
    $name =~ s/\.[ch]$//;

    return 'wiring' if $file eq 'ngx_http_feed_module.c';
    return 'core' if $file eq 'ngx_http_feed_scripts.h';    # generated
    return $layer{$name};
}

opendir(my $dh, $dir) or die "$dir: $!";
my @files = sort grep { /^ngx_http_feed_\w+\.[ch]$/ } readdir($dh);
closedir($dh);

ok(@files > 20, 'the sources are there');

for my $file (@files) {
    my $mine = layer_of($file);

    ok(defined $mine, "$file has a layer") or next;

    open(my $fh, '<', "$dir/$file") or die "$file: $!";
    my $text = do { local $/; <$fh> };
    close($fh);

    my @up;

    while ($text =~ /^#include\s+"(ngx_http_feed_\w+\.h)"/mg) {
        my $theirs = layer_of($1);

        push @up, "$1 ($theirs)"
            if defined $theirs && $rank{$theirs} > $rank{$mine};
    }

    ok(!@up, "$file ($mine) includes nothing above it")
        or diag("includes @up");

    # comments may name anything: only code counts
    $text =~ s{/\*.*?\*/}{}gs;

    for my $name (sort keys %owner) {
        next if $file eq "ngx_http_feed_$owner{$name}";

        ok(index($text, $name) < 0, "$file does not name $name")
            or diag("$name belongs to $owner{$name}");
    }
}

done_testing();
