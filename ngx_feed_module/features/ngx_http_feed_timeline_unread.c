
/*
 * ngx_feed_module: "feed_timeline_unread", a user's unread count.
 *
 *   GET /users/{uid}/timeline/unread   {"count": n, "more": bool}
 *
 * The posts of the home timeline newer than the read marker, hidden ones
 * left out, counted by scripts/timeline_unread.lua in one round trip.  A
 * count is a timeline read (ngx_http_feed_timeline.c runs it, the same
 * states as a page's: a miss rebuilds the cache, waiters wait, Redis down
 * bypasses); this file has what differs: the arguments, the marker asked
 * of MongoDB when its copy is not in Redis, and the answer.
 */


#include "ngx_http_feed_timeline_read.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_markers_store.h"
#include "ngx_http_feed_marker.h"


/* the marker, read in a thread: found or not, and its id */
typedef struct {
    ngx_http_feed_timeline_ctx_t   *ctx;
    ngx_http_feed_timeline_next_pt  next;
    ngx_http_feed_marker_t          marker;
    ngx_uint_t                      found;
} ngx_http_feed_unread_task_t;


static ngx_int_t ngx_http_feed_timeline_unread_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static void ngx_http_feed_timeline_unread_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_timeline_unread_found(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_timeline_unread_fill(ngx_http_request_t *r,
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_unread_task_t *ut);


ngx_http_feed_handler_t  ngx_http_feed_timeline_unread_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_timeline_ctx_t),
    ngx_http_feed_timeline_unread_args,
    ngx_http_feed_timeline_start,
    NULL
};


/* the user, whose count it is only (a marker is private) */

static ngx_int_t
ngx_http_feed_timeline_unread_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_timeline_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->page.user);
    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    ctx->counting = 1;
    ctx->marker.data = ctx->marker_id;
    ctx->marker.len = 0;

    return ngx_http_feed_authorize(r, &ctx->page.user, err);
}


/*
 * The marker from MongoDB, as the marker's GET reads it: next() runs with
 * ctx->marker "-" (none) or its id.  NGX_OK, or what to answer: the task
 * could not be posted.  A failed read answers as the marker's GET does.
 */

ngx_int_t
ngx_http_feed_timeline_unread_marker(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_http_feed_timeline_next_pt next)
{
    ngx_int_t                     rc;
    ngx_http_feed_unread_task_t  *ut;

    ut = ngx_pcalloc(ctx->request->pool, sizeof(ngx_http_feed_unread_task_t));
    if (ut == NULL) {
        return NGX_ERROR;
    }

    ut->ctx = ctx;
    ut->next = next;

    rc = ngx_http_feed_mongo_request(ctx->request,
                                     ngx_http_feed_timeline_unread_run,
                                     ngx_http_feed_timeline_unread_found, ut,
                                     NULL);

    return (rc == NGX_DONE) ? NGX_OK : rc;
}


static void
ngx_http_feed_timeline_unread_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_unread_task_t  *ut = t->data;

    t->rc = ngx_http_feed_markers_get(client, t->database,
                                      &ut->ctx->page.user, &ut->marker,
                                      &t->error);

    ut->found = (t->rc == NGX_OK);

    if (t->rc == NGX_DECLINED) {
        t->rc = NGX_OK;
    }
}


/* read: the count goes on with it, and the copy is filled back */

static ngx_int_t
ngx_http_feed_timeline_unread_found(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_unread_task_t  *ut = data;

    ngx_http_feed_timeline_ctx_t  *ctx;

    ctx = ut->ctx;

    if (ut->found) {
        bson_oid_to_string(&ut->marker.last_read_id, (char *) ctx->marker_id);
        ctx->marker.len = 24;

    } else {
        ngx_memcpy(ctx->marker_id, "-", sizeof("-"));
        ctx->marker.len = 1;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed unread of \"%s\": marker \"%V\" from mongodb",
                   ctx->page.user.data, &ctx->marker);

    ngx_http_feed_timeline_unread_fill(r, ctx, ut);

    ut->next(ctx);

    return NGX_DONE;
}


/*
 * The marker's copy, as the marker's GET fills it, fire and forget, so
 * that the next counts and the timeline's X-Feed-Unread find it; "no
 * marker" too (version 0), which a PUT's copy replaces.
 */

static void
ngx_http_feed_timeline_unread_fill(ngx_http_request_t *r,
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_unread_task_t *ut)
{
    ngx_str_t  json;

    if (ctx->fmcf->redis_client == NULL
        || ctx->status == NGX_HTTP_FEED_CACHE_BYPASS)
    {
        return;
    }

    ngx_str_null(&json);

    if (ut->found
        && ngx_http_feed_marker_json(r, &ut->marker, &json) != NGX_OK)
    {
        return;
    }

    (void) ngx_http_feed_markers_cache_set(NULL, ctx->fmcf->redis_client,
                                           &ctx->page.user,
                                           ut->found ? &ut->marker : NULL,
                                           &json, NULL, NULL);
}


/*
 * {"count": n, "more": bool}: as the script counted, "<n>" or "<n>+"; or
 * on a bypass the fallback's posts newer than the marker, "more" when it
 * has more than the cache would hold
 */

ngx_int_t
ngx_http_feed_timeline_unread_send(ngx_http_feed_timeline_ctx_t *ctx)
{
    u_char      *p;
    size_t       len;
    ngx_int_t    n;
    ngx_str_t    body;
    ngx_uint_t   more;

    if (ctx->cached.counted) {
        len = ctx->cached.unread.len;
        more = (len > 1 && ctx->cached.unread.data[len - 1] == '+');

        n = ngx_atoi(ctx->cached.unread.data, len - more);
        if (n == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

    } else {
        n = ctx->cached.nitems;
        more = ctx->cached.more;
    }

    body.data = ngx_pnalloc(ctx->request->pool,
                            sizeof("{\"count\":,\"more\":false}\n")
                            + NGX_INT_T_LEN);
    if (body.data == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(body.data, "{\"count\":%i,\"more\":%s}\n", n,
                    more ? "true" : "false");
    body.len = p - body.data;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed unread of \"%s\": %i, more %ui",
                   ctx->page.user.data, n, more);

    return ngx_http_feed_send_body(ctx->request, NGX_HTTP_OK, body.data,
                                   body.len);
}
