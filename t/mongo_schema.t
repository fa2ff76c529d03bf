#!/usr/bin/perl

# The MongoDB indexes made at start (docs/storage.md), for each
# feed_timeline_store, each on a fresh database:
#
#   - the collections every configuration uses get their indexes, named as
#     docs/storage.md names them;
#   - the model in use gets its collection and indexes, and no other
#     model's collection is made: "read" leaves MongoDB without any
#     timeline_* collection.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use FeedTest;
use FeedTest::Store;

# the indexes each collection gets, besides _id's
my %COMMON = (
    follows       => [qw(dst_status_created src_dst src_status_created)],
    follow_counts => [qw(pull)],
    filters       => [qw(dst_kind_created pair src_kind_created)],
    posts         => [qw(author_id in_flight outbox)],
    idempotency   => [qw(expiry)],
    cache_effects => [qw(due since)],
);

my %MODELS = (
    read         => {},
    time_buckets => { timeline_time => [qw(entries user_period)] },
    size_buckets => { timeline_size => [qw(entries user_newest user_open)] },
    cache        => { timeline_cache => [qw(entries)] },
    capped       => { timeline_capped => [qw(post user_id)] },
);

# { collection => [index names but _id_, sorted] } of the test's database
sub indexes {
    my ($t) = @_;
    my $py = <<'PY';
import sys, json
from pymongo import MongoClient
db = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000) \
    .get_default_database('feed')
print(json.dumps({c: sorted(n for n in db[c].index_information()
                            if n != '_id_')
                  for c in db.list_collection_names()}))
PY
    open(my $fh, '-|', $FeedTest::PYTHON, '-c', $py, $t->mongo_uri)
        or die "indexes: $!\n";
    my $out = do { local $/; <$fh> };
    close $fh or die "indexes: the listing failed\n";
    return FeedTest::json_decode($out);
}

for my $model (sort keys %MODELS) {
    my $t = FeedTest->new(fresh_mongo => 1);

    $t->start_backends;
    $t->write_conf(FeedTest::Store::conf($model))->run;

    ok($t->wait_for(10, sub { $t->error_log =~ /mongodb indexes ready/ }),
        "$model: indexes ready");

    my $have = indexes($t);
    my %want = (%COMMON, %{ $MODELS{$model} });

    for my $coll (sort keys %want) {
        is(join(' ', @{ $have->{$coll} || [] }),
            join(' ', sort @{ $want{$coll} }), "$model: $coll\'s indexes");
    }

    is(join(' ', sort grep { /^timeline_/ } keys %$have),
        join(' ', sort keys %{ $MODELS{$model} }),
        "$model: the timeline collections");

    $t->finish;
}

done_testing();
