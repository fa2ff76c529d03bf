# bench/read_state.pl: part 11 of make bench (bench/run.pl loads it), read
# state: the same first page read by a reader without a read marker and
# by one whose marker is 10 posts below the head, whose pages carry
# X-Feed-Unread (docs/timeline.md#unread-counts); and the count itself,
# GET /users/{uid}/timeline/unread.
#
# The first page is the hot path: the kept page or the worker's own copy,
# one round trip.  The header adds to it the marker's copy (HMGET) and the
# count kept next to the kept pages (HGET), not a round trip.  The two
# readers' runs alternate, five each, so that what else runs on the
# machine weighs on both alike; the medians are compared.

use strict;
use warnings;

use List::Util qw(sum);

my $ROUNDS = 5;

sub median {
    my @v = sort { $a <=> $b } @_;
    return $v[int(@v / 2)];
}

# the readers' reads, side by side; nginx as start_nginx() left it
sub bench_read_state {
    my ($t, $authors, $posts, $quick) = @_;
    my %res = (posts => $posts, rounds => $quick ? 1 : $ROUNDS);

    start_nginx(mode => 'link');

    for my $r ('rs0', 'rsm') {
        follow($r, $_) for @$authors;
    }

    my %urls = map { $_ => "/users/$_/timeline?limit=20" } 'rs0', 'rsm';

    # the marker 10 posts below the head
    my $page = $t->get("/users/rsm/timeline?limit=11");
    my $items = $page->{json}{items} || [];
    die "part 11: no page\n" unless @$items == 11;
    my $m = $t->http('PUT', '/users/rsm/timeline/marker',
        headers => { 'Content-Type' => 'application/json' },
        body => qq({"last_read_id": "$items->[10]{id}"}));
    die "part 11: marker: $m->{status}\n" unless $m->{status} == 200;

    for my $r ('rs0', 'rsm') {
        my $first = $t->get($urls{$r});
        die "part 11: $r: $first->{status}\n" unless $first->{status} == 200;
        my $h = $first->{headers}{'x-feed-unread'};
        die "part 11: $r: X-Feed-Unread " . ($h // 'none') . "\n"
            if $r eq 'rsm' ? ($h // '') ne '10' : defined $h;
    }
    my $u = $t->get('/users/rsm/timeline/unread');
    die "part 11: unread: $u->{status} $u->{body}\n"
        unless $u->{status} == 200 && $u->{json}{count} == 10;

    for my $round (1 .. $res{rounds}) {
        for my $r ('rs0', 'rsm') {
            push @{ $res{runs}{$r} }, wrk($urls{$r});
        }
    }

    for my $r ('rs0', 'rsm') {
        my @runs = @{ $res{runs}{$r} };
        $res{first}{$r} = {
            rps => median(map { $_->{rps} } @runs),
            p99 => median(map { $_->{p99} // 0 } @runs),
            all => join(', ', map { sprintf('%.0f', $_->{rps}) } @runs),
            errors => sum(map { $_->{errors} } @runs),
        };
    }

    $res{unread} = wrk('/users/rsm/timeline/unread');
    return \%res;
}

sub read_state_report {
    my ($res, $cmd, $date) = @_;
    my ($a, $b) = @{ $res->{first} }{qw(rs0 rsm)};
    my @out;

    push @out, '## 11. Read state: a marker and the unread header', '',
        "Measured $date by `$cmd`. Two readers follow the same five authors "
        . "($res->{posts} posts); one has no read marker, the other's is 10 "
        . 'posts below the head, and its first pages carry `X-Feed-Unread: '
        . '10`. Requests/s of the first page, limit 20 (the kept page or '
        . 'the worker copy), one worker, link mode: the median of '
        . "$res->{rounds} runs each, the two readers' runs alternating "
        . '(each run\'s in the last column).', '',
        '| read | req/s | p99 ms | runs |',
        '|---|---|---|---|',
        sprintf('| first page, no marker | %.0f | %s | %s |', $a->{rps},
            fmt_ms($a->{p99}), $a->{all}),
        sprintf('| first page, a marker and X-Feed-Unread | %.0f | %s | %s |',
            $b->{rps}, fmt_ms($b->{p99}), $b->{all}),
        sprintf('| GET /users/{uid}/timeline/unread | %.0f | %s | |',
            $res->{unread}{rps}, fmt_ms($res->{unread}{p99})), '',
        sprintf('Ratio, a marker and the header / no marker: **%.2f** '
            . '(target ≥ 0.95).', $a->{rps} ? $b->{rps} / $a->{rps} : 0), '';
    return @out;
}

1;
