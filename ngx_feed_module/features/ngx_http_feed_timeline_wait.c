
/*
 * ngx_feed_module: long polling, GET /users/{uid}/timeline?since_id=X&wait=N
 * for clients that cannot hold a stream.
 *
 * The read is made as any since_id read.  A page with posts is answered
 * at once; an empty one waits, up to N seconds (60 at most), for the
 * user's reader in the worker (ngx_http_feed_stream_users.c, the readers
 * of live streams) to read an entry newer than since_id: the read is then
 * made again and answered.  Past N, the empty page is answered.  Without
 * Redis (BYPASS) nothing can tell a post came: the page waits out N, so
 * that clients do not poll in a loop.
 */


#include "ngx_http_feed_timeline_read.h"


#define NGX_HTTP_FEED_WAIT_MAX  60


static void ngx_http_feed_timeline_woken(void *data);
static void ngx_http_feed_timeline_waited(ngx_event_t *ev);


/* wait=N: 0 to 60 seconds, with since_id only */

ngx_int_t
ngx_http_feed_timeline_wait_args(ngx_http_request_t *r,
    ngx_http_feed_timeline_ctx_t *ctx, const ngx_http_feed_error_t **err)
{
    ngx_int_t  n;
    ngx_str_t  value;

    if (ngx_http_feed_arg(r, "wait", &value) != NGX_OK) {
        return NGX_OK;
    }

    n = (value.len && value.len <= 2) ? ngx_atoi(value.data, value.len)
                                      : NGX_ERROR;

    if (n == NGX_ERROR || n > NGX_HTTP_FEED_WAIT_MAX
        || !ctx->page.has_since)
    {
        *err = &ngx_http_feed_err_wait;
        return NGX_DECLINED;
    }

    ctx->wait = (ngx_msec_t) n * 1000;

    return NGX_OK;
}


/*
 * The page is answered now (NGX_DECLINED), or the request waits for a
 * newer post (NGX_OK): the first time, until its deadline
 */

ngx_int_t
ngx_http_feed_timeline_hold(ngx_http_feed_timeline_ctx_t *ctx)
{
    ngx_http_request_t  *r = ctx->request;

    if (ctx->wait == 0 || ctx->waited || ctx->counting || ctx->cached.nitems
        || ctx->cached.kept || ctx->cached.deep || ngx_exiting
        || r->connection->error)
    {
        return NGX_DECLINED;
    }

    if (!ctx->wait_ev.timer_set) {
        ctx->wait_ev.handler = ngx_http_feed_timeline_waited;
        ctx->wait_ev.data = ctx;
        ctx->wait_ev.log = r->connection->log;

        ngx_add_timer(&ctx->wait_ev, ctx->wait);
    }

    if (ctx->cached.found) {
        ngx_memcpy(ctx->waiter.since, ctx->page.since_id, 25);
        ctx->waiter.handler = ngx_http_feed_timeline_woken;
        ctx->waiter.data = ctx;

        if (ngx_http_feed_stream_wait(&ctx->waiter, &ctx->page.user)
            != NGX_OK)
        {
            /* no reader: the timer alone ends the wait */
            ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "feed timeline wait without a reader");
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed timeline of \"%s\" waits for a post newer "
                   "than %s", ctx->page.user.data, ctx->page.since_id);

    /* a client that leaves is seen leaving */
    r->read_event_handler = ngx_http_test_reading;

    return NGX_OK;
}


/* a newer post was read: the page is read again, and answered */

static void
ngx_http_feed_timeline_woken(void *data)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    if (ngx_exiting) {
        ctx->waited = 1;
    }

    ngx_http_feed_timeline_read(ctx);
}


/* N passed: the empty page is answered */

static void
ngx_http_feed_timeline_waited(ngx_event_t *ev)
{
    ngx_http_feed_timeline_ctx_t  *ctx = ev->data;

    ngx_http_feed_stream_unwait(&ctx->waiter);

    ctx->waited = 1;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ev->log, 0,
                   "feed timeline of \"%s\": the wait is over",
                   ctx->page.user.data);

    /* the page is answered as it was read: empty */

    ngx_http_feed_timeline_answer_now(ctx);
}


void
ngx_http_feed_timeline_wait_cleanup(ngx_http_feed_timeline_ctx_t *ctx)
{
    if (ctx->wait_ev.timer_set) {
        ngx_del_timer(&ctx->wait_ev);
    }

    ngx_http_feed_stream_unwait(&ctx->waiter);
}
