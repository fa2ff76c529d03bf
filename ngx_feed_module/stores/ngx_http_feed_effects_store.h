
/*
 * ngx_feed_module: the effects store, the only owner of the journal of
 * cache side effects in MongoDB: what a write still has to do to the
 * caches of a user, recorded before the write and cleared once done.
 */


#ifndef _NGX_HTTP_FEED_EFFECTS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_EFFECTS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/* what a write does to the caches of one user */
#define NGX_HTTP_FEED_EFFECT_TIMELINE  0x01   /* the cached timeline goes */
#define NGX_HTTP_FEED_EFFECT_COUNTS    0x02   /* the cached counts go */
#define NGX_HTTP_FEED_EFFECT_MODEL     0x04   /* the timeline in the
                                                 model is made again */
#define NGX_HTTP_FEED_EFFECTS_ALL      0x07

/* the users one write touches: a follow's two, a block's two */
#define NGX_HTTP_FEED_EFFECTS_USERS    2


/* one user's entry of the journal */
typedef struct {
    ngx_http_feed_user_t          user;
    ngx_uint_t                    effects;    /* NGX_HTTP_FEED_EFFECT_* */

    /* an entry was there already: an earlier write's, not done yet */
    ngx_uint_t                    earlier;
} ngx_http_feed_effect_t;


/* an entry claimed by a sweeper */
typedef struct {
    ngx_http_feed_user_t          user;
    ngx_uint_t                    effects;
    int64_t                       attempts;
    bson_oid_t                    token;
} ngx_http_feed_effect_due_t;

typedef void (*ngx_http_feed_effects_due_pt)(void *data,
    ngx_http_feed_effect_due_t *due);


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_effects_indexes;


ngx_int_t ngx_http_feed_effects_pend(mongoc_client_t *client,
    const char *database, ngx_http_feed_effect_t *e, ngx_uint_t n,
    const bson_oid_t *token, int64_t now, int64_t due, bson_error_t *error);
ngx_int_t ngx_http_feed_effects_clear(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *users, ngx_uint_t n,
    const bson_oid_t *tokens, bson_error_t *error);
ngx_int_t ngx_http_feed_effects_soon(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *users, ngx_uint_t n,
    const bson_oid_t *tokens, int64_t due, bson_error_t *error);
ngx_int_t ngx_http_feed_effects_claim_due(mongoc_client_t *client,
    const char *database, int64_t now, ngx_uint_t batch,
    ngx_http_feed_effects_due_pt each, void *data, bson_error_t *error);
ngx_int_t ngx_http_feed_effects_pending(mongoc_client_t *client,
    const char *database, int64_t *count, int64_t *oldest,
    bson_error_t *error);


#endif /* _NGX_HTTP_FEED_EFFECTS_STORE_H_INCLUDED_ */
