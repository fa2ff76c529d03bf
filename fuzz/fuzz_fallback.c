
/*
 * Fuzz target: the answer of the timeline's fallback location (proxy_pass
 * to anything, or feed_timeline_source), from the subrequest's body to the
 * client's answer, through the three ways it is used:
 *
 *   rebuild  the items warm the cache (ngx_http_feed_timeline_cache_warm
 *            builds its script call from them), and the page is answered
 *            from them (Redis is away: the warm cannot be sent);
 *   deep     the items follow those the cache had;
 *   bypass   the items are the page.
 *
 * The limit asked of the fallback is the one
 * ngx_http_feed_timeline_fallback.c would have asked (the subrequest itself
 * is not made here).
 *
 * Input: a flags byte (bits 0-1 the way, 2 max_id given, 3 since_id
 * given, 4 the fallback failed, 5-7 items the cache had for "deep"), a
 * limit byte, 24 bytes per id given (taken as hex digits), then the body.
 *
 * Checked: no memory error, no alert; the request is answered once, 200
 * or 503, with a JSON body and header values that are single lines.
 *
 * The module's files are included: these steps are their static
 * functions, the read's (ngx_http_feed_timeline.c) and the subrequest's end
 * (ngx_http_feed_timeline_fallback.c).
 */


#include "ngx_http_feed_fuzz.h"

#include "ngx_http_feed_timeline.c"
#include "ngx_http_feed_timeline_fallback.c"


#define NGX_HTTP_FEED_FUZZ_REBUILD  0
#define NGX_HTTP_FEED_FUZZ_DEEP     1


static ngx_http_feed_timeline_ctx_t *ngx_http_feed_fuzz_ctx(
    ngx_http_request_t *r, const uint8_t **data, size_t *size);
static void ngx_http_feed_fuzz_id(char *id, const uint8_t *data);
static ngx_int_t ngx_http_feed_fuzz_cached(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t n);
static void ngx_http_feed_fuzz_subrequest(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t failed, const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_uint_t                     flags;
    ngx_http_request_t            *r;
    ngx_http_feed_timeline_ctx_t  *ctx;

    ngx_http_feed_fuzz_init();

    if (size < 2) {
        return 0;
    }

    flags = data[0];

    r = ngx_http_feed_fuzz_request();

    ctx = ngx_http_feed_fuzz_ctx(r, &data, &size);
    if (ctx == NULL) {
        ngx_http_feed_fuzz_done(r);
        return 0;
    }

    ngx_http_feed_fuzz_subrequest(ctx, flags & 0x10, data, size);

    switch (flags & 3) {

    case NGX_HTTP_FEED_FUZZ_REBUILD:
        ctx->status = NGX_HTTP_FEED_CACHE_MISS;
        ctx->lock_held = 1;
        ngx_memcpy(ctx->version, "7", 1);
        ctx->version_len = 1;
        ctx->fb_limit = ctx->fmcf->cache_size;
        ngx_http_feed_timeline_rebuilt(ctx);
        break;

    case NGX_HTTP_FEED_FUZZ_DEEP:
        ctx->status = NGX_HTTP_FEED_CACHE_DEEP;

        if (ngx_http_feed_fuzz_cached(ctx, flags >> 5) != NGX_OK) {
            abort();
        }

        ctx->fb_limit = ctx->page.limit - ctx->cached.nitems + 1;
        ngx_http_feed_timeline_deep_done(ctx);
        break;

    default:
        ctx->status = NGX_HTTP_FEED_CACHE_BYPASS;
        ctx->fb_limit = ctx->page.limit + 1;
        ngx_http_feed_timeline_bypass_done(ctx);
    }

    ngx_http_feed_fuzz_assert(ngx_http_feed_fuzz_answer.headers_sent,
                              "the request was not answered");
    ngx_http_feed_fuzz_assert(r->count == 1,
                              "the request was not finalized once");
    ngx_http_feed_fuzz_assert(ngx_http_feed_fuzz_answer.status
                              == NGX_HTTP_OK
                              || ngx_http_feed_fuzz_answer.status
                                 == NGX_HTTP_SERVICE_UNAVAILABLE,
                              "an answer that is neither 200 nor 503");

    ngx_http_feed_fuzz_check_answer(r);

    ngx_http_feed_fuzz_done(r);

    return 0;
}


/* the request's context, as the handler skeleton and timeline_start make it */

static ngx_http_feed_timeline_ctx_t *
ngx_http_feed_fuzz_ctx(ngx_http_request_t *r, const uint8_t **data,
    size_t *size)
{
    ngx_uint_t                     flags;
    ngx_pool_cleanup_t            *cln;
    ngx_http_feed_timeline_ctx_t  *ctx;

    flags = (*data)[0];

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_feed_timeline_ctx_t));
    cln = ngx_pool_cleanup_add(r->pool, 0);

    if (ctx == NULL || cln == NULL) {
        abort();
    }

    ctx->request = r;
    ctx->fmcf = ngx_http_feed_fuzz_fmcf;
    ngx_queue_init(&ctx->waiters);
    ctx->token.data = ctx->token_data;
    ctx->token.len = ngx_sprintf(ctx->token_data, "1:2:3") - ctx->token_data;

    cln->handler = ngx_http_feed_timeline_cleanup;
    cln->data = ctx;

    ngx_http_set_ctx(r, ctx, ngx_http_feed_module);

    ngx_memcpy(ctx->page.user.data, "alice", sizeof("alice"));
    ctx->page.user.len = sizeof("alice") - 1;
    ctx->page.limit = 1 + (*data)[1] % NGX_HTTP_FEED_LIMIT_MAX;

    *data += 2;
    *size -= 2;

    if (flags & 4) {
        if (*size < 24) {
            return NULL;
        }

        ngx_http_feed_fuzz_id(ctx->page.max_id, *data);
        ctx->page.has_max = 1;
        *data += 24;
        *size -= 24;
    }

    if (flags & 8) {
        if (*size < 24) {
            return NULL;
        }

        ngx_http_feed_fuzz_id(ctx->page.since_id, *data);
        ctx->page.has_since = 1;
        *data += 24;
        *size -= 24;
    }

    /* the handler counts the request it answers later */
    r->main->count++;

    return ctx;
}


/* what ngx_http_feed_timeline_bounds() lets through: 24 hex digits */

static void
ngx_http_feed_fuzz_id(char *id, const uint8_t *data)
{
    ngx_uint_t  i;

    for (i = 0; i < 24; i++) {
        id[i] = "0123456789abcdef"[data[i] & 0xf];
    }

    id[24] = '\0';
}


/* the first items of a deep page, as the cache gave them */

static ngx_int_t
ngx_http_feed_fuzz_cached(ngx_http_feed_timeline_ctx_t *ctx, ngx_uint_t n)
{
    u_char                  *p;
    ngx_uint_t               i;
    ngx_http_feed_cached_t  *cached;

    cached = &ctx->cached;
    cached->nitems = n % ctx->page.limit;

    if (cached->nitems == 0) {
        return NGX_OK;
    }

    cached->items = ngx_palloc(ctx->request->pool,
                               cached->nitems * sizeof(ngx_str_t));
    if (cached->items == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < cached->nitems; i++) {
        p = ngx_pnalloc(ctx->request->pool, sizeof("{\"id\": \"\"}") + 24);
        if (p == NULL) {
            return NGX_ERROR;
        }

        cached->items[i].data = p;
        cached->items[i].len = ngx_sprintf(p, "{\"id\": \"%016xi%08xi\"}",
                                           (ngx_uint_t) 0xffffffff,
                                           0xffffff - i)
                               - p;
    }

    ngx_sprintf((u_char *) cached->last, "%016xi%08xi%Z",
                (ngx_uint_t) 0xffffffff, 0xffffff - i + 1);

    return NGX_OK;
}


/*
 * The in-memory subrequest as nginx leaves it for the post subrequest
 * handler: its status, and its whole body in one buffer.
 */

static void
ngx_http_feed_fuzz_subrequest(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t failed, const uint8_t *data, size_t size)
{
    ngx_buf_t           *b;
    ngx_chain_t         *cl;
    ngx_http_request_t  *r, *sr;

    r = ctx->request;

    sr = ngx_pcalloc(r->pool, sizeof(ngx_http_request_t));
    b = ngx_calloc_buf(r->pool);
    cl = ngx_alloc_chain_link(r->pool);

    if (sr == NULL || b == NULL || cl == NULL) {
        abort();
    }

    /* a copy of the exact size: a read past it is reported */

    b->start = ngx_pnalloc(r->pool, size ? size : 1);
    if (b->start == NULL) {
        abort();
    }

    if (size) {
        ngx_memcpy(b->start, data, size);
    }

    b->pos = b->start;
    b->last = b->start + size;
    b->end = b->last;
    b->memory = 1;

    cl->buf = b;
    cl->next = NULL;

    sr->main = r;
    sr->parent = r;
    sr->connection = r->connection;
    sr->pool = r->pool;
    sr->headers_out.status = failed ? NGX_HTTP_BAD_GATEWAY : NGX_HTTP_OK;
    sr->out = cl;

    (void) ngx_http_feed_timeline_fallback_done(sr, ctx, NGX_OK);
}
