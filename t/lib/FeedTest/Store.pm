package FeedTest::Store;

# What the tests of feed_timeline_store share: an nginx.conf for a model,
# the posts made and whom each reader follows, what fanout on read would
# answer, and the fallback source's pages checked against it.

use strict;
use warnings;

use Test::More ();
use Time::HiRes ();
use FeedTest::Util qw(rd server_conf follow_each none_failed parallel
    failed_answers);

# the conf of a model: 2 workers, feed_cache_size 10, a pull threshold of
# 5, the fallback open to direct requests; @extra: more directives
sub conf {
    my ($model, @extra) = @_;
    my $extra = join '', map { "    $_;\n" } @extra;
    my $conf = <<"EOF" . server_conf(open => 1) . "}\n";
worker_processes 2;
%%FEED_THREAD_POOL%%
events { worker_connections 256; }
http {
    %%FEED_BACKENDS%%
    feed_mongo_timeout 5s;
    feed_cache_size 10;
    feed_timeline_store $model;
    feed_pull_threshold 5;
    feed_fanout on;
    feed_fanout_block 200ms;
    feed_fanout_claim_idle 2s;
$extra
EOF
    # an extra feed_cache_size replaces the one of every model's test
    $conf =~ s/^    feed_cache_size 10;\n//m
        if grep { /^feed_cache_size\b/ } @extra;
    return $conf;
}

sub new {
    my ($class, $t) = @_;
    return bless { t => $t, posts => [], by => {}, follows => {} }, $class;
}

# a post, kept in order; its id
sub post {
    my ($self, $author, $body) = @_;
    my $id = FeedTest::Util::post($self->{t}, $author, $body) or return;
    push @{ $self->{posts} }, $id;
    $self->{by}{$id} = $author;
    return $id;
}

# the graph of the store tests: r1 follows a1, a2 and celeb (a pull
# author: 6 followers over the threshold of 5); i1, who never reads,
# follows a1
sub graph {
    my ($self) = @_;
    my $t = $self->{t};
    none_failed([ follow_each($t, 'a1', 'r1', 'i1') ], 'follows of a1');
    none_failed([ follow_each($t, 'a2', 'r1') ], 'follows of a2');
    none_failed([ follow_each($t, 'celeb', 'r1', map { "x$_" } 1 .. 5) ],
        'follows of celeb: 6, over the threshold');
    $self->follows('r1', qw(a1 a2 celeb));
}

# the start of the tests of a model with floors ($floor_of: a user's,
# undef without one): the graph, posts of a1 and a2, r1's first read, which
# sets r1's floor and no one else's; then past the floor (2 s ahead, for
# the nodes' clocks) celeb's turn into a pull author, and two posts of
# theirs.  The turn's id.
sub floor_and_turn {
    my ($self, $floor_of) = @_;
    my $t = $self->{t};

    $self->graph;
    $self->post('a1', "a1 $_") for 1 .. 3;
    $self->post('a2', "a2 $_") for 1 .. 3;

    Test::More::is($floor_of->('r1'), undef,
        'no floor before the first read');
    Test::More::is($t->get('/users/r1/timeline')->{status}, 200,
        'first read: 200');
    Test::More::ok($floor_of->('r1'), 'first read: r1\'s floor set');
    Test::More::is($floor_of->('i1'), undef,
        'i1, who never read: no floor');

    Time::HiRes::sleep(2.5);
    my $turn = $self->post('celeb', 'the turn');
    Test::More::ok($t->wait_for(5,
        sub { (FeedTest::Util::node_counts($t)->{'pull.to_pull'} // 0) == 1 }),
        'the turn: celeb is a pull author');
    $self->post('celeb', "pulled $_") for 1 .. 2;
    return $turn;
}

sub posts { @{ $_[0]{posts} } }
sub by { $_[0]{by}{ $_[1] } }
sub last_post { $_[0]{posts}[-1] }

sub deleted {
    my ($self, $id) = @_;
    $self->{posts} = [ grep { $_ ne $id } @{ $self->{posts} } ];
}

sub follows {
    my ($self, $user, @authors) = @_;
    $self->{follows}{$user}{$_} = 1 for @authors;
}

sub unfollows {
    my ($self, $user, $author) = @_;
    delete $self->{follows}{$user}{$author};
}

# what fanout on read answers: the posts of whom the user follows, newest
# first
sub expected {
    my ($self, $user) = @_;
    my $f = $self->{follows}{$user} || {};
    return [ reverse grep { $f->{ $self->{by}{$_} } } @{ $self->{posts} } ];
}

# the ids of the fallback source's answer; undef unless 200
sub source_ids {
    my ($self, $q) = @_;
    my $r = $self->{t}->get("/_feed/timeline?$q");
    return undef unless $r->{status} == 200;
    return [ map { $_->{id} } @{ $r->{json}{items} // [] } ];
}

# the user's cached timeline gone from Redis (as after a restart or an
# eviction), the rest of Redis left as it is
sub forget {
    my ($self, $user) = @_;
    my $keys = rd($self->{t}, 'KEYS', "feed:tl*{$user}") || [];
    $self->{t}->redis('DEL', @$keys) if @$keys;
}

# the source's pages along the timeline, for every max_id and since_id,
# limits 3 and 7, and the first page: what differs from fanout on read
sub pages_bad {
    my ($self, $user) = @_;
    my $want = $self->expected($user);
    my @bad;
    for my $limit (3, 7) {
        for my $i (0 .. $#$want) {
            my $got = $self->source_ids("user=$user&limit=$limit"
                . "&max_id=$want->[$i]");
            my $end = $i + $limit < $#$want ? $i + $limit : $#$want;
            my @w = @$want[ $i + 1 .. $end ];
            push @bad, "max_id #$i, limit $limit: got "
                . join(' ', @{ $got // ['error'] }) . ' want '
                . join(' ', @w)
                unless $got && join(' ', @$got) eq join(' ', @w);
            my $since = $self->source_ids("user=$user&limit=$limit"
                . "&since_id=$want->[$i]");
            my @s = @$want[ 0 .. $i - 1 ];
            @s = @s[ 0 .. $limit - 1 ] if @s > $limit;
            push @bad, "since_id #$i, limit $limit"
                unless $since && join(' ', @$since) eq join(' ', @s);
        }
    }
    my $first = $self->source_ids("user=$user&limit=50");
    push @bad, 'first page' unless $first
        && join(' ', @$first) eq join(' ', @$want);
    return @bad;
}

# a race: r2 follows 8 authors, reads (a floor), then 48 posts of theirs
# are made 24 at a time, so that the workers' deliveries to r2 race for
# the same documents; $gap: seconds between the two halves; $n posts
# instead of 48, $at_once at a time instead of 24
sub race {
    my ($self, $gap, $n, $at_once) = @_;
    $n ||= 48;
    $at_once ||= 24;
    my $t = $self->{t};
    my @c = map { "c$_" } 1 .. 8;
    none_failed([ map { follow_each($t, $_, 'r2') } @c ], 'r2 follows 8');
    $self->follows('r2', @c);
    Test::More::is($t->get('/users/r2/timeline')->{status}, 200,
        'r2 reads: a floor');
    Time::HiRes::sleep(2.5);

    my @reqs = map { my $a = $c[$_ % 8];
        [ 'POST', "/users/$a/posts", qq({"body": "race $_"}) ] } 0 .. $n - 1;
    my $half = int($n / 2);
    my @res = parallel($t, $at_once, @reqs[0 .. $half - 1]);
    Time::HiRes::sleep($gap) if $gap;
    push @res, parallel($t, $at_once, @reqs[$half .. $n - 1]);
    none_failed([ failed_answers(201, [ map { $_->[1] } @reqs ], @res) ],
        "$n posts made, $at_once at a time");
    for my $i (0 .. $#res) {
        my $id = $res[$i]{json}{id} // next;
        push @{ $self->{posts} }, $id;
        $self->{by}{$id} = $c[$i % 8];
    }
    @{ $self->{posts} } = sort @{ $self->{posts} };
}

# a test that deliveries were in flight at once, in the stand-in's command
# log: a command of one connection on $coll between another's first ($first
# says which command it is) and its last ($last) (skipped with a real
# MongoDB)
sub interleaved {
    my ($self, $coll, $first, $last) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    SKIP: {
        Test::More::skip('the stand-in\'s command log', 1)
            if FeedTest::real_mongo();
        my %open;
        my $n = 0;
        for my $c (grep { ($_->{coll} // '') eq $coll }
            $self->{t}->mongo_commands)
        {
            my ($f, $l) = ($first->($c), $last->($c));
            next unless $f || $l;
            $n++ if grep { $_ != $c->{conn} } keys %open;
            $open{ $c->{conn} } = 1 if $f;
            delete $open{ $c->{conn} } if $l;
        }
        Test::More::ok($n > 0, "concurrent fanout: deliveries were in "
            . "flight at once ($n times)");
    }
}

# a test that a collection was read by a find matching $how (the
# stand-in's command log: skipped with a real MongoDB)
sub was_read {
    my ($self, $coll, $name, $how) = @_;
    my $t = $self->{t};
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    SKIP: {
        Test::More::skip('the stand-in\'s command log', 1)
            if FeedTest::real_mongo();
        Test::More::ok(scalar(grep { ($_->{cmd} // '') eq 'find'
            && ($_->{coll} // '') eq $coll && (!$how || $how->($_)) }
            $t->mongo_commands), $name);
    }
}

# a post of a1 whose fanout meets MongoDB gone (the stand-in answers
# slowly, and is stopped as soon as the post is stored): the entry stays
# pending, and once MongoDB is back it is delivered into r1's store, once.
# $count->($id): how often r1's store has the post.  Skipped with a real
# MongoDB, which the tests do not stop.
sub mongo_down {
    my ($self, $name, $count) = @_;
    my $t = $self->{t};
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    SKIP: {
        Test::More::skip('a real MongoDB is not stopped', 3)
            if FeedTest::real_mongo();
        $t->mongo_latency(800);
        my $late = $self->post('a1', "$name: while MongoDB goes");
        $t->stop_mongo;
        $t->mongo_latency(0);
        # the fanout fails once server selection gives up, after up to
        # feed_mongo_timeout (5 s) from the stop: a busy machine adds more
        Test::More::ok($t->wait_for(15,
            sub { $t->error_log =~ /fanout of entry .* will retry/ }),
            "$name: the fanout failed, to be tried again");
        $t->start_mongo;
        Test::More::ok($t->wait_for(10, sub { $count->($late) }),
            "$name: delivered once it is back");
        Time::HiRes::sleep(0.5);
        Test::More::is($count->($late), 1, "$name: once");
    }
}

# the stream entry of a post, added again: its fanout runs twice
sub redeliver {
    my ($self, $id) = @_;
    my $stream = rd($self->{t}, 'XRANGE', 'feed:posts', '-', '+') || [];
    my ($entry) = grep { grep { $_ eq $id } @{ $_->[1] } } @$stream;
    return 0 unless $entry;
    $self->{t}->redis('XADD', 'feed:posts', '*', @{ $entry->[1] });
    return 1;
}

1;
