# bench/filters.pl: part 9 of make bench (bench/run.pl loads it), read
# filters (blocks, mutes, hidden posts): the same reads by a reader who
# filters nothing, by one who mutes 1,000 authors, one of them among the
# five followed (a fifth of the timeline's posts are hidden from that
# reader), and by one who hid 100 posts of the timeline (one in three of
# its newest 300, or more often in a shorter one).
#
# The first page is the hot path: it is answered from the page kept in
# Redis or the worker's own copy, made with the filters, so a filter costs
# one HLEN there.  A second page (max_id) is read from the list by the
# script, which looks up each post's author in the filters: that is where
# a filter costs, and it stays one round trip.

use strict;
use warnings;

use List::Util qw(sum);

my $MUTED = 1_000;
my $HIDDEN = 100;

# the readers' reads, side by side; nginx as start_nginx() left it
sub bench_filters {
    my ($t, $authors, $posts, $quick) = @_;
    my %res = (muted => $quick ? 50 : $MUTED, posts => $posts,
               hidden => $quick ? 10 : $HIDDEN);

    start_nginx(mode => 'link');

    for my $r ('fr0', 'frm', 'frh') {
        follow($r, $_) for @$authors;
    }

    my $t0 = time;
    my @bad = grep { $_->{status} != 204 } map {
        $t->http('PUT', "/users/frm/mutes/$_")
    } ($authors->[-1], map { "muted$_" } 2 .. $res{muted});
    die "part 9: " . scalar(@bad) . " mutes failed\n" if @bad;
    $res{mute_s} = time - $t0;

    # posts spread over the timeline, from the second one on: the first
    # page and the second each have posts hidden
    my @ids;
    my $uri = '/users/frh/timeline?limit=100';
    while (@ids < 1000) {
        my $page = $t->get($uri)->{json};
        push @ids, map { $_->{id} } @{ $page->{items} || [] };
        last unless $page->{next};
        $uri = "/users/frh/timeline?limit=100&max_id=$page->{next}";
    }
    my $step = int(@ids / $res{hidden}) || 1;
    $step = 3 if $step > 3;
    my @hide = grep { defined }
        @ids[map { 1 + $step * $_ } 0 .. $res{hidden} - 1];
    die "part 9: only " . scalar(@hide) . " posts to hide\n"
        if @hide < $res{hidden};
    $res{hidden_step} = $step;
    @bad = grep { $_->{status} != 204 }
        map { $t->http('PUT', "/users/frh/hidden/$_") } @hide;
    die "part 9: " . scalar(@bad) . " hides failed\n" if @bad;

    for my $r ('fr0', 'frm', 'frh') {
        my $first = $t->get("/users/$r/timeline?limit=20");
        die "part 9: $r: $first->{status}\n" unless $first->{status} == 200;
        my $next = $first->{json}{next} or die "part 9: $r: no next\n";

        my %urls = (first => "/users/$r/timeline?limit=20",
                    second => "/users/$r/timeline?limit=20&max_id=$next");

        for my $page (sort keys %urls) {
            body($urls{$page});
            $res{$page}{$r} = wrk($urls{$page});
        }
    }

    $res{filters} = $t->redis('HLEN', 'feed:tlf:{frm}') - 1;
    $res{hidden_fields} = $t->redis('HLEN', 'feed:tlf:{frh}') - 1;
    return \%res;
}

# the first and second pages' rows of a table: the reader fr0 against $who
sub filters_rows {
    my ($res, $who) = @_;
    return map {
        my ($a, $b) = @{ $res->{$_} }{ 'fr0', $who };
        sprintf('| %s | %.0f | %s | %.0f | %s | **%.2f** |',
            $_ eq 'first'
                ? 'first page, limit 20 (kept page or worker copy)'
                : 'second page, limit 20 (max_id: the list is read)',
            $a->{rps}, fmt_ms($a->{p99}), $b->{rps}, fmt_ms($b->{p99}),
            $a->{rps} ? $b->{rps} / $a->{rps} : 0);
    } 'first', 'second';
}

sub filters_report {
    my ($res, $cmd, $date) = @_;
    my @out;

    push @out, '## 9. Read filters: a reader muting 1,000 authors, one '
        . 'hiding 100 posts', '',
        "Measured $date by `$cmd`. Two readers follow the same five authors "
        . "($res->{posts} posts); one mutes nobody, the other mutes "
        . "$res->{muted} "
        . "authors (the filters cached next to the timeline: "
        . "$res->{filters}), one of them among the five, whose posts the "
        . 'reads leave out. Requests/s of each read, one worker, link '
        . sprintf('mode (the %d mutes took %.1f s to make).',
            $res->{muted}, $res->{mute_s}), '',
        '| read | muting nobody: req/s | p99 ms | muting '
        . "$res->{muted}: req/s | p99 ms | ratio |",
        '|---|---|---|---|---|---|';

    push @out, filters_rows($res, 'frm');

    push @out, '', 'Target: the first page ≥ 0.9× with the filters '
        . '(one round trip either way).', '';

    push @out, "A third reader follows the same authors and hid "
        . "$res->{hidden} posts of the timeline, one in $res->{hidden_step} "
        . 'of its newest '
        . "(the filter set: $res->{hidden_fields} fields). The first page "
        . 'is still kept and copied; a page read from the list checks its '
        . 'candidates with one HMGET.', '',
        '| read | hiding nothing: req/s | p99 ms | hiding '
        . "$res->{hidden}: req/s | p99 ms | ratio |",
        '|---|---|---|---|---|---|';

    push @out, filters_rows($res, 'frh');

    push @out, '', 'Target: the first page ≥ 0.95× with 100 hidden posts.',
        '';
    return @out;
}

1;
