
/*
 * ngx_feed_module: "feed_timeline", the home timeline.
 *
 *   hit     one EVALSHA answers the page from the Redis cache;
 *   deep    the page runs past a trimmed cache: the rest comes from the
 *           fallback location, nothing is cached;
 *   miss    no cache: one request per user rebuilds it from the fallback
 *           (the others of this worker wait for it, those of other
 *           workers and nodes poll behind a Redis lock), warms the cache
 *           in one step, and every waiter reads the page from it; a
 *           partial page (the fallback's deadline) is not cached: every
 *           waiter gets it, those that polled from the lock;
 *   bypass  Redis is unavailable: the page comes from the fallback.
 *
 * An unread count (feed_timeline_unread, ngx_http_feed_timeline_unread.c)
 * is a read of the same machine whose script counts instead of reading a
 * page: a miss rebuilds the cache as for a page, a bypass counts the
 * fallback's posts newer than the marker.  Without the marker's copy in
 * Redis, the marker is asked of MongoDB (marker) and the count asked
 * again with it.
 *
 * A read with ?unseen=1 leaves out the posts the reader saw (the seen
 * store's filters): the read script skips them, kept pages and the
 * worker's copies neither answer it nor are made of it, a page made from
 * the fallback asks Redis about its posts first, and without Redis it is
 * answered 503 (what the reader saw is nowhere else).
 *
 * The fallback is an in-memory subrequest to an ordinary location,
 * "feed_timeline_source" (fanout on read from MongoDB) or proxy_pass; it
 * is asked, and its answer parsed, in ngx_http_feed_timeline_fallback.c.
 *
 * A read is a state machine: ngx_http_feed_timeline_move() takes the request
 * from one state to the next, runs what the new state starts, and traces
 * each move at the debug level:
 *
 *   local, read -> kept | hit | deep | miss | pull | bypass | local, read
 *   pull -> local, read | bypass
 *   miss -> wait | poll | members | bypass | rebuilt (the partial page
 *           a rebuild elsewhere left in the lock)
 *   wait, poll -> local, read | rebuilt
 *   members -> lead | failed
 *   bypass -> filters (once) -> bypass | failed
 *   bypass (a count) -> marker (once) -> bypass
 *   read (a count) -> marker -> read
 *   lead -> lead (fewer posts) | warm
 *   warm -> local, read | rebuilt (answered from the rebuild, not cached)
 *   kept, hit, deep, bypass, rebuilt -> done
 *   any -> failed
 */


#include "ngx_http_feed_timeline_read.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_pull.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_seen_store.h"


#define NGX_HTTP_FEED_POLL     20

/* polls for pull authors' lists being loaded, before doing without */
#define NGX_HTTP_FEED_PULL_WAITS  100

/* rebuilds with fewer posts after an answer too large for the buffer */
#define NGX_HTTP_FEED_SHRINKS  5

/*
 * The users who blocked the reader that a read loads at most: they never
 * follow each other (a block ends follows both ways), so these only cover
 * a block racing a delivery
 */
#define NGX_HTTP_FEED_BLOCKERS_MAX  10000


static ngx_int_t ngx_http_feed_timeline_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static void ngx_http_feed_timeline_move(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_state_e state);
static void ngx_http_feed_timeline_count(ngx_http_feed_timeline_ctx_t *ctx);
static ngx_int_t ngx_http_feed_timeline_local_hit(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_str_t *page, ngx_str_t *version,
    ngx_str_t *lists);
static ngx_int_t ngx_http_feed_timeline_kept_copy(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_str_t *copy);
static void ngx_http_feed_timeline_local_found(
    ngx_http_feed_timeline_ctx_t *ctx);
static ngx_msec_t ngx_http_feed_timeline_refresh(
    ngx_http_feed_main_conf_t *fmcf);
static void ngx_http_feed_timeline_lookup(ngx_http_feed_timeline_ctx_t *ctx);
static ngx_int_t ngx_http_feed_timeline_kept_page(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_read_done(void *data, redisReply *reply);
static void ngx_http_feed_timeline_reread(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_miss(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_locked(void *data, redisReply *reply);
static void ngx_http_feed_timeline_poll(ngx_event_t *ev);
static void ngx_http_feed_timeline_shared(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_pull(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_members(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_members_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_timeline_members_done(
    ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_timeline_lead(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_rebuilt(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_partial(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_unlock_partial(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_warm(ngx_http_feed_timeline_ctx_t *ctx);
static ngx_int_t ngx_http_feed_timeline_shrink(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_warmed(void *data, redisReply *reply);
static void ngx_http_feed_timeline_lead_done(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_feed_timeline_share_filters(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_timeline_ctx_t *w);
static void ngx_http_feed_timeline_deep(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_deep_done(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_bypass(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_bypass_done(
    ngx_http_feed_timeline_ctx_t *ctx);

static void ngx_http_feed_timeline_fill(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next);
static void ngx_http_feed_timeline_unseen(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next);
static void ngx_http_feed_timeline_unseen_done(void *data,
    redisReply *reply);
static void ngx_http_feed_timeline_unseen_down(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_answer(ngx_http_feed_timeline_ctx_t *ctx);
static ngx_int_t ngx_http_feed_timeline_send(
    ngx_http_feed_timeline_ctx_t *ctx);
static ngx_int_t ngx_http_feed_timeline_link(ngx_http_request_t *r,
    ngx_http_feed_page_t *page, char *next);
static void ngx_http_feed_timeline_fail(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_feed_timeline_marker(ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_marker_done(
    ngx_http_feed_timeline_ctx_t *ctx);
static void ngx_http_feed_timeline_cleanup(void *data);


static ngx_queue_t  ngx_http_feed_timeline_leaders;


ngx_http_feed_handler_t  ngx_http_feed_timeline_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_timeline_ctx_t),
    ngx_http_feed_timeline_args,
    ngx_http_feed_timeline_start,
    NULL
};


/*
 * ms a worker's copy is answered at most without a read that keeps its
 * list alive (and feed_cache_ttl / 4 when that is shorter)
 */
#define NGX_HTTP_FEED_LOCAL_REFRESH  60000


static ngx_str_t  ngx_http_feed_cache_statuses[] = {
    ngx_null_string,
    ngx_string("HIT"),
    ngx_string("MISS"),
    ngx_string("DEEP"),
    ngx_string("BYPASS"),
    ngx_string("LOCAL"),
    ngx_string("PARTIAL")
};


#if (NGX_DEBUG)

static char  *ngx_http_feed_timeline_states[] = {
    "start", "local", "read", "kept", "hit", "miss", "wait", "poll", "lead",
    "warm", "rebuilt", "deep", "bypass", "done", "failed", "pull", "members",
    "filters", "marker"
};

#endif


static ngx_int_t
ngx_http_feed_timeline_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    ngx_int_t                     rc;
    ngx_str_t                     value;
    const ngx_http_feed_error_t  *e;

    rc = ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_CLIENT, &ctx->page,
                                 err);

    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_feed_timeline_wait_args(r, ctx, err);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_feed_arg(r, "unseen", &value) == NGX_OK) {
        if (value.len != 1
            || (value.data[0] != '0' && value.data[0] != '1'))
        {
            *err = &ngx_http_feed_err_unseen;
            return NGX_DECLINED;
        }

        ctx->page.unseen = (value.data[0] == '1');
    }

    /* what a reader saw is theirs, as their read marker is */

    if (ctx->page.unseen) {
        return ngx_http_feed_authorize(r, &ctx->page.user, err);
    }

    /* so is the unread count, of a plain first page */

    ctx->unread = !ctx->page.has_max && !ctx->page.has_since
                  && ngx_http_feed_authorize(r, &ctx->page.user, &e)
                     == NGX_OK;

    return NGX_OK;
}


/* the read of a page, or of an unread count (counting) */

ngx_int_t
ngx_http_feed_timeline_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_queue_init(&ctx->waiters);

    ctx->poll.handler = ngx_http_feed_timeline_poll;
    ctx->poll.data = r->connection;
    ctx->poll.log = r->connection->log;

    cln->handler = ngx_http_feed_timeline_cleanup;
    cln->data = ctx;

    ngx_http_feed_timeline_read(ctx);

    return NGX_DONE;
}


/*
 * The one place a read changes state: the move is traced, then what the
 * new state starts is run.  Waiting, done and failed start nothing here:
 * whoever moved there did what they need.
 */

static void
ngx_http_feed_timeline_move(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_state_e state)
{
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": %s -> %s",
                   ctx->page.user.data,
                   ngx_http_feed_timeline_states[ctx->state],
                   ngx_http_feed_timeline_states[state]);

    ctx->state = state;

    switch (state) {

    case NGX_HTTP_FEED_TL_LOCAL:
    case NGX_HTTP_FEED_TL_READ:
        ngx_http_feed_timeline_lookup(ctx);
        return;

    case NGX_HTTP_FEED_TL_KEPT:
    case NGX_HTTP_FEED_TL_HIT:
        ngx_http_feed_timeline_answer(ctx);
        return;

    case NGX_HTTP_FEED_TL_MISS:
        ngx_http_feed_timeline_miss(ctx);
        return;

    case NGX_HTTP_FEED_TL_POLL:
        ctx->polling = 1;
        ngx_add_timer(&ctx->poll, NGX_HTTP_FEED_POLL);
        return;

    case NGX_HTTP_FEED_TL_PULL:
        ngx_http_feed_timeline_pull(ctx);
        return;

    case NGX_HTTP_FEED_TL_MEMBERS:
    case NGX_HTTP_FEED_TL_FILTERS:
        ngx_http_feed_timeline_members(ctx);
        return;

    case NGX_HTTP_FEED_TL_MARKER:
        ngx_http_feed_timeline_marker(ctx);
        return;

    case NGX_HTTP_FEED_TL_LEAD:
        ngx_http_feed_timeline_lead(ctx);
        return;

    case NGX_HTTP_FEED_TL_WARM:
        ngx_http_feed_timeline_warm(ctx);
        return;

    case NGX_HTTP_FEED_TL_REBUILT:
        if (ctx->counting) {
            /* the rebuild holds no marker: the cache is asked again */
            ngx_http_feed_timeline_reread(ctx);
            return;
        }

        ngx_http_feed_timeline_bypass_done(ctx);
        return;

    case NGX_HTTP_FEED_TL_DEEP:
        ngx_http_feed_timeline_deep(ctx);
        return;

    case NGX_HTTP_FEED_TL_BYPASS:
        ngx_http_feed_timeline_bypass(ctx);
        return;

    case NGX_HTTP_FEED_TL_DONE:
    case NGX_HTTP_FEED_TL_FAILED:
        ngx_http_feed_timeline_count(ctx);
        return;

    default: /* START, WAIT */
        return;
    }
}


/*
 * A read from the start: with the worker's own copy of the first page,
 * the script need not send the page when that copy is still current.
 */

void
ngx_http_feed_timeline_read(ngx_http_feed_timeline_ctx_t *ctx)
{
    u_char     *nl;
    ngx_str_t   copy, page, lists;

    ctx->kept.len = 0;
    ctx->have.len = 0;
    ctx->vouched = 0;
    ngx_memzero(&ctx->track, sizeof(ngx_http_feed_local_track_t));

    /* a copy of a plain first page is not one with unseen posts only */

    if (!ctx->page.has_max && !ctx->page.has_since && !ctx->no_local
        && !ctx->page.unseen)
    {
        copy = ngx_http_feed_timeline_local_get(&ctx->page.user,
                                                ctx->page.limit, &lists,
                                                &ctx->track);

        nl = copy.len ? ngx_strlchr(copy.data, copy.data + copy.len, '\n')
                      : NULL;

        if (nl) {
            page = copy;
            copy.len = nl - copy.data;

            /*
             * merged from pull authors' lists: the worker may know that
             * none of them changed since, and say so to the script
             */

            ctx->vouched = ngx_http_feed_timeline_watch_vouch(&ctx->page.user,
                                                               &lists);

            if (ngx_http_feed_timeline_local_hit(ctx, &page, &copy, &lists)
                == NGX_OK)
            {
                return;
            }

            ctx->have.len = copy.len;
            ctx->have.data = ngx_pstrdup(ctx->request->pool, &copy);

            if (ctx->have.data == NULL) {
                ngx_http_feed_timeline_fail(ctx,
                                            NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }
        }
    }

    ngx_http_feed_timeline_move(ctx, ctx->have.len ? NGX_HTTP_FEED_TL_LOCAL
                                                   : NGX_HTTP_FEED_TL_READ);
}


/*
 * The hit that costs Redis nothing: the worker's copy, while the watch of
 * the user's node vouches that none of its keys changed since a read
 * found it current, nor any pull author's list it was merged from
 * (ctx->vouched), and a read kept the list alive lately.  page: the copy,
 * version: its version (both the worker's, valid until a copy is put).
 * NGX_DECLINED: Redis is asked.
 */

static ngx_int_t
ngx_http_feed_timeline_local_hit(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_str_t *page, ngx_str_t *version, ngx_str_t *lists)
{
    uint64_t                      searched;
    ngx_http_feed_local_track_t  *t = &ctx->track;

    if (ctx->counting || !ctx->fmcf->cache_tracking
        || (lists->len && !ctx->vouched)
        || (ctx->unread && !t->counted)
        || ngx_current_msec - t->refreshed >= ngx_http_feed_timeline_refresh(
                                                   ctx->fmcf)
        || !ngx_http_feed_timeline_watch_tracks(&ctx->page.user, &t->mark,
                                                1))
    {
        return NGX_DECLINED;
    }

    /*
     * Posts deleted since: the copy must not have any (a count answered
     * with it may have counted one: none must have been deleted)
     */

    if (ngx_http_feed_track_deletes((ctx->unread && t->unread_len) ? NULL
                                                                  : page,
                                    t->searched, &searched)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    if (searched > t->searched) {
        ngx_http_feed_timeline_local_searched(&ctx->page.user,
                                              ctx->page.limit, version,
                                              searched);
    }

    ctx->cached.found = 1;
    ctx->cached.kept = 1;
    ctx->cached.version = *version;
    ctx->cached.lists.len = 0;
    ctx->cached.unread.len = 0;

    if (ctx->unread && t->unread_len) {
        ctx->cached.unread.data = ngx_pnalloc(ctx->request->pool,
                                              t->unread_len);
        if (ctx->cached.unread.data == NULL) {
            return NGX_DECLINED;
        }

        ngx_memcpy(ctx->cached.unread.data, t->unread, t->unread_len);
        ctx->cached.unread.len = t->unread_len;
    }

    if (ngx_http_feed_timeline_kept_copy(ctx, page) != NGX_OK) {
        return NGX_DECLINED;
    }

    /* the version as the request holds it: the worker's copy may go */

    ctx->cached.version.data = ctx->kept.data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": the worker's copy, vouched",
                   ctx->page.user.data);

    ngx_http_feed_stat(local_hits, 1);
    ctx->status = NGX_HTTP_FEED_CACHE_LOCAL;
    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_KEPT);

    return NGX_OK;
}


/*
 * A read found the worker's copy current, or made it: how, for the hits
 * that follow.  A read Redis does not track keeps the list alive.
 */

static void
ngx_http_feed_timeline_local_found(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_feed_local_track_t  t;

    ngx_memzero(&t, sizeof(ngx_http_feed_local_track_t));

    t.mark = ctx->mark;
    t.refreshed = ctx->mark.stamp ? 0 : ngx_current_msec;
    t.counted = ctx->unread;

    if (ctx->cached.unread.len > sizeof(t.unread)) {
        t.counted = 0;

    } else if (ctx->cached.unread.len) {
        ngx_memcpy(t.unread, ctx->cached.unread.data, ctx->cached.unread.len);
        t.unread_len = ctx->cached.unread.len;
    }

    ngx_http_feed_timeline_local_track(&ctx->page.user, ctx->page.limit,
                                       &ctx->cached.version, &t);
}


/*
 * How long the worker's copy is answered without a read that keeps the
 * list alive: a tracked read leaves its TTL alone
 */

static ngx_msec_t
ngx_http_feed_timeline_refresh(ngx_http_feed_main_conf_t *fmcf)
{
    return ngx_min((ngx_msec_t) fmcf->cache_ttl * 1000 / 4,
                   NGX_HTTP_FEED_LOCAL_REFRESH);
}


/* the hot path: one round trip */

static void
ngx_http_feed_timeline_lookup(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_int_t  rc;

    ngx_http_feed_timeline_watch_mark(&ctx->page.user, &ctx->mark);

    /*
     * The read of a first page the worker has a copy of has Redis track
     * its keys, unless the list needs its TTL kept alive: then it is read
     * as before, and the next read is tracked
     */

    if (!ctx->counting && ctx->fmcf->cache_tracking && ctx->have.len
        && ngx_current_msec - ctx->track.refreshed
           < ngx_http_feed_timeline_refresh(ctx->fmcf))
    {
        (void) ngx_http_feed_timeline_watch_track(&ctx->page.user,
                                                  &ctx->mark);
    }

    if (ctx->counting) {
        rc = ngx_http_feed_timeline_cache_unread(ctx->request, ctx->fmcf,
                 &ctx->page.user, &ctx->marker, ctx->polling,
                 ngx_http_feed_timeline_read_done, ctx);

    } else {
        rc = ngx_http_feed_timeline_cache_read(ctx->request, ctx->fmcf,
                                               &ctx->page, &ctx->have,
                                               ctx->vouched, ctx->unread,
                                               ctx->mark.stamp != 0,
                                               ctx->polling,
                                               ngx_http_feed_timeline_read_done,
                                               ctx);
    }
    if (rc == NGX_ERROR) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
    }
}


/*
 * The kept page the script found current: the worker's own copy, taken
 * into the request (the copy may go while the answer is being sent).
 */

static ngx_int_t
ngx_http_feed_timeline_kept_page(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_str_t  copy;

    copy = ngx_http_feed_timeline_local_get(&ctx->page.user, ctx->page.limit,
                                            NULL, NULL);
    if (copy.len == 0) {
        return NGX_DECLINED;
    }

    return ngx_http_feed_timeline_kept_copy(ctx, &copy);
}


/*
 * The worker's own copy of the page, current: taken into the request (the
 * copy may go while the answer is being sent)
 */

static ngx_int_t
ngx_http_feed_timeline_kept_copy(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_str_t *copy)
{
    ctx->kept.data = ngx_pstrdup(ctx->request->pool, copy);
    if (ctx->kept.data == NULL) {
        return NGX_ERROR;
    }

    ctx->kept.len = copy->len;

    if (ngx_http_feed_timeline_cache_kept(&ctx->kept, &ctx->cached)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_http_feed_stat(local_answers, 1);

    if (ctx->vouched && ctx->cached.lists.len == 0) {
        ngx_http_feed_stat(pull_vouched, 1);
    }

    return NGX_OK;
}


/* the script's answer; the Redis layer runs what this posts afterwards */

static void
ngx_http_feed_timeline_read_done(void *data, redisReply *reply)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    ngx_int_t  rc;

    rc = ngx_http_feed_timeline_cache_parse(ctx->request->pool, reply,
                                            &ctx->cached);

    if (rc == NGX_ERROR) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
        return;
    }

    if (ctx->cached.lists.len) {
        ngx_http_feed_timeline_watch_learn(&ctx->cached.lists, &ctx->mark);
    }

    if (ctx->cached.npull) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_PULL);
        return;
    }

    if (!ctx->cached.found) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_MISS);
        return;
    }

    if (ctx->cached.counted) {
        if (ctx->status == NGX_HTTP_FEED_CACHE_NONE) {
            ctx->status = NGX_HTTP_FEED_CACHE_HIT;
        }

        if (ctx->cached.unread.len) {
            ngx_http_feed_timeline_answer(ctx);
            return;
        }

        if (ctx->marker.len == 0) {
            ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_MARKER);
            return;
        }

        /* the script counts from a marker it is given: a broken reply */
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
        return;
    }

    if (ctx->cached.merge_us) {
        ngx_http_feed_stat(pull_reads, 1);
        ngx_http_feed_stat(pull_pulled, ctx->cached.pulled);
        ngx_http_feed_stat(pull_merge_us, ctx->cached.merge_us);
    }

    if (ctx->cached.kept && ngx_http_feed_timeline_kept_page(ctx) != NGX_OK) {
        ngx_http_feed_timeline_reread(ctx);
        return;
    }

    if (ctx->cached.kept) {
        ngx_http_feed_timeline_local_found(ctx);
    }

    if (ctx->status == NGX_HTTP_FEED_CACHE_NONE) {
        ctx->status = NGX_HTTP_FEED_CACHE_HIT;
    }

    if (ctx->cached.deep) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_DEEP);
        return;
    }

    ngx_http_feed_timeline_move(ctx, ctx->cached.kept ? NGX_HTTP_FEED_TL_KEPT
                                                      : NGX_HTTP_FEED_TL_HIT);
}


/*
 * The page changed between the HGET and the script, which both ran in one
 * round trip but not atomically, or the worker's copy went meanwhile:
 * rare, read again.
 */

static void
ngx_http_feed_timeline_reread(ngx_http_feed_timeline_ctx_t *ctx)
{
    ctx->no_local = 1;

    if (ctx->rereads++ < 3) {
        ngx_http_feed_timeline_read(ctx);

    } else {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
    }
}


/*
 * No cache: wait for this worker's rebuild of it if there is one, else
 * lead one, behind the Redis lock when nobody elsewhere holds it.
 */

static void
ngx_http_feed_timeline_miss(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_queue_t                   *q;
    ngx_http_feed_timeline_ctx_t  *l;

    ctx->status = NGX_HTTP_FEED_CACHE_MISS;

    if (!ctx->is_leader) {
        for (q = ngx_queue_head(&ngx_http_feed_timeline_leaders);
             q != ngx_queue_sentinel(&ngx_http_feed_timeline_leaders);
             q = ngx_queue_next(q))
        {
            l = ngx_queue_data(q, ngx_http_feed_timeline_ctx_t, queue);

            if (l->page.user.len == ctx->page.user.len
                && ngx_strcmp(l->page.user.data, ctx->page.user.data) == 0)
            {
                ctx->leader = l;
                ngx_queue_insert_tail(&l->waiters, &ctx->queue);
                ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_WAIT);
                return;
            }
        }

        ctx->is_leader = 1;
        ngx_queue_insert_tail(&ngx_http_feed_timeline_leaders, &ctx->queue);
    }

    if (ctx->cached.locked == NGX_HTTP_FEED_LOCK_FAILED && ctx->polling) {
        /* the rebuild waited for failed elsewhere: its answer is ours */
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    if (ctx->cached.locked == NGX_HTTP_FEED_LOCK_PARTIAL && ctx->polling) {
        ngx_http_feed_timeline_shared(ctx);
        return;
    }

    if (ctx->cached.locked == NGX_HTTP_FEED_LOCK_HELD) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_POLL);
        return;
    }

    ctx->token.data = ctx->token_data;

    if (ngx_http_feed_timeline_cache_lock(ctx->request, ctx->fmcf,
                                          &ctx->page.user, &ctx->token,
                                          ngx_http_feed_timeline_locked, ctx)
        != NGX_OK)
    {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
    }
}


static void
ngx_http_feed_timeline_locked(void *data, redisReply *reply)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);

    } else if (reply->element[0]->integer == 0
               || reply->elements < 2
               || reply->element[1]->type != REDIS_REPLY_STRING
               || reply->element[1]->len >= sizeof(ctx->version))
    {
        /* rebuilt elsewhere: look again shortly */
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_POLL);

    } else {
        ctx->lock_held = 1;
        ngx_memcpy(ctx->version, reply->element[1]->str,
                   reply->element[1]->len);
        ctx->version_len = reply->element[1]->len;

        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_MEMBERS);
    }
}


/*
 * The poll timer of a request waiting for a rebuild elsewhere, or the
 * event posted by the leader it waited for: either way it goes on in its
 * own event, so that what it posts (a fallback subrequest when Redis went
 * away) is run on its own connection.
 */

static void
ngx_http_feed_timeline_poll(ngx_event_t *ev)
{
    ngx_int_t                      rc;
    ngx_connection_t              *c;
    ngx_http_feed_timeline_ctx_t  *ctx;

    c = ev->data;
    ctx = ngx_queue_data(ev, ngx_http_feed_timeline_ctx_t, poll);

    rc = ctx->wake_rc;
    ctx->wake_rc = NGX_OK;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "feed timeline of \"%s\" woken: %i",
                   ctx->page.user.data, rc);

    if (rc != NGX_OK) {
        ngx_http_feed_timeline_fail(ctx, rc);

    } else if (ctx->fb_partial) {
        /* the page its leader rebuilt partial, as the leader answered */
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_REBUILT);

    } else {
        ngx_http_feed_timeline_read(ctx);
    }

    ngx_http_run_posted_requests(c);
}


/*
 * The rebuild this read polled for, elsewhere, answered a partial page and
 * left it in the lock, with the filters it applied: the page is this
 * read's answer, and its waiters', as a leader's waiters get its own
 * (rather than rebuilding, up to a second deadline, while MongoDB is
 * slow).  A read that did not poll for it rebuilds: the page is no cache.
 */

static void
ngx_http_feed_timeline_shared(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_feed_partial_t  *partial;

    partial = &ctx->cached.partial;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": partial page of %ui posts "
                   "shared by the rebuild elsewhere, %uz bytes",
                   ctx->page.user.data, partial->limit, partial->json.len);

    if (partial->json.len == 0) {
        /* a reply without the page: as a rebuild that failed */
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    ctx->filters = partial->filters;

    if (ngx_http_feed_filter_set_tokens(ctx->request->pool, &ctx->filters,
                                        &ctx->filter_set)
        != NGX_OK)
    {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (ctx->fb_doc) {
        bson_destroy(ctx->fb_doc);
    }

    ctx->fb_doc = bson_new_from_json(partial->json.data, partial->json.len,
                                     NULL);
    if (ctx->fb_doc == NULL) {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "timeline of \"%s\": partial page in the rebuild "
                      "lock is not JSON", ctx->page.user.data);
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    ctx->fb_status = NGX_HTTP_OK;
    ctx->fb_limit = partial->limit;
    ctx->fb_partial = 1;

    ngx_http_feed_timeline_partial(ctx);
}


/*
 * The read met pull authors whose lists are missing: this worker loads
 * them (once each, whoever asks), and the read polls until they are
 * there, or does without the cache.
 */

static void
ngx_http_feed_timeline_pull(ngx_http_feed_timeline_ctx_t *ctx)
{
    u_char      buf[NGX_HTTP_FEED_PULL_COPY_LEN];
    ngx_str_t   copy;
    ngx_uint_t  i;

    if (ctx->pull_waits++ == NGX_HTTP_FEED_PULL_WAITS) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
        return;
    }

    /* the lists the read merges: on a cluster, the copies of its node */

    copy.data = buf;
    copy.len = ngx_http_feed_timeline_pull_copy(ctx->fmcf, &ctx->page.user,
                                                buf);

    for (i = 0; i < ctx->cached.npull; i++) {
        if (ngx_http_feed_pull_load(ctx->fmcf, &copy, &ctx->cached.pull[i],
                                    NULL, NULL)
            != NGX_OK)
        {
            ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
            return;
        }
    }

    ngx_add_timer(&ctx->poll, NGX_HTTP_FEED_POLL);
}


/*
 * The lock is ours.  Before the posts are asked for, which of the user's
 * followees are pull authors: their posts from then on are in their own
 * lists only, and the cache must merge them; and the user's filters, which
 * the cache keeps next to the list.  Without a cache (filters), only the
 * filters, for the pages the fallback makes.
 */

static void
ngx_http_feed_timeline_members(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_feed_mongo_task_t  *t;

    t = ngx_http_feed_mongo_task(ctx->request->pool, ctx->fmcf->mongo_client,
                                 ngx_http_feed_timeline_members_run,
                                 ngx_http_feed_timeline_members_done, ctx);
    if (t == NULL) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    t->result = &ctx->members_raw;

    if (ngx_http_feed_mongo_post_r(ctx->request, t) != NGX_OK) {
        if (ctx->state == NGX_HTTP_FEED_TL_FILTERS) {
            ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
            return;
        }

        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
    }
}


static void
ngx_http_feed_timeline_members_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_timeline_ctx_t  *ctx = t->data;

    char    *pull, *filters;
    size_t   plen, flen;

    pull = NULL;
    filters = NULL;
    plen = 0;
    flen = 0;

    t->rc = NGX_OK;

    if (ctx->state == NGX_HTTP_FEED_TL_MEMBERS && ctx->fmcf->pull_threshold) {
        t->rc = ngx_http_feed_pull_followed(client, t->database,
                                            &ctx->page.user, &pull, &plen,
                                            &t->error);
    }

    if (t->rc == NGX_OK) {
        t->rc = ngx_http_feed_filters_of(client, t->database,
                                         &ctx->page.user,
                                         NGX_HTTP_FEED_BLOCKERS_MAX,
                                         &filters, &flen, &t->error);
    }

    if (t->rc == NGX_OK) {
        /* either list may be none at all (NULL): nothing is copied then */

        ctx->members_raw = bson_malloc(plen + 1 + flen);

        if (plen) {
            ngx_memcpy(ctx->members_raw, pull, plen);
        }

        ctx->members_raw[plen] = '\n';

        if (flen) {
            ngx_memcpy(ctx->members_raw + plen + 1, filters, flen);
        }

        ctx->pull_len = plen;
        ctx->filters_len = flen;
    }

    bson_free(pull);
    bson_free(filters);
}


static void
ngx_http_feed_timeline_members_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_timeline_ctx_t  *ctx = t->data;

    ngx_int_t  rc;
    ngx_str_t  raw;

    if (t->rc != NGX_OK) {
        /* MongoDB fails: as a rebuild that fails, for every waiter too */
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "timeline of \"%s\" not read: pull authors or "
                      "filters unknown: %s", ctx->page.user.data,
                      t->error.message);
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    raw.len = ctx->pull_len + 1 + ctx->filters_len;
    raw.data = (u_char *) ctx->members_raw;

    raw.data = ngx_pstrdup(ctx->request->pool, &raw);

    bson_free(ctx->members_raw);
    ctx->members_raw = NULL;

    rc = (raw.data == NULL) ? NGX_ERROR : NGX_OK;

    if (rc == NGX_OK) {
        ctx->pull.data = raw.data;
        ctx->pull.len = ctx->pull_len;
        ctx->filters.data = raw.data + ctx->pull_len + 1;
        ctx->filters.len = ctx->filters_len;

        rc = ngx_http_feed_filter_set_tokens(ctx->request->pool,
                                             &ctx->filters, &ctx->filter_set);
    }

    if (rc != NGX_OK) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": pull authors \"%V\", "
                   "filters \"%V\"",
                   ctx->page.user.data, &ctx->pull, &ctx->filters);

    ngx_http_feed_timeline_move(ctx, ctx->state == NGX_HTTP_FEED_TL_MEMBERS
                                     ? NGX_HTTP_FEED_TL_LEAD
                                     : NGX_HTTP_FEED_TL_BYPASS);
}


/* the lock is ours: the newest feed_cache_size posts of the timeline */

static void
ngx_http_feed_timeline_lead(ngx_http_feed_timeline_ctx_t *ctx)
{
    ctx->rebuilding = 1;
    ctx->rebuild_start = ngx_current_msec;

    if (ngx_http_feed_timeline_fallback_rebuild(ctx, ctx->fmcf->cache_size,
                                                ngx_http_feed_timeline_rebuilt)
        != NGX_OK)
    {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_feed_timeline_rebuilt(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->fb_broke) {
        rc = ngx_http_feed_timeline_shrink(ctx);

        if (rc == NGX_OK) {
            return;
        }

        if (rc == NGX_ERROR) {
            ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    rc = ngx_http_feed_timeline_fallback_items(ctx);

    /*
     * A count whose rebuild is partial answers 503, but the page reads
     * waiting for it, here and elsewhere, get the page (_partial())
     */

    if (rc != NGX_OK
        && !(ctx->counting && ctx->fb_partial && ctx->items_ready))
    {
        ngx_http_feed_timeline_fail(ctx, rc);
        return;
    }

    if (ctx->fb_partial) {
        ngx_http_feed_timeline_partial(ctx);
        return;
    }

    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_WARM);
}


/*
 * The rebuild's page lacks some authors' posts (the fallback's deadline
 * passed): it is answered, and not cached, so that the next read rebuilds
 * it whole.  The requests waiting for it in this worker get it too, and
 * so do those polling for it elsewhere, from the lock, rather than
 * rebuilding one after another.  An unread count cannot be told from it:
 * a count that led the rebuild, or polled for it, shares the page and
 * answers 503, and a count waiting here is told 503.  A poller that found
 * the page in the lock (shared) gives it to its own waiters the same way.
 */

static void
ngx_http_feed_timeline_partial(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_queue_t                   *q;
    ngx_http_feed_timeline_ctx_t  *w;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": rebuilt partial, not cached",
                   ctx->page.user.data);

    if (ctx->lock_held) {
        ngx_http_feed_timeline_unlock_partial(ctx);
    }

    while (ctx->is_leader && !ngx_queue_empty(&ctx->waiters)) {
        q = ngx_queue_head(&ctx->waiters);
        ngx_queue_remove(q);

        w = ngx_queue_data(q, ngx_http_feed_timeline_ctx_t, queue);
        w->leader = NULL;

        ngx_http_feed_timeline_share_filters(ctx, w);

        if (w->counting) {
            /* as the leader's own count: not rebuilt again to be told so */
            w->wake_rc = NGX_HTTP_SERVICE_UNAVAILABLE;

        } else if (w->filter_set.loaded && w->fb_doc == NULL) {
            w->fb_doc = bson_copy(ctx->fb_doc);
            w->fb_status = NGX_HTTP_OK;
            w->fb_limit = ctx->fb_limit;
            w->fb_partial = (w->fb_doc != NULL);
        }

        ngx_post_event(&w->poll, &ngx_posted_events);
    }

    if (ctx->counting) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_REBUILT);
}


/*
 * The lock left holding the partial page, its JSON compact as every JSON
 * the module writes, for the reads polling for it elsewhere.  Without
 * memory for the JSON the lock stays held: the leader releases it when
 * done, and those reads rebuild.
 */

static void
ngx_http_feed_timeline_unlock_partial(ngx_http_feed_timeline_ctx_t *ctx)
{
    char                     *json;
    size_t                    len;
    ngx_http_feed_partial_t   partial;

    json = ngx_http_feed_json_text(ctx->fb_doc, &len);
    if (json == NULL) {
        return;
    }

    partial.limit = ctx->fb_limit;
    partial.filters = ctx->filters;
    partial.json.data = (u_char *) json;
    partial.json.len = len;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": partial page left in the "
                   "lock, %uz bytes", ctx->page.user.data, len);

    ngx_http_feed_timeline_cache_unlock(ctx->fmcf, &ctx->page.user,
                                        &ctx->token, 0, &partial);
    ctx->lock_held = 0;

    bson_free(json);
}


/* the rebuild's posts into the cache, with the follows version it began */

static void
ngx_http_feed_timeline_warm(ngx_http_feed_timeline_ctx_t *ctx)
{
    bson_t      items;
    ngx_str_t   version;
    ngx_uint_t  complete;

    /* fewer posts than asked for: the timeline's whole history */
    (void) bson_init_static(&items, ctx->fb_items, ctx->fb_items_len);

    complete = bson_count_keys(&items) < ctx->fb_limit;

    version.data = ctx->version;
    version.len = ctx->version_len;

    if (ngx_http_feed_timeline_cache_warm(ctx->request, ctx->fmcf,
                                          &ctx->page.user, &version,
                                          &ctx->token, &ctx->pull,
                                          &ctx->filters, &items, complete,
                                          ngx_http_feed_timeline_warmed, ctx)
        != NGX_OK)
    {
        /* Redis went away meanwhile: answer from what the rebuild gave */
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_REBUILT);
    }
}


static void
ngx_http_feed_timeline_warmed(void *data, redisReply *reply)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_feed_timeline_cache_error(reply);
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_REBUILT);

    } else if (reply->integer == 0) {
        /*
         * The user's follows changed while rebuilding: this answer is as
         * of the request, the next read rebuilds.
         */
        ctx->lock_held = 0;
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_REBUILT);

    } else {
        /* the warm released the lock; everyone reads the new cache */
        ctx->lock_held = 0;
        ngx_http_feed_timeline_read(ctx);
    }
}


/*
 * The rebuild's answer was too large for the fallback location's buffer:
 * the cache is made of fewer posts (the rest is read past its end, page by
 * page), as many as the answer's length says would fit, or half as many.
 * NGX_DECLINED: no more tries, the rebuild fails.
 */

static ngx_int_t
ngx_http_feed_timeline_shrink(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_uint_t  limit;

    if (ctx->fb_limit <= 1 || ctx->shrinks++ == NGX_HTTP_FEED_SHRINKS) {
        return NGX_DECLINED;
    }

    limit = ctx->fb_fit ? ngx_min(ctx->fb_fit, ctx->fb_limit - 1)
                        : ctx->fb_limit / 2;

    ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                  "timeline of \"%s\" rebuilt with %ui posts instead of "
                  "%ui: raise subrequest_output_buffer_size of the "
                  "fallback location", ctx->page.user.data, limit,
                  ctx->fb_limit);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": lead again, %ui posts",
                   ctx->page.user.data, limit);

    return ngx_http_feed_timeline_fallback_rebuild(ctx, limit,
               ngx_http_feed_timeline_rebuilt);
}


/* the leader is done: its waiters read the cache now, or share its error */

static void
ngx_http_feed_timeline_lead_done(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_int_t rc)
{
    ngx_queue_t                   *q;
    ngx_http_feed_timeline_ctx_t  *w;

    if (ctx->lock_held) {
        /* the rebuild did not warm the cache: another one may try */
        ngx_http_feed_timeline_cache_unlock(ctx->fmcf, &ctx->page.user,
                                            &ctx->token, rc != NGX_OK, NULL);
        ctx->lock_held = 0;
    }

    if (!ctx->is_leader) {
        return;
    }

    ctx->is_leader = 0;
    ngx_queue_remove(&ctx->queue);

    while (!ngx_queue_empty(&ctx->waiters)) {
        q = ngx_queue_head(&ctx->waiters);
        ngx_queue_remove(q);

        w = ngx_queue_data(q, ngx_http_feed_timeline_ctx_t, queue);
        w->leader = NULL;
        w->wake_rc = rc;

        ngx_http_feed_timeline_share_filters(ctx, w);

        ngx_post_event(&w->poll, &ngx_posted_events);
    }
}


/*
 * The filters the leader loaded, for a waiter that finds no Redis when it
 * reads: it need not ask MongoDB for them again.  Without memory, the
 * waiter loads them itself.
 */

static void
ngx_http_feed_timeline_share_filters(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_ctx_t *w)
{
    if (!ctx->filter_set.loaded || w->filter_set.loaded) {
        return;
    }

    w->filters.len = ctx->filters.len;

    if (ctx->filters.len) {
        w->filters.data = ngx_pstrdup(w->request->pool, &ctx->filters);
        if (w->filters.data == NULL) {
            return;
        }
    }

    if (ngx_http_feed_filter_set_tokens(w->request->pool, &w->filters,
                                        &w->filter_set)
        != NGX_OK)
    {
        ngx_memzero(&w->filter_set, sizeof(ngx_http_feed_filter_set_t));
    }
}


/* past the end of a trimmed cache: the rest from the fallback */

static void
ngx_http_feed_timeline_deep(ngx_http_feed_timeline_ctx_t *ctx)
{
    if (ctx->status == NGX_HTTP_FEED_CACHE_HIT) {
        ctx->status = NGX_HTTP_FEED_CACHE_DEEP;
    }

    /* the filters the cache applied, for the rest of the page */
    ctx->filter_set = ctx->cached.filters;

    if (ngx_http_feed_timeline_fallback_page(ctx, ctx->cached.nitems,
                                             ngx_http_feed_timeline_deep_done)
        != NGX_OK)
    {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_feed_timeline_deep_done(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_timeline_fallback_items(ctx);

    if (rc != NGX_OK) {
        ngx_http_feed_timeline_fail(ctx, rc);
        return;
    }

    ngx_http_feed_timeline_fill(ctx, ngx_http_feed_timeline_deep_done);
}


/*
 * No Redis: the page straight from the fallback, with the user's filters.
 * What the user saw is only in Redis: a read with ?unseen=1 is answered
 * 503 rather than with posts the user saw.
 */

static void
ngx_http_feed_timeline_bypass(ngx_http_feed_timeline_ctx_t *ctx)
{
    ctx->status = NGX_HTTP_FEED_CACHE_BYPASS;

    if (ctx->counting) {
        if (ctx->marker.len == 0) {
            ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_MARKER);
            return;
        }

        /* a count: the posts newer than the marker, up to a cache's worth */

        ctx->page.limit = ctx->fmcf->cache_size;
        ctx->page.has_since = (ctx->marker.len == 24);

        if (ctx->page.has_since) {
            ngx_memcpy(ctx->page.since_id, ctx->marker.data, 25);
        }
    }

    if (ctx->page.unseen) {
        ngx_http_feed_timeline_unseen_down(ctx);
        return;
    }

    if (!ctx->filter_set.loaded) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_FILTERS);
        return;
    }

    if (ngx_http_feed_timeline_fallback_page(ctx, 0,
                                             ngx_http_feed_timeline_bypass_done)
        != NGX_OK)
    {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


/*
 * The page from fallback items, after those of the cache if any: those
 * of a bypass, or of a rebuild that could not be cached.
 */

static void
ngx_http_feed_timeline_bypass_done(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (!ctx->items_ready) {
        rc = ngx_http_feed_timeline_fallback_items(ctx);

        if (rc != NGX_OK) {
            ngx_http_feed_timeline_fail(ctx, rc);
            return;
        }
    }

    /* the posts of the answers asked again for the filters stay */

    if (ctx->refills == 0) {
        ngx_memzero(&ctx->cached, sizeof(ngx_http_feed_cached_t));
    }

    ngx_http_feed_timeline_fill(ctx, ngx_http_feed_timeline_bypass_done);
}


/*
 * The fallback's items added to the page; while the filters left it short
 * and the fallback has more, it is asked again (next runs then), else the
 * page is answered.
 */

static void
ngx_http_feed_timeline_fill(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next)
{
    ngx_int_t   rc;
    ngx_uint_t  more;

    if (ctx->page.unseen && !ctx->fb_seen_ready) {
        ngx_http_feed_timeline_unseen(ctx, next);
        return;
    }

    if (ngx_http_feed_timeline_fallback_add(ctx,
                                            ctx->page.limit
                                            - ctx->cached.nitems,
                                            &more)
        != NGX_OK)
    {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->cached.more = more;

    rc = ngx_http_feed_timeline_fallback_more(ctx, next);
    if (rc == NGX_ERROR) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_OK) {
        return;
    }

    ngx_http_feed_timeline_answer(ctx);
}


/*
 * A read with ?unseen=1 makes a page of the fallback's answer (past the
 * end of a trimmed cache, or a rebuild that could not be cached): which
 * of its posts the user saw is asked of Redis first, all in one call, and
 * the page leaves those out as it leaves out the filters' (a page left
 * short asks the fallback again).  Without Redis, no page.
 */

static void
ngx_http_feed_timeline_unseen(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next)
{
    u_char     *ids;
    ngx_int_t   rc;

    if (ngx_http_feed_timeline_fallback_ids(ctx, &ids) != NGX_OK) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->fill_next = next;

    if (ctx->fb_seen_n == 0) {
        ctx->fb_seen_ready = 1;
        ngx_http_feed_timeline_fill(ctx, next);
        return;
    }

    rc = ngx_http_feed_seen_check(ctx->request, ctx->fmcf, &ctx->page.user,
                                  ids, ctx->fb_seen_n,
                                  ngx_http_feed_timeline_unseen_done, ctx);

    if (rc == NGX_ERROR) {
        ngx_http_feed_timeline_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);

    } else if (rc == NGX_DECLINED) {
        ngx_http_feed_timeline_unseen_down(ctx);
    }
}


static void
ngx_http_feed_timeline_unseen_done(void *data, redisReply *reply)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    if (ngx_http_feed_seen_flags(reply, ctx->fb_seen_n, ctx->fb_seen)
        != NGX_OK)
    {
        ngx_http_feed_timeline_cache_error(reply);
        ngx_http_feed_timeline_unseen_down(ctx);
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": seen of %ui fallback posts "
                   "known", ctx->page.user.data, ctx->fb_seen_n);

    ctx->fb_seen_ready = 1;
    ngx_http_feed_timeline_fill(ctx, ctx->fill_next);
}


/*
 * 503 for a read with ?unseen=1 that cannot know what the user saw.  Its
 * waiters, if it led a rebuild, go on on their own: their reads may not
 * need Redis.
 */

static void
ngx_http_feed_timeline_unseen_down(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_request_t  *r;

    r = ctx->request;

    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_FAILED);
    ngx_http_feed_timeline_lead_done(ctx, NGX_OK);

    ngx_http_feed_finalize(r, ngx_http_feed_error(r,
                                  &ngx_http_feed_err_unseen_down));
}


/*
 * Waiters are woken before the request is answered: answering may free it,
 * and its cleanup would then send them rebuilding on their own.
 */

static void
ngx_http_feed_timeline_answer(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_feed_timeline_lead_done(ctx, NGX_OK);

    /* a long poll with nothing newer waits for it, not counted yet */

    if (ngx_http_feed_timeline_hold(ctx) == NGX_OK) {
        return;
    }

    ngx_http_feed_timeline_answer_now(ctx);
}


void
ngx_http_feed_timeline_answer_now(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_DONE);
    ngx_http_feed_finalize(ctx->request, ngx_http_feed_timeline_send(ctx));
}


/*
 * {"items":[...],"next":...}: the items' JSON as the cache had it, or the
 * whole page as it was answered before.  Compact as the items are, which
 * were squeezed when written: nothing is squeezed on a hit.
 */

static ngx_int_t
ngx_http_feed_timeline_send(ngx_http_feed_timeline_ctx_t *ctx)
{
    u_char              *p;
    size_t               len;
    ngx_str_t            body;
    ngx_uint_t           i;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (r->connection->error) {
        return NGX_HTTP_CLIENT_CLOSED_REQUEST;
    }

    if (ctx->counting) {
        return ngx_http_feed_timeline_unread_send(ctx);
    }

    if (ctx->cached.unread.len
        && ngx_http_feed_add_header(r, "X-Feed-Unread", &ctx->cached.unread)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->cached.more && ctx->cached.nitems
        && ngx_http_feed_timeline_link(r, &ctx->page, ctx->cached.last)
           != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->cached.kept) {
        return ngx_http_feed_send_body(r, NGX_HTTP_OK, ctx->cached.body.data,
                                       ctx->cached.body.len);
    }

    len = sizeof("{\"items\":[],\"next\":\"\"}\n") + 24;

    for (i = 0; i < ctx->cached.nitems; i++) {
        len += ctx->cached.items[i].len + 1;
    }

    body.data = ngx_pnalloc(r->pool, len);
    if (body.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(body.data, "{\"items\":[", sizeof("{\"items\":[") - 1);

    for (i = 0; i < ctx->cached.nitems; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, ctx->cached.items[i].data,
                       ctx->cached.items[i].len);
    }

    if (ctx->cached.more && ctx->cached.nitems) {
        p = ngx_sprintf(p, "],\"next\":\"%s\"}\n", ctx->cached.last);

    } else {
        p = ngx_cpymem(p, "],\"next\":null}\n",
                       sizeof("],\"next\":null}\n") - 1);
    }

    body.len = p - body.data;

    /* a first page read whole from the cache is kept as answered */

    if (ctx->cached.version.len && !ctx->cached.deep
        && !ctx->page.has_max && !ctx->page.has_since && !ctx->page.unseen)
    {
        ngx_http_feed_timeline_cache_page(r, ctx->fmcf, &ctx->page,
                                          &ctx->cached, &body);
    }

    return ngx_http_feed_send_body(r, NGX_HTTP_OK, body.data, body.len);
}


/*
 * Link: </users/u/timeline?limit=20&max_id=...[&since_id=...][&unseen=1]>;
 * rel="next"
 */

static ngx_int_t
ngx_http_feed_timeline_link(ngx_http_request_t *r, ngx_http_feed_page_t *page,
    char *next)
{
    u_char     *p;
    ngx_str_t   link;

    link.data = ngx_pnalloc(r->pool,
                            sizeof("<?limit=&max_id=&since_id=&unseen=1>; "
                                   "rel=\"next\"")
                            + r->uri.len + NGX_INT_T_LEN + 2 * 24);
    if (link.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(link.data, "<%V?limit=%ui&max_id=%s", &r->uri,
                    page->limit, next);

    if (page->has_since) {
        p = ngx_sprintf(p, "&since_id=%s", page->since_id);
    }

    if (page->unseen) {
        p = ngx_cpymem(p, "&unseen=1", sizeof("&unseen=1") - 1);
    }

    p = ngx_cpymem(p, ">; rel=\"next\"", sizeof(">; rel=\"next\"") - 1);
    link.len = p - link.data;

    return ngx_http_feed_add_header(r, "Link", &link);
}


/*
 * rc: a status to answer, or what answering returned.  A leader's waiters
 * get the same error, not a rebuild each.
 */

static void
ngx_http_feed_timeline_fail(ngx_http_feed_timeline_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_FAILED);

    ngx_http_feed_timeline_lead_done(ctx,
                                     (rc == NGX_HTTP_INTERNAL_SERVER_ERROR
                                      || rc == NGX_HTTP_SERVICE_UNAVAILABLE)
                                     ? rc : NGX_OK);

    if (rc == NGX_HTTP_INTERNAL_SERVER_ERROR) {
        rc = ngx_http_feed_error(ctx->request, &ngx_http_feed_err_internal);

    } else if (rc == NGX_HTTP_SERVICE_UNAVAILABLE) {
        rc = ngx_http_feed_error(ctx->request,
                                 &ngx_http_feed_err_timeline_down);
    }

    ngx_http_feed_finalize(ctx->request, rc);
}


/* a count without the marker's copy in Redis: the marker from MongoDB */

static void
ngx_http_feed_timeline_marker(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_timeline_unread_marker(ctx,
             ngx_http_feed_timeline_marker_done);
    if (rc != NGX_OK) {
        ngx_http_feed_timeline_fail(ctx, rc);
    }
}


/* the marker known (ctx->marker): the count asked again with it */

static void
ngx_http_feed_timeline_marker_done(ngx_http_feed_timeline_ctx_t *ctx)
{
    if (ctx->status == NGX_HTTP_FEED_CACHE_BYPASS) {
        ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
        return;
    }

    ngx_http_feed_timeline_move(ctx, NGX_HTTP_FEED_TL_READ);
}


/*
 * A read that ended, for feed_metrics: how the cache answered it, and the
 * rebuild it led.  A read that failed before the cache answered has no
 * cache status and is counted by its response only.
 */

static void
ngx_http_feed_timeline_count(ngx_http_feed_timeline_ctx_t *ctx)
{
    if (ctx->status != NGX_HTTP_FEED_CACHE_NONE && !ctx->counting) {
        ngx_http_feed_stat(timeline_reads[ctx->status], 1);
    }

    if (!ctx->rebuilding) {
        return;
    }

    ctx->rebuilding = 0;

    ngx_http_feed_observe(rebuild,
                          (ngx_msec_int_t) (ngx_current_msec
                                            - ctx->rebuild_start));

    if (ctx->state == NGX_HTTP_FEED_TL_FAILED) {
        ngx_http_feed_stat(rebuild_failures, 1);
    }
}


/* a request that goes away takes itself out of the coalescing */

static void
ngx_http_feed_timeline_cleanup(void *data)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    if (ctx->poll.timer_set) {
        ngx_del_timer(&ctx->poll);
    }

    if (ctx->poll.posted) {
        ngx_delete_posted_event(&ctx->poll);
    }

    if (ctx->leader) {
        ngx_queue_remove(&ctx->queue);
        ctx->leader = NULL;
    }

    if (ctx->is_leader) {
        /* whoever waited on it finds the lock and leads a rebuild */
        ngx_http_feed_timeline_lead_done(ctx, NGX_OK);
    }

    if (ctx->fb_doc) {
        bson_destroy(ctx->fb_doc);
    }

    ngx_http_feed_timeline_wait_cleanup(ctx);
}


ngx_int_t
ngx_http_feed_timeline_init(void)
{
    ngx_queue_init(&ngx_http_feed_timeline_leaders);

    return NGX_OK;
}


ngx_int_t
ngx_http_feed_cache_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_feed_loc_conf_t      *flcf;
    ngx_http_feed_timeline_ctx_t  *ctx;

    flcf = ngx_http_get_module_loc_conf(r->main, ngx_http_feed_module);
    ctx = ngx_http_get_module_ctx(r->main, ngx_http_feed_module);

    if (ctx == NULL
        || (flcf->handler != &ngx_http_feed_timeline_handler
            && flcf->handler != &ngx_http_feed_timeline_unread_handler)
        || ctx->status == NGX_HTTP_FEED_CACHE_NONE)
    {
        v->not_found = 1;
        return NGX_OK;
    }

    v->len = ngx_http_feed_cache_statuses[ctx->status].len;
    v->data = ngx_http_feed_cache_statuses[ctx->status].data;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;

    return NGX_OK;
}
