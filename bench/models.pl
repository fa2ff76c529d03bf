# bench/models.pl: part 8 of make bench (bench/run.pl loads it), the
# timelines kept in MongoDB (feed_timeline_store) side by side, as
# Socialite compared its models: what a post costs MongoDB for authors of
# 10, 1,000 and 10,000 followers; what a miss reads for readers of 10, 100
# and 1,000 authors; the bytes a user's timeline takes after 10,000 posts.
#
# The stand-in's times are not MongoDB's: the operations and documents
# are the same on both, and are what is reported first.  Each model runs
# three times on a fresh stand-in: the writers, the readers, the bytes.

use strict;
use warnings;

use Time::HiRes qw(time sleep);
use List::Util qw(sum);
use FeedTest::Util qw(parallel failed_answers);

my @MODELS = qw(read cache time_buckets size_buckets capped);

# the collections of each model (docs/storage.md)
my %COLLS = (
    read         => [],
    cache        => ['timeline_cache'],
    time_buckets => ['timeline_time'],
    size_buckets => ['timeline_size'],
    capped       => ['timeline_capped', 'timeline_capped_users'],
);

# a user's documents in them, for their bytes
my %USER_DOCS = (
    timeline_cache        => '{"_id": "%s"}',
    timeline_time         => '{"_id.u": "%s"}',
    timeline_size         => '{"_id.u": "%s"}',
    timeline_capped       => '{"u": "%s"}',
    timeline_capped_users => '{"_id": "%s"}',
);

my $CACHE_SIZE = 100;

# the bucket models again for the bytes, with feed_timeline_bucket_keep
my @KEPT = qw(time_buckets size_buckets);
my $KEEP = 3;

# time buckets of a minute, not a day: the stand-in copies a document for
# each update, and a day's bucket of 10,000 posts made in minutes would
# take it an hour (a real MongoDB updates in place)
my $BUCKET_TIME = 60;


# every part of every model; the results by model
sub bench_models {
    my ($t, $dir, $quick) = @_;

    # a smoke run shares one stand-in between the parts of a model; a
    # measured one gives each its own (the stand-in scans: the writers'
    # 11,010 follows would slow the 10,000 posts of the bytes tenfold)
    my %o = (
        writers => $quick ? [10, 50] : [10, 1_000, 10_000],
        readers => $quick ? [5, 20] : [10, 100, 1_000],
        posts   => $quick ? 30 : 10_000,
        per     => $quick ? 3 : 10,     # posts by each of a1 to a10
        tries   => $quick ? 1 : 3,      # misses of each reader
        shared  => $quick,
    );
    my %res = (opts => \%o);
    my $t0 = time;

    for my $model (@MODELS) {
        models_start($t, $dir, $model, map { ["w$_", $_] } @{ $o{writers} })
            if $o{shared};

        for my $part (qw(writers readers bytes)) {
            my $t1 = time;
            my $f = \&{"models_$part"};
            $res{$model}{$part} = $f->($t, $dir, $model, \%o);
            printf STDERR "models: %s %s, %.0f s\n", $model, $part,
                time - $t1;
        }
    }

    for my $v (map { "$_+keep" } @KEPT) {
        my $t1 = time;
        models_start($t, $dir, $v) if $o{shared};
        $res{$v}{bytes} = models_bytes($t, $dir, $v, \%o);
        printf STDERR "models: %s bytes, %.0f s\n", $v, time - $t1;
    }

    $t->stop;
    $t->stop_mongo('mongomod');
    $res{s} = time - $t0;

    return \%res;
}


# nginx with the model ("<model>+keep": with feed_timeline_bucket_keep),
# on an empty Redis and an empty stand-in (with the follows of @seed:
# [author, followers] in its data file first)
sub models_start {
    my ($t, $dir, $variant, @seed) = @_;
    my ($model, $keep) = split /\+/, $variant;

    $t->stop or die "models: nginx did not stop gracefully\n";
    $t->stop_mongo('mongomod') if $t->pid('mongomod');
    system('rm', '-rf', "$dir/mongomod-db");
    mkdir "$dir/mongomod-db";

    for my $s (@seed) {
        system("$dir/seed", "$dir/mongomod-db/standin-data.bson", 'feed',
            $s->[0], $s->[1], "$s->[0]f%d") == 0 or die "seed failed\n";
    }

    $t->start_mongo(name => 'mongomod', args => ['--no-unique'], wait => 60);
    $t->redis('FLUSHALL');
    main::start_nginx(mode => 'embed', mongo => 'mongomod',
        mongo_timeout => '60s', pull => 'off',
        extra => "feed_timeline_store $model;\n"
            . "    feed_timeline_bucket_time ${BUCKET_TIME}s;\n"
            . "    feed_cache_size $CACHE_SIZE;"
            . ($keep ? "\n    feed_timeline_bucket_keep $KEEP;" : ''));
}


# the stand-in's counters summed over some collections (all: every one)
sub models_counts {
    my ($t, $colls) = @_;
    my $s = main::mongo_returned('mongomod');
    my %c;
    for my $k (qw(commands statements written returned)) {
        for my $ns (keys %{ $s->{$k} // {} }) {
            (my $coll = $ns) =~ s/^[^.]*\.//;
            next if $colls && !grep { $_ eq $coll } @$colls;
            $c{$k} += $s->{$k}{$ns};
        }
        $c{$k} //= 0;
    }
    return \%c;
}

sub models_delta {
    my ($a, $b) = @_;
    return { map { $_ => $b->{$_} - $a->{$_} } keys %$b };
}


# one post by an author of each number of followers: what the model's
# collections saw of its fanout
sub models_writers {
    my ($t, $dir, $model, $o) = @_;
    return {} unless @{ $COLLS{$model} };

    models_start($t, $dir, $model, map { ["w$_", $_] } @{ $o->{writers} })
        unless $o->{shared};

    # the second post measured: the followers' documents are there then
    my %r;
    for my $n (@{ $o->{writers} }) {
        main::post("w$n", "to $n followers, first");
        main::wait_fanout(600) or die "fanout of w$n did not end\n";
        my $before = models_counts($t, $COLLS{$model});
        main::post("w$n", "to $n followers");
        main::wait_fanout(600) or die "fanout of w$n did not end\n";
        $r{$n} = models_delta($before, models_counts($t, $COLLS{$model}));
    }

    return \%r;
}


# readers of 10, 100, 1,000 authors (r<n> follows a1 to a<n>), who read
# once before the posts (their floor, their document); then a1 to a10 post
# 10 times each (a smoke run: 3), the others once; then each reader's
# first page misses the Redis cache, three times (a smoke run: once): the
# documents and commands of the last, the median time
sub models_readers {
    my ($t, $dir, $model, $o) = @_;

    models_start($t, $dir, $model) unless $o->{shared};

    my @readers = @{ $o->{readers} };
    my $max = $readers[-1];
    my @reqs;
    for my $a (1 .. $max) {
        push @reqs, map { [ 'PUT', "/users/r$_/following/a$a" ] }
            grep { $_ >= $a } @readers;
    }
    my @bad = failed_answers(204, [ map { $_->[1] } @reqs ],
        parallel($t, 32, @reqs));
    die "models: follows failed: $bad[0]\n" if @bad;

    for my $r (@readers) {
        my $st = $t->get("/users/r$r/timeline")->{status};
        die "models: r$r read $st\n" unless $st == 200;
    }
    sleep 2.5;      # past the floors, 2 s ahead of the clock

    @reqs = map { my $a = $_;
        map { [ 'POST', "/users/a$a/posts", qq({"body": "a$a $_"}) ] }
            1 .. ($a <= 10 ? $o->{per} : 1) } 1 .. $max;
    @bad = failed_answers(201, [ map { $_->[1] } @reqs ],
        parallel($t, 32, @reqs));
    die "models: posts failed: $bad[0]\n" if @bad;
    main::wait_fanout(600) or die "models: fanout did not end\n";

    my %r;
    for my $n (@readers) {
        my (@ms, $d, $items);
        for (1 .. $o->{tries}) {
            my $keys = $t->redis('KEYS', "feed:tl*{r$n}") || [];
            $t->redis('DEL', @$keys) if @$keys;
            my $before = models_counts($t);
            my $t0 = time;
            my $res = $t->get("/c/users/r$n/timeline?limit=20",
                timeout => 120);
            push @ms, (time - $t0) * 1000;
            die "models: r$n miss: $res->{status}\n"
                unless $res->{status} == 200
                && main::body_cache($res) eq 'MISS';
            $d = models_delta($before, models_counts($t));
            $items = scalar @{ $res->{json}{items} // [] };
        }
        @ms = sort { $a <=> $b } @ms;
        $r{$n} = { %$d, ms => $ms[$#ms / 2], items => $items,
                   posts => $n <= 10 ? $o->{per} * $n
                       : 10 * $o->{per} + ($n - 10) };
    }

    return \%r;
}


# the bytes (BSON) of a user's kept timeline after $o->{posts} posts of
# whom they follow
sub models_bytes {
    my ($t, $dir, $variant, $o) = @_;
    my ($model) = split /\+/, $variant;
    return {} unless @{ $COLLS{$model} };

    models_start($t, $dir, $variant) unless $o->{shared};

    $t->http('PUT', '/users/b1/following/bw')->{status} == 204
        or die "models: follow failed\n";
    $t->get('/users/b1/timeline')->{status} == 200
        or die "models: b1 read failed\n";
    sleep 2.5;

    my $left = $o->{posts};
    while ($left > 0) {
        my $k = $left > 500 ? 500 : $left;
        my @reqs = map { [ 'POST', '/users/bw/posts',
            qq({"body": "post number $_ of many, about the length of one"}) ]
            } 1 .. $k;
        my @bad = failed_answers(201, [ map { $_->[1] } @reqs ],
            parallel($t, 32, @reqs));
        die "models: posts failed: $bad[0]\n" if @bad;
        $left -= $k;
    }
    main::wait_fanout(600) or die "models: fanout did not end\n";

    my %r = (bytes => 0, docs => 0, entries => 0);
    for my $coll (@{ $COLLS{$model} }) {
        my $flt = sprintf($USER_DOCS{$coll}, 'b1');
        my ($n, $bytes, $entries) = models_bson($t, $coll, $flt);
        $r{docs} += $n;
        $r{bytes} += $bytes;
        $r{entries} += $entries;
    }

    return \%r;
}


# the documents of a filter: how many, their BSON bytes, their entries
sub models_bson {
    my ($t, $coll, $flt) = @_;
    my $py = <<'PY';
import sys, bson
from bson import json_util
from pymongo import MongoClient
db = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000,
                 socketTimeoutMS=600000).get_default_database('feed')
docs = list(db[sys.argv[2]].find(json_util.loads(sys.argv[3])))
print(len(docs), sum(len(bson.encode(d)) for d in docs),
      sum(len(d['c']) if isinstance(d.get('c'), list)
          else (1 if 'i' in d else 0) for d in docs))
PY
    open my $fh, '-|', $FeedTest::PYTHON, '-c', $py,
        $t->mongo_uri('mongomod'), $coll, $flt or die "models: $!\n";
    my $out = <$fh>;
    close $fh or die "models: bytes of $coll failed\n";
    return split ' ', $out;
}


# the part's section of docs/benchmarks.md
sub models_report {
    my ($res, $cmd, $date) = @_;
    my $o = $res->{opts};
    my @out = ('## 8. Timelines kept in MongoDB', '',
        "Measured $date by `$cmd`.", '',
        'The models of `feed_timeline_store` side by side, as Socialite '
        . 'compared them (seeds 000 and 003), each on a fresh stand-in, '
        . "embed mode, `feed_cache_size $CACHE_SIZE`, "
        . "`feed_timeline_bucket_time ${BUCKET_TIME}s`, "
        . '`feed_timeline_bucket_size 100`, one nginx worker. '
        . 'The stand-in\'s times are not MongoDB\'s; the operations and '
        . 'documents are the same on both (counted by the stand-in per '
        . 'collection: `serverStatus` `standin`).', '',
        '### What a post costs MongoDB', '',
        'The second post of an author of N followers, none of whom ever '
        . 'read, fanned out in one page (the model\'s collections only; '
        . 'the post itself, the follows and Redis are the same for every '
        . 'model; the author\'s own timeline is written too): round '
        . 'trips, write statements, documents written (inserted, matched, '
        . 'upserted) and documents read.', '',
        '| model | followers | round trips | statements | documents '
        . 'written | documents read |',
        '|---|---|---|---|---|---|');

    for my $m (@MODELS) {
        my $w = $res->{$m}{writers};
        if (!%$w) {
            push @out, "| $m | any | 0 | 0 | 0 | 0 |";
            next;
        }
        for my $n (@{ $o->{writers} }) {
            my $r = $w->{$n};
            push @out, sprintf('| %s | %d | %d | %d | %d | %d |',
                $m, $n, $r->{commands}, $r->{statements}, $r->{written},
                $r->{returned});
        }
    }

    push @out, '', '### What a miss reads', '',
        'The first page (`limit=20`) of a reader of N authors, whose '
        . 'Redis timeline is gone: the rebuild asks the fallback for '
        . "$CACHE_SIZE posts. The readers read once before the authors "
        . 'posted (with a store: their floor, or their `cache` document), '
        . "then a1 to a10 posted $o->{per} times each and the others "
        . 'once. Round trips and documents returned by MongoDB for the '
        . 'whole miss (every collection), the median time of '
        . "$o->{tries}. A reader of 5,000 authors, with and without "
        . '`feed_timeline_window`, and one chunk of them held 2 s: part '
        . '14.', '',
        '| model | authors followed | posts of theirs | round trips | '
        . 'documents read | ms |', '|---|---|---|---|---|---|';

    for my $m (@MODELS) {
        for my $n (@{ $o->{readers} }) {
            my $r = $res->{$m}{readers}{$n};
            push @out, sprintf('| %s | %d | %d | %d | %d | %.1f |', $m, $n,
                $r->{posts}, $r->{commands}, $r->{returned}, $r->{ms});
        }
    }

    push @out, '', '### Bytes per user', '',
        "A user following one author who then posts $o->{posts} times "
        . '(each post about 60 bytes of body, embedded): the documents '
        . 'and BSON bytes of that user\'s kept timeline.', '',
        '| model | documents | entries | bytes | bytes per entry |',
        '|---|---|---|---|---|';

    for my $m (@MODELS, map { "$_+keep" } @KEPT) {
        my $b = $res->{$m}{bytes};
        (my $name = $m) =~ s/\+keep$/, `feed_timeline_bucket_keep $KEEP`/;
        if (!%$b) {
            push @out, "| $name | 0 | 0 | 0 | - |";
            next;
        }
        push @out, sprintf('| %s | %d | %d | %d | %.0f |', $name,
            $b->{docs}, $b->{entries}, $b->{bytes},
            $b->{entries} ? $b->{bytes} / $b->{entries} : 0);
    }

    push @out, '', sprintf('This part took %.0f s.', $res->{s}), '';

    return @out;
}

1;
