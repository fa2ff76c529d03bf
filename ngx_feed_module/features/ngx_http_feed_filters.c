
/*
 * ngx_feed_module: read filters, the graph side: blocks and mutes hide
 * an author, a hidden post one post, all from one reader's timeline.
 *
 *   feed_block $user $target;   PUT blocks, DELETE unblocks: 204
 *   feed_mute $user $target;    PUT mutes, DELETE unmutes: 204
 *   feed_hide $user $post;      PUT hides, DELETE shows again: 204
 *   feed_blocks $user;          GET whom $user blocks
 *   feed_mutes $user;           GET whom $user mutes
 *   feed_hidden $user;          GET the posts $user hid (the user only)
 *
 * MongoDB holds the filters (ngx_http_feed_filters_store.c).  A block
 * also removes the follows between the two users, both ways, as unfollows
 * do (ngx_http_feed_graph_task.c), and the graph refuses new ones.  After
 * a change the filter sets of the cached timelines learn it
 * (ngx_http_feed_timeline_cache.c) before the 204: the user's own, and
 * for a block the blocked user's too, whose timeline must not show the
 * user either.  These cache side effects are recorded in MongoDB before
 * the change (ngx_http_feed_effects.c), so that a failure after it, or
 * Redis refusing them, leaves them to a retry or to the sweeper.
 *
 * The lists are the graph's lists (ngx_http_feed_graph.c) over the
 * filters store: the same pages, cursors and JSON.
 */


#include "ngx_http_feed_filters.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_graph.h"


/*
 * A filter added or removed, and a block's clean-up: the unfollows of
 * src -> dst and dst -> src; run in a thread
 */
typedef struct {
    ngx_http_feed_filter_op_t     filter;
    ngx_http_feed_follow_op_t     unfollow[2];
    ngx_http_feed_effects_t       fx;
} ngx_http_feed_filters_change_t;


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t              *request;
    ngx_http_feed_main_conf_t       *fmcf;
    ngx_http_feed_filters_change_t   change;
    ngx_http_feed_graph_list_op_t    list;
} ngx_http_feed_filters_ctx_t;


static ngx_int_t ngx_http_feed_block_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_mute_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_hide_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_filter_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_filter_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_filter_stored(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_filter_write(mongoc_client_t *client,
    const char *database, ngx_http_feed_filters_change_t *ch,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_filter_effects(
    ngx_http_feed_filters_change_t *ch);
static void ngx_http_feed_filter_owe(ngx_http_feed_filters_change_t *ch);
static void ngx_http_feed_filter_effected(ngx_http_feed_effects_t *fx);
static ngx_int_t ngx_http_feed_filter_answer(ngx_http_request_t *r,
    ngx_http_feed_filters_change_t *ch);
static ngx_int_t ngx_http_feed_blocks_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_mutes_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_hidden_args(ngx_http_request_t *r,
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

ngx_http_feed_handler_t  ngx_http_feed_hide_handler = {
    NGX_HTTP_PUT|NGX_HTTP_DELETE, "PUT, DELETE", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_hide_args,
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

ngx_http_feed_handler_t  ngx_http_feed_hidden_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_filters_ctx_t),
    ngx_http_feed_hidden_args,
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


/*
 * A hidden post: the user, then the post's id, then the identity.  The
 * post need not exist: hiding a post deleted meanwhile is no error, and
 * its id is only ever compared.  Stored as a filter whose "dst" is the
 * post's id, which is a valid user id too.
 */

static ngx_int_t
ngx_http_feed_hide_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_str_t                  value;
    bson_oid_t                 oid;
    ngx_http_feed_user_t      *post;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    ctx->change.filter.kind = NGX_HTTP_FEED_FILTER_HIDDEN;

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->change.filter.src);
    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    if (ngx_http_complex_value(r, flcf->target, &value) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_post_id(&value, &oid) != NGX_OK) {
        *err = &ngx_http_feed_err_post_id;
        return NGX_DECLINED;
    }

    post = &ctx->change.filter.dst;
    ngx_memcpy(post->data, value.data, value.len);
    post->data[value.len] = '\0';
    post->len = value.len;

    return ngx_http_feed_authorize(r, &ctx->change.filter.src, err);
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
    op->max = (int64_t) (op->kind == NGX_HTTP_FEED_FILTER_HIDDEN
                         ? ctx->fmcf->hidden_max : ctx->fmcf->filter_max);

    for (i = 0; i < 2; i++) {
        u = &ctx->change.unfollow[i];
        u->src = i ? op->dst : op->src;
        u->dst = i ? op->src : op->dst;
        u->now = op->now;
        u->max = (int64_t) ctx->fmcf->follow_max;
    }

    ngx_http_feed_effects_init(&ctx->change.fx, r, ctx->fmcf);

    if (ngx_http_feed_filter_effects(&ctx->change) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter %c%s \"%s\" -> \"%s\": storing", op->kind,
                   op->want ? "+" : "-", op->src.data, op->dst.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_filter_run,
                                       ngx_http_feed_filter_stored,
                                       &ctx->change, NULL);
}


/*
 * What a change may do to caches, recorded before it: the user's timeline,
 * and for a block the other's too, with both users' counts (the follows
 * the block removes)
 */

static ngx_int_t
ngx_http_feed_filter_effects(ngx_http_feed_filters_change_t *ch)
{
    ngx_uint_t                  i;
    ngx_http_feed_filter_op_t  *op;

    op = &ch->filter;

    if (op->kind != NGX_HTTP_FEED_FILTER_BLOCK) {
        return (ngx_http_feed_effects_add(&ch->fx, &op->src,
                                          NGX_HTTP_FEED_EFFECT_TIMELINE)
                == NGX_ERROR) ? NGX_ERROR : NGX_OK;
    }

    for (i = 0; i < 2; i++) {
        if (ngx_http_feed_graph_effects(&ch->fx, &ch->unfollow[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* the effects recorded, the change, then what it owes */

static void
ngx_http_feed_filter_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_filters_change_t  *ch = t->data;

    t->rc = ngx_http_feed_effects_record(client, t->database, &ch->fx,
                                         &t->error);
    if (t->rc != NGX_OK) {
        return;
    }

    t->rc = ngx_http_feed_filter_write(client, t->database, ch, &t->error);
    if (t->rc != NGX_OK) {
        return;
    }

    ngx_http_feed_filter_owe(ch);

    t->rc = ngx_http_feed_effects_owed(client, t->database, &ch->fx,
                                       &t->error);
}


/*
 * The filter, then a block's clean-up: after the block is written, so
 * that a follow racing it either sees the block or is seen here
 * (ngx_http_feed_graph_task.c).  Marked done last: a block cut short is
 * cleaned up again by the next PUT of it.
 */

static ngx_int_t
ngx_http_feed_filter_write(mongoc_client_t *client, const char *database,
    ngx_http_feed_filters_change_t *ch, bson_error_t *error)
{
    ngx_uint_t  i;

    if (ngx_http_feed_filters_change(client, database, &ch->filter, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!ch->filter.changed || !ch->filter.want
        || ch->filter.kind != NGX_HTTP_FEED_FILTER_BLOCK)
    {
        return NGX_OK;
    }

    for (i = 0; i < 2; i++) {
        if (ngx_http_feed_graph_follow_apply(client, database,
                                             &ch->unfollow[i], error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return ngx_http_feed_filters_cleaned(client, database, &ch->filter,
                                         error);
}


/*
 * The filter sets: a mute of t by u is u's reason 'm' for t; a block, u's
 * reason 'b' for t and t's reason 'B' for u.  The follows a block removed
 * owe what unfollows owe, the reason 'u', sent with the block's.
 */

static void
ngx_http_feed_filter_owe(ngx_http_feed_filters_change_t *ch)
{
    ngx_uint_t                  i;
    ngx_http_feed_filter_op_t  *op;

    op = &ch->filter;

    if (op->changed) {
        ngx_http_feed_effects_owe_filter(&ch->fx, &op->src, &op->dst,
                                         op->kind, op->want);

        if (op->kind == NGX_HTTP_FEED_FILTER_BLOCK) {
            ngx_http_feed_effects_owe_filter(&ch->fx, &op->dst, &op->src,
                                             NGX_HTTP_FEED_FILTER_BLOCKED,
                                             op->want);
        }
    }

    for (i = 0; i < 2; i++) {
        ngx_http_feed_graph_owe(&ch->fx, &ch->unfollow[i]);
    }
}


static ngx_int_t
ngx_http_feed_filter_stored(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_filters_change_t  *ch = data;

    ngx_int_t                   rc;
    ngx_http_feed_filter_op_t  *op;

    op = &ch->filter;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter %c \"%s\" -> \"%s\": stored, changed %ui",
                   op->kind, op->src.data, op->dst.data, op->changed);

    rc = ngx_http_feed_effects_apply(&ch->fx, ngx_http_feed_filter_effected);

    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DONE) {
        return NGX_DONE;
    }

    return ngx_http_feed_filter_answer(r, ch);
}


static void
ngx_http_feed_filter_effected(ngx_http_feed_effects_t *fx)
{
    ngx_http_feed_filters_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(fx->request, ngx_http_feed_module);

    ngx_http_feed_finalize(fx->request,
                           ngx_http_feed_filter_answer(fx->request,
                                                       &ctx->change));
}


/* 204, 422 past feed_filter_max, 503 when a cache has yet to take it */

static ngx_int_t
ngx_http_feed_filter_answer(ngx_http_request_t *r,
    ngx_http_feed_filters_change_t *ch)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed filter: answered, over %ui, caches %s",
                   ch->filter.over, ch->fx.failed ? "pending" : "done");

    if (ch->fx.failed) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_cache_pending);
    }

    if (ch->filter.over && ch->filter.kind == NGX_HTTP_FEED_FILTER_HIDDEN) {
        return ngx_http_feed_over_max(r, NGX_HTTP_FEED_HIDDEN_MAX_CODE,
                                      NGX_HTTP_FEED_HIDDEN_MAX_TEXT,
                                      ch->filter.max);
    }

    if (ch->filter.over) {
        return ngx_http_feed_over_max(r, NGX_HTTP_FEED_FILTER_MAX_CODE,
                                      NGX_HTTP_FEED_FILTER_MAX_TEXT,
                                      ch->filter.max);
    }

    return ngx_http_feed_no_content(r);
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


/* the posts a user hid are the user's own business, as the marker */

static ngx_int_t
ngx_http_feed_hidden_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_filters_ctx_t  *ctx = data;

    ngx_int_t  rc;

    ctx->list.kind = NGX_HTTP_FEED_FILTER_HIDDEN;

    rc = ngx_http_feed_graph_list_parse(r, &ctx->list, err);
    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_feed_authorize(r, &ctx->list.user, err);
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
                                         ? "blocks"
                                         : op->kind == NGX_HTTP_FEED_FILTER_MUTE
                                         ? "mutes" : "hidden posts");
}
