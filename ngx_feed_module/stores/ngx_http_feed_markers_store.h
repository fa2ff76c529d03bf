
/*
 * ngx_feed_module: the markers store, the only owner of users' timeline
 * read markers, in MongoDB and in Redis in front of it.
 */


#ifndef _NGX_HTTP_FEED_MARKERS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_MARKERS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_util.h"


/* a marker as stored: the last post read, when and how many changes */
typedef struct {
    bson_oid_t                    last_read_id;
    int64_t                       updated_at;   /* ms since the epoch */
    int64_t                       version;      /* 1 at the first PUT */
} ngx_http_feed_marker_t;


/* a PUT, run in a thread */
typedef struct {
    ngx_http_feed_user_t          user;
    bson_oid_t                    id;
    ngx_uint_t                    force;
    ngx_uint_t                    has_if_match;
    int64_t                       if_match;
    int64_t                       now;          /* ms since the epoch */

    /* results */
    ngx_http_feed_marker_t        marker;       /* as stored after it */
    ngx_uint_t                    changed;
    ngx_uint_t                    conflict;     /* If-Match not current */
} ngx_http_feed_marker_op_t;


ngx_int_t ngx_http_feed_markers_get(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_marker_t *marker, bson_error_t *error);
ngx_int_t ngx_http_feed_markers_put(mongoc_client_t *client,
    const char *database, ngx_http_feed_marker_op_t *op,
    bson_error_t *error);

ngx_int_t ngx_http_feed_markers_cache_lookup(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_markers_cache_parse(redisReply *reply,
    ngx_str_t *json, int64_t *version);
ngx_int_t ngx_http_feed_markers_cache_set(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_marker_t *m, ngx_str_t *json,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_markers_cache_drop(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_markers_cache_taken(redisReply *reply);
size_t ngx_http_feed_markers_cache_key(char *buf, ngx_http_feed_user_t *user);
ngx_uint_t ngx_http_feed_markers_is_cache_key(ngx_str_t *key);


#endif /* _NGX_HTTP_FEED_MARKERS_STORE_H_INCLUDED_ */
