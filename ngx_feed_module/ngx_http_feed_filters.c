
/*
 * ngx_feed_module: blocks and mutes, the graph side.
 *
 *   feed_block $user $target;   PUT blocks, DELETE unblocks: 204
 *   feed_mute $user $target;    PUT mutes, DELETE unmutes: 204
 *   feed_blocks $user;          GET whom $user blocks
 *   feed_mutes $user;           GET whom $user mutes
 *
 * MongoDB holds the filters (ngx_http_feed_filters_store.c).  A block
 * also removes the follows between the two users, both ways, as unfollows
 * do (ngx_http_feed_graph_task.c), and the graph refuses new ones.  After
 * a change the filter sets of the cached timelines learn it
 * (ngx_http_feed_timeline_cache.c) before the 204: the user's own, and
 * for a block the blocked user's too, whose timeline must not show the
 * user either.
 *
 * The lists are the graph's lists (ngx_http_feed_graph.c) over the
 * filters store: the same pages, cursors and JSON.
 */


#include "ngx_http_feed_filters.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_timeline_cache.h"


/*
 * A filter added or removed, and a block's clean-up: the unfollows of
 * src -> dst and dst -> src; run in a thread
 */
typedef struct {
    ngx_http_feed_filter_op_t     filter;
    ngx_http_feed_follow_op_t     unfollow[2];
} ngx_http_feed_filters_change_t;


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t              *request;
    ngx_http_feed_main_conf_t       *fmcf;
    ngx_http_feed_filters_change_t   change;
    ngx_http_feed_graph_list_op_t    list;

    /* the cache updates of a change whose replies are awaited */
    ngx_uint_t                       waiting;
} ngx_http_feed_filters_ctx_t;


static ngx_int_t ngx_http_feed_block_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_mute_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_filter_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_filter_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_filter_stored(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_filter_sets(ngx_http_feed_filters_ctx_t *ctx);
static void ngx_http_feed_filter_updated(void *data, redisReply *reply);
static void ngx_http_feed_filter_later(ngx_http_feed_filters_ctx_t *ctx);
static ngx_int_t ngx_http_feed_blocks_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_mutes_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_filters_list_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_filters_listed(ngx_http_request_t *r,
    void *data);


ngx_http_feed_handler_t  ngx_http_feed_block_handler = {
    NGX_HTTP_PUT|NGX_HTTP_DELETE, "PUT, DELETE", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_block_args,
    ngx_http_feed_filter_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_mute_handler = {
    NGX_HTTP_PUT|NGX_HTTP_DELETE, "PUT, DELETE", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_mute_args,
    ngx_http_feed_filter_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_blocks_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_blocks_args,
    ngx_http_feed_filters_list_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_mutes_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_mutes_args,
    ngx_http_feed_filters_list_start,
    NULL
};


static ngx_int_t
ngx_http_feed_block_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ctx->change.filter.kind = NGX_HTTP_FEED_FILTER_BLOCK;

    return ngx_http_feed_pair_args(r, &ctx->change.filter.src,
                                   &ctx->change.filter.dst,
                                   &ngx_http_feed_err_self_block, err);
}


static ngx_int_t
ngx_http_feed_mute_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ctx->change.filter.kind = NGX_HTTP_FEED_FILTER_MUTE;

    return ngx_http_feed_pair_args(r, &ctx->change.filter.src,
                                   &ctx->change.filter.dst,
                                   &ngx_http_feed_err_self_mute, err);
}


static ngx_int_t
ngx_http_feed_filter_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ngx_uint_t                   i;
    ngx_http_feed_follow_op_t   *u;
    ngx_http_feed_filter_op_t   *op;

    op = &ctx->change.filter;
    op->want = (r->method == NGX_HTTP_PUT);
    op->now = ngx_http_feed_now_ms();
    op->max = (int64_t) ctx->fmcf->filter_max;

    for (i = 0; i < 2; i++) {
        u = &ctx->change.unfollow[i];
        u->src = i ? op->dst : op->src;
        u->dst = i ? op->src : op->dst;
        u->now = op->now;
        u->max = (int64_t) ctx->fmcf->follow_max;
        u->kept = ctx->fmcf->timeline_store;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter %c%s \"%s\" -> \"%s\": storing", op->kind,
                   op->want ? "+" : "-", op->src.data, op->dst.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_filter_run,
                                       ngx_http_feed_filter_stored,
                                       &ctx->change, NULL);
}


/*
 * The filter, then a block's clean-up: after the block is written, so
 * that a follow racing it either sees the block or is seen here
 * (ngx_http_feed_graph_task.c).  Marked done last: a block cut short is
 * cleaned up again by the next PUT of it.
 */

static void
ngx_http_feed_filter_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_filters_change_t  *ch = t->data;

    ngx_uint_t  i;

    t->rc = ngx_http_feed_filters_change(client, t->database, &ch->filter,
                                         &t->error);

    if (t->rc != NGX_OK || !ch->filter.changed || !ch->filter.want
        || ch->filter.kind != NGX_HTTP_FEED_FILTER_BLOCK)
    {
        return;
    }

    for (i = 0; i < 2; i++) {
        t->rc = ngx_http_feed_graph_follow_apply(client, t->database,
                                                 &ch->unfollow[i], &t->error);
        if (t->rc != NGX_OK) {
            return;
        }
    }

    t->rc = ngx_http_feed_filters_cleaned(client, t->database, &ch->filter,
                                          &t->error);
}


static ngx_int_t
ngx_http_feed_filter_stored(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_filters_change_t  *ch = data;

    ngx_int_t                     rc;
    ngx_uint_t                    i;
    ngx_http_feed_filter_op_t    *op;
    ngx_http_feed_filters_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);
    op = &ch->filter;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter %c \"%s\" -> \"%s\": stored, changed %ui",
                   op->kind, op->src.data, op->dst.data, op->changed);

    if (op->over) {
        return ngx_http_feed_over_max(r, NGX_HTTP_FEED_FILTER_MAX_CODE,
                                      NGX_HTTP_FEED_FILTER_MAX_TEXT, op->max);
    }

    if (!op->changed || ctx->fmcf->redis_enabled == 0) {
        return ngx_http_feed_no_content(r);
    }

    if (ngx_http_feed_filter_sets(ctx) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* the follows a block removed: as after unfollows */

    for (i = 0; i < 2; i++) {
        if (!ch->unfollow[i].changed) {
            continue;
        }

        rc = ngx_http_feed_graph_invalidate(r, ctx->fmcf, &ch->unfollow[i],
                                            ngx_http_feed_filter_updated,
                                            ctx);
        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ctx->waiting += rc;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter: %ui cache updates sent", ctx->waiting);

    if (ctx->waiting == 0) {
        return ngx_http_feed_no_content(r);
    }

    return NGX_DONE;
}


/*
 * The filter sets: a mute of t by u is u's reason 'm' for t; a block, u's
 * reason 'b' for t and t's reason 'B' for u.  One not sent is left to the
 * drop of the cached timeline, replayed when Redis is back.
 */

static ngx_int_t
ngx_http_feed_filter_sets(ngx_http_feed_filters_ctx_t *ctx)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i, n;
    ngx_http_feed_filter_op_t  *op;

    op = &ctx->change.filter;
    n = (op->kind == NGX_HTTP_FEED_FILTER_BLOCK) ? 2 : 1;

    for (i = 0; i < n; i++) {
        rc = ngx_http_feed_timeline_cache_filter(ctx->request, ctx->fmcf,
                 i ? &op->dst : &op->src, i ? &op->src : &op->dst,
                 i ? NGX_HTTP_FEED_FILTER_BLOCKED : op->kind, op->want,
                 ngx_http_feed_filter_updated, ctx);

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_OK) {
            ctx->waiting++;

        } else {
            ngx_http_feed_timeline_cache_drop_later(i ? &op->dst : &op->src);
        }
    }

    return NGX_OK;
}


static void
ngx_http_feed_filter_updated(void *data, redisReply *reply)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_http_feed_filter_later(ctx);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed filter: cache updated%s, %ui to go",
                   (reply && reply->type != REDIS_REPLY_ERROR)
                   ? "" : " later", ctx->waiting - 1);

    if (--ctx->waiting) {
        return;
    }

    ngx_http_feed_finalize(ctx->request,
                           ngx_http_feed_no_content(ctx->request));
}


/*
 * An update failed: which one is not known, all are idempotent; the
 * cached timelines go (a rebuild reads the filters from MongoDB)
 */

static void
ngx_http_feed_filter_later(ngx_http_feed_filters_ctx_t *ctx)
{
    ngx_uint_t                       i;
    ngx_http_feed_filters_change_t  *ch;

    ch = &ctx->change;

    ngx_http_feed_timeline_cache_drop_later(&ch->filter.src);

    if (ch->filter.kind == NGX_HTTP_FEED_FILTER_BLOCK) {
        ngx_http_feed_timeline_cache_drop_later(&ch->filter.dst);
    }

    for (i = 0; i < 2; i++) {
        if (ch->unfollow[i].changed) {
            ngx_http_feed_graph_invalidate_later(&ch->unfollow[i]);
        }
    }
}


static ngx_int_t
ngx_http_feed_blocks_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ctx->list.kind = NGX_HTTP_FEED_FILTER_BLOCK;

    return ngx_http_feed_graph_list_parse(r, &ctx->list, err);
}


static ngx_int_t
ngx_http_feed_mutes_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ctx->list.kind = NGX_HTTP_FEED_FILTER_MUTE;

    return ngx_http_feed_graph_list_parse(r, &ctx->list, err);
}


/* the page and its count, both from MongoDB: filters are not cached */

static ngx_int_t
ngx_http_feed_filters_list_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ctx->list.need_count = 1;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filters %c of \"%s\": reading", ctx->list.kind,
                   ctx->list.user.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_graph_list_run,
                                       ngx_http_feed_filters_listed,
                                       &ctx->list, &ctx->list.json);
}


static ngx_int_t
ngx_http_feed_filters_listed(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_graph_list_op_t  *op = data;

    return ngx_http_feed_graph_list_send(r, op,
                                         op->kind == NGX_HTTP_FEED_FILTER_BLOCK
                                         ? "blocks" : "mutes");
}
