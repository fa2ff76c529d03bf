
/*
 * ngx_feed_module: the node's counters, histograms, gauges and post id
 * sequence, in a shared zone (ngx_http_feed_stats.c), and the enums that
 * size them.  Every layer adds to them; feed_status and feed_metrics only
 * read them, as stub_status reads nginx's ngx_stat_* counters.
 */


#ifndef _NGX_HTTP_FEED_STATS_H_INCLUDED_
#define _NGX_HTTP_FEED_STATS_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>


/* feed_metrics' label values, ngx_http_feed_metrics.c names them */
#define NGX_HTTP_FEED_ENDPOINTS       21    /* one per location directive */
#define NGX_HTTP_FEED_CODES           5     /* 1xx to 5xx */
#define NGX_HTTP_FEED_BUCKETS         13    /* the last one is +Inf */


/* how a timeline read was answered: $feed_cache_status, X-Feed-Cache */
typedef enum {
    NGX_HTTP_FEED_CACHE_NONE = 0,
    NGX_HTTP_FEED_CACHE_HIT,
    NGX_HTTP_FEED_CACHE_MISS,
    NGX_HTTP_FEED_CACHE_DEEP,
    NGX_HTTP_FEED_CACHE_BYPASS,
    NGX_HTTP_FEED_CACHE_LOCAL,            /* a hit with no Redis command */
    NGX_HTTP_FEED_CACHE_PARTIAL,          /* a rebuild without some posts */
    NGX_HTTP_FEED_CACHE_STATUSES          /* how many, not a status */
} ngx_http_feed_cache_status_e;


/* a Redis connection's state, a gauge per state */
typedef enum {
    NGX_HTTP_FEED_REDIS_DOWN = 0,
    NGX_HTTP_FEED_REDIS_CONNECTING,
    NGX_HTTP_FEED_REDIS_UP,
    NGX_HTTP_FEED_REDIS_EXITING,
    NGX_HTTP_FEED_REDIS_STATES            /* how many, not a state */
} ngx_http_feed_redis_state_e;


/* why a cluster's command was sent again after a pause (feed_metrics) */
typedef enum {
    NGX_HTTP_FEED_REDIS_TRYAGAIN = 0,
    NGX_HTTP_FEED_REDIS_CLUSTERDOWN,
    NGX_HTTP_FEED_REDIS_RETRIES           /* how many, not a reason */
} ngx_http_feed_redis_retry_e;


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
    ngx_atomic_t                  redis_primary_moves;  /* per worker */
    ngx_atomic_t                  redis_name_moves;     /* per worker */
    ngx_atomic_t                  redis_moved;
    ngx_atomic_t                  redis_asked;
    ngx_atomic_t                  redis_retried
                                      [NGX_HTTP_FEED_REDIS_RETRIES];
    ngx_atomic_t                  redis_forgotten;
    ngx_atomic_t                  mongo_tasks;
    ngx_atomic_t                  mongo_errors;
    ngx_atomic_t                  local_answers;
    ngx_atomic_t                  local_hits;
    ngx_atomic_t                  fanout_consumed;
    ngx_atomic_t                  fanout_deliveries;
    ngx_atomic_t                  fanout_acked;
    ngx_atomic_t                  fanout_claims;
    ngx_atomic_t                  fanout_retried;
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

    /*
     * Live timelines: events sent (updates, deletes, resets), streams
     * refused (feed_stream_max) and let go (a client too slow), the
     * readers' round trips, and the entries they sent as told by the
     * fanout, without a read
     */
    ngx_atomic_t                  stream_updates;
    ngx_atomic_t                  stream_deletes;
    ngx_atomic_t                  stream_resets;
    ngx_atomic_t                  stream_refused;
    ngx_atomic_t                  stream_dropped;
    ngx_atomic_t                  stream_reads;
    ngx_atomic_t                  stream_told;

    ngx_atomic_t                  responses[NGX_HTTP_FEED_ENDPOINTS]
                                      [NGX_HTTP_FEED_CODES];
    ngx_atomic_t                  timeline_reads
                                      [NGX_HTTP_FEED_CACHE_STATUSES];
    ngx_atomic_t                  rebuild_failures;

    /*
     * feed_timeline_source's reads with feed_timeline_window, and those
     * that read posts past it (a page the window did not fill, or deeper)
     */
    ngx_atomic_t                  window_reads;
    ngx_atomic_t                  window_older;

    /*
     * Its pages made at feed_timeline_rebuild_deadline without some
     * chunks of authors, and the chunks missing from them
     */
    ngx_atomic_t                  rebuild_partial;
    ngx_atomic_t                  rebuild_late_chunks;
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
    ngx_atomic_t                  streams;
    ngx_atomic_t                  waits;
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


ngx_shm_zone_t *ngx_http_feed_stats_zone(ngx_conf_t *cf, void *tag);
void ngx_http_feed_stats_init_process(ngx_shm_zone_t *zone, ngx_log_t *log);
void ngx_http_feed_stats_exit_process(ngx_log_t *log);

ngx_uint_t ngx_http_feed_bucket(ngx_msec_int_t ms);

void ngx_http_feed_gauges_take(ngx_http_feed_gauges_t *slots, ngx_log_t *log);
void ngx_http_feed_gauges_give_back(ngx_log_t *log);
void ngx_http_feed_gauges_sum(ngx_http_feed_gauges_t *sum);


extern const ngx_msec_int_t    ngx_http_feed_bucket_ms[];

extern ngx_http_feed_stats_t   ngx_http_feed_stats;
extern ngx_http_feed_stats_t  *ngx_http_feed_node_stats;
extern ngx_http_feed_ids_t    *ngx_http_feed_node_ids;
extern ngx_http_feed_gauges_t  *ngx_http_feed_gauges;


#endif /* _NGX_HTTP_FEED_STATS_H_INCLUDED_ */
