
/*
 * ngx_feed_module: the "feed_status" location.
 *
 * Answers what this worker sees right now: a PING through its Redis
 * connection and a "ping" command through the MongoDB thread pool, both
 * run at once, plus the worker's counters.
 */


#include "ngx_http_feed_status.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_authors_store.h"
#include "ngx_http_feed_pull.h"
#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_util.h"


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_uint_t                    waiting;

    unsigned                      redis_up:1;
    unsigned                      mongo_up:1;

    ngx_http_feed_fanout_queue_t  queue;

    /* pull authors, as MongoDB counts them; -1: unknown */
    int64_t                       pull_authors;

    char                          mongo_error[128];
} ngx_http_feed_status_ctx_t;


static ngx_int_t ngx_http_feed_status_cluster(bson_t *doc,
    ngx_http_feed_redis_t *rd);
static ngx_int_t ngx_http_feed_status_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_status_redis_reply(void *data, redisReply *reply);
static void ngx_http_feed_status_queue_done(void *data);
static ngx_int_t ngx_http_feed_status_effects(bson_t *doc,
    ngx_http_feed_stats_t *st);
static ngx_int_t ngx_http_feed_status_fanout(ngx_http_feed_status_ctx_t *ctx,
    bson_t *doc);
static ngx_int_t ngx_http_feed_status_node(bson_t *doc);
static ngx_int_t ngx_http_feed_status_retried(bson_t *doc,
    ngx_atomic_t *retried);
static ngx_int_t ngx_http_feed_status_connections(bson_t *doc,
    ngx_http_feed_gauges_t *g);
static void ngx_http_feed_status_mongo_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_status_mongo_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_status_finish(ngx_http_feed_status_ctx_t *ctx);
static ngx_int_t ngx_http_feed_status_send(ngx_http_feed_status_ctx_t *ctx);
static ngx_int_t ngx_http_feed_status_redis(ngx_http_feed_status_ctx_t *ctx,
    bson_t *doc);
static ngx_int_t ngx_http_feed_status_window(bson_t *doc,
    ngx_http_feed_stats_t *st);
static ngx_int_t ngx_http_feed_status_mongo(ngx_http_feed_status_ctx_t *ctx,
    bson_t *doc);
static ngx_int_t ngx_http_feed_status_moving(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_t *rd, bson_t *doc);
static ngx_int_t ngx_http_feed_status_moves(bson_t *doc, const char *key,
    ngx_str_t *name, const char *field, ngx_str_t *at, ngx_uint_t moves);


static const char  *ngx_http_feed_redis_states[] = {
    "down", "connecting", "up", "exiting"
};


/*
 * Its 405 keeps its own wording; like every location's, it says the
 * methods in Allow, as HTTP requires.
 */

ngx_http_feed_handler_t  ngx_http_feed_status_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_status_ctx_t),
    NULL,
    ngx_http_feed_status_start,
    &ngx_http_feed_err_status_method
};


static ngx_int_t
ngx_http_feed_status_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_status_ctx_t  *ctx = data;

    ngx_int_t                    rc;
    const char                  *argv[3];
    size_t                       argvlen[3];
    ngx_http_feed_redis_args_t   args;
    ngx_http_feed_mongo_task_t  *t;

    /* both checks are in flight at once; the last one to finish answers */

    ctx->waiting = 1;
    ctx->pull_authors = -1;

    if (ctx->fmcf->redis_client) {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "PING");

        rc = ngx_http_feed_redis_send_r(r, ctx->fmcf->redis_client,
                                        ngx_http_feed_status_redis_reply,
                                        ctx, &args);
        if (rc == NGX_ERROR) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ctx->waiting += (rc == NGX_OK);
    }

    /* the queue: every partition's, summed */

    ctx->queue.done = ngx_http_feed_status_queue_done;
    ctx->queue.data = ctx;

    rc = ngx_http_feed_fanout_queue_ask(r, ctx->fmcf, &ctx->queue);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->waiting += rc;

    if (ctx->fmcf->mongo_client) {
        t = ngx_http_feed_mongo_task(r->pool, ctx->fmcf->mongo_client,
                                     ngx_http_feed_status_mongo_run,
                                     ngx_http_feed_status_mongo_done, ctx);
        if (t == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        if (ngx_http_feed_mongo_post_r(r, t) == NGX_OK) {
            ctx->waiting++;

        } else {
            ngx_cpystrn((u_char *) ctx->mongo_error,
                        (u_char *) "thread pool queue overflow",
                        sizeof(ctx->mongo_error));
        }
    }

    if (--ctx->waiting == 0) {
        return ngx_http_feed_status_send(ctx);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_status_redis_reply(void *data, redisReply *reply)
{
    ngx_http_feed_status_ctx_t  *ctx = data;

    ctx->redis_up = (reply != NULL && reply->type == REDIS_REPLY_STATUS);

    ngx_http_feed_status_finish(ctx);
}


static void
ngx_http_feed_status_queue_done(void *data)
{
    ngx_http_feed_status_finish(data);
}


static void
ngx_http_feed_status_mongo_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    bson_t  cmd;

    ngx_http_feed_status_ctx_t  *ctx = t->data;

    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "ping", 1);

    t->rc = mongoc_client_command_simple(client, "admin", &cmd, NULL, NULL,
                                         &t->error)
            ? NGX_OK : NGX_ERROR;

    bson_destroy(&cmd);

    if (t->rc == NGX_OK
        && ngx_http_feed_authors_count(client, t->database,
                                       &ctx->pull_authors, &t->error)
           != NGX_OK)
    {
        ctx->pull_authors = -1;
    }
}


static void
ngx_http_feed_status_mongo_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_status_ctx_t  *ctx = t->data;

    ctx->mongo_up = (t->rc == NGX_OK);

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, ctx->request->connection->log, 0,
                      "mongodb ping failed: %s", t->error.message);
        ngx_cpystrn((u_char *) ctx->mongo_error, (u_char *) t->error.message,
                    sizeof(ctx->mongo_error));
    }

    ngx_http_feed_status_finish(ctx);
}


static void
ngx_http_feed_status_finish(ngx_http_feed_status_ctx_t *ctx)
{
    if (ngx_http_feed_last_reply(ctx->request, &ctx->waiting) == NGX_OK) {
        ngx_http_finalize_request(ctx->request,
                                  ngx_http_feed_status_send(ctx));
    }
}


static ngx_int_t
ngx_http_feed_status_send(ngx_http_feed_status_ctx_t *ctx)
{
    bson_t     doc;
    ngx_int_t  rc;

    bson_init(&doc);

    if (!BSON_APPEND_INT64(&doc, "pid", (int64_t) ngx_pid)
        || !BSON_APPEND_INT64(&doc, "requests",
                              (int64_t) ngx_http_feed_stats.requests)
        || ngx_http_feed_status_redis(ctx, &doc) != NGX_OK
        || ngx_http_feed_status_mongo(ctx, &doc) != NGX_OK
        || ngx_http_feed_status_fanout(ctx, &doc) != NGX_OK
        || ngx_http_feed_timeline_local_status(&doc) != NGX_OK
        || ngx_http_feed_stream_status(&doc) != NGX_OK
        || ngx_http_feed_pull_status(&doc, ctx->fmcf, ctx->pull_authors)
           != NGX_OK
        || ngx_http_feed_status_node(&doc) != NGX_OK)
    {
        bson_destroy(&doc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_feed_send_json(ctx->request, NGX_HTTP_OK, &doc);

    bson_destroy(&doc);

    return rc;
}


static ngx_int_t
ngx_http_feed_status_redis(ngx_http_feed_status_ctx_t *ctx, bson_t *doc)
{
    bson_t                      sub;
    const char                 *err;
    ngx_http_feed_redis_t      *rd;
    ngx_http_feed_stats_t      *st;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = ctx->fmcf;
    rd = fmcf->redis_client;
    st = &ngx_http_feed_stats;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "redis", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_BOOL(&sub, "configured", fmcf->redis_enabled);

    if (fmcf->redis_enabled) {
        BSON_APPEND_UTF8(&sub, "address",
                         (const char *) fmcf->redis.addr_text.data);
        BSON_APPEND_BOOL(&sub, "up", ctx->redis_up);
        BSON_APPEND_UTF8(&sub, "state",
                 ngx_http_feed_redis_states[ngx_http_feed_redis_state(rd)]);
        BSON_APPEND_INT64(&sub, "pending",
                          (int64_t) ngx_http_feed_redis_pending(rd));
        BSON_APPEND_INT64(&sub, "commands", (int64_t) st->redis_commands);
        BSON_APPEND_INT64(&sub, "errors", (int64_t) st->redis_errors);
        BSON_APPEND_INT64(&sub, "timeouts", (int64_t) st->redis_timeouts);
        BSON_APPEND_INT64(&sub, "reconnects",
                          (int64_t) st->redis_reconnects);

        if (ngx_http_feed_status_moving(fmcf, rd, &sub) != NGX_OK) {
            return NGX_ERROR;
        }

        err = ngx_http_feed_redis_last_error(rd);

        if (err) {
            BSON_APPEND_UTF8(&sub, "last_error", err);

        } else {
            BSON_APPEND_NULL(&sub, "last_error");
        }

        if (fmcf->redis.cluster
            && ngx_http_feed_status_cluster(&sub, rd) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/*
 * This worker's view of where its Redis moves: with sentinel=, the primary
 * the sentinels told (null while none answered yet); with a host name and
 * a resolver, the address it resolved to.  And how often this worker
 * moved to a new one.
 */

static ngx_int_t
ngx_http_feed_status_moving(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_t *rd, bson_t *doc)
{
    ngx_str_t   *at, *name;
    ngx_uint_t   moves;
    const char  *key, *field;

    moves = 0;

    if (fmcf->redis.sentinel.len) {
        key = "sentinel";
        field = "primary";
        name = &fmcf->redis.sentinel;
        at = ngx_http_feed_redis_sentinel_primary(rd, &moves);

    } else if (fmcf->redis.resolver) {
        key = "resolved";
        field = "address";
        name = &fmcf->redis.name;
        at = ngx_http_feed_redis_name_address(rd, &moves);

    } else {
        return NGX_OK;
    }

    return ngx_http_feed_status_moves(doc, key, name, field, at, moves);
}


static ngx_int_t
ngx_http_feed_status_moves(bson_t *doc, const char *key, ngx_str_t *name,
    const char *field, ngx_str_t *at, ngx_uint_t moves)
{
    bson_t  sub;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, key, &sub)
        || !bson_append_utf8(&sub, "name", -1, (const char *) name->data,
                             (int) name->len))
    {
        return NGX_ERROR;
    }

    if (at) {
        if (!bson_append_utf8(&sub, field, -1, (const char *) at->data,
                              (int) at->len))
        {
            return NGX_ERROR;
        }

    } else if (!bson_append_null(&sub, field, -1)) {
        return NGX_ERROR;
    }

    if (!BSON_APPEND_INT64(&sub, "moves", (int64_t) moves)) {
        return NGX_ERROR;
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/*
 * this worker's view of the cluster: the masters of its slot map, and the
 * nodes it knows (the seeds, the masters, those still answering a command)
 */

static ngx_int_t
ngx_http_feed_status_cluster(bson_t *doc, ngx_http_feed_redis_t *rd)
{
    bson_t      sub;
    ngx_uint_t  masters, up;

    masters = ngx_http_feed_redis_masters(rd, &up);

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "cluster", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&sub, "masters", (int64_t) masters);
    BSON_APPEND_INT64(&sub, "masters_up", (int64_t) up);
    BSON_APPEND_INT64(&sub, "nodes",
                      (int64_t) ngx_http_feed_redis_nodes(rd));
    BSON_APPEND_INT64(&sub, "forgotten",
                      (int64_t) ngx_http_feed_stats.redis_forgotten);
    BSON_APPEND_INT64(&sub, "moved",
                      (int64_t) ngx_http_feed_stats.redis_moved);
    BSON_APPEND_INT64(&sub, "asked",
                      (int64_t) ngx_http_feed_stats.redis_asked);

    if (ngx_http_feed_status_retried(&sub, ngx_http_feed_stats.redis_retried)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/* the commands a cluster's node asked to send again, by its answer */

static ngx_int_t
ngx_http_feed_status_retried(bson_t *doc, ngx_atomic_t *retried)
{
    bson_t      sub;
    ngx_uint_t  i;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "retried", &sub)) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_FEED_REDIS_RETRIES; i++) {
        BSON_APPEND_INT64(&sub, ngx_http_feed_redis_retry_name(i),
                          (int64_t) retried[i]);
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_feed_status_mongo(ngx_http_feed_status_ctx_t *ctx, bson_t *doc)
{
    bson_t                      sub;
    ngx_http_feed_stats_t      *st;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = ctx->fmcf;
    st = &ngx_http_feed_stats;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "mongo", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_BOOL(&sub, "configured", fmcf->mongo_enabled);

    if (fmcf->mongo_enabled) {
        BSON_APPEND_UTF8(&sub, "database",
                         (const char *) fmcf->mongo.database.data);
        BSON_APPEND_BOOL(&sub, "up", ctx->mongo_up);
        BSON_APPEND_INT64(&sub, "tasks", (int64_t) st->mongo_tasks);
        BSON_APPEND_INT64(&sub, "errors", (int64_t) st->mongo_errors);

        if (ngx_http_feed_status_window(&sub, st) != NGX_OK) {
            return NGX_ERROR;
        }

        if (ctx->mongo_error[0]) {
            BSON_APPEND_UTF8(&sub, "last_error", ctx->mongo_error);

        } else {
            BSON_APPEND_NULL(&sub, "last_error");
        }
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/*
 * Pages feed_timeline_source read with feed_timeline_window, and those of
 * them that read past it: many of those, the window is short for readers.
 * Pages answered partial at feed_timeline_rebuild_deadline, and the
 * chunks of authors missing from them: a slow part of MongoDB.
 */

static ngx_int_t
ngx_http_feed_status_window(bson_t *doc, ngx_http_feed_stats_t *st)
{
    if (!BSON_APPEND_INT64(doc, "window_reads", (int64_t) st->window_reads)
        || !BSON_APPEND_INT64(doc, "window_older",
                              (int64_t) st->window_older)
        || !BSON_APPEND_INT64(doc, "rebuild_partial",
                              (int64_t) st->rebuild_partial)
        || !BSON_APPEND_INT64(doc, "rebuild_late_chunks",
                              (int64_t) st->rebuild_late_chunks))
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_status_fanout(ngx_http_feed_status_ctx_t *ctx, bson_t *doc)
{
    bson_t       sub;
    bson_iter_t  it;

    if (ngx_http_feed_fanout_status(doc) != NGX_OK) {
        return NGX_ERROR;
    }

    if (!ctx->queue.known
        || !bson_iter_init_find(&it, doc, "fanout")
        || !BSON_ITER_HOLDS_DOCUMENT(&it))
    {
        return NGX_OK;
    }

    /* the queue as Redis sees it, for every consumer of the group */

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "queue", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&sub, "pending", ctx->queue.pending);
    BSON_APPEND_INT64(&sub, "lag_ms",
                      ctx->queue.pending ? ctx->queue.lag : 0);

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/*
 * The cache side effects of writes: applied at once, failed, applied by
 * the sweeper; and those pending in the whole deployment, as this node's
 * sweeper last counted them, with the age of the oldest
 */

static ngx_int_t
ngx_http_feed_status_effects(bson_t *doc, ngx_http_feed_stats_t *st)
{
    bson_t   part;
    int64_t  age;

    age = 0;

    if (st->effects_pending && st->effects_oldest) {
        age = ngx_http_feed_now_ms() - (int64_t) st->effects_oldest;
        age = ngx_max(age, 0);
    }

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "effects", &part)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&part, "applied", (int64_t) st->effects_applied);
    BSON_APPEND_INT64(&part, "failed", (int64_t) st->effects_failed);
    BSON_APPEND_INT64(&part, "swept", (int64_t) st->effects_swept);
    BSON_APPEND_INT64(&part, "pending", (int64_t) st->effects_pending);
    BSON_APPEND_INT64(&part, "oldest_ms", age);

    return bson_append_document_end(doc, &part) ? NGX_OK : NGX_ERROR;
}


/*
 * The same counters for all the workers of this nginx together, since it
 * started (reloads included): what a monitor that reaches any worker wants.
 * With them, the gauges: what the workers alive hold now.
 */

static ngx_int_t
ngx_http_feed_status_node(bson_t *doc)
{
    bson_t                   sub, part;
    ngx_http_feed_stats_t   *st = ngx_http_feed_node_stats;
    ngx_http_feed_gauges_t   gauges;

    if (st == NULL) {
        return NGX_OK;
    }

    ngx_http_feed_gauges_sum(&gauges);

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "node", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&sub, "requests", (int64_t) st->requests);

    BSON_APPEND_DOCUMENT_BEGIN(&sub, "redis", &part);
    BSON_APPEND_INT64(&part, "commands", (int64_t) st->redis_commands);
    BSON_APPEND_INT64(&part, "errors", (int64_t) st->redis_errors);
    BSON_APPEND_INT64(&part, "timeouts", (int64_t) st->redis_timeouts);
    BSON_APPEND_INT64(&part, "reconnects", (int64_t) st->redis_reconnects);
    BSON_APPEND_INT64(&part, "moved", (int64_t) st->redis_moved);
    BSON_APPEND_INT64(&part, "asked", (int64_t) st->redis_asked);
    BSON_APPEND_INT64(&part, "forgotten", (int64_t) st->redis_forgotten);

    if (ngx_http_feed_status_retried(&part, st->redis_retried) != NGX_OK
        || ngx_http_feed_status_connections(&part, &gauges) != NGX_OK)
    {
        return NGX_ERROR;
    }

    bson_append_document_end(&sub, &part);

    BSON_APPEND_DOCUMENT_BEGIN(&sub, "mongo", &part);
    BSON_APPEND_INT64(&part, "tasks", (int64_t) st->mongo_tasks);
    BSON_APPEND_INT64(&part, "errors", (int64_t) st->mongo_errors);

    if (ngx_http_feed_status_window(&part, st) != NGX_OK) {
        return NGX_ERROR;
    }

    bson_append_document_end(&sub, &part);

    BSON_APPEND_DOCUMENT_BEGIN(&sub, "fanout", &part);
    BSON_APPEND_INT64(&part, "consumed", (int64_t) st->fanout_consumed);
    BSON_APPEND_INT64(&part, "deliveries", (int64_t) st->fanout_deliveries);
    BSON_APPEND_INT64(&part, "acked", (int64_t) st->fanout_acked);
    BSON_APPEND_INT64(&part, "claims", (int64_t) st->fanout_claims);
    BSON_APPEND_INT64(&part, "retried", (int64_t) st->fanout_retried);
    BSON_APPEND_INT64(&part, "failures", (int64_t) st->fanout_failures);
    BSON_APPEND_INT64(&part, "skipped", (int64_t) st->fanout_skipped);
    bson_append_document_end(&sub, &part);

    BSON_APPEND_DOCUMENT_BEGIN(&sub, "local_pages", &part);
    BSON_APPEND_INT64(&part, "bytes", (int64_t) gauges.local_bytes);
    BSON_APPEND_INT64(&part, "pages", (int64_t) gauges.local_pages);
    BSON_APPEND_INT64(&part, "answered", (int64_t) st->local_answers);
    BSON_APPEND_INT64(&part, "answered_without_redis",
                      (int64_t) st->local_hits);
    bson_append_document_end(&sub, &part);

    BSON_APPEND_DOCUMENT_BEGIN(&sub, "streams", &part);
    BSON_APPEND_INT64(&part, "streams", (int64_t) gauges.streams);
    BSON_APPEND_INT64(&part, "waits", (int64_t) gauges.waits);
    bson_append_document_end(&sub, &part);

    if (ngx_http_feed_status_effects(&sub, st) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_pull_node_status(&sub, st) != NGX_OK) {
        return NGX_ERROR;
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/* the live workers' Redis connections by state, as feed_metrics has them */

static ngx_int_t
ngx_http_feed_status_connections(bson_t *doc, ngx_http_feed_gauges_t *g)
{
    bson_t      sub;
    ngx_uint_t  i;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "connections", &sub)) {
        return NGX_ERROR;
    }

    /* exiting is no connection's state there */

    for (i = 0; i < NGX_HTTP_FEED_REDIS_EXITING; i++) {
        BSON_APPEND_INT64(&sub, ngx_http_feed_redis_states[i],
                          (int64_t) g->redis_connections[i]);
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}
