
/*
 * ngx_feed_module: the follow graph, HTTP side.
 *
 *   feed_follow $user $target;   PUT follows, DELETE unfollows: 204
 *   feed_following $user;        GET the users $user follows
 *   feed_followers $user;        GET the users following $user
 *
 * MongoDB holds the graph and the counters (ngx_http_feed_graph_store.c);
 * Redis caches the counts in front of it (ngx_http_feed_counts.c).
 */


#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_json.h"


typedef struct {
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_follow_op_t     follow;
    ngx_http_feed_list_op_t       list;
    ngx_http_feed_counts_gen_t    gen;
    const char                   *field;
    ngx_uint_t                    waiting;
} ngx_http_feed_graph_ctx_t;


static ngx_int_t ngx_http_feed_follow(ngx_http_request_t *r);
static void ngx_http_feed_follow_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_follow_invalidated(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_follow_answer(ngx_http_request_t *r,
    ngx_http_feed_follow_op_t *op);
static ngx_int_t ngx_http_feed_following(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_followers(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_list_handler(ngx_http_request_t *r,
    ngx_uint_t followers);
static ngx_int_t ngx_http_feed_graph_list_args(ngx_http_request_t *r,
    ngx_http_feed_list_op_t *op, const char **code, const char **message);
static void ngx_http_feed_list_counted(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_list_post(ngx_http_feed_graph_ctx_t *ctx);
static void ngx_http_feed_list_done(ngx_http_feed_mongo_task_t *t);
static ngx_http_feed_graph_ctx_t *ngx_http_feed_graph_ctx(
    ngx_http_request_t *r);


ngx_http_feed_handler_t  ngx_http_feed_follow_handler = {
    ngx_http_feed_follow
};

ngx_http_feed_handler_t  ngx_http_feed_following_handler = {
    ngx_http_feed_following
};

ngx_http_feed_handler_t  ngx_http_feed_followers_handler = {
    ngx_http_feed_followers
};


static ngx_int_t
ngx_http_feed_follow(ngx_http_request_t *r)
{
    ngx_int_t                    rc;
    ngx_http_feed_loc_conf_t    *flcf;
    ngx_http_feed_graph_ctx_t   *ctx;
    ngx_http_feed_mongo_task_t  *t;

    ngx_http_feed_stat(requests, 1);

    if (!(r->method & (NGX_HTTP_PUT|NGX_HTTP_DELETE))) {
        return ngx_http_feed_not_allowed(r, "PUT, DELETE");
    }

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    ctx = ngx_http_feed_graph_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->follow.src);
    if (rc == NGX_OK) {
        rc = ngx_http_feed_get_user(r, flcf->target, &ctx->follow.dst);
    }

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_feed_bad_request(r, "invalid_user_id",
                   NGX_HTTP_FEED_USER_ID_TEXT);
    }

    if (ctx->follow.src.len == ctx->follow.dst.len
        && ngx_strcmp(ctx->follow.src.data, ctx->follow.dst.data) == 0)
    {
        return ngx_http_feed_bad_request(r, "self_follow",
                                         "a user cannot follow themselves");
    }

    rc = ngx_http_feed_authorize(r, &ctx->follow.src);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    ctx->follow.want = (r->method == NGX_HTTP_PUT);
    ctx->follow.now = ngx_http_feed_now_ms();
    ctx->follow.max = (int64_t) ctx->fmcf->follow_max;

    t = ngx_http_feed_mongo_task(r->pool, ctx->fmcf->mongo_client,
                                 ngx_http_feed_graph_follow_run,
                                 ngx_http_feed_follow_done, &ctx->follow);
    if (t == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_feed_mongo_post_r(r, t) != NGX_OK) {
        return ngx_http_feed_db_busy(r);
    }

    r->main->count++;

    return NGX_DONE;
}


static void
ngx_http_feed_follow_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_follow_op_t  *op = t->data;

    ngx_int_t                   rc;
    ngx_uint_t                  i;
    ngx_http_request_t         *r;
    ngx_http_feed_user_t       *users[2];
    ngx_http_feed_redis_t      *rd;
    ngx_http_feed_graph_ctx_t  *ctx;

    r = t->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (t->rc != NGX_OK) {
        ngx_http_finalize_request(r, ngx_http_feed_db_failed(r, &t->error));
        return;
    }

    rd = ctx->fmcf->redis_client;

    if (!op->changed || ctx->fmcf->redis_enabled == 0) {
        ngx_http_finalize_request(r, ngx_http_feed_follow_answer(r, op));
        return;
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
            ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
            return;
        }

        ctx->waiting += (rc == NGX_OK);
    }

    rc = ngx_http_feed_timeline_cache_drop(r, ctx->fmcf, &op->src,
                                           ngx_http_feed_follow_invalidated,
                                           ctx);
    if (rc == NGX_ERROR) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->waiting += (rc == NGX_OK);

    if (ctx->waiting == 0) {
        ngx_http_finalize_request(r, ngx_http_feed_follow_answer(r, op));
    }
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

    if (!op->over) {
        return ngx_http_feed_no_content(r);
    }

    msg = ngx_pnalloc(r->pool, sizeof("a user follows at most  users")
                               + NGX_INT64_LEN);
    if (msg == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_sprintf(msg, "a user follows at most %L users", op->max);
    *p = '\0';

    /* nginx has no reason phrase of its own for 422 */
    ngx_str_set(&r->headers_out.status_line, "422 Unprocessable Entity");

    return ngx_http_feed_send_error(r, 422, "too_many_follows",
                                    (char *) msg);
}


static ngx_int_t
ngx_http_feed_following(ngx_http_request_t *r)
{
    return ngx_http_feed_list_handler(r, 0);
}


static ngx_int_t
ngx_http_feed_followers(ngx_http_request_t *r)
{
    return ngx_http_feed_list_handler(r, 1);
}


static ngx_int_t
ngx_http_feed_list_handler(ngx_http_request_t *r, ngx_uint_t followers)
{
    ngx_int_t                   rc;
    const char                 *code, *message;
    ngx_http_feed_graph_ctx_t  *ctx;

    ngx_http_feed_stat(requests, 1);

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_feed_not_allowed(r, "GET, HEAD");
    }

    ctx = ngx_http_feed_graph_ctx(r);
    if (ctx == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->list.followers = followers;
    ctx->field = followers ? "followers" : "following";

    rc = ngx_http_feed_graph_list_args(r, &ctx->list, &code, &message);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        return ngx_http_feed_bad_request(r, code, message);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    /* the count from Redis if it has it, then the page from MongoDB */

    rc = ngx_http_feed_counts_lookup(r, ctx->fmcf->redis_client,
                                     &ctx->list.user, ctx->field,
                                     ngx_http_feed_list_counted, ctx);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ctx->list.need_count = 1;

        if (ngx_http_feed_list_post(ctx) != NGX_OK) {
            return ngx_http_feed_db_busy(r);
        }
    }

    r->main->count++;

    return NGX_DONE;
}


/* NGX_DECLINED: malformed, with the error code and message to answer */

static ngx_int_t
ngx_http_feed_graph_list_args(ngx_http_request_t *r,
    ngx_http_feed_list_op_t *op, const char **code, const char **message)
{
    u_char     *dst, *src;
    ngx_int_t   rc;
    ngx_str_t   value, cursor;

    rc = ngx_http_feed_list_args(r, &op->user, &op->limit, code, message);
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
        *code = "invalid_cursor";
        *message = "cursor is not one this server gave out";
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static void
ngx_http_feed_list_counted(void *data, redisReply *reply)
{
    ngx_http_feed_graph_ctx_t  *ctx = data;

    ctx->list.need_count =
        (ngx_http_feed_counts_parse(ctx->fmcf->redis_client, reply,
                                    &ctx->list.count, &ctx->gen)
         != NGX_OK);

    if (ngx_http_feed_list_post(ctx) != NGX_OK) {
        ngx_http_feed_finalize(ctx->request,
                               ngx_http_feed_db_busy(ctx->request));
    }
}


static ngx_int_t
ngx_http_feed_list_post(ngx_http_feed_graph_ctx_t *ctx)
{
    ngx_http_feed_mongo_task_t  *t;

    t = ngx_http_feed_mongo_task(ctx->request->pool, ctx->fmcf->mongo_client,
                                 ngx_http_feed_graph_list_run,
                                 ngx_http_feed_list_done, &ctx->list);
    if (t == NULL) {
        return NGX_ERROR;
    }

    t->result = &ctx->list.json;

    return ngx_http_feed_mongo_post_r(ctx->request, t);
}


static void
ngx_http_feed_list_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_list_op_t  *op = t->data;

    u_char                     *p;
    ngx_http_request_t         *r;
    ngx_http_feed_graph_ctx_t  *ctx;

    r = t->request;
    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (t->rc != NGX_OK) {
        bson_free(op->json);
        ngx_http_finalize_request(r, ngx_http_feed_db_failed(r, &t->error));
        return;
    }

    if (op->skipped) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "follows of \"%s\": %ui documents with invalid user "
                      "ids skipped", op->user.data, op->skipped);
    }

    if (op->need_count && ctx->fmcf->redis_client) {
        ngx_http_feed_counts_warm(ctx->fmcf->redis_client, &op->user,
                                  ctx->field, op->count, &ctx->gen);
    }

    p = ngx_pnalloc(r->pool, op->json_len + 1);
    if (p == NULL) {
        bson_free(op->json);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memcpy(p, op->json, op->json_len);
    p[op->json_len] = '\n';
    bson_free(op->json);

    ngx_http_finalize_request(r, ngx_http_feed_send_body(r, NGX_HTTP_OK, p,
                                                         op->json_len + 1));
}


static ngx_http_feed_graph_ctx_t *
ngx_http_feed_graph_ctx(ngx_http_request_t *r)
{
    ngx_http_feed_graph_ctx_t  *ctx;

    ctx = ngx_pcalloc(r->pool, sizeof(ngx_http_feed_graph_ctx_t));
    if (ctx == NULL) {
        return NULL;
    }

    ctx->request = r;
    ctx->fmcf = ngx_http_get_module_main_conf(r, ngx_http_feed_module);

    ngx_http_set_ctx(r, ctx, ngx_http_feed_module);

    return ctx;
}
