
/*
 * ngx_feed_module: social timelines at the edge.
 *
 * The wiring: directives, configuration and its defaults, the worker's
 * life cycle.  Each flow lives in a file of its own in features/, over
 * the stores/ and the core/ below them (docs/architecture.md).
 */


#include "ngx_http_feed_module.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_effects.h"
#include "ngx_http_feed_outbox.h"
#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_filters.h"
#include "ngx_http_feed_post.h"
#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_marker.h"
#include "ngx_http_feed_seen.h"
#include "ngx_http_feed_pull.h"
#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_status.h"
#include "ngx_http_feed_metrics.h"
#include "ngx_http_feed_schema.h"
#include "ngx_http_feed_model.h"
#include "ngx_http_feed_keys.h"

#include <math.h>


static ngx_int_t ngx_http_feed_cluster_defaults(ngx_conf_t *cf,
    ngx_http_feed_main_conf_t *fmcf);
static char *ngx_http_feed_mongo_database(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_feed_positive_msec(ngx_conf_t *cf, void *post,
    void *data);
static char *ngx_http_feed_enum(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_feed_positive_sec(ngx_conf_t *cf, void *post,
    void *data);
static ngx_int_t ngx_http_feed_add_variables(ngx_conf_t *cf);
static char *ngx_http_feed_handler_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_feed_location(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_feed_stream_conf(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_feed_timeline_window(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_feed_pull_threshold(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static ngx_int_t ngx_http_feed_stream_partitions(ngx_conf_t *cf,
    ngx_http_feed_main_conf_t *fmcf);
static char *ngx_http_feed_stream(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_feed_seen_error(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void ngx_http_feed_seen_size(ngx_http_feed_main_conf_t *fmcf);

static void *ngx_http_feed_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_feed_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_feed_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_feed_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);

static ngx_int_t ngx_http_feed_init_process(ngx_cycle_t *cycle);
static void ngx_http_feed_exit_process(ngx_cycle_t *cycle);


static ngx_conf_post_handler_pt  ngx_http_feed_positive_msec_p =
    ngx_http_feed_positive_msec;

static ngx_conf_post_handler_pt  ngx_http_feed_positive_sec_p =
    ngx_http_feed_positive_sec;

static ngx_conf_num_bounds_t  ngx_http_feed_cache_size_bounds = {
    ngx_conf_check_num_bounds, 1, NGX_HTTP_FEED_CACHE_SIZE_MAX
};

static ngx_conf_enum_t  ngx_http_feed_cache_modes[] = {
    { ngx_string("link"), 0 },
    { ngx_string("embed"), 1 },
    { ngx_null_string, 0 }
};

/* the models of the MongoDB timelines (ngx_http_feed_model.h) */
static ngx_conf_enum_t  ngx_http_feed_timeline_stores[] = {
    { ngx_string("read"), NGX_HTTP_FEED_MODEL_READ },
    { ngx_string("time_buckets"), NGX_HTTP_FEED_MODEL_TIME_BUCKETS },
    { ngx_string("size_buckets"), NGX_HTTP_FEED_MODEL_SIZE_BUCKETS },
    { ngx_string("cache"), NGX_HTTP_FEED_MODEL_CACHE },
    { ngx_string("capped"), NGX_HTTP_FEED_MODEL_CAPPED },
    { ngx_null_string, 0 }
};

/* a bucket of embedded posts stays far below MongoDB's 16 MB */
static ngx_conf_num_bounds_t  ngx_http_feed_parallel_bounds = {
    ngx_conf_check_num_bounds, 1, 64
};

static ngx_conf_num_bounds_t  ngx_http_feed_bucket_size_bounds = {
    ngx_conf_check_num_bounds, 1, 1000
};

/* the buckets a user keeps: 0, all of them */
static ngx_conf_num_bounds_t  ngx_http_feed_bucket_keep_bounds = {
    ngx_conf_check_num_bounds, 0, 1000000
};

/* the slots of the capped model: twice the largest cache by default */
static ngx_conf_num_bounds_t  ngx_http_feed_capped_size_bounds = {
    ngx_conf_check_num_bounds, 1, 2 * NGX_HTTP_FEED_CACHE_SIZE_MAX
};

static ngx_conf_num_bounds_t  ngx_http_feed_fanout_batch_bounds = {
    ngx_conf_check_num_bounds, 1, 1000
};

static ngx_conf_num_bounds_t  ngx_http_feed_fanout_page_bounds = {
    ngx_conf_check_num_bounds, 1, 1000000
};

static ngx_conf_num_bounds_t  ngx_http_feed_fanout_deliver_bounds = {
    ngx_conf_check_num_bounds, 1, 5000
};

static ngx_conf_num_bounds_t  ngx_http_feed_post_max_chars_bounds = {
    ngx_conf_check_num_bounds, 1, 100000
};

static ngx_conf_num_bounds_t  ngx_http_feed_follow_max_bounds = {
    ngx_conf_check_num_bounds, 1, 1000000
};

/* a generation of the seen filters: at most 1.2 MB of bits */
static ngx_conf_num_bounds_t  ngx_http_feed_seen_capacity_bounds = {
    ngx_conf_check_num_bounds, 1, 1000000
};

static ngx_conf_num_bounds_t  ngx_http_feed_post_data_max_bounds = {
    ngx_conf_check_num_bounds, 0, 1024 * 1024
};


static ngx_command_t  ngx_http_feed_commands[] = {

    { ngx_string("feed_redis"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_feed_redis_conf,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, redis),
      NULL },

    { ngx_string("feed_redis_connect_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, redis.connect_timeout),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_redis_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, redis.timeout),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_mongo_uri"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_mongo_uri,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, mongo),
      NULL },

    { ngx_string("feed_mongo_database"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_mongo_database,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, mongo.database),
      NULL },

    { ngx_string("feed_mongo_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, mongo.timeout),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_thread_pool"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, mongo.thread_pool_name),
      NULL },

    { ngx_string("feed_follow"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_follow_handler },

    { ngx_string("feed_following"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_following_handler },

    { ngx_string("feed_followers"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_followers_handler },

    { ngx_string("feed_block"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_block_handler },

    { ngx_string("feed_mute"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_mute_handler },

    { ngx_string("feed_blocks"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_blocks_handler },

    { ngx_string("feed_mutes"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_mutes_handler },

    { ngx_string("feed_hide"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_hide_handler },

    { ngx_string("feed_hidden"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_hidden_handler },

    { ngx_string("feed_posts"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_posts_handler },

    { ngx_string("feed_post"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_post_handler },

    { ngx_string("feed_user_post"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE2,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_user_post_handler },

    { ngx_string("feed_follow_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, follow_max),
      &ngx_http_feed_follow_max_bounds },

    { ngx_string("feed_filter_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, filter_max),
      &ngx_http_feed_follow_max_bounds },

    { ngx_string("feed_hidden_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, hidden_max),
      &ngx_http_feed_follow_max_bounds },

    { ngx_string("feed_post_max_chars"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, post_max_chars),
      &ngx_http_feed_post_max_chars_bounds },

    { ngx_string("feed_post_data_max_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, post_data_max_size),
      &ngx_http_feed_post_data_max_bounds },

    { ngx_string("feed_stream"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE123,
      ngx_http_feed_stream,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("feed_timeline"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_timeline_handler },

    { ngx_string("feed_timeline_marker"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_marker_handler },

    { ngx_string("feed_timeline_stream"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_stream_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_stream_handler },

    { ngx_string("feed_stream_max"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, stream_max),
      NULL },

    { ngx_string("feed_stream_heartbeat"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_feed_loc_conf_t, stream_heartbeat),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_stream_buffer"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_feed_loc_conf_t, stream_buffer),
      NULL },

    { ngx_string("feed_timeline_unread"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_timeline_unread_handler },

    { ngx_string("feed_seen"),
      NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_seen_handler },

    { ngx_string("feed_seen_capacity"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, seen_capacity),
      &ngx_http_feed_seen_capacity_bounds },

    { ngx_string("feed_seen_error"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_seen_error,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("feed_timeline_source"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_feed_handler_conf,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_timeline_source_handler },

    { ngx_string("feed_timeline_fallback"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_feed_loc_conf_t, fallback),
      NULL },

    { ngx_string("feed_cache_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_size),
      &ngx_http_feed_cache_size_bounds },

    { ngx_string("feed_pull_threshold"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_pull_threshold,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("feed_cache_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_ttl),
      &ngx_http_feed_positive_sec_p },

    { ngx_string("feed_cache_empty_ttl"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_empty_ttl),
      &ngx_http_feed_positive_sec_p },

    { ngx_string("feed_cache_mode"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_enum,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_embed),
      &ngx_http_feed_cache_modes },

    { ngx_string("feed_timeline_store"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_enum,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_store),
      &ngx_http_feed_timeline_stores },

    { ngx_string("feed_timeline_window"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_feed_timeline_window,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("feed_timeline_rebuild_deadline"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_deadline),
      NULL },

    { ngx_string("feed_timeline_rebuild_parallel"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_parallel),
      &ngx_http_feed_parallel_bounds },

    { ngx_string("feed_timeline_bucket_time"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_sec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_bucket_time),
      &ngx_http_feed_positive_sec_p },

    { ngx_string("feed_timeline_bucket_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_bucket_size),
      &ngx_http_feed_bucket_size_bounds },

    { ngx_string("feed_timeline_bucket_keep"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_bucket_keep),
      &ngx_http_feed_bucket_keep_bounds },

    { ngx_string("feed_timeline_capped_size"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, timeline_capped_size),
      &ngx_http_feed_capped_size_bounds },

    { ngx_string("feed_cache_local"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_size_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_local),
      NULL },

    { ngx_string("feed_cache_tracking"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_tracking),
      NULL },

    { ngx_string("feed_cache_lock_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, cache_lock_timeout),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_fanout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_FLAG,
      ngx_conf_set_flag_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout),
      NULL },

    { ngx_string("feed_fanout_group"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_group),
      NULL },

    { ngx_string("feed_fanout_batch"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_batch),
      &ngx_http_feed_fanout_batch_bounds },

    { ngx_string("feed_fanout_page"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_page),
      &ngx_http_feed_fanout_page_bounds },

    { ngx_string("feed_fanout_deliver_batch"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_num_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_deliver_batch),
      &ngx_http_feed_fanout_deliver_bounds },

    { ngx_string("feed_fanout_block"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_block),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_fanout_claim_idle"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_msec_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_feed_main_conf_t, fanout_claim_idle),
      &ngx_http_feed_positive_msec_p },

    { ngx_string("feed_identity"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_feed_loc_conf_t, identity),
      NULL },

    { ngx_string("feed_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_feed_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_status_handler },

    { ngx_string("feed_metrics"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_feed_location,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      &ngx_http_feed_metrics_handler },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_feed_module_ctx = {
    ngx_http_feed_add_variables,           /* preconfiguration */
    ngx_http_feed_metrics_init,            /* postconfiguration */

    ngx_http_feed_create_main_conf,        /* create main configuration */
    ngx_http_feed_init_main_conf,          /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_feed_create_loc_conf,         /* create location configuration */
    ngx_http_feed_merge_loc_conf           /* merge location configuration */
};


ngx_module_t  ngx_http_feed_module = {
    NGX_MODULE_V1,
    &ngx_http_feed_module_ctx,             /* module context */
    ngx_http_feed_commands,                /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_feed_init_process,            /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_feed_exit_process,            /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* MongoDB's own rules for database names */

static char *
ngx_http_feed_mongo_database(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char  *p = conf;

    ngx_str_t   *value, *field;
    ngx_uint_t   i;

    field = (ngx_str_t *) (p + cmd->offset);

    if (field->data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0 || value[1].len > 63) {
        goto invalid;
    }

    for (i = 0; i < value[1].len; i++) {
        if (ngx_strchr("/\\. \"$*<>:|?", value[1].data[i]) != NULL
            || value[1].data[i] < 0x20)
        {
            goto invalid;
        }
    }

    *field = value[1];

    return NGX_CONF_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid database name \"%V\" in \"%V\"",
                       &value[1], &cmd->name);

    return NGX_CONF_ERROR;
}


/*
 * "feed_follow", "feed_posts", ...: the location answers with the
 * directive's handler; the arguments (variables, usually regex captures)
 * become the location's user and target.
 */

static char *
ngx_http_feed_handler_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_feed_loc_conf_t  *flcf = conf;

    char                              *rv;
    ngx_str_t                         *value;
    ngx_uint_t                         i;
    ngx_http_complex_value_t         **cv[2];
    ngx_http_feed_main_conf_t         *fmcf;
    ngx_http_compile_complex_value_t   ccv;

    rv = ngx_http_feed_location(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    value = cf->args->elts;
    cv[0] = &flcf->user;
    cv[1] = &flcf->target;

    for (i = 1; i < cf->args->nelts; i++) {
        *cv[i - 1] = ngx_palloc(cf->pool, sizeof(ngx_http_complex_value_t));
        if (*cv[i - 1] == NULL) {
            return NGX_CONF_ERROR;
        }

        ngx_memzero(&ccv, sizeof(ngx_http_compile_complex_value_t));

        ccv.cf = cf;
        ccv.value = &value[i];
        ccv.complex_value = *cv[i - 1];

        if (ngx_http_compile_complex_value(&ccv) != NGX_OK) {
            return NGX_CONF_ERROR;
        }
    }

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_feed_module);
    fmcf->needs_mongo = 1;

    return NGX_CONF_OK;
}


/* feed_timeline_stream: the workers keep readers of streamed timelines */

static char *
ngx_http_feed_stream_conf(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                       *rv;
    ngx_http_feed_main_conf_t  *fmcf;

    rv = ngx_http_feed_handler_conf(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    fmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_feed_module);
    fmcf->live = 1;

    return NGX_CONF_OK;
}


/*
 * The location answers through the handler skeleton with the directive's
 * handler: "feed_status" and "feed_metrics" as is (they work without
 * MongoDB), the others by way of ngx_http_feed_handler_conf().  Its
 * requests are counted under the directive's name.
 */

static char *
ngx_http_feed_location(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_feed_loc_conf_t  *flcf = conf;

    ngx_http_core_loc_conf_t  *clcf;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (clcf->handler) {
        return "is duplicate";
    }

    flcf->handler = cmd->post;
    flcf->endpoint = ngx_http_feed_metrics_endpoint(&cmd->name);
    clcf->handler = ngx_http_feed_handler;

    return NGX_CONF_OK;
}


/*
 * feed_timeline_window <time> | 0 | off: a rebuild reads the posts of that
 * last time first, older ones only for a page they do not fill
 */

static char *
ngx_http_feed_timeline_window(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_feed_main_conf_t  *fmcf = conf;

    ngx_str_t  *value;

    if (fmcf->timeline_window != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        fmcf->timeline_window = 0;
        return NGX_CONF_OK;
    }

    fmcf->timeline_window = ngx_parse_time(&value[1], 1);

    if (fmcf->timeline_window == (time_t) NGX_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid feed_timeline_window \"%V\": a time "
                           "(30d), 0 or off", &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * feed_pull_threshold <followers> | off: authors with that many followers
 * are pulled at read time, not fanned out (0: nobody is)
 */

static char *
ngx_http_feed_pull_threshold(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_feed_main_conf_t  *fmcf = conf;

    ngx_str_t  *value;

    if (fmcf->pull_threshold != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        fmcf->pull_threshold = 0;
        return NGX_CONF_OK;
    }

    fmcf->pull_threshold = ngx_atoi(value[1].data, value[1].len);

    if (fmcf->pull_threshold == NGX_ERROR || fmcf->pull_threshold == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid feed_pull_threshold \"%V\": a number "
                           "of followers, or off", &value[1]);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/* feed_stream name [maxlen=N] [partitions=N]; */

static char *
ngx_http_feed_stream(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_feed_main_conf_t  *fmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;
    ngx_uint_t  i;

    if (fmcf->stream.data) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        return "needs a stream name";
    }

    fmcf->stream = value[1];

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strncmp(value[i].data, "maxlen=", 7) == 0) {
            n = ngx_atoi(value[i].data + 7, value[i].len - 7);

            if (n > 0) {
                fmcf->stream_maxlen = n;
                continue;
            }

        } else if (ngx_strncmp(value[i].data, "partitions=", 11) == 0) {
            n = ngx_atoi(value[i].data + 11, value[i].len - 11);

            if (n > 0 && n <= NGX_HTTP_FEED_PARTITIONS_MAX) {
                fmcf->stream_partitions = n;
                continue;
            }
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid parameter \"%V\" in \"feed_stream\"",
                           &value[i]);

        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * The partitions' streams: the name itself, then "<name>:1" to
 * "<name>:<N - 1>", so that a queue that gets partitions keeps its
 * entries (they are in partition 0).  On a cluster each is a key of its
 * own, on a slot of its own: appends and reads spread over the masters.
 */

static ngx_int_t
ngx_http_feed_stream_partitions(ngx_conf_t *cf,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_uint_t   i;
    ngx_str_t   *s;

    if (fmcf->stream_partitions == 0) {
        fmcf->stream_partitions = 1;
    }

    s = ngx_pcalloc(cf->pool, fmcf->stream_partitions * sizeof(ngx_str_t));
    if (s == NULL) {
        return NGX_ERROR;
    }

    s[0] = fmcf->stream;

    for (i = 1; i < fmcf->stream_partitions; i++) {
        s[i].data = ngx_pnalloc(cf->pool, fmcf->stream.len + NGX_INT_T_LEN);
        if (s[i].data == NULL) {
            return NGX_ERROR;
        }

        s[i].len = ngx_sprintf(s[i].data, "%V:%ui", &fmcf->stream, i)
                   - s[i].data;
    }

    fmcf->streams = s;

    return NGX_OK;
}


/*
 * feed_seen_error: a rate, "0.01" or "1%", kept in millionths.  Below
 * 0.0082 a filter would need more than 10 bits per id.
 */

static char *
ngx_http_feed_seen_error(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_feed_main_conf_t  *fmcf = conf;

    size_t      len;
    ngx_int_t   n;
    ngx_str_t  *value;

    if (fmcf->seen_error != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    len = value[1].len;

    if (len > 1 && value[1].data[len - 1] == '%') {
        n = ngx_atofp(value[1].data, len - 1, 4);

    } else {
        n = ngx_atofp(value[1].data, len, 6);
    }

    if (n < NGX_HTTP_FEED_SEEN_ERROR_MIN || n > 500000) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V\" must be a rate from 0.0082 (at most 10 "
                           "bits per id) to 0.5, or 0.82%% to 50%%, "
                           "not \"%V\"", &cmd->name, &value[1]);
        return NGX_CONF_ERROR;
    }

    fmcf->seen_error = n;

    return NGX_CONF_OK;
}


/*
 * A generation's filter for n ids and a rate p: m = ceil(-n ln p / ln2^2)
 * bits, k = round(m / n ln 2) hashes, the optimum
 */

static void
ngx_http_feed_seen_size(ngx_http_feed_main_conf_t *fmcf)
{
    double  n, p, m, k;

    n = (double) fmcf->seen_capacity;
    p = (double) fmcf->seen_error / 1000000;

    m = ceil(-n * log(p) / (M_LN2 * M_LN2));
    k = floor(m / n * M_LN2 + 0.5);

    fmcf->seen_bits = (ngx_uint_t) m;
    fmcf->seen_hashes = k < 1 ? 1 : (ngx_uint_t) k;
}


static char *
ngx_http_feed_positive_sec(ngx_conf_t *cf, void *post, void *data)
{
    time_t  *sec = data;

    if (*sec == 0) {
        return "must be positive";
    }

    return NGX_CONF_OK;
}


/*
 * ngx_conf_set_enum_slot(), but its error names the directive and what it
 * accepts, which nginx's own (a warning, "invalid value") leaves out
 */

static char *
ngx_http_feed_enum(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    u_char           *p, *last, buf[256];
    ngx_str_t        *value;
    ngx_uint_t        i, n;
    ngx_conf_enum_t  *e = cmd->post;

    if (*(ngx_uint_t *) ((char *) conf + cmd->offset) != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;

    for (n = 0; e[n].name.len; n++) {
        if (e[n].name.len == value[1].len
            && ngx_strcmp(e[n].name.data, value[1].data) == 0)
        {
            *(ngx_uint_t *) ((char *) conf + cmd->offset) = e[n].value;
            return NGX_CONF_OK;
        }
    }

    p = buf;
    last = buf + sizeof(buf);

    for (i = 0; i < n; i++) {
        p = ngx_slprintf(p, last, "%s\"%V\"",
                         i == 0 ? "" : (i + 1 == n ? " or " : ", "),
                         &e[i].name);
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be %*s", &value[1], &cmd->name,
                       p - buf, buf);

    return NGX_CONF_ERROR;
}


static ngx_http_variable_t  ngx_http_feed_vars[] = {

    { ngx_string("feed_cache_status"), NULL,
      ngx_http_feed_cache_status_variable, 0, NGX_HTTP_VAR_NOCACHEABLE, 0 },

    { ngx_string("feed_endpoint"), NULL,
      ngx_http_feed_endpoint_variable, 0, 0, 0 },

      ngx_http_null_variable
};


static ngx_int_t
ngx_http_feed_add_variables(ngx_conf_t *cf)
{
    ngx_http_variable_t  *var, *v;

    for (v = ngx_http_feed_vars; v->name.len; v++) {
        var = ngx_http_add_variable(cf, &v->name, v->flags);
        if (var == NULL) {
            return NGX_ERROR;
        }

        var->get_handler = v->get_handler;
        var->data = v->data;
    }

    return NGX_OK;
}


static char *
ngx_http_feed_positive_msec(ngx_conf_t *cf, void *post, void *data)
{
    ngx_msec_t  *ms = data;

    if (*ms == 0) {
        return "must be positive";
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_feed_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_feed_main_conf_t));
    if (fmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     fmcf->redis.host = NULL;
     *     fmcf->redis.unix_path = NULL;
     *     fmcf->redis.password = { 0, NULL };
     *     fmcf->redis.db = 0;
     *     fmcf->mongo.uri = NULL;
     *     fmcf->mongo.database = { 0, NULL };
     *     fmcf->mongo.thread_pool_name = { 0, NULL };
     *     fmcf->stream = { 0, NULL };
     *     fmcf->stream_maxlen = 0;
     *     fmcf->stream_partitions = 0;
     *     fmcf->streams = NULL;
     */

    ngx_http_feed_main_conf_unset(fmcf);

    return fmcf;
}


/*
 * Every directive of the main configuration unset, as create_main_conf
 * leaves it; the fuzz harness starts from the same.
 */

void
ngx_http_feed_main_conf_unset(ngx_http_feed_main_conf_t *fmcf)
{
    fmcf->redis.connect_timeout = NGX_CONF_UNSET_MSEC;
    fmcf->redis.timeout = NGX_CONF_UNSET_MSEC;
    fmcf->mongo.timeout = NGX_CONF_UNSET_MSEC;
    fmcf->post_max_chars = NGX_CONF_UNSET_UINT;
    fmcf->follow_max = NGX_CONF_UNSET_UINT;
    fmcf->filter_max = NGX_CONF_UNSET_UINT;
    fmcf->hidden_max = NGX_CONF_UNSET_UINT;
    fmcf->post_data_max_size = NGX_CONF_UNSET_SIZE;
    fmcf->cache_size = NGX_CONF_UNSET_UINT;
    fmcf->pull_threshold = NGX_CONF_UNSET;
    fmcf->seen_capacity = NGX_CONF_UNSET_UINT;
    fmcf->seen_error = NGX_CONF_UNSET_UINT;
    fmcf->cache_ttl = NGX_CONF_UNSET;
    fmcf->cache_empty_ttl = NGX_CONF_UNSET;
    fmcf->cache_embed = NGX_CONF_UNSET_UINT;
    fmcf->timeline_store = NGX_CONF_UNSET_UINT;
    fmcf->timeline_window = NGX_CONF_UNSET;
    fmcf->timeline_deadline = NGX_CONF_UNSET_MSEC;
    fmcf->timeline_parallel = NGX_CONF_UNSET_UINT;
    fmcf->timeline_bucket_time = NGX_CONF_UNSET;
    fmcf->timeline_bucket_size = NGX_CONF_UNSET_UINT;
    fmcf->timeline_capped_size = NGX_CONF_UNSET_UINT;
    fmcf->timeline_bucket_keep = NGX_CONF_UNSET_UINT;
    fmcf->cache_lock_timeout = NGX_CONF_UNSET_MSEC;
    fmcf->cache_local = NGX_CONF_UNSET_SIZE;
    fmcf->cache_tracking = NGX_CONF_UNSET;
    fmcf->stream_max = NGX_CONF_UNSET_UINT;
    fmcf->fanout = NGX_CONF_UNSET;
    fmcf->fanout_batch = NGX_CONF_UNSET_UINT;
    fmcf->fanout_page = NGX_CONF_UNSET_UINT;
    fmcf->fanout_deliver_batch = NGX_CONF_UNSET_UINT;
    fmcf->fanout_block = NGX_CONF_UNSET_MSEC;
    fmcf->fanout_claim_idle = NGX_CONF_UNSET_MSEC;
}


/*
 * The defaults of what was left unset: the one list of them, which the
 * fuzz harness uses too.
 */

void
ngx_http_feed_main_conf_defaults(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_conf_init_msec_value(fmcf->redis.connect_timeout, 1000);
    ngx_conf_init_msec_value(fmcf->redis.timeout, 1000);
    ngx_conf_init_msec_value(fmcf->mongo.timeout, 3000);
    ngx_conf_init_uint_value(fmcf->post_max_chars, 5000);
    ngx_conf_init_uint_value(fmcf->follow_max, 5000);
    ngx_conf_init_uint_value(fmcf->filter_max, 10000);
    ngx_conf_init_uint_value(fmcf->hidden_max, 1000);
    ngx_conf_init_size_value(fmcf->post_data_max_size, 16384);
    ngx_conf_init_uint_value(fmcf->cache_size, 800);

    ngx_conf_init_value(fmcf->pull_threshold, 10000);
    ngx_conf_init_uint_value(fmcf->seen_capacity, 10000);
    ngx_conf_init_uint_value(fmcf->seen_error, 10000);
    ngx_http_feed_seen_size(fmcf);
    ngx_conf_init_value(fmcf->cache_ttl, 7 * 24 * 3600);
    ngx_conf_init_value(fmcf->cache_empty_ttl, 30);

    if (fmcf->cache_empty_ttl > fmcf->cache_ttl) {
        fmcf->cache_empty_ttl = fmcf->cache_ttl;
    }

    ngx_conf_init_uint_value(fmcf->cache_embed, 0);
    ngx_conf_init_uint_value(fmcf->timeline_store, NGX_HTTP_FEED_MODEL_READ);
    ngx_conf_init_value(fmcf->timeline_window, 30 * 24 * 3600);
    ngx_conf_init_value(fmcf->timeline_bucket_time, 24 * 3600);
    ngx_conf_init_uint_value(fmcf->timeline_bucket_size, 100);
    ngx_conf_init_uint_value(fmcf->timeline_bucket_keep, 0);

    /*
     * Deliveries come in about the order of the posts, not exactly: with
     * only as many slots as a rebuild asks for, the newest entry
     * overwritten is newer than some kept ones, and the store vouches for
     * fewer posts than asked, so that fanout on read makes up the rest.
     * Twice as many leaves room for the posts delivered out of order.
     */
    ngx_conf_init_uint_value(fmcf->timeline_capped_size,
                             2 * fmcf->cache_size);
    ngx_conf_init_msec_value(fmcf->cache_lock_timeout,
                             2 * fmcf->mongo.timeout + 1000);

    /*
     * A rebuild answers with what it has a little before MongoDB's own
     * timeout would fail it: a second before, or at half of it
     */
    ngx_conf_init_msec_value(fmcf->timeline_deadline,
                             fmcf->mongo.timeout > 2000
                             ? fmcf->mongo.timeout - 1000
                             : fmcf->mongo.timeout / 2);
    ngx_conf_init_uint_value(fmcf->timeline_parallel, 4);
    ngx_conf_init_size_value(fmcf->cache_local, 16 * 1024 * 1024);
    ngx_conf_init_value(fmcf->cache_tracking, 1);
    ngx_conf_init_uint_value(fmcf->stream_max, 10000);
    ngx_conf_init_value(fmcf->fanout, 0);
    ngx_conf_init_uint_value(fmcf->fanout_batch, 16);
    ngx_conf_init_uint_value(fmcf->fanout_page, 5000);
    ngx_conf_init_uint_value(fmcf->fanout_deliver_batch, 500);
    ngx_conf_init_msec_value(fmcf->fanout_block, 2000);
    ngx_conf_init_msec_value(fmcf->fanout_claim_idle, 30000);

    if (fmcf->fanout_group.data == NULL) {
        ngx_str_set(&fmcf->fanout_group, "feed");
    }

    if (fmcf->stream.data == NULL) {
        ngx_str_set(&fmcf->stream, NGX_HTTP_FEED_KEY_FANOUT_STREAM);
    }

    if (fmcf->stream_maxlen == 0) {
        fmcf->stream_maxlen = 1000000;
    }

    if (fmcf->mongo.thread_pool_name.data == NULL) {
        ngx_str_set(&fmcf->mongo.thread_pool_name, "default");
    }
}


static char *
ngx_http_feed_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_feed_main_conf_t  *fmcf = conf;

    ngx_http_core_loc_conf_t   *clcf;

    fmcf->stats_zone = ngx_http_feed_stats_zone(cf, &ngx_http_feed_module);
    if (fmcf->stats_zone == NULL) {
        return NGX_CONF_ERROR;
    }

    fmcf->redis_enabled = (fmcf->redis.seeds != NULL);

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);

    if (ngx_http_feed_redis_conf_names(cf, &fmcf->redis, clcf->resolver,
                                       clcf->resolver_timeout)
        != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    /* before the defaults: a cluster's cache mode defaults otherwise */

    if (fmcf->redis.cluster
        && ngx_http_feed_cluster_defaults(cf, fmcf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    ngx_http_feed_main_conf_defaults(fmcf);

    if (fmcf->fanout && !fmcf->redis_enabled) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"feed_fanout\" needs \"feed_redis\"");
        return NGX_CONF_ERROR;
    }

    if (fmcf->fanout) {
        fmcf->needs_mongo = 1;
    }

    if (ngx_http_feed_stream_partitions(cf, fmcf) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    if (fmcf->mongo.uri == NULL) {
        if (fmcf->needs_mongo) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "the feed_* locations need \"feed_mongo_uri\"");
            return NGX_CONF_ERROR;
        }

        return NGX_CONF_OK;
    }

    fmcf->mongo_enabled = 1;

    if (ngx_http_feed_mongo_init_conf(cf, &fmcf->mongo) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * On a Redis Cluster a read's script reaches only its node's keys: a
 * timeline's entries hold the JSON (embed mode; link mode's post keys are
 * on every node).  It is the default there; link, asked for, an error.
 * Pull authors' lists have a copy on each master for that reason.
 */

static ngx_int_t
ngx_http_feed_cluster_defaults(ngx_conf_t *cf,
    ngx_http_feed_main_conf_t *fmcf)
{
    if (fmcf->cache_embed == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"feed_cache_mode link\" cannot be used with "
                           "a redis cluster: use \"embed\"");
        return NGX_ERROR;
    }

    fmcf->cache_embed = 1;

    return NGX_OK;
}


static void *
ngx_http_feed_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_feed_loc_conf_t));
    if (flcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     flcf->identity = NULL;
     *     flcf->handler = NULL;
     *     flcf->user = NULL;
     *     flcf->target = NULL;
     *     flcf->fallback = { 0, NULL };
     */

    flcf->stream_heartbeat = NGX_CONF_UNSET_MSEC;
    flcf->stream_buffer = NGX_CONF_UNSET_SIZE;

    return flcf;
}


static char *
ngx_http_feed_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_feed_loc_conf_t  *prev = parent;
    ngx_http_feed_loc_conf_t  *conf = child;

    if (conf->identity == NULL) {
        conf->identity = prev->identity;
    }

    ngx_conf_merge_str_value(conf->fallback, prev->fallback,
                             "/_feed/timeline");
    ngx_conf_merge_msec_value(conf->stream_heartbeat, prev->stream_heartbeat,
                              15000);
    ngx_conf_merge_size_value(conf->stream_buffer, prev->stream_buffer,
                              64 * 1024);

    /*
     * handler, user and target belong to the location's own handler
     * directive; an "if" block inside it is a location of its own whose
     * requests still run the location's content handler (nginx keeps it
     * when the block matches), so the block takes all three from it
     */

    if (conf->handler == NULL) {
        conf->handler = prev->handler;
        conf->user = prev->user;
        conf->target = prev->target;
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_feed_init_process(ngx_cycle_t *cycle)
{
    ngx_http_feed_main_conf_t  *fmcf;

    /* not in the cache manager and loader: they serve no requests */

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    fmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_feed_module);
    if (fmcf == NULL) {
        return NGX_OK;
    }

    /* before the worker holds any connection or page */
    ngx_http_feed_stats_init_process(fmcf->stats_zone, cycle->log);

    if (fmcf->mongo_enabled) {
        fmcf->mongo_client = ngx_http_feed_mongo_create(cycle, &fmcf->mongo);
        if (fmcf->mongo_client == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_feed_schema_init(cycle, fmcf->mongo_client,
                                      fmcf->timeline_store)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (fmcf->redis_enabled) {
        fmcf->redis_client = ngx_http_feed_redis_create(cycle, &fmcf->redis);
        if (fmcf->redis_client == NULL) {
            return NGX_ERROR;
        }

        if (ngx_http_feed_timeline_cache_init(fmcf) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ngx_http_feed_timeline_local_init(fmcf->cache_local);
    ngx_http_feed_pull_init();

    if (ngx_http_feed_timeline_watch_init(cycle, fmcf) != NGX_OK
        || ngx_http_feed_stream_users_init(fmcf) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_feed_outbox_init(cycle, fmcf) != NGX_OK
        || ngx_http_feed_effects_sweep_init(cycle, fmcf) != NGX_OK
        || ngx_http_feed_timeline_init() != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (fmcf->redis_client) {
        ngx_http_feed_redis_start(fmcf->redis_client);
    }

    /*
     * A replica promoted by the sentinels has only what was replicated:
     * the outbox forgets an entry once a replica has it
     */

    if (fmcf->redis_client && fmcf->redis.sentinel.len) {
        fmcf->redis_barrier = ngx_http_feed_redis_barrier_create(cycle,
                                                                &fmcf->redis);
        if (fmcf->redis_barrier == NULL) {
            return NGX_ERROR;
        }
    }

    if (ngx_http_feed_fanout_init(cycle, fmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static void
ngx_http_feed_exit_process(ngx_cycle_t *cycle)
{
    ngx_http_feed_main_conf_t  *fmcf;

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return;
    }

    fmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_feed_module);
    if (fmcf == NULL) {
        return;
    }

    ngx_http_feed_schema_exit();
    ngx_http_feed_outbox_exit();
    ngx_http_feed_effects_sweep_exit();
    ngx_http_feed_fanout_exit();
    ngx_http_feed_stream_users_exit();
    ngx_http_feed_timeline_watch_exit();
    ngx_http_feed_timeline_local_exit();

    ngx_http_feed_redis_barrier_destroy(fmcf->redis_barrier);
    fmcf->redis_barrier = NULL;

    ngx_http_feed_redis_destroy(fmcf->redis_client);
    fmcf->redis_client = NULL;

    ngx_http_feed_mongo_destroy(fmcf->mongo_client);
    fmcf->mongo_client = NULL;

    ngx_http_feed_stats_exit_process(cycle->log);
}
