
/*
 * ngx_feed_module: a rebuild's chunks of authors, read in parallel under
 * one deadline.
 *
 * A reader's authors are read NGX_HTTP_FEED_POSTS_CHUNK at a time, one
 * thread pool task a chunk, at most feed_timeline_rebuild_parallel of them
 * at once, so that one reader of many authors does not take the pool.
 * Each task answers its chunk's newest posts in range; the page is merged
 * here, newest first, no post twice.  With feed_timeline_window, every
 * chunk is asked first for the posts newer than the edge, and the chunks
 * are asked again for older ones only when those do not fill the page.
 *
 * At feed_timeline_rebuild_deadline the page is made of the chunks that
 * answered, and said partial: a slow shard of posts costs its authors'
 * posts, not the whole page.  Tasks still running then cannot be
 * cancelled: they hold the rebuild until they come back, their answers
 * thrown away; MongoDB itself stops a query at feed_mongo_timeout from
 * the rebuild's start (maxTimeMS), when nobody waits for it any more.  A
 * chunk that fails is missing from the page as a late one is; the page
 * fails only when no chunk answered.
 */


#include "ngx_http_feed_timeline_chunks.h"


#define NGX_HTTP_FEED_CHUNK_WAITING   0
#define NGX_HTTP_FEED_CHUNK_ANSWERED  1
#define NGX_HTTP_FEED_CHUNK_FAILED    2
#define NGX_HTTP_FEED_CHUNK_SKIPPED   3


typedef struct {
    ngx_http_feed_posts_found_t   found;
    ngx_uint_t                    state;
} ngx_http_feed_chunk_t;


typedef struct {
    ngx_http_feed_chunks_t        ch;         /* first: what callers see */

    ngx_http_feed_mongo_t        *mongo;
    ngx_log_t                    *log;        /* the request's, then the
                                                 cycle's once it went */
    ngx_pool_cleanup_t           *cleanup;
    ngx_uint_t                    refs;

    char                        **authors;
    size_t                        nauthors;
    ngx_uint_t                    limit;
    ngx_uint_t                    parallel;

    /* the page's range, the window's edge, and the range of the round */
    bson_oid_t                    max_id;
    bson_oid_t                    since_id;
    ngx_uint_t                    has_max;
    ngx_uint_t                    has_since;
    ngx_http_feed_posts_window_t  window;
    ngx_http_feed_posts_range_t   range;

    /* round 0: the range, or its part newer than the edge; 1: older */
    ngx_uint_t                    round;
    ngx_uint_t                    two_rounds;
    ngx_uint_t                    next;
    ngx_uint_t                    running;
    ngx_uint_t                    back;
    ngx_uint_t                    starting;
    ngx_uint_t                    overdue;

    ngx_msec_t                    deadline_at;
    ngx_msec_t                    expires_at;
    ngx_event_t                   deadline;

    /* each chunk's answer in each round: [round * nchunks + chunk] */
    ngx_http_feed_chunk_t        *chunks;
} ngx_http_feed_chunks_in_t;


/* a chunk's task, in its own pool: it may outlive the request */
typedef struct {
    ngx_http_feed_chunks_in_t    *in;
    ngx_uint_t                    slot;
    char                        **authors;
    size_t                        n;
    ngx_http_feed_posts_range_t   range;
    bson_oid_t                    max_id;
    bson_oid_t                    since_id;
    int64_t                       max_time_ms;
    ngx_http_feed_posts_found_t   found;
} ngx_http_feed_chunk_task_t;


static void ngx_http_feed_chunks_range(ngx_http_feed_chunks_in_t *in,
    time_t edge);
static void ngx_http_feed_chunks_go(ngx_http_feed_chunks_in_t *in);
static ngx_int_t ngx_http_feed_chunks_post(ngx_http_feed_chunks_in_t *in,
    ngx_uint_t i);
static void ngx_http_feed_chunk_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_chunk_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_chunks_round(ngx_http_feed_chunks_in_t *in);
static void ngx_http_feed_chunks_expired(ngx_event_t *ev);
static ngx_uint_t ngx_http_feed_chunks_answered(
    ngx_http_feed_chunks_in_t *in);
static ngx_uint_t ngx_http_feed_chunks_count(ngx_http_feed_chunks_in_t *in,
    ngx_uint_t *got);
static void ngx_http_feed_chunks_finish(ngx_http_feed_chunks_in_t *in,
    ngx_uint_t partial);
static ngx_int_t ngx_http_feed_chunks_merge(ngx_http_feed_chunks_in_t *in);
static void ngx_http_feed_chunks_cleanup(void *data);
static void ngx_http_feed_chunks_unref(ngx_http_feed_chunks_in_t *in);


/*
 * Starts the reads; NULL when nothing could be (the authors stay the
 * caller's).  The page may be there already (ch->finished: every task
 * failed to be posted); else done() is called once it is, unless the
 * request went meanwhile.
 */

ngx_http_feed_chunks_t *
ngx_http_feed_chunks_start(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_chunks_ask_t *ask,
    ngx_http_feed_chunks_done_pt done, void *data)
{
    ngx_msec_int_t              left;
    ngx_http_feed_chunks_in_t  *in;

    in = ngx_calloc(sizeof(ngx_http_feed_chunks_in_t), r->connection->log);
    if (in == NULL) {
        return NULL;
    }

    in->ch.nchunks = (ask->nauthors + NGX_HTTP_FEED_POSTS_CHUNK - 1)
                     / NGX_HTTP_FEED_POSTS_CHUNK;

    in->chunks = ngx_calloc(2 * in->ch.nchunks * sizeof(ngx_http_feed_chunk_t),
                            r->connection->log);
    in->cleanup = ngx_pool_cleanup_add(r->pool, 0);

    if (in->chunks == NULL || in->cleanup == NULL) {
        ngx_free(in->chunks);
        ngx_free(in);
        return NULL;
    }

    in->cleanup->handler = ngx_http_feed_chunks_cleanup;
    in->cleanup->data = in;

    in->ch.request = r;
    in->ch.done = done;
    in->ch.data = data;
    in->ch.rc = NGX_OK;

    in->mongo = fmcf->mongo_client;
    in->log = r->connection->log;
    in->refs = 1;
    in->authors = ask->authors;
    in->nauthors = ask->nauthors;
    in->limit = ask->limit;
    in->parallel = fmcf->timeline_parallel;

    if (ask->max_id) {
        bson_oid_init_from_string(&in->max_id, ask->max_id);
        in->has_max = 1;
    }

    if (ask->since_id) {
        bson_oid_init_from_string(&in->since_id, ask->since_id);
        in->has_since = 1;
    }

    ngx_http_feed_chunks_range(in, ask->edge);

    in->deadline.handler = ngx_http_feed_chunks_expired;
    in->deadline.data = in;
    in->deadline.log = r->connection->log;

    /*
     * The deadline counts from the rebuild's start; when the follows' read
     * took all of it, there is nothing to answer with, and the chunks are
     * waited for as they were before the deadline.
     */

    in->expires_at = ask->started + fmcf->mongo.timeout;
    in->deadline_at = ask->started + fmcf->timeline_deadline;

    left = (ngx_msec_int_t) (in->deadline_at - ngx_current_msec);

    if (fmcf->timeline_deadline && left > 0) {
        ngx_add_timer(&in->deadline, (ngx_msec_t) left);
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed timeline chunks: %uz authors, %ui chunks, %ui "
                   "at once, deadline in %M ms", in->nauthors,
                   in->ch.nchunks, in->parallel,
                   in->deadline.timer_set ? (ngx_msec_t) left : 0);

    in->starting = 1;
    ngx_http_feed_chunks_go(in);
    in->starting = 0;

    return &in->ch;
}


/* the request is done with the page: its memory may go */

void
ngx_http_feed_chunks_release(ngx_http_feed_chunks_t *ch)
{
    ngx_http_feed_chunks_in_t  *in = (ngx_http_feed_chunks_in_t *) ch;

    if (in->cleanup == NULL) {
        return;
    }

    in->cleanup->handler = NULL;
    in->cleanup = NULL;

    ngx_http_feed_chunks_cleanup(in);
}


void
ngx_http_feed_chunks_free_authors(char **authors, size_t n)
{
    size_t  i;

    for (i = 0; i < n; i++) {
        bson_free(authors[i]);
    }

    bson_free(authors);
}


/*
 * The first round's range: the page's, or its part newer than the
 * window's edge when the page reaches past it (as
 * ngx_http_feed_posts_timeline() reads in one thread)
 */

static void
ngx_http_feed_chunks_range(ngx_http_feed_chunks_in_t *in, time_t edge)
{
    ngx_http_feed_posts_range_t  *range = &in->range;

    range->max_id = in->has_max ? &in->max_id : NULL;
    range->since_id = in->has_since ? &in->since_id : NULL;
    range->limit = in->limit;
    range->window = NULL;
    range->cut = NULL;

    if (edge == 0) {
        return;
    }

    ngx_http_feed_posts_window_init(&in->window, edge);
    in->ch.windowed = 1;

    if (range->since_id
        && bson_oid_compare(range->since_id, &in->window.edge) >= 0)
    {
        return;
    }

    if (range->max_id
        && bson_oid_compare(range->max_id, &in->window.above) <= 0)
    {
        in->ch.older = 1;
        return;
    }

    range->since_id = &in->window.edge;
    in->two_rounds = 1;
}


/* as many chunks of the round asked as may be at once */

static void
ngx_http_feed_chunks_go(ngx_http_feed_chunks_in_t *in)
{
    ngx_uint_t              n;
    ngx_http_feed_chunk_t  *chunk;

    n = in->ch.nchunks;

    while (in->next < n && in->running < in->parallel) {
        chunk = &in->chunks[in->round * n + in->next];

        if (in->round == 1
            && in->chunks[in->next].state != NGX_HTTP_FEED_CHUNK_ANSWERED)
        {
            /* a chunk missing from the newer posts is missing from all */
            chunk->state = NGX_HTTP_FEED_CHUNK_SKIPPED;
            in->back++;

        } else if (ngx_http_feed_chunks_post(in, in->next) != NGX_OK) {
            chunk->state = NGX_HTTP_FEED_CHUNK_FAILED;
            bson_set_error(&in->ch.error, MONGOC_ERROR_STREAM,
                           MONGOC_ERROR_STREAM_SOCKET,
                           "the thread pool's queue is full");
            in->back++;

        } else {
            in->running++;
        }

        in->next++;
    }

    if (in->back == n) {
        ngx_http_feed_chunks_round(in);
    }
}


static ngx_int_t
ngx_http_feed_chunks_post(ngx_http_feed_chunks_in_t *in, ngx_uint_t i)
{
    ngx_msec_int_t               left;
    ngx_http_feed_mongo_task_t  *t;
    ngx_http_feed_chunk_task_t  *ct;

    if (in->mongo == NULL) {
        return NGX_ERROR;
    }

    t = ngx_http_feed_mongo_task_bg(in->mongo, ngx_http_feed_chunk_run,
                                    ngx_http_feed_chunk_done);
    if (t == NULL) {
        return NGX_ERROR;
    }

    ct = ngx_pcalloc(t->pool, sizeof(ngx_http_feed_chunk_task_t));
    if (ct == NULL) {
        ngx_destroy_pool(t->pool);
        return NGX_ERROR;
    }

    ct->in = in;
    ct->slot = in->round * in->ch.nchunks + i;
    ct->authors = in->authors + i * NGX_HTTP_FEED_POSTS_CHUNK;
    ct->n = ngx_min(NGX_HTTP_FEED_POSTS_CHUNK,
                    in->nauthors - i * NGX_HTTP_FEED_POSTS_CHUNK);

    /* the thread reads its own copy: the rebuild's changes by round */

    ct->range = in->range;

    if (in->range.max_id) {
        bson_oid_copy(in->range.max_id, &ct->max_id);
        ct->range.max_id = &ct->max_id;
    }

    if (in->range.since_id) {
        bson_oid_copy(in->range.since_id, &ct->since_id);
        ct->range.since_id = &ct->since_id;
    }

    left = (ngx_msec_int_t) (in->expires_at - ngx_current_msec);
    ct->max_time_ms = left > 0 ? left : 1;

    t->data = ct;

    if (ngx_http_feed_mongo_post_bg(t) != NGX_OK) {
        return NGX_ERROR;
    }

    in->refs++;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, in->log, 0,
                   "feed timeline chunk %ui of round %ui: %uz authors",
                   i, in->round, ct->n);

    return NGX_OK;
}


static void
ngx_http_feed_chunk_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_chunk_task_t  *ct = t->data;

    t->rc = ngx_http_feed_posts_chunk_read(client, t->database, ct->authors,
                                           ct->n, &ct->range,
                                           ct->max_time_ms, &ct->found,
                                           &t->error);
}


/* a chunk came back: its answer kept, unless the page was made without */

static void
ngx_http_feed_chunk_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_chunk_task_t  *ct = t->data;

    ngx_http_feed_chunk_t      *chunk;
    ngx_http_feed_chunks_in_t  *in;

    in = ct->in;
    in->running--;

    if (in->ch.finished) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, in->log, 0,
                       "feed timeline chunk came back late: %i", t->rc);

        ngx_http_feed_posts_found_free(&ct->found);
        ngx_http_feed_chunks_unref(in);
        return;
    }

    chunk = &in->chunks[ct->slot];

    if (t->rc == NGX_OK) {
        chunk->found = ct->found;
        chunk->state = NGX_HTTP_FEED_CHUNK_ANSWERED;

        if (in->overdue && in->back + 1 < in->ch.nchunks) {
            in->back++;
            ngx_http_feed_chunks_finish(in, 1);
            ngx_http_feed_chunks_unref(in);
            return;
        }

    } else {
        ngx_http_feed_posts_found_free(&ct->found);
        chunk->state = NGX_HTTP_FEED_CHUNK_FAILED;
        in->ch.error = t->error;
    }

    in->back++;

    ngx_http_feed_chunks_go(in);
    ngx_http_feed_chunks_unref(in);
}


/*
 * Every chunk of the round came back.  Those newer than the edge that
 * fill the page are all of it: each chunk read as many as the page takes.
 * Fewer, and every chunk read all it has newer than the edge: the page's
 * rest is the newest at or below it.
 */

static void
ngx_http_feed_chunks_round(ngx_http_feed_chunks_in_t *in)
{
    ngx_uint_t  got, failed;

    failed = ngx_http_feed_chunks_count(in, &got);

    if (in->round == 0 && in->two_rounds && got < in->limit
        && failed < in->ch.nchunks)
    {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, in->log, 0,
                       "feed timeline chunks: %ui of %ui posts newer than "
                       "the window's edge, reading older", got, in->limit);

        in->ch.older = 1;
        in->round = 1;
        in->next = 0;
        in->back = 0;

        in->range.since_id = in->has_since ? &in->since_id : NULL;
        in->range.max_id = &in->window.above;
        in->range.limit = in->limit - got;

        ngx_http_feed_chunks_go(in);
        return;
    }

    ngx_http_feed_chunks_finish(in, failed != 0);
}


/* the round's chunks that did not answer, and the posts of those that did */

static ngx_uint_t
ngx_http_feed_chunks_count(ngx_http_feed_chunks_in_t *in, ngx_uint_t *got)
{
    ngx_uint_t              i, failed;
    ngx_http_feed_chunk_t  *chunk;

    *got = 0;
    failed = 0;

    for (i = 0; i < in->ch.nchunks; i++) {
        chunk = &in->chunks[in->round * in->ch.nchunks + i];

        if (chunk->state == NGX_HTTP_FEED_CHUNK_ANSWERED) {
            *got += chunk->found.n;

        } else {
            failed++;
        }
    }

    return failed;
}


/*
 * The deadline: the page is made of the chunks that answered.  When none
 * of the round under way did yet, MongoDB is slow as a whole, not one
 * part of it, and a page cut there would lack all of the round (nothing
 * at all, or every post older than the window's edge): it is made as soon
 * as one answers while others are still out, and a round whose chunks all
 * answered goes on as before the deadline.
 */

static void
ngx_http_feed_chunks_expired(ngx_event_t *ev)
{
    ngx_uint_t                  got;
    ngx_http_feed_chunks_in_t  *in = ev->data;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "feed timeline chunks: deadline, %ui of %ui back",
                   in->back, in->ch.nchunks);

    if (ngx_http_feed_chunks_count(in, &got) == in->ch.nchunks) {
        in->overdue = 1;
        return;
    }

    ngx_http_feed_chunks_finish(in, 1);
}


/* the chunks that answered the first round: what a page can be made of */

static ngx_uint_t
ngx_http_feed_chunks_answered(ngx_http_feed_chunks_in_t *in)
{
    ngx_uint_t  i, n;

    n = 0;

    for (i = 0; i < in->ch.nchunks; i++) {
        if (in->chunks[i].state == NGX_HTTP_FEED_CHUNK_ANSWERED) {
            n++;
        }
    }

    return n;
}


/* the page, of the chunks that answered; the request is told */

static void
ngx_http_feed_chunks_finish(ngx_http_feed_chunks_in_t *in,
    ngx_uint_t partial)
{
    ngx_uint_t              i;
    ngx_http_feed_chunk_t  *chunk;

    in->ch.finished = 1;
    in->ch.partial = partial;

    if (in->deadline.timer_set) {
        ngx_del_timer(&in->deadline);
    }

    /* missing: a chunk late or failed, in either round */

    for (i = 0; i < in->ch.nchunks; i++) {
        chunk = &in->chunks[in->round * in->ch.nchunks + i];

        if (in->chunks[i].state != NGX_HTTP_FEED_CHUNK_ANSWERED
            || chunk->state != NGX_HTTP_FEED_CHUNK_ANSWERED)
        {
            in->ch.late++;
        }
    }

    if (ngx_http_feed_chunks_answered(in) == 0) {
        if (in->ch.error.code == 0) {
            bson_set_error(&in->ch.error, MONGOC_ERROR_STREAM,
                           MONGOC_ERROR_STREAM_SOCKET,
                           "no chunk of authors answered");
        }

        in->ch.rc = NGX_ERROR;

    } else if (ngx_http_feed_chunks_merge(in) != NGX_OK) {
        bson_set_error(&in->ch.error, MONGOC_ERROR_CLIENT,
                       MONGOC_ERROR_CLIENT_NOT_READY, "out of memory");
        in->ch.rc = NGX_ERROR;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, in->log, 0,
                   "feed timeline chunks: %ui posts, %ui of %ui chunks "
                   "missing, partial: %ui", in->ch.npage, in->ch.late,
                   in->ch.nchunks, partial);

    if (in->ch.request && !in->starting) {
        in->ch.done(&in->ch);
    }
}


/*
 * The newest posts of the chunks that answered, newest first, no post
 * twice, at most limit: those of the first round are all newer than any
 * of the second's
 */

static ngx_int_t
ngx_http_feed_chunks_merge(ngx_http_feed_chunks_in_t *in)
{
    ngx_uint_t                         r, i, n, best, *at;
    ngx_http_feed_chunk_t             *chunks, *c;
    ngx_http_feed_chunks_post_t       *post;
    ngx_http_feed_posts_found_item_t  *item, *top;

    n = in->ch.nchunks;

    in->ch.page = ngx_alloc(in->limit * sizeof(ngx_http_feed_chunks_post_t)
                            + n * sizeof(ngx_uint_t), in->log);
    if (in->ch.page == NULL) {
        return NGX_ERROR;
    }

    at = (ngx_uint_t *) &in->ch.page[in->limit];

    for (r = 0; r <= in->round; r++) {
        chunks = &in->chunks[r * n];
        ngx_memzero(at, n * sizeof(ngx_uint_t));

        while (in->ch.npage < in->limit) {
            best = n;
            top = NULL;

            for (i = 0; i < n; i++) {
                c = &chunks[i];

                if (c->state != NGX_HTTP_FEED_CHUNK_ANSWERED
                    || at[i] == c->found.n)
                {
                    continue;
                }

                item = &c->found.items[at[i]];

                if (top == NULL || ngx_memcmp(item->id, top->id, 24) > 0) {
                    best = i;
                    top = item;
                }
            }

            if (top == NULL) {
                break;
            }

            at[best]++;

            post = &in->ch.page[in->ch.npage];

            if (in->ch.npage && ngx_memcmp(post[-1].id, top->id, 24) == 0) {
                continue;
            }

            post->id = top->id;
            post->json = chunks[best].found.buf + top->off;
            post->len = top->len;
            in->ch.npage++;
        }
    }

    return NGX_OK;
}


/* the request went, or is done with the page */

static void
ngx_http_feed_chunks_cleanup(void *data)
{
    ngx_http_feed_chunks_in_t  *in = data;

    in->ch.request = NULL;
    in->cleanup = NULL;
    in->log = ngx_cycle->log;

    /* nobody waits for the page: the chunks still out are not read */

    in->ch.finished = 1;

    if (in->deadline.timer_set) {
        ngx_del_timer(&in->deadline);
    }

    ngx_http_feed_chunks_unref(in);
}


static void
ngx_http_feed_chunks_unref(ngx_http_feed_chunks_in_t *in)
{
    ngx_uint_t  i;

    if (--in->refs) {
        return;
    }

    for (i = 0; i < 2 * in->ch.nchunks; i++) {
        ngx_http_feed_posts_found_free(&in->chunks[i].found);
    }

    ngx_free(in->chunks);
    ngx_free(in->ch.page);
    ngx_http_feed_chunks_free_authors(in->authors, in->nauthors);
    ngx_free(in);
}
