
/*
 * ngx_feed_module: the idempotency store, the only owner of the keys of
 * Idempotency-Key headers in MongoDB.
 */


#ifndef _NGX_HTTP_FEED_IDEMPOTENCY_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_IDEMPOTENCY_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/* how long a key is remembered, in seconds (and the TTL index's) */
#define NGX_HTTP_FEED_IDEMPOTENCY_TTL  3600


/* a request's key, and the post it would make */
typedef struct {
    ngx_http_feed_user_t         *user;
    const char                   *key;
    const char                   *hash;       /* of the content, in hex */
    int64_t                       now;        /* ms since the epoch */

    /* this request's post; what the key holds when it is an earlier one */
    bson_oid_t                    id;
    int64_t                       ts;
} ngx_http_feed_idempotency_t;


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_idempotency_indexes;


ngx_int_t ngx_http_feed_idempotency_claim(mongoc_client_t *client,
    const char *database, ngx_http_feed_idempotency_t *ik,
    bson_error_t *error);


#endif /* _NGX_HTTP_FEED_IDEMPOTENCY_STORE_H_INCLUDED_ */
