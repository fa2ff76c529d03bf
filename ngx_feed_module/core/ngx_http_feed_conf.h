
/*
 * ngx_feed_module: the configuration every layer reads, and the module
 * object it is looked up with.
 */


#ifndef _NGX_HTTP_FEED_CONF_H_INCLUDED_
#define _NGX_HTTP_FEED_CONF_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#if !(NGX_THREADS)
#error ngx_http_feed_module needs nginx built --with-threads
#endif

#include <ngx_thread_pool.h>

#include "ngx_http_feed_stats.h"


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
typedef struct ngx_http_feed_redis_sentinel_s
    ngx_http_feed_redis_sentinel_t;
typedef struct ngx_http_feed_redis_name_s  ngx_http_feed_redis_name_t;
typedef struct ngx_http_feed_mongo_s  ngx_http_feed_mongo_t;
typedef struct ngx_http_feed_handler_s  ngx_http_feed_handler_t;


/* feed_stream ... partitions=N: at most */
#define NGX_HTTP_FEED_PARTITIONS_MAX  64


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

    /*
     * Redis Sentinel: the primary's name; seeds are then the sentinels.
     * The worker's view of them is made with its first connection and
     * shared by every connection made from this conf or a copy of it.
     */
    ngx_str_t                     sentinel;
    ngx_str_t                     sentinel_password;
    ngx_http_feed_redis_sentinel_t *sentinels;

    /*
     * A host name (a single Redis): with nginx's resolver configured, it
     * is resolved again through it before each connect and when its
     * answer expires (ngx_http_feed_redis_name.c); host is then NULL
     * until it was.  The worker's view is made with its first connection.
     */
    ngx_str_t                     name;
    ngx_resolver_t               *resolver;
    ngx_msec_t                    resolver_timeout;
    ngx_http_feed_redis_name_t   *named;

    /* a sentinel's own connection: no SELECT, scripts or ROLE */
    unsigned                      plain:1;
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
    ngx_uint_t                    hidden_max;
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
    time_t                        timeline_window;  /* 0: none */
    ngx_msec_t                    timeline_deadline;  /* 0: none */
    ngx_uint_t                    timeline_parallel;
    time_t                        timeline_bucket_time;
    ngx_uint_t                    timeline_bucket_size;
    ngx_uint_t                    timeline_capped_size;
    ngx_uint_t                    timeline_bucket_keep;
    ngx_msec_t                    cache_lock_timeout;
    size_t                        cache_local;

    /* first pages answered from the worker's copy with no Redis command */
    ngx_flag_t                    cache_tracking;

    /* live timelines (feed_timeline_stream): streams per worker at most */
    ngx_uint_t                    stream_max;

    /* the push/pull hybrid: followers that make a pull author, 0: off */
    ngx_int_t                     pull_threshold;

    /*
     * The posts each reader saw (?unseen=1): ids a generation of the
     * Bloom filter takes, its false positive rate in millionths, and
     * what they make of a filter, its bits (m) and hashes (k)
     */
    ngx_uint_t                    seen_capacity;
    ngx_uint_t                    seen_error;
    ngx_uint_t                    seen_bits;
    ngx_uint_t                    seen_hashes;

    unsigned                      redis_enabled:1;
    unsigned                      mongo_enabled:1;
    unsigned                      needs_mongo:1;
    unsigned                      live:1;     /* a location streams */

    /* the node's counters, for feed_status */
    ngx_shm_zone_t               *stats_zone;

    /* runtime, per worker: created in init_process */
    ngx_http_feed_redis_t        *redis_client;

    /* with sentinel=: writes waited for until a replica has them */
    struct ngx_http_feed_redis_barrier_s  *redis_barrier;
    ngx_http_feed_mongo_t        *mongo_client;
} ngx_http_feed_main_conf_t;


/* the lowest feed_seen_error, in millionths: 10 bits per id at most */
#define NGX_HTTP_FEED_SEEN_ERROR_MIN  8200


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

    /* a live timeline's heartbeat, and what its client may leave unread */
    ngx_msec_t                    stream_heartbeat;
    size_t                        stream_buffer;
} ngx_http_feed_loc_conf_t;


/*
 * The module object, defined by the wiring (ngx_http_feed_module.c): every
 * layer looks its configuration up with it, as nginx's modules do.
 */
extern ngx_module_t           ngx_http_feed_module;



#endif /* _NGX_HTTP_FEED_CONF_H_INCLUDED_ */
