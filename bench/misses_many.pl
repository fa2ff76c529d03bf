# bench/misses_many.pl: part 14 of make bench (bench/run.pl loads it),
# part 8's "what a miss reads" for a reader of many authors (issue 34): a
# reader of 5,000 authors, 200 of whom posted in the last days (5 posts
# each), the 4,800 others 60 days ago (one post each).  Its first page
# misses Redis: the rebuild asks feed_timeline_source for 100 posts, by
# 25 chunks of 200 authors.
#
# Side by side, on the read model, link mode, one nginx worker: with and
# without feed_timeline_window, the chunks in parallel (4) or one after
# another (1, as before issue 34), on the stand-in as it is and with 5 ms
# of latency a command (a network's round trip: the stand-in serializes
# its commands, the latency is slept outside that lock); then one chunk's
# queries held 2 s by the stand-in (feedDelayAuthors) under a deadline of
# 1 s.  For each: MongoDB's round trips and documents returned (the
# stand-in's counters, every collection), the median time of three
# misses, X-Feed-Cache and the posts on the page.

use strict;
use warnings;

use Time::HiRes qw(time sleep);

my $MANY = 5000;
my $ACTIVE = 200;

my @MANY_ROWS = (
    [ 'window 30d, 4 at once',              '30d', 4, 0, 0 ],
    [ 'no window, 4 at once',               '0',   4, 0, 0 ],
    [ 'window 30d, one after another',      '30d', 1, 0, 0 ],
    [ 'window 30d, 4 at once, 5 ms a command',         '30d', 4, 5, 0 ],
    [ 'no window, 4 at once, 5 ms a command',          '0',   4, 5, 0 ],
    [ 'window 30d, one after another, 5 ms a command', '30d', 1, 5, 0 ],
    [ 'window 30d, 4 at once, a chunk held 2 s, deadline 1 s',
                                            '30d', 4, 0, 2000 ],
);


# the reader's follows and the authors' posts, straight into the stand-in
sub many_seed {
    my ($t, $o) = @_;
    my $now = int time;
    my (@follows, @posts);
    my $n = 0;

    for my $i (1 .. $o->{many}) {
        push @follows, qq({"src": "rm", "dst": "m$i", "status": 1, )
            . qq("created": {"\$date": ${\ ($i * 1000)}}});

        my @ages = $i % ($o->{many} / $o->{active}) == 0
            ? map { 3600 * $_ + $i } 1 .. 5 : (60 * 86400 + $i);

        for my $age (@ages) {
            my $id = sprintf('%08x%016x', $now - $age, ++$n);
            push @posts, qq({"_id": {"\$oid": "$id"}, "author": "m$i", )
                . qq("body": "post $n of m$i", "ts": )
                . (($now - $age) * 1000) . '}';
        }
    }

    many_insert($t, follows => \@follows);
    many_insert($t, posts => \@posts);
}

# documents (extended JSON) into the part's stand-in, through a file
sub many_insert {
    my ($t, $coll, $docs) = @_;
    my $file = $t->dir . "/many-$coll.jsonl";
    open my $fh, '>', $file or die "$file: $!\n";
    print $fh "$_\n" for @$docs;
    close $fh;

    my $py = <<'PY';
import sys
from bson import json_util
from pymongo import MongoClient
uri, coll, path = sys.argv[1:4]
db = MongoClient(uri, serverSelectionTimeoutMS=5000).get_default_database('feed')
with open(path) as f:
    db[coll].insert_many([json_util.loads(l) for l in f if l.strip()])
PY
    system($FeedTest::PYTHON, '-c', $py, $t->mongo_uri('mongomany'), $coll,
        $file) == 0 or die "part 14: insert into $coll failed\n";
}


# misses of the reader's first page: the counters of the last, the median
sub many_misses {
    my ($t, $tries) = @_;
    my (@ms, $d, $res);

    for (1 .. $tries) {
        my $keys = $t->redis('KEYS', '*{rm}*') || [];
        $t->redis('DEL', @$keys) if @$keys;
        my $before = main::mongo_returned('mongomany');
        my $t0 = time;
        $res = $t->get('/c/users/rm/timeline?limit=20', timeout => 120);
        push @ms, (time - $t0) * 1000;
        die "part 14: miss: $res->{status}\n" unless $res->{status} == 200;
        $d = many_delta($before, main::mongo_returned('mongomany'));
        sleep 2.2 if main::body_cache($res) eq 'PARTIAL';   # held finds
    }

    @ms = sort { $a <=> $b } @ms;
    return { %$d, ms => $ms[$#ms / 2], cache => main::body_cache($res),
             items => scalar @{ $res->{json}{items} // [] } };
}

sub many_delta {
    my ($a, $b) = @_;
    my %d;
    for my $k (qw(commands returned)) {
        $d{$k} += $b->{$k}{$_} - ($a->{$k}{$_} // 0)
            for keys %{ $b->{$k} // {} };
        $d{$k} //= 0;
    }
    return \%d;
}


sub bench_misses_many {
    my ($t, $quick) = @_;
    my %o = (many => $quick ? 500 : $MANY, active => $quick ? 20 : $ACTIVE,
             tries => $quick ? 1 : 3);
    my $t0 = time;

    $t->stop;
    $t->start_mongo(name => 'mongomany', args => ['--no-unique']);
    many_seed($t, \%o);

    my @rows;
    for my $row (@MANY_ROWS) {
        my ($name, $window, $parallel, $latency, $held) = @$row;
        main::start_nginx(mode => 'link', mongo => 'mongomany',
            mongo_timeout => '60s', pull => 'off',
            extra => "feed_cache_size 100;\n"
                . "    feed_timeline_window $window;\n"
                . "    feed_timeline_rebuild_parallel $parallel;\n"
                . '    feed_timeline_rebuild_deadline '
                . ($held ? '1s' : '0') . ';');
        $t->mongo_latency($latency, 'mongomany');
        $t->mongo_delay_authors(ms => $held, authors => ['m25'],
            mongo => 'mongomany') if $held;

        push @rows, { name => $name, %{ many_misses($t, $o{tries}) } };

        $t->mongo_delay_authors_off('mongomany') if $held;
        $t->mongo_latency(0, 'mongomany');
    }

    $t->stop;
    $t->stop_mongo('mongomany');
    $t->redis('FLUSHALL');

    return { %o, rows => \@rows, s => time - $t0 };
}


sub misses_many_report {
    my ($r, $cmd, $date) = @_;

    my @out = ('## 14. What a miss reads: a reader of many authors', '',
        "Measured $date by `$cmd` (this part: "
        . sprintf('%.0f', $r->{s}) . ' s).', '',
        "Part 8's misses for a reader of $r->{many} authors, $r->{active} "
        . 'of whom posted in the last days (5 posts each), the others 60 '
        . 'days ago (one post each) (issue 34). The first page (`limit=20`) '
        . 'misses Redis; the rebuild asks `feed_timeline_source` for 100 '
        . 'posts, by chunks of 200 authors (`feed_timeline_rebuild_parallel` '
        . 'of them at once), those newer than `feed_timeline_window` first. '
        . 'Read model, link mode, one nginx worker, the stand-in of part 8. '
        . 'Round trips and documents returned by MongoDB for the whole miss '
        . '(every collection: the reader\'s follows are '
        . "$r->{many} of them), the median time of $r->{tries}. With 5 ms a "
        . 'command, the stand-in sleeps before each answer, outside the lock '
        . 'that serializes its commands (a network\'s round trip). The last '
        . 'row holds the finds of the chunk of `m25` 2 s (the stand-in\'s '
        . '`feedDelayAuthors`) under `feed_timeline_rebuild_deadline 1s`.',
        '', '| rebuild | round trips | documents read | ms | X-Feed-Cache '
        . '| posts on the page |', '|---|---|---|---|---|---|');

    for my $row (@{ $r->{rows} }) {
        push @out, sprintf('| %s | %d | %d | %.1f | %s | %d |', $row->{name},
            $row->{commands}, $row->{returned}, $row->{ms}, $row->{cache},
            $row->{items});
    }

    push @out, '';
    return @out;
}

1;
