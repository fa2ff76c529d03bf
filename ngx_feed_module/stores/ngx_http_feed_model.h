
/*
 * ngx_feed_module: home timelines kept in MongoDB behind the Redis cache
 * (feed_timeline_store), the only owner of their collections.
 */


#ifndef _NGX_HTTP_FEED_MODEL_H_INCLUDED_
#define _NGX_HTTP_FEED_MODEL_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_posts_store.h"


/* feed_timeline_store */
typedef enum {
    NGX_HTTP_FEED_STORE_READ = 0,       /* none: fanout on read */
    NGX_HTTP_FEED_STORE_TIME_BUCKETS,
    NGX_HTTP_FEED_STORE_SIZE_BUCKETS,
    NGX_HTTP_FEED_STORE_CACHE,
    NGX_HTTP_FEED_STORE_CAPPED
} ngx_http_feed_store_e;


/* how the timelines are kept: what the model needs of the configuration */
typedef struct {
    ngx_uint_t                    model;      /* ngx_http_feed_store_e */
    ngx_uint_t                    embed;      /* feed_cache_mode embed */
    ngx_uint_t                    cap;        /* feed_cache_size */
    int64_t                       bucket;     /* feed_timeline_bucket_time,
                                                 seconds */
    ngx_uint_t                    size;       /* feed_timeline_bucket_size */
    ngx_uint_t                    slots;      /* feed_timeline_capped_size */
    ngx_uint_t                    keep;       /* feed_timeline_bucket_keep,
                                                 0: every bucket */
} ngx_http_feed_timelines_conf_t;


/* what a user's kept timeline has for a page */
typedef struct {
    ngx_uint_t                    state;      /* one of the three below */
#define NGX_HTTP_FEED_TIMELINES_NONE      0
#define NGX_HTTP_FEED_TIMELINES_BUILDING  1
#define NGX_HTTP_FEED_TIMELINES_THERE     2
    int64_t                       building;   /* since when (ms) */

    /* the entries in the page's range, newest first, bson_malloc()ed */
    bson_oid_t                   *ids;
    size_t                        n;

    /*
     * Every post from bound up (in the page's range) is among the ids:
     * older ones are not kept here, or were not asked for
     */
    bson_oid_t                    bound;
    ngx_uint_t                    whole;      /* bound is the beginning of
                                                 all posts */
} ngx_http_feed_timelines_page_t;


/* rounds of a page of followers lost to concurrent deliveries, at most */
#define NGX_HTTP_FEED_TIMELINES_TRIES  8

/* one round of a page's writes: NGX_AGAIN, another is needed */
typedef ngx_int_t (*ngx_http_feed_timelines_round_pt)(void *data,
    bson_error_t *error);


/* a page's user, by id, for finding a query's answers among them */
typedef struct {
    const char                   *name;
    size_t                        len;
    size_t                        index;      /* in the page */
} ngx_http_feed_timelines_key_t;


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_timelines_indexes;
extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_timelines_time_indexes;


void ngx_http_feed_timelines_conf(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timelines_conf_t *tc);
ngx_int_t ngx_http_feed_timelines_entry(const char *json, size_t len,
    ngx_uint_t embed, bson_t *entry);
ngx_int_t ngx_http_feed_timelines_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_timelines_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, int64_t now, ngx_uint_t *mine,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_fill(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, const bson_t *items, ngx_uint_t complete,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_abandon(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, int64_t building, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_remove(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    const bson_oid_t *id, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_drop(mongoc_client_t *client,
    const char *database, ngx_uint_t model, ngx_http_feed_user_t *user,
    bson_error_t *error);

/* the bucket models' (ngx_http_feed_timelines_store.c) */
ngx_int_t ngx_http_feed_timelines_bucket_recheck(mongoc_collection_t *coll,
    const char *field, ngx_http_feed_user_t *user,
    ngx_http_feed_timelines_page_t *page, bson_error_t *error);
void ngx_http_feed_timelines_next(const bson_oid_t *id, bson_oid_t *next);
ngx_int_t ngx_http_feed_timelines_trim(mongoc_collection_t *coll,
    const char *field, ngx_http_feed_user_t *users, size_t n,
    const u_char *pick, const int64_t *cut, const bson_oid_t *mark,
    bson_error_t *error);

/* the time buckets model's (ngx_http_feed_timelines_time.c) */
ngx_int_t ngx_http_feed_timelines_time_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_time_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_timelines_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_time_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_time_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);
void ngx_http_feed_timelines_time_oid(bson_oid_t *oid, time_t ahead);

/* the capped model's (ngx_http_feed_timelines_capped.c) */
extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_timelines_capped_indexes;

ngx_int_t ngx_http_feed_timelines_capped_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_capped_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_timelines_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_capped_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_capped_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);

/* the size buckets model's (ngx_http_feed_timelines_size.c) */
extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_timelines_size_indexes;

ngx_int_t ngx_http_feed_timelines_size_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_size_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_timelines_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_size_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_size_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);

/* the rounds of writes of a page (ngx_http_feed_timelines_bulk.c) */
ngx_http_feed_timelines_key_t *ngx_http_feed_timelines_keys(
    ngx_http_feed_user_t *users, size_t n);
ssize_t ngx_http_feed_timelines_key(ngx_http_feed_timelines_key_t *keys,
    size_t n, const char *name, size_t len);
void ngx_http_feed_timelines_in(bson_t *filter, const char *field,
    ngx_http_feed_user_t *users, size_t n, const u_char *pick,
    char **names);
ngx_int_t ngx_http_feed_timelines_rounds(
    ngx_http_feed_timelines_round_pt round, void *data, const char *model,
    bson_error_t *error);
mongoc_bulk_operation_t *ngx_http_feed_timelines_unordered(
    mongoc_collection_t *coll);
ngx_int_t ngx_http_feed_timelines_bulk(mongoc_bulk_operation_t *bulk,
    int64_t *done, bson_error_t *error);

/* shared by the models */
ngx_int_t ngx_http_feed_timelines_floor(mongoc_collection_t *coll,
    bson_t *selector, ngx_uint_t reset, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_floor_page(mongoc_collection_t *coll,
    const bson_t *selector, size_t want, ngx_http_feed_timelines_page_t *page,
    bson_t *doc, bson_error_t *error);
void ngx_http_feed_timelines_bucket_id(bson_t *doc, const char *key,
    ngx_http_feed_user_t *user, const char *field, int64_t v);
ngx_int_t ngx_http_feed_timelines_bucket_floor(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, ngx_uint_t reset, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_bucket_page(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, size_t want,
    ngx_http_feed_timelines_page_t *page, mongoc_collection_t **coll,
    bson_error_t *error);
bson_oid_t *ngx_http_feed_timelines_ids(const bson_t *doc, size_t *n);
void ngx_http_feed_timelines_push(bson_t *update, const bson_t *each,
    ngx_uint_t cap);
ngx_int_t ngx_http_feed_timelines_pull(mongoc_collection_t *coll,
    const bson_oid_t *id, bson_error_t *error);
ngx_int_t ngx_http_feed_timelines_take(ngx_http_feed_timelines_page_t *page,
    const bson_oid_t *id, ngx_http_feed_posts_range_t *range, size_t want);
void ngx_http_feed_timelines_raise(ngx_http_feed_timelines_page_t *page,
    const bson_oid_t *from);


#endif /* _NGX_HTTP_FEED_MODEL_H_INCLUDED_ */
