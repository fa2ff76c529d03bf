
/*
 * ngx_feed_module: the timeline's fallback, the location that answers a
 * page when the cache cannot (a rebuild, a page past the cache's end, no
 * Redis): an in-memory subrequest to it, and its answer parsed into the
 * page's items.
 *
 * A page is asked with one post more than it still needs, so that the
 * answer says whether there is a next page.  Nothing here changes the
 * read's state: when the subrequest is done, the read goes on with the
 * step it named (ngx_http_feed_timeline.c), which takes the items from
 * here.
 */


#include "ngx_http_feed_timeline_read.h"
#include "ngx_http_feed_json.h"


static ngx_int_t ngx_http_feed_timeline_fallback_ask(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_page_t *page,
    ngx_http_feed_timeline_next_pt next);
static ngx_int_t ngx_http_feed_timeline_fallback_done(ngx_http_request_t *sr,
    void *data, ngx_int_t rc);
static ngx_int_t ngx_http_feed_timeline_fallback_broke(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_request_t *sr);
static ngx_uint_t ngx_http_feed_timeline_fallback_partial(bson_t *doc);
static void ngx_http_feed_timeline_fallback_wake(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_timeline_fallback_range(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_str_t *id);
static ngx_uint_t ngx_http_feed_timeline_fallback_hidden(
    ngx_http_feed_timeline_ctx_t *ctx, bson_t *post, ngx_str_t *id);


/* a page short of posts for the filters asks again at most so many times */
#define NGX_HTTP_FEED_REFILLS  16

/* and for at most so many posts at a time */
#define NGX_HTTP_FEED_REFILL_MAX  400


/* a rebuild: the newest limit posts of the timeline */

ngx_int_t
ngx_http_feed_timeline_fallback_rebuild(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t limit, ngx_http_feed_timeline_next_pt next)
{
    ngx_http_feed_page_t  page;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = ctx->page.user;
    page.limit = limit;

    return ngx_http_feed_timeline_fallback_ask(ctx, &page, next);
}


/*
 * The client's page after the first n posts, those the cache had (none
 * for a bypass), with one post more to tell whether a next page exists.
 */

ngx_int_t
ngx_http_feed_timeline_fallback_page(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t n, ngx_http_feed_timeline_next_pt next)
{
    ngx_http_feed_page_t  page;

    page = ctx->page;
    page.limit = ctx->page.limit - n + 1;

    if (n) {
        ngx_memcpy(page.max_id, ctx->cached.last, 25);
        page.has_max = 1;
    }

    return ngx_http_feed_timeline_fallback_ask(ctx, &page, next);
}


/*
 * The page is short of posts because the filters left some of the
 * fallback's answer out, or full but without the post that tells whether
 * a next page exists, and the answer was full (more may follow): the
 * fallback is asked again from the last post it gave, for what the page
 * still needs, and twice as many as it left out.  NGX_DECLINED: the page
 * is as full as it gets; after NGX_HTTP_FEED_REFILLS tries, it is answered
 * short, its next page beginning after the last post looked at.
 */

ngx_int_t
ngx_http_feed_timeline_fallback_more(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next)
{
    ngx_uint_t            want;
    ngx_http_feed_page_t  page;

    if (ctx->cached.more || ctx->fb_hidden == 0
        || ctx->fb_answered < ctx->fb_limit)
    {
        return NGX_DECLINED;
    }

    if (ctx->refills++ == NGX_HTTP_FEED_REFILLS) {
        ngx_memcpy(ctx->cached.last, ctx->fb_scanned, 25);
        ctx->cached.more = 1;
        return NGX_DECLINED;
    }

    want = ctx->page.limit - ctx->cached.nitems + 1;

    page = ctx->page;
    page.limit = ngx_min(want + 2 * ctx->fb_hidden, NGX_HTTP_FEED_REFILL_MAX);
    ngx_memcpy(page.max_id, ctx->fb_scanned, 25);
    page.has_max = 1;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed timeline of \"%s\": %ui posts filtered out, "
                   "fallback asked again for %ui",
                   ctx->page.user.data, ctx->fb_hidden, page.limit);

    ctx->items_ready = 0;

    return ngx_http_feed_timeline_fallback_ask(ctx, &page, next);
}


/*
 * The in-memory subrequest; the request resumes in
 * ngx_http_feed_timeline_fallback_wake() once it is done, and goes on with
 * next().
 */

static ngx_int_t
ngx_http_feed_timeline_fallback_ask(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_page_t *page, ngx_http_feed_timeline_next_pt next)
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

    ps->handler = ngx_http_feed_timeline_fallback_done;
    ps->data = ctx;

    ctx->next = next;
    ctx->fb_limit = page->limit;
    ctx->fb_fit = 0;
    ctx->fb_broke = 0;
    ctx->fb_partial = 0;
    ctx->fb_done = 0;
    ctx->items_ready = 0;
    ctx->fb_seen_ready = 0;
    ctx->fb_seen_n = 0;
    ctx->fb_start = ngx_current_msec;

    if (ngx_http_subrequest(r, &flcf->fallback, &args, &sr, ps,
                            NGX_HTTP_SUBREQUEST_IN_MEMORY
                            |NGX_HTTP_SUBREQUEST_WAITED)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    r->write_event_handler = ngx_http_feed_timeline_fallback_wake;

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_timeline_fallback_done(ngx_http_request_t *sr, void *data,
    ngx_int_t rc)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    ngx_buf_t  *b;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, sr->connection->log, 0,
                   "feed timeline fallback done: %i, status %ui, again %ui",
                   rc, sr->headers_out.status, ctx->fb_done);

    /* may be called more than once: the first time counts */

    if (ctx->fb_done) {
        return rc;
    }

    ctx->fb_done = 1;

    ngx_http_feed_observe(fallback,
                          (ngx_msec_int_t) (ngx_current_msec - ctx->fb_start));

    if (rc == NGX_ERROR) {
        rc = ngx_http_feed_timeline_fallback_broke(ctx, sr);

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
        return rc;
    }

    ctx->fb_partial = ngx_http_feed_timeline_fallback_partial(ctx->fb_doc);

    return rc;
}


/* "partial": true, a page without some authors' posts (a deadline) */

static ngx_uint_t
ngx_http_feed_timeline_fallback_partial(bson_t *doc)
{
    bson_iter_t  it;

    return bson_iter_init_find(&it, doc, "partial")
           && BSON_ITER_HOLDS_BOOL(&it) && bson_iter_bool(&it);
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
ngx_http_feed_timeline_fallback_broke(ngx_http_feed_timeline_ctx_t *ctx,
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
ngx_http_feed_timeline_fallback_wake(ngx_http_request_t *r)
{
    ngx_http_feed_timeline_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (!ctx->fb_done) {
        return;
    }

    r->write_event_handler = ngx_http_request_empty_handler;

    ctx->next(ctx);
}


/*
 * The "items" of the fallback's answer; when it has none, the status the
 * request fails with.
 */

ngx_int_t
ngx_http_feed_timeline_fallback_items(ngx_http_feed_timeline_ctx_t *ctx)
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

        return NGX_HTTP_SERVICE_UNAVAILABLE;
    }

    bson_iter_array(&it, &len, &data);

    if (!bson_init_static(&items, data, len)) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->fb_items = data;
    ctx->fb_items_len = len;
    ctx->items_ready = 1;

    /*
     * A page with posts missing says so, however the rest was answered;
     * an unread count cannot be told from it
     */

    if (ctx->fb_partial) {
        if (ctx->counting) {
            ngx_log_error(NGX_LOG_ERR, ctx->request->connection->log, 0,
                          "timeline fallback answered partial: no count");
            return NGX_HTTP_SERVICE_UNAVAILABLE;
        }

        ctx->status = NGX_HTTP_FEED_CACHE_PARTIAL;
    }

    return NGX_OK;
}


/*
 * The ids of the answer's posts in the page's range, in order (as
 * ngx_http_feed_timeline_fallback_add() meets them): those a read with
 * ?unseen=1 asks Redis about.  Their number is fb_seen_n, and fb_seen
 * the room for what Redis says of each.
 */

ngx_int_t
ngx_http_feed_timeline_fallback_ids(ngx_http_feed_timeline_ctx_t *ctx,
    u_char **ids)
{
    bson_t        post, list;
    u_char       *p;
    ngx_int_t     rc;
    ngx_str_t     id;
    ngx_uint_t    n;
    bson_iter_t   it;

    if (!bson_init_static(&list, ctx->fb_items, ctx->fb_items_len)
        || !bson_iter_init(&it, &list))
    {
        return NGX_ERROR;
    }

    n = bson_count_keys(&list);

    p = ngx_pnalloc(ctx->request->pool, 24 * n + 1);
    ctx->fb_seen = ngx_pcalloc(ctx->request->pool, n + 1);

    if (p == NULL || ctx->fb_seen == NULL) {
        return NGX_ERROR;
    }

    *ids = p;
    ctx->fb_seen_n = 0;

    for ( ;; ) {
        rc = ngx_http_feed_json_next_post(&it, &post, &id);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc == NGX_DECLINED) {
            continue;
        }

        rc = ngx_http_feed_timeline_fallback_range(ctx, &id);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc == NGX_OK) {
            p = ngx_cpymem(p, id.data, 24);
            ctx->fb_seen_n++;
        }
    }

    return NGX_OK;
}


/*
 * Where a post of the fallback's answer is against the client's bounds:
 * NGX_OK in them, NGX_DECLINED newer than max_id (skipped), NGX_DONE at
 * or older than since_id (the answer's end)
 */

static ngx_int_t
ngx_http_feed_timeline_fallback_range(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_str_t *id)
{
    if (ctx->page.has_max && ngx_strcmp(id->data, ctx->page.max_id) >= 0) {
        return NGX_DECLINED;
    }

    if (ctx->page.has_since
        && ngx_strcmp(id->data, ctx->page.since_id) <= 0)
    {
        return NGX_DONE;
    }

    return NGX_OK;
}


/*
 * Appends up to max fallback items within the client's bounds to the page
 * (a rebuild's items are not bounded yet); more: there were others.  The
 * fallback may be any application: an item whose id is not a post id is
 * skipped, since ids go into "next" and the Link header as they are; so
 * is any item that is not a post at all.
 */

ngx_int_t
ngx_http_feed_timeline_fallback_add(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t max, ngx_uint_t *more)
{
    bson_t           post, list;
    ngx_int_t        rc;
    ngx_str_t       *items, id;
    ngx_uint_t       n, skipped, answered, j, seen;
    bson_iter_t      it;

    *more = 0;
    skipped = 0;

    if (!bson_init_static(&list, ctx->fb_items, ctx->fb_items_len)) {
        return NGX_ERROR;
    }

    answered = bson_count_keys(&list);
    n = answered;
    ctx->fb_answered = answered;
    ctx->fb_hidden = 0;

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
    j = 0;

    for ( ;; ) {
        rc = ngx_http_feed_json_next_post(&it, &post, &id);

        if (rc == NGX_DONE) {
            break;
        }

        if (rc == NGX_DECLINED) {
            skipped++;
            continue;
        }

        rc = ngx_http_feed_timeline_fallback_range(ctx, &id);

        if (rc == NGX_DECLINED) {
            continue;
        }

        if (rc == NGX_DONE) {
            break;
        }

        /* the user saw it (a read with ?unseen=1): left out as filtered */
        seen = (ctx->fb_seen_ready && j < ctx->fb_seen_n && ctx->fb_seen[j]);
        j++;

        if (seen
            || ngx_http_feed_timeline_fallback_hidden(ctx, &post, &id))
        {
            ngx_cpystrn((u_char *) ctx->fb_scanned, id.data, 25);
            ctx->fb_hidden++;
            continue;
        }

        if (n == max) {
            *more = 1;
            break;
        }

        if (ngx_http_feed_json_copy(ctx->request->pool, &post,
                                    &items[ctx->cached.nitems])
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        ngx_cpystrn((u_char *) ctx->cached.last, id.data, 25);
        ngx_cpystrn((u_char *) ctx->fb_scanned, id.data, 25);

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


/* the user hid the post, or its author is one the filters leave out */

static ngx_uint_t
ngx_http_feed_timeline_fallback_hidden(ngx_http_feed_timeline_ctx_t *ctx,
    bson_t *post, ngx_str_t *id)
{
    uint32_t      len;
    const char   *author;
    bson_iter_t   it;

    if (ctx->filter_set.n == 0) {
        return 0;
    }

    if (ngx_http_feed_filter_set_hides(&ctx->filter_set, id->data, id->len)) {
        return 1;
    }

    if (!bson_iter_init_find(&it, post, "author")
        || !BSON_ITER_HOLDS_UTF8(&it))
    {
        return 0;
    }

    author = bson_iter_utf8(&it, &len);

    return ngx_http_feed_filter_set_has(&ctx->filter_set, (u_char *) author,
                                        len);
}
