
/*
 * ngx_feed_module: social timelines at the edge.
 */


#ifndef _NGX_HTTP_FEED_MODULE_H_INCLUDED_
#define _NGX_HTTP_FEED_MODULE_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if !(NGX_THREADS)
#error ngx_http_feed_module needs nginx built --with-threads
#endif

#include <ngx_thread_pool.h>


/*
 * The sanitizer build (make test-asan, the fuzzers) gives every block the
 * module takes from a pool a heap allocation of its own, freed with the
 * pool as nginx's large allocations are: AddressSanitizer then sees a
 * write one byte past any of them, which inside a shared pool block it
 * cannot.  Each block starts 8 bytes past a 16-byte boundary, no more
 * aligned than a pool promises (NGX_ALIGNMENT), so that UBSan sees code
 * that assumes more.  And libbson, which is not instrumented, writes what
 * the module hands it to fill through a copy that is.
 */

#if (NGX_HTTP_FEED_EXACT_ALLOC)

#include <bson.h>

static ngx_inline void *
ngx_http_feed_exact_alloc(ngx_pool_t *pool, size_t size, ngx_uint_t zero)
{
    u_char  *p;

    p = ngx_pmemalign(pool, size + 8, 16);
    if (p == NULL) {
        return NULL;
    }

    p += 8;

    if (zero) {
        ngx_memzero(p, size);
    }

    return p;
}


static ngx_inline void
ngx_http_feed_checked_oid_to_string(const bson_oid_t *oid, char *str)
{
    char  hex[25];

    (bson_oid_to_string)(oid, hex);
    memcpy(str, hex, sizeof(hex));
}

#define ngx_palloc(pool, size)   ngx_http_feed_exact_alloc(pool, size, 0)
#define ngx_pnalloc(pool, size)  ngx_http_feed_exact_alloc(pool, size, 0)
#define ngx_pcalloc(pool, size)  ngx_http_feed_exact_alloc(pool, size, 1)

#define bson_oid_to_string(oid, str)                                        \
    ngx_http_feed_checked_oid_to_string(oid, str)

#endif


typedef struct ngx_http_feed_redis_s  ngx_http_feed_redis_t;
typedef struct ngx_http_feed_mongo_s  ngx_http_feed_mongo_t;
typedef struct ngx_http_feed_handler_s  ngx_http_feed_handler_t;


/* feed_metrics' label values, ngx_http_feed_metrics.c names them */
#define NGX_HTTP_FEED_ENDPOINTS       16    /* one per location directive */
#define NGX_HTTP_FEED_CODES           5     /* 1xx to 5xx */
#define NGX_HTTP_FEED_CACHE_STATUSES  5     /* ngx_http_feed_cache_status_e */
#define NGX_HTTP_FEED_REDIS_STATES    4     /* ngx_http_feed_redis_state_e */
#define NGX_HTTP_FEED_REDIS_RETRIES   2     /* ngx_http_feed_redis_retry_e */
#define NGX_HTTP_FEED_BUCKETS         13    /* the last one is +Inf */


/*
 * A latency histogram in milliseconds: how many fell in each bucket (not
 * cumulative: one add per observation), and their sum.  The count is the
 * buckets' sum, so that a reader sees _count equal to the +Inf bucket.
 */
typedef struct {
    ngx_atomic_t                  buckets[NGX_HTTP_FEED_BUCKETS];
    ngx_atomic_t                  sum_ms;
} ngx_http_feed_histogram_t;


/*
 * Counters reported by feed_status and feed_metrics: each worker's own,
 * and the node's (all workers of this nginx, in shared memory, kept across
 * reloads).  They only grow: a worker that dies leaves its adds behind,
 * which is what a counter wants.  Gauges are apart (below).
 */
typedef struct {
    ngx_atomic_t                  requests;
    ngx_atomic_t                  redis_commands;
    ngx_atomic_t                  redis_errors;
    ngx_atomic_t                  redis_timeouts;
    ngx_atomic_t                  redis_reconnects;
    ngx_atomic_t                  redis_moved;
    ngx_atomic_t                  redis_asked;
    ngx_atomic_t                  redis_retried
                                      [NGX_HTTP_FEED_REDIS_RETRIES];
    ngx_atomic_t                  redis_forgotten;
    ngx_atomic_t                  mongo_tasks;
    ngx_atomic_t                  mongo_errors;
    ngx_atomic_t                  local_answers;
    ngx_atomic_t                  fanout_consumed;
    ngx_atomic_t                  fanout_deliveries;
    ngx_atomic_t                  fanout_acked;
    ngx_atomic_t                  fanout_claims;
    ngx_atomic_t                  fanout_failures;
    ngx_atomic_t                  fanout_skipped;
    ngx_atomic_t                  pull_listed;
    ngx_atomic_t                  pull_reads;
    ngx_atomic_t                  pull_pulled;
    ngx_atomic_t                  pull_merge_us;
    ngx_atomic_t                  pull_loads;
    ngx_atomic_t                  pull_to_pull;
    ngx_atomic_t                  pull_to_push;
    ngx_atomic_t                  pull_vouched;

    ngx_atomic_t                  responses[NGX_HTTP_FEED_ENDPOINTS]
                                      [NGX_HTTP_FEED_CODES];
    ngx_atomic_t                  timeline_reads
                                      [NGX_HTTP_FEED_CACHE_STATUSES];
    ngx_atomic_t                  rebuild_failures;
    ngx_atomic_t                  posts_created;
    ngx_atomic_t                  posts_deleted;

    /*
     * Cache side effects of writes (ngx_http_feed_effects.c): writes
     * whose effects were applied at once, or not (left to the sweeper),
     * entries the sweeper applied; and the journal as the node's sweeper
     * last counted it: entries, and when the oldest was recorded (ms)
     */
    ngx_atomic_t                  effects_applied;
    ngx_atomic_t                  effects_failed;
    ngx_atomic_t                  effects_swept;
    ngx_atomic_t                  effects_pending;
    ngx_atomic_t                  effects_oldest;

    ngx_http_feed_histogram_t     rebuild;
    ngx_http_feed_histogram_t     fallback;
    ngx_http_feed_histogram_t     mongo_wait;
} ngx_http_feed_stats_t;


/*
 * What a process holds right now, in a slot of its own in the shared
 * zone: a gauge summed over the node's shared adds and takes would keep
 * forever the share of a worker killed by SIGKILL or a crash, which never
 * takes it back.  A slot belongs to one process (its pid); a worker takes
 * a free one, or one whose process is gone, and zeroes it when it starts,
 * and gives it back when it exits.  feed_status and feed_metrics sum the
 * slots of the processes that are alive (ngx_http_feed_gauges_sum), old
 * workers still shutting down after a reload included.
 */
typedef struct {
    ngx_atomic_t                  pid;      /* the owner, 0: free */
    ngx_atomic_t                  redis_connections
                                      [NGX_HTTP_FEED_REDIS_STATES];
    ngx_atomic_t                  local_bytes;
    ngx_atomic_t                  local_pages;
} ngx_http_feed_gauges_t;


/*
 * As many slots as the master can have children: a slot is taken back
 * from a process that is gone, so they never all belong to live ones.
 */
#define NGX_HTTP_FEED_GAUGE_SLOTS     NGX_MAX_PROCESSES


/*
 * The node's post id sequence (ngx_http_feed_post_oid), in the same shared
 * zone: the milliseconds and sequence of the last id any worker made, and
 * random bytes of the node, drawn when the zone was made.
 */
typedef struct {
    ngx_atomic_t                  last;
    u_char                        node[5];
} ngx_http_feed_ids_t;


/* feed_stream ... partitions=N: at most */
#define NGX_HTTP_FEED_PARTITIONS_MAX  64


#define ngx_http_feed_stat(field, n)                                         \
    (ngx_http_feed_stats.field += (n),                                        \
     ngx_http_feed_node_stats                                                 \
         ? (void) ngx_atomic_fetch_add(&ngx_http_feed_node_stats->field,     \
                                       (ngx_atomic_int_t) (n))                \
         : (void) 0)


/* the bucket of a latency: a few compares, then the same adds as above */
#define ngx_http_feed_observe(field, ms)                                     \
    do {                                                                      \
        ngx_msec_int_t  ms_ = (ms) < 0 ? 0 : (ms);                            \
        ngx_http_feed_stat(field.buckets[ngx_http_feed_bucket(ms_)], 1);      \
        ngx_http_feed_stat(field.sum_ms, ms_);                                \
    } while (0)


/*
 * A gauge moves in the process's own slot, which no other process writes:
 * a plain add is enough, and a word written whole is read whole.
 */
#define ngx_http_feed_gauge(field, n)                                        \
    (ngx_http_feed_gauges                                                     \
         ? (void) (ngx_http_feed_gauges->field += (n))                        \
         : (void) 0)


ngx_uint_t ngx_http_feed_bucket(ngx_msec_int_t ms);

extern const ngx_msec_int_t  ngx_http_feed_bucket_ms[];


typedef struct {
    ngx_str_t                     addr_text;    /* as written in the conf */
    char                         *host;         /* IP text or NULL */
    int                           port;
    char                         *unix_path;    /* unix socket or NULL */
    ngx_str_t                     password;
    ngx_int_t                     db;
    ngx_msec_t                    connect_timeout;
    ngx_msec_t                    timeout;

    /* a Redis Cluster: its seed nodes (this conf among them) */
    ngx_flag_t                    cluster;
    ngx_array_t                  *seeds;
} ngx_http_feed_redis_conf_t;


typedef struct {
    ngx_str_t                     uri_text;
    void                         *uri;          /* mongoc_uri_t */
    ngx_str_t                     database;
    ngx_msec_t                    timeout;
    ngx_str_t                     thread_pool_name;
    ngx_thread_pool_t            *thread_pool;
} ngx_http_feed_mongo_conf_t;


typedef struct {
    ngx_http_feed_redis_conf_t    redis;
    ngx_http_feed_mongo_conf_t    mongo;

    ngx_uint_t                    post_max_chars;
    ngx_uint_t                    follow_max;
    ngx_uint_t                    filter_max;
    size_t                        post_data_max_size;

    /* the fanout queue: its partitions' streams, posts routed by author */
    ngx_str_t                     stream;
    ngx_uint_t                    stream_maxlen;
    ngx_uint_t                    stream_partitions;
    ngx_str_t                    *streams;

    /* fanout on write */
    ngx_flag_t                    fanout;
    ngx_str_t                     fanout_group;
    ngx_uint_t                    fanout_batch;
    ngx_uint_t                    fanout_page;
    ngx_uint_t                    fanout_deliver_batch;
    ngx_msec_t                    fanout_block;
    ngx_msec_t                    fanout_claim_idle;

    /* the timeline cache */
    ngx_uint_t                    cache_size;
    time_t                        cache_ttl;
    time_t                        cache_empty_ttl;
    ngx_uint_t                    cache_embed;
    ngx_uint_t                    timeline_store;   /* feed_timeline_store:
                                                       ngx_http_feed_store_e
                                                       */
    time_t                        timeline_bucket_time;
    ngx_uint_t                    timeline_bucket_size;
    ngx_uint_t                    timeline_capped_size;
    ngx_uint_t                    timeline_bucket_keep;
    ngx_msec_t                    cache_lock_timeout;
    size_t                        cache_local;

    /* the push/pull hybrid: followers that make a pull author, 0: off */
    ngx_int_t                     pull_threshold;

    unsigned                      redis_enabled:1;
    unsigned                      mongo_enabled:1;
    unsigned                      needs_mongo:1;

    /* the node's counters, for feed_status */
    ngx_shm_zone_t               *stats_zone;

    /* runtime, per worker: created in init_process */
    ngx_http_feed_redis_t        *redis_client;
    ngx_http_feed_mongo_t        *mongo_client;
} ngx_http_feed_main_conf_t;


typedef struct {
    /* feed_identity: the authenticated user writes are bound to */
    ngx_http_complex_value_t     *identity;

    /* the location's feed_* handler directive, and its arguments */
    ngx_http_feed_handler_t      *handler;
    ngx_uint_t                    endpoint;   /* its feed_metrics label */
    ngx_http_complex_value_t     *user;
    ngx_http_complex_value_t     *target;

    /* where a timeline is built when the cache cannot answer */
    ngx_str_t                     fallback;
} ngx_http_feed_loc_conf_t;


extern ngx_module_t           ngx_http_feed_module;
extern ngx_http_feed_stats_t   ngx_http_feed_stats;
extern ngx_http_feed_stats_t  *ngx_http_feed_node_stats;
extern ngx_http_feed_ids_t    *ngx_http_feed_node_ids;
extern ngx_http_feed_gauges_t  *ngx_http_feed_gauges;


void ngx_http_feed_gauges_take(ngx_http_feed_gauges_t *slots, ngx_log_t *log);
void ngx_http_feed_gauges_give_back(ngx_log_t *log);
void ngx_http_feed_gauges_sum(ngx_http_feed_gauges_t *sum);


#endif /* _NGX_HTTP_FEED_MODULE_H_INCLUDED_ */
