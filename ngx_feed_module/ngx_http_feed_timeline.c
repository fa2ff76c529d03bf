
/*
 * ngx_feed_module: "feed_timeline", the home timeline.
 *
 *   hit     one EVALSHA answers the page from the Redis cache;
 *   deep    the page runs past a trimmed cache: the rest comes from the
 *           fallback location, nothing is cached;
 *   miss    no cache: one request per user rebuilds it from the fallback
 *           (the others of this worker wait for it, those of other
 *           workers and nodes poll behind a Redis lock), warms the cache
 *           in one step, and every waiter reads the page from it;
 *   bypass  Redis is unavailable: the page comes from the fallback.
 *
 * The fallback is an in-memory subrequest to an ordinary location,
 * "feed_timeline_source" (fanout on read from MongoDB) or proxy_pass.
 *
 * A read is a state machine: ngx_http_feed_tl_move() takes the request
 * from one state to the next, runs what the new state starts, and traces
 * each move at the debug level:
 *
 *   local, read -> kept | hit | deep | miss | bypass | local, read
 *   miss -> wait | poll | lead | bypass
 *   wait, poll -> local, read
 *   lead -> lead (fewer posts) | warm
 *   warm -> local, read | rebuilt (answered from the rebuild, not cached)
 *   kept, hit, deep, bypass, rebuilt -> done
 *   any -> failed
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_json.h"


#define NGX_HTTP_FEED_POLL     20

/* rebuilds with fewer posts after an answer too large for the buffer */
#define NGX_HTTP_FEED_SHRINKS  5


typedef enum {
    NGX_HTTP_FEED_TL_START = 0,
    NGX_HTTP_FEED_TL_LOCAL,         /* the cache is read, the worker's copy
                                       of the first page offered */
    NGX_HTTP_FEED_TL_READ,          /* the cache is read */
    NGX_HTTP_FEED_TL_KEPT,          /* a page kept as answered is current */
    NGX_HTTP_FEED_TL_HIT,           /* the cache has the page's posts */
    NGX_HTTP_FEED_TL_MISS,          /* no cache: the rebuild lock is asked */
    NGX_HTTP_FEED_TL_WAIT,          /* for this worker's rebuild */
    NGX_HTTP_FEED_TL_POLL,          /* for a rebuild elsewhere */
    NGX_HTTP_FEED_TL_LEAD,          /* the rebuild asks the fallback */
    NGX_HTTP_FEED_TL_WARM,          /* the rebuild is written to the cache */
    NGX_HTTP_FEED_TL_REBUILT,       /* the rebuild could not be cached */
    NGX_HTTP_FEED_TL_DEEP,          /* past the cache's end: the fallback */
    NGX_HTTP_FEED_TL_BYPASS,        /* no cache at all: the fallback */
    NGX_HTTP_FEED_TL_DONE,
    NGX_HTTP_FEED_TL_FAILED
} ngx_http_feed_tl_state_e;


typedef struct ngx_http_feed_tl_ctx_s  ngx_http_feed_tl_ctx_t;

typedef void (*ngx_http_feed_tl_next_pt)(ngx_http_feed_tl_ctx_t *ctx);


struct ngx_http_feed_tl_ctx_s {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_page_t          page;
    ngx_http_feed_cached_t        cached;
    ngx_http_feed_cache_status_e  status;
    ngx_http_feed_tl_state_e      state;

    /* coalescing: leaders are in the worker's list, waiters in theirs */
    ngx_queue_t                   queue;
    ngx_queue_t                   waiters;
    ngx_http_feed_tl_ctx_t       *leader;
    ngx_event_t                   poll;
    ngx_int_t                     wake_rc;

    /* the fallback subrequest */
    ngx_http_feed_tl_next_pt      next;
    ngx_uint_t                    fb_limit;
    ngx_uint_t                    fb_fit;
    ngx_uint_t                    shrinks;
    ngx_uint_t                    fb_done;
    ngx_uint_t                    fb_status;

    /*
     * The answer and its items: a heap document and a view of its array,
     * not bson_t members (libbson declares bson_t 128-byte aligned, which
     * this pool-allocated context is not)
     */
    bson_t                       *fb_doc;
    const uint8_t                *fb_items;
    uint32_t                      fb_items_len;

    /* the user's follows version when the rebuild began */
    u_char                        version[24];
    size_t                        version_len;

    /* the rebuild lock's token, ours while lock_held */
    u_char                        token_data[NGX_HTTP_FEED_NONCE_LEN];
    ngx_str_t                     token;

    /* the first page kept as answered, as the HGET got it */
    ngx_str_t                     kept;
    ngx_uint_t                    rereads;

    /* the version of the worker's own copy of it, when it has one */
    ngx_str_t                     have;

    unsigned                      is_leader:1;
    unsigned                      lock_held:1;
    unsigned                      items_ready:1;
    unsigned                      polling:1;
    unsigned                      no_local:1;
    unsigned                      fb_broke:1;
};


static ngx_int_t ngx_http_feed_tl_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_tl_start(ngx_http_request_t *r, void *data);
static void ngx_http_feed_tl_move(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_feed_tl_state_e state);
static void ngx_http_feed_tl_read(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_lookup(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_kept(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_tl_kept_page(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_read_done(void *data, redisReply *reply);
static void ngx_http_feed_tl_reread(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_miss(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_locked(void *data, redisReply *reply);
static void ngx_http_feed_tl_poll(ngx_event_t *ev);
static void ngx_http_feed_tl_lead(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_rebuilt(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_warm(ngx_http_feed_tl_ctx_t *ctx);
static ngx_int_t ngx_http_feed_tl_shrink(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_warmed(void *data, redisReply *reply);
static void ngx_http_feed_tl_lead_done(ngx_http_feed_tl_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_feed_tl_deep(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_deep_done(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_bypass(ngx_http_feed_tl_ctx_t *ctx);
static void ngx_http_feed_tl_bypass_done(ngx_http_feed_tl_ctx_t *ctx);

static ngx_int_t ngx_http_feed_tl_fallback(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_feed_page_t *page, ngx_http_feed_tl_next_pt next);
static ngx_int_t ngx_http_feed_tl_fallback_done(ngx_http_request_t *sr,
    void *data, ngx_int_t rc);
static ngx_int_t ngx_http_feed_tl_fallback_broke(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_request_t *sr);
static void ngx_http_feed_tl_wake(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_tl_fallback_items(ngx_http_feed_tl_ctx_t *ctx);
static ngx_int_t ngx_http_feed_tl_add_items(ngx_http_feed_tl_ctx_t *ctx,
    ngx_uint_t max, ngx_uint_t *more);

static void ngx_http_feed_tl_answer(ngx_http_feed_tl_ctx_t *ctx);
static ngx_int_t ngx_http_feed_tl_send(ngx_http_feed_tl_ctx_t *ctx);
static ngx_int_t ngx_http_feed_tl_link(ngx_http_request_t *r,
    ngx_http_feed_page_t *page, char *next);
static void ngx_http_feed_tl_fail(ngx_http_feed_tl_ctx_t *ctx,
    ngx_int_t rc);
static void ngx_http_feed_tl_cleanup(void *data);


static ngx_queue_t  ngx_http_feed_tl_leaders;


ngx_http_feed_handler_t  ngx_http_feed_timeline_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_tl_ctx_t),
    ngx_http_feed_tl_args,
    ngx_http_feed_tl_start,
    NULL
};


static ngx_str_t  ngx_http_feed_cache_statuses[] = {
    ngx_null_string,
    ngx_string("HIT"),
    ngx_string("MISS"),
    ngx_string("DEEP"),
    ngx_string("BYPASS")
};


#if (NGX_DEBUG)

static char  *ngx_http_feed_tl_states[] = {
    "start", "local", "read", "kept", "hit", "miss", "wait", "poll", "lead",
    "warm", "rebuilt", "deep", "bypass", "done", "failed"
};

#endif


static ngx_int_t
ngx_http_feed_tl_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    return ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_CLIENT, &ctx->page,
                                   err);
}


static ngx_int_t
ngx_http_feed_tl_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_queue_init(&ctx->waiters);

    ctx->poll.handler = ngx_http_feed_tl_poll;
    ctx->poll.data = r->connection;
    ctx->poll.log = r->connection->log;

    cln->handler = ngx_http_feed_tl_cleanup;
    cln->data = ctx;

    ngx_http_feed_tl_read(ctx);

    return NGX_DONE;
}


/*
 * The one place a read changes state: the move is traced, then what the
 * new state starts is run.  Waiting, done and failed start nothing here:
 * whoever moved there did what they need.
 */

static void
ngx_http_feed_tl_move(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_feed_tl_state_e state)
{
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": %s -> %s",
                   ctx->page.user.data, ngx_http_feed_tl_states[ctx->state],
                   ngx_http_feed_tl_states[state]);

    ctx->state = state;

    switch (state) {

    case NGX_HTTP_FEED_TL_LOCAL:
    case NGX_HTTP_FEED_TL_READ:
        ngx_http_feed_tl_lookup(ctx);
        return;

    case NGX_HTTP_FEED_TL_KEPT:
    case NGX_HTTP_FEED_TL_HIT:
        ngx_http_feed_tl_answer(ctx);
        return;

    case NGX_HTTP_FEED_TL_MISS:
        ngx_http_feed_tl_miss(ctx);
        return;

    case NGX_HTTP_FEED_TL_POLL:
        ctx->polling = 1;
        ngx_add_timer(&ctx->poll, NGX_HTTP_FEED_POLL);
        return;

    case NGX_HTTP_FEED_TL_LEAD:
        ngx_http_feed_tl_lead(ctx);
        return;

    case NGX_HTTP_FEED_TL_WARM:
        ngx_http_feed_tl_warm(ctx);
        return;

    case NGX_HTTP_FEED_TL_REBUILT:
        ngx_http_feed_tl_bypass_done(ctx);
        return;

    case NGX_HTTP_FEED_TL_DEEP:
        ngx_http_feed_tl_deep(ctx);
        return;

    case NGX_HTTP_FEED_TL_BYPASS:
        ngx_http_feed_tl_bypass(ctx);
        return;

    default: /* START, WAIT, DONE, FAILED */
        return;
    }
}


/*
 * A read from the start: with the worker's own copy of the first page,
 * the script need not send the page when that copy is still current.
 */

static void
ngx_http_feed_tl_read(ngx_http_feed_tl_ctx_t *ctx)
{
    u_char     *nl;
    ngx_str_t   copy;

    ctx->kept.len = 0;
    ctx->have.len = 0;

    if (!ctx->page.has_max && !ctx->page.has_since && !ctx->no_local) {
        copy = ngx_http_feed_timeline_local_get(&ctx->page.user,
                                                ctx->page.limit);

        nl = copy.len ? ngx_strlchr(copy.data, copy.data + copy.len, '\n')
                      : NULL;

        if (nl) {
            copy.len = nl - copy.data;
            ctx->have.len = copy.len;
            ctx->have.data = ngx_pstrdup(ctx->request->pool, &copy);

            if (ctx->have.data == NULL) {
                ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
                return;
            }
        }
    }

    ngx_http_feed_tl_move(ctx, ctx->have.len ? NGX_HTTP_FEED_TL_LOCAL
                                             : NGX_HTTP_FEED_TL_READ);
}


/* the hot path: one round trip */

static void
ngx_http_feed_tl_lookup(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_timeline_cache_read(ctx->request, ctx->fmcf,
                                           &ctx->page, &ctx->have,
                                           ngx_http_feed_tl_kept,
                                           ngx_http_feed_tl_read_done, ctx);
    if (rc == NGX_ERROR) {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
    }
}


/* the HGET of the first page kept as answered: copied, checked after */

static void
ngx_http_feed_tl_kept(void *data, redisReply *reply)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    if (reply == NULL || reply->type != REDIS_REPLY_STRING
        || ngx_http_feed_redis_keep_reply(ctx->request->pool, reply)
           != NGX_OK)
    {
        return;
    }

    /* the answer is sent from the reply itself */

    ctx->kept.data = (u_char *) reply->str;
    ctx->kept.len = reply->len;
}


/*
 * The kept page the script found current: the worker's own copy (taken
 * into the request: the copy may go while the answer is being sent), or
 * the one in the reply, which the worker then keeps a copy of.
 */

static ngx_int_t
ngx_http_feed_tl_kept_page(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_str_t  copy;

    if (ctx->cached.local) {
        copy = ngx_http_feed_timeline_local_get(&ctx->page.user,
                                                ctx->page.limit);
        if (copy.len == 0) {
            return NGX_DECLINED;
        }

        ctx->kept.data = ngx_pstrdup(ctx->request->pool, &copy);
        if (ctx->kept.data == NULL) {
            return NGX_ERROR;
        }

        ctx->kept.len = copy.len;

        if (ngx_http_feed_timeline_cache_kept(&ctx->kept, &ctx->cached)
            != NGX_OK)
        {
            return NGX_DECLINED;
        }

        ngx_http_feed_stat(local_answers, 1);

        return NGX_OK;
    }

    if (ctx->cached.page.len) {
        ctx->kept = ctx->cached.page;
    }

    if (ngx_http_feed_timeline_cache_kept(&ctx->kept, &ctx->cached)
        != NGX_OK)
    {
        return NGX_DECLINED;
    }

    ngx_http_feed_timeline_local_put(&ctx->page.user, ctx->page.limit,
                                     &ctx->kept);

    return NGX_OK;
}


/* the script's answer; the Redis layer runs what this posts afterwards */

static void
ngx_http_feed_tl_read_done(void *data, redisReply *reply)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    ngx_int_t  rc;

    rc = ngx_http_feed_timeline_cache_parse(ctx->request, reply,
                                            &ctx->cached);

    if (rc == NGX_ERROR) {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    if (rc == NGX_DECLINED) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
        return;
    }

    if (!ctx->cached.found) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_MISS);
        return;
    }

    if (ctx->cached.kept && ngx_http_feed_tl_kept_page(ctx) != NGX_OK) {
        ngx_http_feed_tl_reread(ctx);
        return;
    }

    if (ctx->status == NGX_HTTP_FEED_CACHE_NONE) {
        ctx->status = NGX_HTTP_FEED_CACHE_HIT;
    }

    if (ctx->cached.deep) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_DEEP);
        return;
    }

    ngx_http_feed_tl_move(ctx, ctx->cached.kept ? NGX_HTTP_FEED_TL_KEPT
                                                : NGX_HTTP_FEED_TL_HIT);
}


/*
 * The page changed between the HGET and the script, which both ran in one
 * round trip but not atomically, or the worker's copy went meanwhile:
 * rare, read again.
 */

static void
ngx_http_feed_tl_reread(ngx_http_feed_tl_ctx_t *ctx)
{
    ctx->no_local = 1;

    if (ctx->rereads++ < 3) {
        ngx_http_feed_tl_read(ctx);

    } else {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
    }
}


/*
 * No cache: wait for this worker's rebuild of it if there is one, else
 * lead one, behind the Redis lock when nobody elsewhere holds it.
 */

static void
ngx_http_feed_tl_miss(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_queue_t             *q;
    ngx_http_feed_tl_ctx_t  *l;

    ctx->status = NGX_HTTP_FEED_CACHE_MISS;

    if (!ctx->is_leader) {
        for (q = ngx_queue_head(&ngx_http_feed_tl_leaders);
             q != ngx_queue_sentinel(&ngx_http_feed_tl_leaders);
             q = ngx_queue_next(q))
        {
            l = ngx_queue_data(q, ngx_http_feed_tl_ctx_t, queue);

            if (l->page.user.len == ctx->page.user.len
                && ngx_strcmp(l->page.user.data, ctx->page.user.data) == 0)
            {
                ctx->leader = l;
                ngx_queue_insert_tail(&l->waiters, &ctx->queue);
                ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_WAIT);
                return;
            }
        }

        ctx->is_leader = 1;
        ngx_queue_insert_tail(&ngx_http_feed_tl_leaders, &ctx->queue);
    }

    if (ctx->cached.locked == 2 && ctx->polling) {
        /* the rebuild waited for failed elsewhere: its answer is ours */
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return;
    }

    if (ctx->cached.locked == 1) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_POLL);
        return;
    }

    ctx->token.data = ctx->token_data;

    if (ngx_http_feed_timeline_cache_lock(ctx->request, ctx->fmcf,
                                          &ctx->page.user, &ctx->token,
                                          ngx_http_feed_tl_locked, ctx)
        != NGX_OK)
    {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_BYPASS);
    }
}


static void
ngx_http_feed_tl_locked(void *data, redisReply *reply)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_BYPASS);

    } else if (reply->element[0]->integer == 0
               || reply->elements < 2
               || reply->element[1]->type != REDIS_REPLY_STRING
               || reply->element[1]->len >= sizeof(ctx->version))
    {
        /* rebuilt elsewhere: look again shortly */
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_POLL);

    } else {
        ctx->lock_held = 1;
        ngx_memcpy(ctx->version, reply->element[1]->str,
                   reply->element[1]->len);
        ctx->version_len = reply->element[1]->len;

        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_LEAD);
    }
}


/*
 * The poll timer of a request waiting for a rebuild elsewhere, or the
 * event posted by the leader it waited for: either way it goes on in its
 * own event, so that what it posts (a fallback subrequest when Redis went
 * away) is run on its own connection.
 */

static void
ngx_http_feed_tl_poll(ngx_event_t *ev)
{
    ngx_int_t                rc;
    ngx_connection_t        *c;
    ngx_http_feed_tl_ctx_t  *ctx;

    c = ev->data;
    ctx = ngx_queue_data(ev, ngx_http_feed_tl_ctx_t, poll);

    rc = ctx->wake_rc;
    ctx->wake_rc = NGX_OK;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "feed timeline of \"%s\" woken: %i",
                   ctx->page.user.data, rc);

    if (rc != NGX_OK) {
        ngx_http_feed_tl_fail(ctx, rc);

    } else {
        ngx_http_feed_tl_read(ctx);
    }

    ngx_http_run_posted_requests(c);
}


/* the lock is ours: the newest feed_cache_size posts of the timeline */

static void
ngx_http_feed_tl_lead(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_http_feed_page_t  page;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = ctx->page.user;
    page.limit = ctx->fmcf->cache_size;

    if (ngx_http_feed_tl_fallback(ctx, &page, ngx_http_feed_tl_rebuilt)
        != NGX_OK)
    {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_feed_tl_rebuilt(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_int_t  rc;

    if (ctx->fb_broke) {
        rc = ngx_http_feed_tl_shrink(ctx);

        if (rc == NGX_OK) {
            return;
        }

        if (rc == NGX_ERROR) {
            ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }
    }

    if (ngx_http_feed_tl_fallback_items(ctx) != NGX_OK) {
        return;
    }

    ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_WARM);
}


/* the rebuild's posts into the cache, with the follows version it began */

static void
ngx_http_feed_tl_warm(ngx_http_feed_tl_ctx_t *ctx)
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
                                          &ctx->token, &items,
                                          complete, ngx_http_feed_tl_warmed,
                                          ctx)
        != NGX_OK)
    {
        /* Redis went away meanwhile: answer from what the rebuild gave */
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_REBUILT);
    }
}


static void
ngx_http_feed_tl_warmed(void *data, redisReply *reply)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_REBUILT);

    } else if (reply->integer == 0) {
        /*
         * The user's follows changed while rebuilding: this answer is as
         * of the request, the next read rebuilds.
         */
        ctx->lock_held = 0;
        ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_REBUILT);

    } else {
        /* the warm released the lock; everyone reads the new cache */
        ctx->lock_held = 0;
        ngx_http_feed_tl_read(ctx);
    }
}


/*
 * The rebuild's answer was too large for the fallback location's buffer:
 * the cache is made of fewer posts (the rest is read past its end, page by
 * page), as many as the answer's length says would fit, or half as many.
 * NGX_DECLINED: no more tries, the rebuild fails.
 */

static ngx_int_t
ngx_http_feed_tl_shrink(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_uint_t            limit;
    ngx_http_feed_page_t  page;

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

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = ctx->page.user;
    page.limit = limit;

    return ngx_http_feed_tl_fallback(ctx, &page, ngx_http_feed_tl_rebuilt);
}


/* the leader is done: its waiters read the cache now, or share its error */

static void
ngx_http_feed_tl_lead_done(ngx_http_feed_tl_ctx_t *ctx, ngx_int_t rc)
{
    ngx_queue_t             *q;
    ngx_http_feed_tl_ctx_t  *w;

    if (ctx->lock_held) {
        /* the rebuild did not warm the cache: another one may try */
        ngx_http_feed_timeline_cache_unlock(ctx->fmcf, &ctx->page.user,
                                            &ctx->token, rc != NGX_OK);
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

        w = ngx_queue_data(q, ngx_http_feed_tl_ctx_t, queue);
        w->leader = NULL;
        w->wake_rc = rc;

        ngx_post_event(&w->poll, &ngx_posted_events);
    }
}


/* past the end of a trimmed cache: the rest from the fallback */

static void
ngx_http_feed_tl_deep(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_http_feed_page_t  page;

    page = ctx->page;
    page.limit = ctx->page.limit - ctx->cached.nitems + 1;

    if (ctx->cached.nitems) {
        ngx_memcpy(page.max_id, ctx->cached.last, 25);
        page.has_max = 1;
    }

    if (ctx->status == NGX_HTTP_FEED_CACHE_HIT) {
        ctx->status = NGX_HTTP_FEED_CACHE_DEEP;
    }

    if (ngx_http_feed_tl_fallback(ctx, &page, ngx_http_feed_tl_deep_done)
        != NGX_OK)
    {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


static void
ngx_http_feed_tl_deep_done(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_uint_t  more;

    if (ngx_http_feed_tl_fallback_items(ctx) != NGX_OK) {
        return;
    }

    if (ngx_http_feed_tl_add_items(ctx,
                                   ctx->page.limit - ctx->cached.nitems,
                                   &more)
        != NGX_OK)
    {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->cached.more = more;

    ngx_http_feed_tl_answer(ctx);
}


/* no Redis: the page straight from the fallback */

static void
ngx_http_feed_tl_bypass(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_http_feed_page_t  page;

    ctx->status = NGX_HTTP_FEED_CACHE_BYPASS;

    page = ctx->page;
    page.limit++;

    if (ngx_http_feed_tl_fallback(ctx, &page, ngx_http_feed_tl_bypass_done)
        != NGX_OK)
    {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
    }
}


/*
 * The page from fallback items, after those of the cache if any: those
 * of a bypass, or of a rebuild that could not be cached.
 */

static void
ngx_http_feed_tl_bypass_done(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_uint_t  more;

    if (!ctx->items_ready && ngx_http_feed_tl_fallback_items(ctx) != NGX_OK)
    {
        return;
    }

    ngx_memzero(&ctx->cached, sizeof(ngx_http_feed_cached_t));

    if (ngx_http_feed_tl_add_items(ctx, ctx->page.limit, &more) != NGX_OK) {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->cached.more = more;

    ngx_http_feed_tl_answer(ctx);
}


/*
 * The fallback: an in-memory subrequest; the request resumes in
 * ngx_http_feed_tl_wake() once it is done, and goes on with next().
 */

static ngx_int_t
ngx_http_feed_tl_fallback(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_feed_page_t *page, ngx_http_feed_tl_next_pt next)
{
    u_char                      *p;
    ngx_str_t                    args;
    ngx_http_request_t          *r, *sr;
    ngx_http_feed_loc_conf_t    *flcf;
    ngx_http_post_subrequest_t  *ps;

    r = ctx->request;
    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    args.data = ngx_pnalloc(r->pool, sizeof("user=&limit=&max_id=&since_id=")
                                     + NGX_HTTP_FEED_USER_MAX
                                     + NGX_INT_T_LEN + 2 * 24);
    ps = ngx_palloc(r->pool, sizeof(ngx_http_post_subrequest_t));

    if (args.data == NULL || ps == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(args.data, "user=%s&limit=%ui", page->user.data,
                    page->limit);

    if (page->has_max) {
        p = ngx_sprintf(p, "&max_id=%s", page->max_id);
    }

    if (page->has_since) {
        p = ngx_sprintf(p, "&since_id=%s", page->since_id);
    }

    args.len = p - args.data;

    ps->handler = ngx_http_feed_tl_fallback_done;
    ps->data = ctx;

    ctx->next = next;
    ctx->fb_limit = page->limit;
    ctx->fb_fit = 0;
    ctx->fb_broke = 0;
    ctx->fb_done = 0;
    ctx->items_ready = 0;

    if (ngx_http_subrequest(r, &flcf->fallback, &args, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            |NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    r->write_event_handler = ngx_http_feed_tl_wake;

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_tl_fallback_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

    ngx_buf_t  *b;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, sr->connection->log, 0,
                   "feed timeline fallback done: %i, status %ui, again %ui",
                   rc, sr->headers_out.status, ctx->fb_done);

    /* may be called more than once: the first time counts */

    if (ctx->fb_done) {
        return rc;
    }

    ctx->fb_done = 1;

    if (rc == NGX_ERROR) {
        rc = ngx_http_feed_tl_fallback_broke(ctx, sr);

        if (rc != NGX_ERROR) {
            return rc;
        }
    }
    ctx->fb_status = (rc == NGX_OK || rc == NGX_DONE)
                     ? sr->headers_out.status : NGX_HTTP_BAD_GATEWAY;

    if (ctx->fb_status != NGX_HTTP_OK || sr->out == NULL) {
        ctx->fb_status = ctx->fb_status == NGX_HTTP_OK
                         ? NGX_HTTP_BAD_GATEWAY : ctx->fb_status;
        return rc;
    }

    if (ctx->fb_doc) {
        bson_destroy(ctx->fb_doc);
    }

    b = sr->out->buf;

    ctx->fb_doc = bson_new_from_json(b->pos, b->last - b->pos, NULL);

    if (ctx->fb_doc == NULL) {
        ctx->fb_status = NGX_HTTP_BAD_GATEWAY;
    }

    return rc;
}


/*
 * The fallback's answer was larger than the fallback location's
 * subrequest_output_buffer_size: nginx marks the connection both requests
 * share as failed, although nothing was written to it, and would
 * terminate the client's request, which would get no answer at all.  The
 * subrequest ends as done instead, and the request goes on knowing it.
 * Any other error (NGX_ERROR) stays nginx's to handle.
 */

static ngx_int_t
ngx_http_feed_tl_fallback_broke(ngx_http_feed_tl_ctx_t *ctx,
    ngx_http_request_t *sr)
{
    off_t                      len;
    ngx_connection_t          *c;
    ngx_http_core_loc_conf_t  *clcf;

    c = sr->connection;
    clcf = ngx_http_get_module_loc_conf(sr, ngx_http_core_module);
    len = sr->headers_out.content_length_n;

    if (!c->error || !sr->subrequest_in_memory
        || (len <= (off_t) clcf->subrequest_output_buffer_size
            && sr->out == NULL))
    {
        return NGX_ERROR;
    }

    c->error = 0;

    ctx->fb_status = NGX_HTTP_BAD_GATEWAY;
    ctx->fb_broke = 1;

    if (len > 0 && (size_t) len > clcf->subrequest_output_buffer_size) {
        /* as many posts as fit, with room for some larger than others */
        ctx->fb_fit = (ngx_uint_t) (ctx->fb_limit
                                    * clcf->subrequest_output_buffer_size
                                    / len * 3 / 4);

        if (ctx->fb_fit == 0) {
            ctx->fb_fit = 1;
        }
    }

    ngx_log_error(NGX_LOG_ERR, sr->connection->log, 0,
                  "timeline fallback answer for %ui posts failed, %O bytes "
                  "for a subrequest_output_buffer_size of %uz",
                  ctx->fb_limit, len, clcf->subrequest_output_buffer_size);

    return NGX_OK;
}


static void
ngx_http_feed_tl_wake(ngx_http_request_t *r)
{
    ngx_http_feed_tl_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (!ctx->fb_done) {
        return;
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    ctx->next(ctx);
}


/* the "items" of the fallback's answer, or the request failed */

static ngx_int_t
ngx_http_feed_tl_fallback_items(ngx_http_feed_tl_ctx_t *ctx)
{
    bson_t          items;
    bson_iter_t     it;
    uint32_t        len;
    const uint8_t  *data;

    if (ctx->fb_status != NGX_HTTP_OK || ctx->fb_doc == NULL
        || !bson_iter_init_find(&it, ctx->fb_doc, "items")
        || !BSON_ITER_HOLDS_ARRAY(&it))
    {
        ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                      "timeline fallback failed: status %ui",
                      ctx->fb_status);

        ngx_http_feed_tl_fail(ctx, NGX_HTTP_SERVICE_UNAVAILABLE);
        return NGX_ERROR;
    }

    bson_iter_array(&it, &len, &data);

    if (!bson_init_static(&items, data, len)) {
        ngx_http_feed_tl_fail(ctx, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return NGX_ERROR;
    }

    ctx->fb_items = data;
    ctx->fb_items_len = len;
    ctx->items_ready = 1;

    return NGX_OK;
}


/*
 * Appends up to max fallback items within the client's bounds to the page
 * (a rebuild's items are not bounded yet); more: there were others.  The
 * fallback may be any application: an item whose id is not a post id is
 * skipped, since ids go into "next" and the Link header as they are.
 */

static ngx_int_t
ngx_http_feed_tl_add_items(ngx_http_feed_tl_ctx_t *ctx, ngx_uint_t max,
    ngx_uint_t *more)
{
    char            *json;
    size_t           len;
    bson_t           post, list;
    uint32_t         doclen, idlen;
    ngx_str_t       *items, *item, value;
    ngx_uint_t       n, skipped, answered;
    bson_oid_t       oid;
    const char      *id;
    bson_iter_t      it, iid;
    const uint8_t   *raw;

    *more = 0;
    skipped = 0;
    if (!bson_init_static(&list, ctx->fb_items, ctx->fb_items_len)) {
        return NGX_ERROR;
    }

    answered = bson_count_keys(&list);
    n = answered;

    items = ngx_palloc(ctx->request->pool,
                       (ctx->cached.nitems + ngx_min(n, max) + 1)
                       * sizeof(ngx_str_t));
    if (items == NULL) {
        return NGX_ERROR;
    }

    if (ctx->cached.nitems) {
        ngx_memcpy(items, ctx->cached.items,
                   ctx->cached.nitems * sizeof(ngx_str_t));
    }

    ctx->cached.items = items;

    if (!bson_iter_init(&it, &list)) {
        return NGX_ERROR;
    }

    n = 0;

    while (bson_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }

        bson_iter_document(&it, &doclen, &raw);

        if (!bson_init_static(&post, raw, doclen)
            || !bson_iter_init_find(&iid, &post, "id")
            || !BSON_ITER_HOLDS_UTF8(&iid))
        {
            continue;
        }

        id = bson_iter_utf8(&iid, &idlen);

        value.data = (u_char *) id;
        value.len = idlen;

        if (ngx_http_feed_post_id(&value, &oid) != NGX_OK) {
            skipped++;
            continue;
        }

        if (ctx->page.has_max && ngx_strcmp(id, ctx->page.max_id) >= 0) {
            continue;
        }

        if (ctx->page.has_since && ngx_strcmp(id, ctx->page.since_id) <= 0) {
            break;
        }

        if (n == max) {
            *more = 1;
            break;
        }

        json = bson_as_relaxed_extended_json(&post, &len);
        if (json == NULL) {
            return NGX_ERROR;
        }

        item = &items[ctx->cached.nitems];

        item->data = ngx_pnalloc(ctx->request->pool, len);
        if (item->data == NULL) {
            bson_free(json);
            return NGX_ERROR;
        }

        ngx_memcpy(item->data, json, len);
        item->len = len;
        bson_free(json);

        ngx_cpystrn((u_char *) ctx->cached.last, (u_char *) id, 25);

        ctx->cached.nitems++;
        n++;
    }

    if (skipped) {
        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "timeline fallback answered %ui items without a "
                      "valid post id, skipped", skipped);

        /* a full answer may go on past what was skipped: a short page */

        if (n && answered >= ctx->fb_limit) {
            *more = 1;
        }
    }

    return NGX_OK;
}


/*
 * Waiters are woken before the request is answered: answering may free it,
 * and its cleanup would then send them rebuilding on their own.
 */

static void
ngx_http_feed_tl_answer(ngx_http_feed_tl_ctx_t *ctx)
{
    ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_DONE);
    ngx_http_feed_tl_lead_done(ctx, NGX_OK);
    ngx_http_feed_finalize(ctx->request, ngx_http_feed_tl_send(ctx));
}


/*
 * {"items": [...], "next": ...}: the items' JSON as the cache had it, or
 * the whole page as it was answered before.
 */

static ngx_int_t
ngx_http_feed_tl_send(ngx_http_feed_tl_ctx_t *ctx)
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

    if (ctx->cached.more && ctx->cached.nitems
        && ngx_http_feed_tl_link(r, &ctx->page, ctx->cached.last) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->cached.kept) {
        return ngx_http_feed_send_body(r, NGX_HTTP_OK, ctx->cached.body.data,
                                       ctx->cached.body.len);
    }

    len = sizeof("{\"items\": [], \"next\": \"\"}\n") + 24;

    for (i = 0; i < ctx->cached.nitems; i++) {
        len += ctx->cached.items[i].len + 2;
    }

    body.data = ngx_pnalloc(r->pool, len);
    if (body.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(body.data, "{\"items\": [", sizeof("{\"items\": [") - 1);

    for (i = 0; i < ctx->cached.nitems; i++) {
        if (i) {
            *p++ = ',';
            *p++ = ' ';
        }

        p = ngx_cpymem(p, ctx->cached.items[i].data,
                       ctx->cached.items[i].len);
    }

    if (ctx->cached.more && ctx->cached.nitems) {
        p = ngx_sprintf(p, "], \"next\": \"%s\"}\n", ctx->cached.last);

    } else {
        p = ngx_cpymem(p, "], \"next\": null}\n",
                       sizeof("], \"next\": null}\n") - 1);
    }

    body.len = p - body.data;

    /* a first page read whole from the cache is kept as answered */

    if (ctx->cached.version.len && !ctx->cached.deep
        && !ctx->page.has_max && !ctx->page.has_since)
    {
        ngx_http_feed_timeline_cache_page(r, ctx->fmcf, &ctx->page,
                                          &ctx->cached, &body);
    }

    return ngx_http_feed_send_body(r, NGX_HTTP_OK, body.data, body.len);
}


/* Link: </users/u/timeline?limit=20&max_id=...[&since_id=...]>; rel="next" */

static ngx_int_t
ngx_http_feed_tl_link(ngx_http_request_t *r, ngx_http_feed_page_t *page,
    char *next)
{
    u_char     *p;
    ngx_str_t   link;

    link.data = ngx_pnalloc(r->pool,
                            sizeof("<?limit=&max_id=&since_id=>; rel=\"next\"")
                            + r->uri.len + NGX_INT_T_LEN + 2 * 24);
    if (link.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(link.data, "<%V?limit=%ui&max_id=%s", &r->uri,
                    page->limit, next);

    if (page->has_since) {
        p = ngx_sprintf(p, "&since_id=%s", page->since_id);
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
ngx_http_feed_tl_fail(ngx_http_feed_tl_ctx_t *ctx, ngx_int_t rc)
{
    ngx_http_feed_tl_move(ctx, NGX_HTTP_FEED_TL_FAILED);

    ngx_http_feed_tl_lead_done(ctx, (rc == NGX_HTTP_INTERNAL_SERVER_ERROR
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


/* a request that goes away takes itself out of the coalescing */

static void
ngx_http_feed_tl_cleanup(void *data)
{
    ngx_http_feed_tl_ctx_t  *ctx = data;

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
        ngx_http_feed_tl_lead_done(ctx, NGX_OK);
    }

    if (ctx->fb_doc) {
        bson_destroy(ctx->fb_doc);
    }
}


ngx_int_t
ngx_http_feed_timeline_init(void)
{
    ngx_queue_init(&ngx_http_feed_tl_leaders);

    return NGX_OK;
}


ngx_int_t
ngx_http_feed_cache_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    ngx_http_feed_tl_ctx_t    *ctx;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r->main, ngx_http_feed_module);
    ctx = ngx_http_get_module_ctx(r->main, ngx_http_feed_module);

    if (ctx == NULL || flcf->handler != &ngx_http_feed_timeline_handler
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
