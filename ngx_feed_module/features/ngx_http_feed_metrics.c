
/*
 * ngx_feed_module: the "feed_metrics" location.
 *
 * Answers the node's counters (all the workers of this nginx, since it
 * started, reloads included: the shared zone's) in Prometheus' text
 * format 0.0.4, its gauges (what the workers alive hold now: their slots
 * of the zone, summed), plus the fanout queue as Redis sees it right now.
 * The workers only ever add to the zone (ngx_http_feed_stat,
 * ngx_http_feed_gauge); everything here is read at scrape time.
 *
 * Requests are counted by endpoint and status class in the log phase,
 * once the status is final.  The endpoint is marked before (in the
 * preaccess phase, as the request enters a feed_* location) in the
 * $feed_endpoint variable: a request's variables outlive the internal
 * redirect to an error_page location, its module contexts do not.
 */


#include "ngx_http_feed_metrics.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_util.h"


/* what one scrape prints at most: some 200 lines */
#define NGX_HTTP_FEED_METRICS_SIZE  (64 * 1024)


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_uint_t                    waiting;

    ngx_http_feed_fanout_queue_t  queue;
} ngx_http_feed_metrics_ctx_t;


/*
 * A family of one sample, read at offset: in the node's counters for a
 * counter, in the gauges' sum for a gauge
 */
typedef struct {
    char                         *name;
    char                         *type;
    char                         *help;
    size_t                        offset;
} ngx_http_feed_metric_t;


static ngx_int_t ngx_http_feed_metrics_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_metrics_queue_done(void *data);
static ngx_int_t ngx_http_feed_metrics_send(ngx_http_feed_metrics_ctx_t *ctx);
static void ngx_http_feed_metrics_family(ngx_buf_t *b, char *name,
    char *type, char *help);
static void ngx_http_feed_metrics_effects_age(ngx_buf_t *b,
    ngx_http_feed_stats_t *st);
static void ngx_http_feed_metrics_plain(ngx_buf_t *b,
    ngx_http_feed_metric_t *m, void *base);
static void ngx_http_feed_metrics_requests(ngx_buf_t *b,
    ngx_http_feed_stats_t *st);
static void ngx_http_feed_metrics_labeled(ngx_buf_t *b,
    ngx_http_feed_stats_t *st);
static void ngx_http_feed_metrics_connections(ngx_buf_t *b,
    ngx_http_feed_gauges_t *g);
static void ngx_http_feed_metrics_histogram(ngx_buf_t *b, char *name,
    char *help, ngx_http_feed_histogram_t *h);
static u_char *ngx_http_feed_metrics_seconds(u_char *p, u_char *last,
    ngx_atomic_uint_t ms);
static void ngx_http_feed_metrics_queue(ngx_buf_t *b,
    ngx_http_feed_fanout_queue_t *q);
static ngx_int_t ngx_http_feed_metrics_mark(ngx_http_request_t *r);
static ngx_int_t ngx_http_feed_metrics_log(ngx_http_request_t *r);


static ngx_int_t  ngx_http_feed_endpoint_index = NGX_ERROR;


static ngx_str_t  ngx_http_feed_metrics_type =
    ngx_string("text/plain; version=0.0.4; charset=utf-8");


/*
 * The endpoint label: the location directive, printed without "feed_";
 * index 0, "other", for a directive missing here.
 */

#define NGX_HTTP_FEED_PREFIX_LEN  (sizeof("feed_") - 1)

static ngx_str_t  ngx_http_feed_metrics_endpoints[NGX_HTTP_FEED_ENDPOINTS] = {
    ngx_string("feed_other"),
    ngx_string("feed_timeline"),
    ngx_string("feed_timeline_source"),
    ngx_string("feed_timeline_marker"),
    ngx_string("feed_seen"),
    ngx_string("feed_posts"),
    ngx_string("feed_user_post"),
    ngx_string("feed_post"),
    ngx_string("feed_follow"),
    ngx_string("feed_following"),
    ngx_string("feed_followers"),
    ngx_string("feed_block"),
    ngx_string("feed_blocks"),
    ngx_string("feed_mute"),
    ngx_string("feed_mutes"),
    ngx_string("feed_hide"),
    ngx_string("feed_hidden"),
    ngx_string("feed_status"),
    ngx_string("feed_metrics"),
    ngx_string("feed_timeline_stream"),
    ngx_null_string
};


/* indexed by ngx_http_feed_cache_status_e, NONE (0) not printed */

static char  *ngx_http_feed_metrics_caches[NGX_HTTP_FEED_CACHE_STATUSES] = {
    NULL, "HIT", "MISS", "DEEP", "BYPASS", "LOCAL", "PARTIAL"
};


/* indexed by ngx_http_feed_redis_state_e; exiting is never counted */

static char  *ngx_http_feed_metrics_states[] = {
    "down", "connecting", "up"
};


#define ngx_http_feed_metric(name, type, help, field)                        \
    { name, type, help, offsetof(ngx_http_feed_stats_t, field) }

#define ngx_http_feed_metric_gauge(name, help, field)                        \
    { name, "gauge", help, offsetof(ngx_http_feed_gauges_t, field) }

static ngx_http_feed_metric_t  ngx_http_feed_metrics_counters[] = {

    ngx_http_feed_metric("feed_timeline_pull_reads_total", "counter",
        "Timeline reads that merged the posts of pull authors.",
        pull_reads),
    ngx_http_feed_metric("feed_timeline_rebuild_failures_total", "counter",
        "Timeline rebuilds (cache misses) that failed.",
        rebuild_failures),
    ngx_http_feed_metric("feed_timeline_window_reads_total", "counter",
        "Timeline pages read from MongoDB by feed_timeline_source with "
        "feed_timeline_window.", window_reads),
    ngx_http_feed_metric("feed_timeline_window_older_total", "counter",
        "Of those, pages that read posts older than the window: the "
        "window's posts did not fill them, or they are deeper.",
        window_older),
    ngx_http_feed_metric("feed_timeline_rebuild_partial_total", "counter",
        "Timeline pages feed_timeline_source answered partial: some "
        "chunks of authors had not answered by "
        "feed_timeline_rebuild_deadline.", rebuild_partial),
    ngx_http_feed_metric("feed_timeline_rebuild_late_chunks_total",
        "counter", "Chunks of authors missing from those pages.",
        rebuild_late_chunks),
    ngx_http_feed_metric("feed_redis_commands_total", "counter",
        "Redis commands sent.", redis_commands),
    ngx_http_feed_metric("feed_redis_errors_total", "counter",
        "Redis commands answered with an error or not at all.",
        redis_errors),
    ngx_http_feed_metric("feed_redis_timeouts_total", "counter",
        "Redis commands that timed out.", redis_timeouts),
    ngx_http_feed_metric("feed_redis_reconnects_total", "counter",
        "Redis connections made again after being lost.",
        redis_reconnects),
    ngx_http_feed_metric("feed_redis_primary_moves_total", "counter",
        "Moves of a worker to the new primary a sentinel told, summed "
        "over the workers.", redis_primary_moves),
    ngx_http_feed_metric("feed_redis_name_moves_total", "counter",
        "Moves of a worker to the new address its resolver gave the Redis "
        "host name, summed over the workers.", redis_name_moves),
    ngx_http_feed_metric("feed_redis_moved_total", "counter",
        "Redis Cluster MOVED redirections followed.", redis_moved),
    ngx_http_feed_metric("feed_redis_asked_total", "counter",
        "Redis Cluster ASK redirections followed.", redis_asked),
    ngx_http_feed_metric("feed_redis_nodes_forgotten_total", "counter",
        "Redis Cluster nodes forgotten: no longer in the map.",
        redis_forgotten),
    ngx_http_feed_metric("feed_mongo_tasks_total", "counter",
        "MongoDB tasks posted to the thread pool.", mongo_tasks),
    ngx_http_feed_metric("feed_mongo_errors_total", "counter",
        "MongoDB tasks that failed.", mongo_errors),
    ngx_http_feed_metric("feed_fanout_consumed_total", "counter",
        "Fanout queue entries read by the consumers.", fanout_consumed),
    ngx_http_feed_metric("feed_fanout_deliveries_total", "counter",
        "Posts delivered into cached timelines.", fanout_deliveries),
    ngx_http_feed_metric("feed_fanout_acked_total", "counter",
        "Fanout queue entries acknowledged when done.", fanout_acked),
    ngx_http_feed_metric("feed_fanout_claims_total", "counter",
        "Fanout queue entries claimed from idle consumers.",
        fanout_claims),
    ngx_http_feed_metric("feed_fanout_retried_total", "counter",
        "Fanout queue entries a consumer read again from its own pending "
        "ones after they failed.", fanout_retried),
    ngx_http_feed_metric("feed_fanout_failures_total", "counter",
        "Fanout entries that failed and are retried.", fanout_failures),
    ngx_http_feed_metric("feed_fanout_skipped_total", "counter",
        "Fanout entries and follows skipped as unusable.",
        fanout_skipped),
    ngx_http_feed_metric("feed_local_pages_answered_total", "counter",
        "Timeline reads answered with a worker's kept page.",
        local_answers),
    ngx_http_feed_metric("feed_local_hits_total", "counter",
        "Timeline reads answered with a worker's kept page and no Redis "
        "command.", local_hits),
    ngx_http_feed_metric("feed_streams_refused_total", "counter",
        "Live timelines refused past feed_stream_max.", stream_refused),
    ngx_http_feed_metric("feed_streams_dropped_total", "counter",
        "Live timelines closed for a client too slow to read them.",
        stream_dropped),
    ngx_http_feed_metric("feed_stream_reads_total", "counter",
        "Reads of streamed timelines, one for all streams and long polls of "
        "a user in a worker.", stream_reads),
    ngx_http_feed_metric("feed_stream_told_total", "counter",
        "Entries of streamed timelines sent as the fanout told them, with "
        "no read.", stream_told),
    ngx_http_feed_metric("feed_posts_created_total", "counter",
        "Posts stored.", posts_created),
    ngx_http_feed_metric("feed_posts_deleted_total", "counter",
        "Posts deleted.", posts_deleted),
    ngx_http_feed_metric("feed_effects_applied_total", "counter",
        "Writes whose cache side effects Redis all took before the answer.",
        effects_applied),
    ngx_http_feed_metric("feed_effects_failed_total", "counter",
        "Tries of cache side effects Redis did not take (writes answered "
        "503, sweeper tries), left to the sweeper.", effects_failed),
    ngx_http_feed_metric("feed_effects_swept_total", "counter",
        "Users whose cache side effects left over the sweeper applied.",
        effects_swept),
    ngx_http_feed_metric("feed_effects_pending", "gauge",
        "Users with cache side effects not applied yet, in the whole "
        "deployment, as this node's sweeper last counted.", effects_pending),

    { NULL, NULL, NULL, 0 }
};


static ngx_http_feed_metric_t  ngx_http_feed_metrics_gauges[] = {

    ngx_http_feed_metric_gauge("feed_local_pages_bytes",
        "Bytes of the first pages the live workers keep as answered.",
        local_bytes),
    ngx_http_feed_metric_gauge("feed_local_pages",
        "First pages the live workers keep as answered.", local_pages),
    ngx_http_feed_metric_gauge("feed_streams",
        "Live timelines open (Server-Sent Events).", streams),
    ngx_http_feed_metric_gauge("feed_timeline_waits",
        "Long polls waiting for a post.", waits),

    { NULL, NULL, NULL, 0 }
};


/*
 * Its 405 is the usual one; it answers without Redis (the queue is then
 * left out) and without MongoDB.
 */

ngx_http_feed_handler_t  ngx_http_feed_metrics_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_metrics_ctx_t),
    NULL,
    ngx_http_feed_metrics_start,
    NULL
};


ngx_uint_t
ngx_http_feed_metrics_endpoint(ngx_str_t *directive)
{
    ngx_uint_t  i;

    for (i = 1; ngx_http_feed_metrics_endpoints[i].len; i++) {
        if (ngx_http_feed_metrics_endpoints[i].len == directive->len
            && ngx_strncmp(ngx_http_feed_metrics_endpoints[i].data,
                           directive->data, directive->len) == 0)
        {
            return i;
        }
    }

    return 0;
}


/*
 * postconfiguration: every request of a feed_* location is marked, then
 * counted.  The mark runs before limit_req's and the access checks: their
 * refusals count for the endpoint too.
 */

ngx_int_t
ngx_http_feed_metrics_init(ngx_conf_t *cf)
{
    ngx_str_t                   name = ngx_string("feed_endpoint");
    ngx_http_handler_pt        *h;
    ngx_http_core_main_conf_t  *cmcf;

    ngx_http_feed_endpoint_index = ngx_http_get_variable_index(cf, &name);
    if (ngx_http_feed_endpoint_index == NGX_ERROR) {
        return NGX_ERROR;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_feed_metrics_mark;

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_feed_metrics_log;

    return NGX_OK;
}


/*
 * Set as the rewrite module's "set" sets a variable.  Not by a subrequest:
 * it shares its parent's variables, and is no request of its own.
 */

static ngx_int_t
ngx_http_feed_metrics_mark(ngx_http_request_t *r)
{
    ngx_http_variable_value_t  *v;
    ngx_http_feed_loc_conf_t   *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    if (flcf->handler == NULL || r != r->main) {
        return NGX_DECLINED;
    }

    v = &r->variables[ngx_http_feed_endpoint_index];

    v->data = ngx_http_feed_metrics_endpoints[flcf->endpoint].data
              + NGX_HTTP_FEED_PREFIX_LEN;
    v->len = ngx_http_feed_metrics_endpoints[flcf->endpoint].len
             - NGX_HTTP_FEED_PREFIX_LEN;
    v->valid = 1;
    v->no_cacheable = 0;
    v->not_found = 0;
    v->escape = 0;

    return NGX_DECLINED;
}


/* $feed_endpoint before (or without) the mark: none */

ngx_int_t
ngx_http_feed_endpoint_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data)
{
    v->not_found = 1;

    return NGX_OK;
}


/* the marked endpoint, whatever location the request ended in */

static ngx_int_t
ngx_http_feed_metrics_log(ngx_http_request_t *r)
{
    ngx_uint_t                  i, code;
    ngx_http_variable_value_t  *v;

    v = ngx_http_get_indexed_variable(r, ngx_http_feed_endpoint_index);

    if (v == NULL || v->not_found) {
        return NGX_OK;
    }

    code = r->headers_out.status / 100;

    if (code < 1 || code > NGX_HTTP_FEED_CODES) {
        return NGX_OK;
    }

    for (i = 0; ngx_http_feed_metrics_endpoints[i].len; i++) {
        if (v->data == ngx_http_feed_metrics_endpoints[i].data
                       + NGX_HTTP_FEED_PREFIX_LEN)
        {
            ngx_http_feed_stat(responses[i][code - 1], 1);
            return NGX_OK;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_metrics_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_metrics_ctx_t  *ctx = data;

    ngx_int_t  rc;

    /* the queue, every partition's; without Redis, the counters alone */

    ctx->queue.done = ngx_http_feed_metrics_queue_done;
    ctx->queue.data = ctx;

    rc = ngx_http_feed_fanout_queue_ask(r, ctx->fmcf, &ctx->queue);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ctx->waiting = rc;

    if (ctx->waiting == 0) {
        return ngx_http_feed_metrics_send(ctx);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_metrics_queue_done(void *data)
{
    ngx_http_feed_metrics_ctx_t  *ctx = data;

    if (ngx_http_feed_last_reply(ctx->request, &ctx->waiting) == NGX_OK) {
        ngx_http_finalize_request(ctx->request,
                                  ngx_http_feed_metrics_send(ctx));
    }
}


static ngx_int_t
ngx_http_feed_metrics_send(ngx_http_feed_metrics_ctx_t *ctx)
{
    ngx_buf_t               *b;
    ngx_http_request_t      *r = ctx->request;
    ngx_http_feed_stats_t   *st = ngx_http_feed_node_stats;
    ngx_http_feed_gauges_t   gauges;

    if (st == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    b = ngx_create_temp_buf(r->pool, NGX_HTTP_FEED_METRICS_SIZE);
    if (b == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_http_feed_gauges_sum(&gauges);

    ngx_http_feed_metrics_requests(b, st);
    ngx_http_feed_metrics_labeled(b, st);
    ngx_http_feed_metrics_connections(b, &gauges);
    ngx_http_feed_metrics_plain(b, ngx_http_feed_metrics_counters, st);
    ngx_http_feed_metrics_plain(b, ngx_http_feed_metrics_gauges, &gauges);

    ngx_http_feed_metrics_histogram(b, "feed_timeline_rebuild_seconds",
        "Timeline rebuilds led by a cache miss, until cached or failed.",
        &st->rebuild);
    ngx_http_feed_metrics_histogram(b, "feed_timeline_fallback_seconds",
        "Fallback subrequests (rebuilds, deep pages, bypasses).",
        &st->fallback);
    ngx_http_feed_metrics_histogram(b, "feed_mongo_queue_wait_seconds",
        "Time MongoDB tasks waited for a thread of the pool.",
        &st->mongo_wait);

    ngx_http_feed_metrics_effects_age(b, st);
    ngx_http_feed_metrics_queue(b, &ctx->queue);

    /* ngx_slprintf() stops at the end: a full buffer is a cut answer */

    if (b->last == b->end) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "feed metrics larger than %uz bytes",
                      (size_t) NGX_HTTP_FEED_METRICS_SIZE);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed metrics: %uz bytes, the queue %s",
                   (size_t) (b->last - b->pos),
                   ctx->queue.known ? "known" : "unknown");

    return ngx_http_feed_send_typed(r, NGX_HTTP_OK,
                                    &ngx_http_feed_metrics_type, b->pos,
                                    b->last - b->pos);
}


static void
ngx_http_feed_metrics_family(ngx_buf_t *b, char *name, char *type,
    char *help)
{
    b->last = ngx_slprintf(b->last, b->end, "# HELP %s %s\n# TYPE %s %s\n",
                           name, help, name, type);
}


/* how long the oldest effect left over has waited, 0 when none has */

static void
ngx_http_feed_metrics_effects_age(ngx_buf_t *b, ngx_http_feed_stats_t *st)
{
    int64_t  age;

    age = 0;

    if (st->effects_pending && st->effects_oldest) {
        age = ngx_http_feed_now_ms() - (int64_t) st->effects_oldest;
        age = ngx_max(age, 0);
    }

    ngx_http_feed_metrics_family(b, "feed_effects_oldest_age_seconds",
        "gauge", "Age of the oldest cache side effect not applied yet.");

    b->last = ngx_slprintf(b->last, b->end,
                           "feed_effects_oldest_age_seconds %L.%03L\n",
                           age / 1000, age % 1000);
}


static void
ngx_http_feed_metrics_plain(ngx_buf_t *b, ngx_http_feed_metric_t *m,
    void *base)
{
    ngx_atomic_t  *v;

    for ( /* void */ ; m->name; m++) {
        v = (ngx_atomic_t *) ((u_char *) base + m->offset);

        ngx_http_feed_metrics_family(b, m->name, m->type, m->help);

        b->last = ngx_slprintf(b->last, b->end, "%s %uA\n", m->name, *v);
    }
}


static void
ngx_http_feed_metrics_requests(ngx_buf_t *b, ngx_http_feed_stats_t *st)
{
    ngx_str_t   label;
    ngx_uint_t  i, code;

    ngx_http_feed_metrics_family(b, "feed_requests_total", "counter",
        "Requests of the feed_* locations, by endpoint and status class.");

    for (i = 0; ngx_http_feed_metrics_endpoints[i].len; i++) {
        label.data = ngx_http_feed_metrics_endpoints[i].data
                     + NGX_HTTP_FEED_PREFIX_LEN;
        label.len = ngx_http_feed_metrics_endpoints[i].len
                    - NGX_HTTP_FEED_PREFIX_LEN;

        for (code = 1; code <= NGX_HTTP_FEED_CODES; code++) {
            b->last = ngx_slprintf(b->last, b->end,
                          "feed_requests_total{endpoint=\"%V\",code=\"%uixx\"}"
                          " %uA\n",
                          &label, code, st->responses[i][code - 1]);
        }
    }
}


/*
 * The other labeled counters: reads by cache status, cluster retries by
 * reason, live timelines' events by kind
 */

static void
ngx_http_feed_metrics_labeled(ngx_buf_t *b, ngx_http_feed_stats_t *st)
{
    ngx_uint_t  i;

    ngx_http_feed_metrics_family(b, "feed_timeline_reads_total", "counter",
        "Timeline reads by how the cache answered ($feed_cache_status).");

    for (i = 1; i < NGX_HTTP_FEED_CACHE_STATUSES; i++) {
        b->last = ngx_slprintf(b->last, b->end,
                               "feed_timeline_reads_total{cache=\"%s\"} %uA\n",
                               ngx_http_feed_metrics_caches[i],
                               st->timeline_reads[i]);
    }

    ngx_http_feed_metrics_family(b, "feed_redis_cluster_retries_total",
        "counter", "Redis Cluster TRYAGAIN and CLUSTERDOWN answers "
        "followed by a retry after a pause.");

    for (i = 0; i < NGX_HTTP_FEED_REDIS_RETRIES; i++) {
        b->last = ngx_slprintf(b->last, b->end,
                               "feed_redis_cluster_retries_total"
                               "{reason=\"%s\"} %uA\n",
                               ngx_http_feed_redis_retry_name(i),
                               st->redis_retried[i]);
    }

    ngx_http_feed_metrics_family(b, "feed_stream_events_total", "counter",
        "Live timelines' events sent, by kind.");

    b->last = ngx_slprintf(b->last, b->end,
                           "feed_stream_events_total{event=\"update\"} %uA\n"
                           "feed_stream_events_total{event=\"delete\"} %uA\n"
                           "feed_stream_events_total{event=\"reset\"} %uA\n",
                           st->stream_updates, st->stream_deletes,
                           st->stream_resets);
}


/* the live workers' connections by state */

static void
ngx_http_feed_metrics_connections(ngx_buf_t *b, ngx_http_feed_gauges_t *g)
{
    ngx_uint_t  i;

    ngx_http_feed_metrics_family(b, "feed_redis_connections", "gauge",
        "Redis connections the live workers hold, by state.");

    for (i = 0; i < sizeof(ngx_http_feed_metrics_states) / sizeof(char *);
         i++)
    {
        b->last = ngx_slprintf(b->last, b->end,
                               "feed_redis_connections{state=\"%s\"} %uA\n",
                               ngx_http_feed_metrics_states[i],
                               g->redis_connections[i]);
    }
}


/*
 * The zone keeps each bucket's own count: they are summed here into
 * Prometheus' cumulative ones, the last of which is the count.
 */

static void
ngx_http_feed_metrics_histogram(ngx_buf_t *b, char *name, char *help,
    ngx_http_feed_histogram_t *h)
{
    ngx_uint_t         i;
    ngx_atomic_uint_t  n;

    ngx_http_feed_metrics_family(b, name, "histogram", help);

    n = 0;

    for (i = 0; i < NGX_HTTP_FEED_BUCKETS; i++) {
        n += h->buckets[i];

        b->last = ngx_slprintf(b->last, b->end, "%s_bucket{le=\"", name);

        if (i < NGX_HTTP_FEED_BUCKETS - 1) {
            b->last = ngx_http_feed_metrics_seconds(b->last, b->end,
                                                ngx_http_feed_bucket_ms[i]);

        } else {
            b->last = ngx_slprintf(b->last, b->end, "+Inf");
        }

        b->last = ngx_slprintf(b->last, b->end, "\"} %uA\n", n);
    }

    b->last = ngx_slprintf(b->last, b->end, "%s_sum ", name);
    b->last = ngx_http_feed_metrics_seconds(b->last, b->end, h->sum_ms);
    b->last = ngx_slprintf(b->last, b->end, "\n%s_count %uA\n", name, n);
}


/* ms as seconds, the shortest way: 1000 "1", 2500 "2.5", 10 "0.01" */

static u_char *
ngx_http_feed_metrics_seconds(u_char *p, u_char *last, ngx_atomic_uint_t ms)
{
    u_char  *frac;

    p = ngx_slprintf(p, last, "%uA", ms / 1000);

    if (ms % 1000 == 0) {
        return p;
    }

    frac = p;
    p = ngx_slprintf(p, last, ".%03uA", ms % 1000);

    while (p > frac + 1 && p[-1] == '0') {
        p--;
    }

    return p;
}


/* known only when Redis answered for every partition: else no sample */

static void
ngx_http_feed_metrics_queue(ngx_buf_t *b, ngx_http_feed_fanout_queue_t *q)
{
    ngx_http_feed_metrics_family(b, "feed_fanout_pending_entries", "gauge",
        "Fanout queue entries read by the group but not acknowledged.");

    if (q->known) {
        b->last = ngx_slprintf(b->last, b->end,
                               "feed_fanout_pending_entries %L\n",
                               q->pending);
    }

    ngx_http_feed_metrics_family(b, "feed_fanout_lag_seconds", "gauge",
        "Age of the oldest fanout queue entry not acknowledged.");

    if (q->known) {
        b->last = ngx_slprintf(b->last, b->end, "feed_fanout_lag_seconds ");
        b->last = ngx_http_feed_metrics_seconds(b->last, b->end,
                                       (ngx_atomic_uint_t)
                                       (q->pending && q->lag > 0 ? q->lag
                                                                 : 0));
        b->last = ngx_slprintf(b->last, b->end, "\n");
    }
}
