
/*
 * ngx_feed_module: the posts a reader saw, HTTP side.
 *
 *   feed_seen $user;   POST ["<post id>", ...]: 204
 *
 * The client sends the ids of the posts it showed, up to 500 at a time;
 * reads of the home timeline with ?unseen=1 then leave them out
 * (ngx_http_feed_timeline.c).  They are kept in Redis only, as Bloom
 * filters (ngx_http_feed_seen_store.c): one script call adds them all
 * or none, and the 204 waits for it.  With Redis down, 503: there is
 * nowhere else to keep them, and a retry adds them.
 */


#include "ngx_http_feed_seen.h"
#include "ngx_http_feed_seen_store.h"
#include "ngx_http_feed_json.h"


/* the largest body: 500 ids of 24 digits, quoted, with room for spaces */
#define NGX_HTTP_FEED_SEEN_BODY_MAX  16384


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t             *request;
    ngx_http_feed_main_conf_t      *fmcf;
    ngx_http_feed_user_t            user;

    /* the ids, 24 hex digits each, one after the other */
    u_char                         *ids;
    ngx_uint_t                      n;
} ngx_http_feed_seen_ctx_t;


static ngx_int_t ngx_http_feed_seen_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_seen_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_seen_body(ngx_http_request_t *r);
static const ngx_http_feed_error_t *ngx_http_feed_seen_parse(
    ngx_http_feed_seen_ctx_t *ctx, ngx_str_t *body);
static void ngx_http_feed_seen_done(void *data, redisReply *reply);


ngx_http_feed_handler_t  ngx_http_feed_seen_handler = {
    NGX_HTTP_POST, "POST", NGX_HTTP_POST,
    sizeof(ngx_http_feed_seen_ctx_t),
    ngx_http_feed_seen_args,
    ngx_http_feed_seen_start,
    NULL
};


/* the user, the identity (what a reader saw is theirs), the body's size */

static ngx_int_t
ngx_http_feed_seen_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_seen_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->user);
    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    rc = ngx_http_feed_authorize(r, &ctx->user, err);
    if (rc != NGX_OK) {
        return rc;
    }

    if (r->headers_in.content_length_n > NGX_HTTP_FEED_SEEN_BODY_MAX) {
        *err = &ngx_http_feed_err_seen_size;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_seen_start(ngx_http_request_t *r, void *data)
{
    return ngx_http_feed_read_body(r, ngx_http_feed_seen_body);
}


static void
ngx_http_feed_seen_body(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                     body;
    ngx_http_feed_seen_ctx_t     *ctx;
    const ngx_http_feed_error_t  *err;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (ngx_http_feed_read_whole_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    err = ngx_http_feed_seen_parse(ctx, &body);
    if (err) {
        ngx_http_finalize_request(r, ngx_http_feed_error(r, err));
        return;
    }

    if (ctx->n == 0) {
        /* nothing was shown: nothing to keep, Redis or not */
        ngx_http_finalize_request(r, ngx_http_feed_no_content(r));
        return;
    }

    rc = ngx_http_feed_seen_add(r, ctx->fmcf, &ctx->user, ctx->ids, ctx->n,
                                ngx_http_feed_seen_done, ctx);

    if (rc == NGX_OK) {
        /* the callback answers, with the body reader's hold on the request */
        return;
    }

    ngx_http_finalize_request(r, rc == NGX_ERROR
                                 ? NGX_HTTP_INTERNAL_SERVER_ERROR
                                 : ngx_http_feed_error(r,
                                       &ngx_http_feed_err_seen_down));
}


/*
 * ["<24 hex>", ...]: at most NGX_HTTP_FEED_SEEN_MAX post ids, each a
 * string of 24 lowercase hexadecimal digits.  NULL when it is that, else
 * the error to answer.
 */

static const ngx_http_feed_error_t *
ngx_http_feed_seen_parse(ngx_http_feed_seen_ctx_t *ctx, ngx_str_t *body)
{
    bson_t                        doc;
    uint32_t                      len;
    ngx_int_t                     rc;
    ngx_str_t                     id;
    bson_oid_t                    oid;
    bson_iter_t                   it;
    const ngx_http_feed_error_t  *err;

    if (body->len > NGX_HTTP_FEED_SEEN_BODY_MAX) {
        return &ngx_http_feed_err_seen_size;
    }

    rc = ngx_http_feed_json_body(body, '[', &doc, &it);

    if (rc != NGX_OK) {
        return rc == NGX_ABORT ? &ngx_http_feed_err_not_utf8
                               : &ngx_http_feed_err_seen_json;
    }

    err = NULL;

    ctx->ids = ngx_pnalloc(ctx->request->pool,
                           24 * NGX_HTTP_FEED_SEEN_MAX);
    if (ctx->ids == NULL) {
        bson_destroy(&doc);
        return &ngx_http_feed_err_internal;
    }

    while (bson_iter_next(&it)) {
        if (ctx->n == NGX_HTTP_FEED_SEEN_MAX) {
            err = &ngx_http_feed_err_seen_many;
            break;
        }

        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            err = &ngx_http_feed_err_seen_id;
            break;
        }

        id.data = (u_char *) bson_iter_utf8(&it, &len);
        id.len = len;

        if (ngx_http_feed_post_id(&id, &oid) != NGX_OK) {
            err = &ngx_http_feed_err_seen_id;
            break;
        }

        ngx_memcpy(ctx->ids + 24 * ctx->n, id.data, 24);
        ctx->n++;
    }

    bson_destroy(&doc);

    return err;
}


/* the script added them all: 204; else nothing was added: 503, retry */

static void
ngx_http_feed_seen_done(void *data, redisReply *reply)
{
    ngx_http_feed_seen_ctx_t  *ctx = data;

    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_feed_seen_added(reply) == NGX_OK) {
        ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed seen of \"%s\": generation %i holds %i ids",
                       ctx->user.data,
                       reply->element[0]->type == REDIS_REPLY_INTEGER
                       ? reply->element[0]->integer : -1,
                       reply->element[1]->type == REDIS_REPLY_INTEGER
                       ? reply->element[1]->integer : -1);

        rc = ngx_http_feed_no_content(r);

    } else {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "seen of \"%s\": redis did not take %ui ids%s%*s",
                      ctx->user.data, ctx->n,
                      reply && reply->type == REDIS_REPLY_ERROR ? ": " : "",
                      reply && reply->type == REDIS_REPLY_ERROR
                      ? (size_t) reply->len : (size_t) 0,
                      reply && reply->type == REDIS_REPLY_ERROR
                      ? reply->str : "");

        rc = ngx_http_feed_error(r, &ngx_http_feed_err_seen_down);
    }

    ngx_http_feed_finalize(r, rc);
}
