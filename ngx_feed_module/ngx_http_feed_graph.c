
/*
 * ngx_feed_module: the follow graph, HTTP side.
 *
 *   feed_follow $user $target;   PUT follows, DELETE unfollows: 204
 *   feed_following $user;        GET the users $user follows
 *   feed_followers $user;        GET the users following $user
 *
 * MongoDB holds the graph and the counters (ngx_http_feed_follows_store.c);
 * Redis caches the counts in front of it (ngx_http_feed_counts.c).
 */


#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_json.h"


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t            *request;
    ngx_http_feed_main_conf_t     *fmcf;
    ngx_http_feed_follow_op_t      follow;
    ngx_http_feed_graph_list_op_t  list;

    /* the counts' generation read with a list's count, to warm it */
    ngx_http_feed_counts_gen_t     gen;

    /* a list's count field and debug name: "following" or "followers" */
    const char                    *field;

    /* the cache invalidations of a follow whose replies are awaited */
    ngx_uint_t                     waiting;
} ngx_http_feed_graph_ctx_t;


static ngx_int_t ngx_http_feed_follow_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_follow_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_follow_stored(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_follow_invalidated(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_follow_answer(ngx_http_request_t *r,
    ngx_http_feed_follow_op_t *op);
static ngx_int_t ngx_http_feed_following_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_followers_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_graph_list_args(ngx_http_request_t *r,
    ngx_http_feed_graph_ctx_t *ctx, ngx_uint_t followers,
    const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_graph_list_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_graph_list_counted(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_graph_list_post(ngx_http_feed_graph_ctx_t *ctx);
static ngx_int_t ngx_http_feed_graph_list_answer(ngx_http_request_t *r,
    void *data);


ngx_http_feed_handler_t  ngx_http_feed_follow_handler = {
    NGX_HTTP_PUT|NGX_HTTP_DELETE, "PUT, DELETE", 0,
    sizeof(ngx_http_feed_graph_ctx_t),
    ngx_http_feed_follow_args,
    ngx_http_feed_follow_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_following_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_graph_ctx_t),
    ngx_http_feed_following_args,
    ngx_http_feed_graph_list_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_followers_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_graph_ctx_t),
    ngx_http_feed_followers_args,
    ngx_http_feed_graph_list_start,
    NULL
};


static ngx_int_t
ngx_http_feed_follow_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->follow.src);
    if (rc == NGX_OK) {
        rc = ngx_http_feed_get_user(r, flcf->target, &ctx->follow.dst);
    }

    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    if (ctx->follow.src.len == ctx->follow.dst.len
        && ngx_strcmp(ctx->follow.src.data, ctx->follow.dst.data) == 0)
    {
        *err = &ngx_http_feed_err_self_follow;
        return NGX_DECLINED;
    }

    return ngx_http_feed_authorize(r, &ctx->follow.src, err);
}


static ngx_int_t
ngx_http_feed_follow_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ctx->follow.want = (r->method == NGX_HTTP_PUT);
    ctx->follow.now = ngx_http_feed_now_ms();
    ctx->follow.max = (int64_t) ctx->fmcf->follow_max;
    ctx->follow.kept = ctx->fmcf->timeline_store;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed %s \"%s\" -> \"%s\": storing",
                   ctx->follow.want ? "follow" : "unfollow",
                   ctx->follow.src.data, ctx->follow.dst.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_graph_follow_run,
                                       ngx_http_feed_follow_stored,
                                       &ctx->follow, NULL);
}


static ngx_int_t
ngx_http_feed_follow_stored(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_follow_op_t  *op = data;

    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_http_feed_user_t       *users[2];
    ngx_http_feed_redis_t      *rd;
    ngx_http_feed_graph_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed follow \"%s\" -> \"%s\": stored, changed %ui",
                   op->src.data, op->dst.data, op->changed);

    rd = ctx->fmcf->redis_client;

    if (!op->changed || ctx->fmcf->redis_enabled == 0) {
        return ngx_http_feed_follow_answer(r, op);
    }

    /*
     * Answer once the cached counts of both users are gone, and the
     * follower's cached timeline: the next read rebuilds it with (or
     * without) the posts of whom they follow now.
     */

    users[0] = &op->src;
    users[1] = &op->dst;

    for (i = 0; i < 2; i++) {
        rc = ngx_http_feed_counts_invalidate(r, rd, users[i],
                                             ngx_http_feed_follow_invalidated,
                                             ctx);
        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ctx->waiting += (rc == NGX_OK);
    }

    rc = ngx_http_feed_timeline_cache_drop(r, ctx->fmcf, &op->src,
                                           ngx_http_feed_follow_invalidated,
                                           ctx);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->waiting += (rc == NGX_OK);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed follow: %ui cache invalidations sent",
                   ctx->waiting);

    if (ctx->waiting == 0) {
        return ngx_http_feed_follow_answer(r, op);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_follow_invalidated(void *data, redisReply *reply)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        /* invalidation is idempotent: replay all when Redis is back */
        ngx_http_feed_counts_invalidate_later(&ctx->follow.src);
        ngx_http_feed_counts_invalidate_later(&ctx->follow.dst);
        ngx_http_feed_timeline_cache_drop_later(&ctx->follow.src);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed follow: cache invalidated%s, %ui to go",
                   (reply && reply->type != REDIS_REPLY_ERROR)
                   ? "" : " later", ctx->waiting - 1);

    if (--ctx->waiting) {
        return;
    }

    ngx_http_feed_finalize(ctx->request,
                           ngx_http_feed_follow_answer(ctx->request,
                                                       &ctx->follow));
}


/*
 * 204, or 422 for a follow past feed_follow_max.  One that was written and
 * then taken back (concurrent follows went past the limit together) counts
 * as a change: the caches were invalidated before this answer.
 */

static ngx_int_t
ngx_http_feed_follow_answer(ngx_http_request_t *r,
    ngx_http_feed_follow_op_t *op)
{
    u_char  *msg, *p;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed follow \"%s\" -> \"%s\": answered, over %ui",
                   op->src.data, op->dst.data, op->over);

    if (!op->over) {
        return ngx_http_feed_no_content(r);
    }

    msg = ngx_pnalloc(r->pool, sizeof(NGX_HTTP_FEED_FOLLOW_MAX_TEXT)
                               + NGX_INT64_LEN);
    if (msg == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(msg, NGX_HTTP_FEED_FOLLOW_MAX_TEXT, op->max);
    *p = '\0';

    /* nginx has no reason phrase of its own for 422 */
    ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Entity");

    return ngx_http_feed_send_error(r, 422, NGX_HTTP_FEED_FOLLOW_MAX_CODE,
                                    (char *) msg);
}


static ngx_int_t
ngx_http_feed_following_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    return ngx_http_feed_graph_list_args(r, data, 0, err);
}


static ngx_int_t
ngx_http_feed_followers_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    return ngx_http_feed_graph_list_args(r, data, 1, err);
}


/* the user, limit and cursor of a page of "following" or "followers" */

static ngx_int_t
ngx_http_feed_graph_list_args(ngx_http_request_t *r,
    ngx_http_feed_graph_ctx_t *ctx, ngx_uint_t followers,
    const ngx_http_feed_error_t **err)
{
    u_char                         *dst, *src;
    ngx_int_t                       rc;
    ngx_str_t                       value, cursor;
    ngx_http_feed_graph_list_op_t  *op;

    op = &ctx->list;
    op->followers = followers;
    ctx->field = followers ? "followers" : "following";

    rc = ngx_http_feed_list_args(r, &op->user, &op->limit, err);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_feed_arg(r, "cursor", &value) != NGX_OK) {
        return NGX_OK;
    }

    cursor.data = ngx_pnalloc(r->pool, value.len);
    if (cursor.data == NULL) {
        return NGX_ERROR;
    }

    dst = cursor.data;
    src = value.data;
    ngx_unescape_uri(&dst, &src, value.len, 0);
    cursor.len = dst - cursor.data;

    if (ngx_http_feed_graph_cursor_parse(&cursor, op) != NGX_OK) {
        *err = &ngx_http_feed_err_cursor;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* the count from Redis if it has it, then the page from MongoDB */

static ngx_int_t
ngx_http_feed_graph_list_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ngx_int_t  rc;

    rc = ngx_http_feed_counts_lookup(r, ctx->fmcf->redis_client,
                                     &ctx->list.user, ctx->field,
                                     ngx_http_feed_graph_list_counted, ctx);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ctx->list.need_count = 1;
        return ngx_http_feed_graph_list_post(ctx);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed %s of \"%s\": counting", ctx->field,
                   ctx->list.user.data);

    return NGX_DONE;
}


static void
ngx_http_feed_graph_list_counted(void *data, redisReply *reply)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ngx_int_t  rc;

    ctx->list.need_count =
        (ngx_http_feed_counts_parse(ctx->request, ctx->fmcf->redis_client,
                                    reply, &ctx->list.count, &ctx->gen)
         != NGX_OK);

    rc = ngx_http_feed_graph_list_post(ctx);

    if (rc != NGX_DONE) {
        ngx_http_feed_finalize(ctx->request, rc);
    }
}


static ngx_int_t
ngx_http_feed_graph_list_post(ngx_http_feed_graph_ctx_t *ctx)
{
    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed %s of \"%s\": reading, count %s", ctx->field,
                   ctx->list.user.data,
                   ctx->list.need_count ? "to be counted" : "cached");

    return ngx_http_feed_mongo_request(ctx->request,
                                       ngx_http_feed_graph_list_run,
                                       ngx_http_feed_graph_list_answer,
                                       &ctx->list, &ctx->list.json);
}


static ngx_int_t
ngx_http_feed_graph_list_answer(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_list_op_t  *op = data;

    ngx_http_feed_graph_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed %s of \"%s\": answered", ctx->field,
                   op->user.data);

    if (op->skipped) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "follows of \"%s\": %ui documents with invalid user "
                      "ids skipped", op->user.data, op->skipped);
    }

    if (op->need_count && ctx->fmcf->redis_client) {
        ngx_http_feed_counts_warm(r, ctx->fmcf->redis_client, &op->user,
                                  ctx->field, op->count, &ctx->gen);
    }

    return ngx_http_feed_mongo_send(r, op->json, op->json_len, 1);
}
