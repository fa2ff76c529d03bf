
/*
 * ngx_feed_module: the models of the home timelines in MongoDB, behind
 * the Redis cache (feed_timeline_store), each the only owner of its
 * collections.  Thread side only.
 */


#ifndef _NGX_HTTP_FEED_MODEL_H_INCLUDED_
#define _NGX_HTTP_FEED_MODEL_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_posts_store.h"


/* feed_timeline_store */
typedef enum {
    NGX_HTTP_FEED_MODEL_READ = 0,       /* none: fanout on read */
    NGX_HTTP_FEED_MODEL_TIME_BUCKETS,
    NGX_HTTP_FEED_MODEL_SIZE_BUCKETS,
    NGX_HTTP_FEED_MODEL_CACHE,
    NGX_HTTP_FEED_MODEL_CAPPED
} ngx_http_feed_model_e;


typedef struct ngx_http_feed_model_ops_s  ngx_http_feed_model_ops_t;


/* the model in use, and what it needs of the configuration */
typedef struct {
    ngx_http_feed_model_ops_t    *ops;        /* NULL: none (read) */
    ngx_uint_t                    embed;      /* feed_cache_mode embed */
    ngx_uint_t                    cap;        /* feed_cache_size */
    int64_t                       bucket;     /* feed_timeline_bucket_time,
                                                 seconds */
    ngx_uint_t                    size;       /* feed_timeline_bucket_size */
    ngx_uint_t                    slots;      /* feed_timeline_capped_size */
    ngx_uint_t                    keep;       /* feed_timeline_bucket_keep,
                                                 0: every bucket */
} ngx_http_feed_model_conf_t;


/* what a user's timeline in the model has for a page */
typedef struct {
    ngx_uint_t                    state;      /* one of the three below */
#define NGX_HTTP_FEED_MODEL_PAGE_NONE      0
#define NGX_HTTP_FEED_MODEL_PAGE_BUILDING  1
#define NGX_HTTP_FEED_MODEL_PAGE_THERE     2
    int64_t                       building;   /* since when (ms) */

    /* the entries in the page's range, newest first, bson_malloc()ed */
    bson_oid_t                   *ids;
    size_t                        n;

    /*
     * Every post from bound up (in the page's range) is among the ids:
     * older ones are not in the model, or were not asked for
     */
    bson_oid_t                    bound;
    ngx_uint_t                    whole;      /* bound is the beginning of
                                                 all posts */
} ngx_http_feed_model_page_t;


/*
 * A model's operations, one table per model, as nginx's event modules
 * each have their ngx_event_actions_t: the dispatch below picks the
 * configured model's table (ngx_http_feed_model_conf()) and calls
 * through it.
 */

struct ngx_http_feed_model_ops_s {
    /* its collections' indexes, made at start-up */
    ngx_http_feed_mongo_indexes_t  *indexes;

    /* a post (its entry, its id) into these users' timelines, once */
    ngx_int_t  (*add)(mongoc_client_t *client, const char *database,
                      ngx_http_feed_model_conf_t *mc,
                      ngx_http_feed_user_t *users, size_t n,
                      const bson_t *entry, const bson_oid_t *id,
                      bson_error_t *error);

    /* what a user's timeline has in a page's range, at most want ids */
    ngx_int_t  (*read)(mongoc_client_t *client, const char *database,
                       ngx_http_feed_model_conf_t *mc,
                       ngx_http_feed_user_t *user,
                       ngx_http_feed_posts_range_t *range, size_t want,
                       ngx_http_feed_model_page_t *page,
                       bson_error_t *error);

    /*
     * A user's first read, who has no timeline in the model: one begun;
     * *mine when this call made a document the read is to fill
     */
    ngx_int_t  (*begin)(mongoc_client_t *client, const char *database,
                        ngx_http_feed_user_t *user, int64_t now,
                        ngx_uint_t *mine, bson_error_t *error);

    /*
     * That document filled with what fanout on read answered, or left
     * to be made again; NULL: begin makes none
     */
    ngx_int_t  (*fill)(mongoc_client_t *client, const char *database,
                       ngx_http_feed_model_conf_t *mc,
                       ngx_http_feed_user_t *user, const bson_t *items,
                       ngx_uint_t complete, bson_error_t *error);
    ngx_int_t  (*abandon)(mongoc_client_t *client, const char *database,
                          ngx_http_feed_user_t *user, int64_t building,
                          bson_error_t *error);

    /* a deleted post out of every timeline */
    ngx_int_t  (*remove)(mongoc_client_t *client, const char *database,
                         const bson_oid_t *id, bson_error_t *error);

    /* whom a user follows changed: what the model has is not trusted */
    ngx_int_t  (*drop)(mongoc_client_t *client, const char *database,
                       ngx_http_feed_user_t *user, bson_error_t *error);
};


extern ngx_http_feed_model_ops_t  ngx_http_feed_model_cache_ops;
extern ngx_http_feed_model_ops_t  ngx_http_feed_model_time_ops;
extern ngx_http_feed_model_ops_t  ngx_http_feed_model_size_ops;
extern ngx_http_feed_model_ops_t  ngx_http_feed_model_capped_ops;


/* the dispatch (ngx_http_feed_model.c) */
void ngx_http_feed_model_conf(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_model_conf_t *mc);
ngx_http_feed_mongo_indexes_t *ngx_http_feed_model_indexes(ngx_uint_t model);
ngx_int_t ngx_http_feed_model_entry(const char *json, size_t len,
    ngx_uint_t embed, bson_t *entry);
ngx_int_t ngx_http_feed_model_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error);
ngx_int_t ngx_http_feed_model_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_model_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, int64_t now, ngx_uint_t *mine,
    bson_error_t *error);
ngx_int_t ngx_http_feed_model_fill(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, const bson_t *items, ngx_uint_t complete,
    bson_error_t *error);
ngx_int_t ngx_http_feed_model_abandon(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, int64_t building, bson_error_t *error);
ngx_int_t ngx_http_feed_model_remove(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    const bson_oid_t *id, bson_error_t *error);
ngx_int_t ngx_http_feed_model_drop(mongoc_client_t *client,
    const char *database, ngx_uint_t model, ngx_http_feed_user_t *user,
    bson_error_t *error);


/* rounds of a page of followers lost to concurrent deliveries, at most */
#define NGX_HTTP_FEED_MODEL_TRIES  8

/* one round of a page's writes: NGX_AGAIN, another is needed */
typedef ngx_int_t (*ngx_http_feed_model_round_pt)(void *data,
    bson_error_t *error);


/* a page's user, by id, for finding a query's answers among them */
typedef struct {
    const char                   *name;
    size_t                        len;
    size_t                        index;      /* in the page */
} ngx_http_feed_model_key_t;


/* the rounds of writes of a page (ngx_http_feed_model_bulk.c) */
ngx_http_feed_model_key_t *ngx_http_feed_model_keys(
    ngx_http_feed_user_t *users, size_t n);
ssize_t ngx_http_feed_model_key(ngx_http_feed_model_key_t *keys,
    size_t n, const char *name, size_t len);
void ngx_http_feed_model_in(bson_t *filter, const char *field,
    ngx_http_feed_user_t *users, size_t n, const u_char *pick,
    char **names);
ngx_int_t ngx_http_feed_model_rounds(
    ngx_http_feed_model_round_pt round, void *data, const char *model,
    bson_error_t *error);
mongoc_bulk_operation_t *ngx_http_feed_model_unordered(
    mongoc_collection_t *coll);
ngx_int_t ngx_http_feed_model_bulk(mongoc_bulk_operation_t *bulk,
    int64_t *done, bson_error_t *error);

/* what the models share (ngx_http_feed_model.c) */
void ngx_http_feed_model_push(bson_t *update, const bson_t *each,
    ngx_uint_t cap);
bson_oid_t *ngx_http_feed_model_ids(const bson_t *doc, size_t *n);
ngx_int_t ngx_http_feed_model_take(ngx_http_feed_model_page_t *page,
    const bson_oid_t *id, ngx_http_feed_posts_range_t *range, size_t want);
void ngx_http_feed_model_raise(ngx_http_feed_model_page_t *page,
    const bson_oid_t *from);
void ngx_http_feed_model_next(const bson_oid_t *id, bson_oid_t *next);
void ngx_http_feed_model_oid_at(bson_oid_t *oid, time_t at);
ngx_int_t ngx_http_feed_model_delete_post(mongoc_client_t *client,
    const char *database, const char *name, const bson_oid_t *id,
    bson_error_t *error);

/* the models with a floor per user: time, size, capped */
ngx_int_t ngx_http_feed_model_floor(mongoc_collection_t *coll,
    bson_t *selector, ngx_uint_t reset, bson_error_t *error);
ngx_int_t ngx_http_feed_model_floor_page(mongoc_collection_t *coll,
    const bson_t *selector, size_t want, ngx_http_feed_model_page_t *page,
    bson_t *doc, bson_error_t *error);

/* the bucket models': time, size */
void ngx_http_feed_model_bucket_id(bson_t *doc, const char *key,
    ngx_http_feed_user_t *user, const char *field, int64_t v);
ngx_int_t ngx_http_feed_model_bucket_floor(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, ngx_uint_t reset, bson_error_t *error);
ngx_int_t ngx_http_feed_model_bucket_page(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, size_t want,
    ngx_http_feed_model_page_t *page, mongoc_collection_t **coll,
    bson_error_t *error);
ngx_int_t ngx_http_feed_model_bucket_recheck(mongoc_collection_t *coll,
    const char *field, ngx_http_feed_user_t *user,
    ngx_http_feed_model_page_t *page, bson_error_t *error);
ngx_int_t ngx_http_feed_model_trim(mongoc_collection_t *coll,
    const char *field, ngx_http_feed_user_t *users, size_t n,
    const u_char *pick, const int64_t *cut, const bson_oid_t *mark,
    bson_error_t *error);


#endif /* _NGX_HTTP_FEED_MODEL_H_INCLUDED_ */
