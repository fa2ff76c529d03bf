
/*
 * ngx_feed_module: the follow graph, HTTP side.
 *
 *   feed_follow $user $target;   PUT follows, DELETE unfollows: 204
 *   feed_following $user;        GET the users $user follows
 *   feed_followers $user;        GET the users following $user
 *
 * MongoDB holds the graph and the counters (ngx_http_feed_follows_store.c);
 * Redis caches the counts in front of it (ngx_http_feed_counts.c).  What a
 * change does to the caches (the counts, the follower's timeline) is
 * recorded before it and applied before the answer
 * (ngx_http_feed_effects.c): a 204 says every cache took it.
 */


#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_json.h"


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t            *request;
    ngx_http_feed_main_conf_t     *fmcf;
    ngx_http_feed_graph_change_t   follow;
    ngx_http_feed_graph_list_op_t  list;

    /* the counts' generation read with a list's count, to warm it */
    ngx_http_feed_counts_gen_t     gen;

    /* a list's count field and debug name: "following" or "followers" */
    const char                    *field;
} ngx_http_feed_graph_ctx_t;


static ngx_int_t ngx_http_feed_follow_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_follow_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_follow_stored(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_follow_effected(ngx_http_feed_effects_t *fx);
static ngx_int_t ngx_http_feed_follow_answer(ngx_http_request_t *r,
    ngx_http_feed_graph_change_t *ch);
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

    return ngx_http_feed_pair_args(r, &ctx->follow.op.src,
                                   &ctx->follow.op.dst,
                                   &ngx_http_feed_err_self_follow, err);
}


static ngx_int_t
ngx_http_feed_follow_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ngx_http_feed_follow_op_t  *op;

    op = &ctx->follow.op;
    op->want = (r->method == NGX_HTTP_PUT);
    op->now = ngx_http_feed_now_ms();
    op->max = (int64_t) ctx->fmcf->follow_max;

    ngx_http_feed_effects_init(&ctx->follow.fx, r, ctx->fmcf);

    if (ngx_http_feed_graph_effects(&ctx->follow.fx, op) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed %s \"%s\" -> \"%s\": storing",
                   op->want ? "follow" : "unfollow", op->src.data,
                   op->dst.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_graph_follow_run,
                                       ngx_http_feed_follow_stored,
                                       &ctx->follow, NULL);
}


/* stored: the caches the change owes are updated before the answer */

static ngx_int_t
ngx_http_feed_follow_stored(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_change_t  *ch = data;

    ngx_int_t  rc;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed follow \"%s\" -> \"%s\": stored, changed %ui",
                   ch->op.src.data, ch->op.dst.data, ch->op.changed);

    rc = ngx_http_feed_effects_apply(&ch->fx, ngx_http_feed_follow_effected);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DONE) {
        return NGX_DONE;
    }

    return ngx_http_feed_follow_answer(r, ch);
}


static void
ngx_http_feed_follow_effected(ngx_http_feed_effects_t *fx)
{
    ngx_http_feed_graph_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(fx->request, ngx_http_feed_module);

    ngx_http_feed_finalize(fx->request,
                           ngx_http_feed_follow_answer(fx->request,
                                                       &ctx->follow));
}


/*
 * 204; 403 for a follow between users of whom one blocks the other, 422
 * for one past feed_follow_max.  One that was written and then taken back
 * (a block or concurrent follows came meanwhile) counts as a change: the
 * caches were invalidated before this answer.  A change whose caches did
 * not all take it is 503: stored, and completed by a retry or, within
 * about a second of Redis taking writes again, by the sweeper.
 */

static ngx_int_t
ngx_http_feed_follow_answer(ngx_http_request_t *r,
    ngx_http_feed_graph_change_t *ch)
{
    ngx_http_feed_follow_op_t  *op = &ch->op;

    ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed follow \"%s\" -> \"%s\": answered, over %ui, "
                   "blocked %ui, caches %s", op->src.data, op->dst.data,
                   op->over, op->blocked,
                   ch->fx.failed ? "pending" : "done");

    if (ch->fx.failed) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_cache_pending);
    }

    if (op->blocked) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_blocked_follow);
    }

    if (op->over) {
        return ngx_http_feed_over_max(r, NGX_HTTP_FEED_FOLLOW_MAX_CODE,
                                      NGX_HTTP_FEED_FOLLOW_MAX_TEXT, op->max);
    }

    return ngx_http_feed_no_content(r);
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


static ngx_int_t
ngx_http_feed_graph_list_args(ngx_http_request_t *r,
    ngx_http_feed_graph_ctx_t *ctx, ngx_uint_t followers,
    const ngx_http_feed_error_t **err)
{
    ctx->list.followers = followers;
    ctx->field = followers ? "followers" : "following";

    return ngx_http_feed_graph_list_parse(r, &ctx->list, err);
}


/* the user, limit and cursor of a page of a list */

ngx_int_t
ngx_http_feed_graph_list_parse(ngx_http_request_t *r,
    ngx_http_feed_graph_list_op_t *op, const ngx_http_feed_error_t **err)
{
    u_char     *dst, *src;
    ngx_int_t   rc;
    ngx_str_t   value, cursor;

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

    if (op->need_count && ctx->fmcf->redis_client) {
        ngx_http_feed_counts_warm(r, ctx->fmcf->redis_client, &op->user,
                                  ctx->field, op->count, &ctx->gen);
    }

    return ngx_http_feed_graph_list_send(r, op, ctx->field);
}


/* a page read: what: the list's name, for the log */

ngx_int_t
ngx_http_feed_graph_list_send(ngx_http_request_t *r,
    ngx_http_feed_graph_list_op_t *op, const char *what)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed %s of \"%s\": answered", what, op->user.data);

    if (op->skipped) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "%ss of \"%s\": %ui documents with invalid user ids "
                      "skipped", op->kind ? "filter" : "follow",
                      op->user.data, op->skipped);
    }

    return ngx_http_feed_mongo_send(r, op->json, op->json_len, 1);
}
