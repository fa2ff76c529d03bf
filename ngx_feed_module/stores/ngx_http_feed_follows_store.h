
/*
 * ngx_feed_module: the follows store, the only owner of the follow graph
 * in MongoDB: its edges, its counters, and the one query that pages them.
 */


#ifndef _NGX_HTTP_FEED_FOLLOWS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_FOLLOWS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/* follow or unfollow, run in a thread */
typedef struct {
    ngx_http_feed_user_t          src;
    ngx_http_feed_user_t          dst;
    ngx_uint_t                    want;       /* 1: follow, 0: unfollow */
    int64_t                       now;        /* ms since epoch */
    int64_t                       max;        /* feed_follow_max */
    ngx_uint_t                    changed;
    ngx_uint_t                    over;       /* refused: src follows max */
    ngx_uint_t                    blocked;    /* refused: one of the two
                                                 blocks the other
                                                 (graph_task.c) */
} ngx_http_feed_follow_op_t;


/*
 * Called for each relationship of a page, with the other user and when
 * the relationship began (0 when not read): NGX_OK for the next one, any
 * other value stops the page and is what the page returns.
 */
typedef ngx_http_feed_mongo_user_pt  ngx_http_feed_follows_pt;


/* a page of a user's followers or followees, newest relationship first */
typedef struct {
    ngx_http_feed_user_t         *user;
    ngx_uint_t                    followers;  /* 0: followees, 1: followers */

    /* where the page starts: after (created, other user) of the last one */
    ngx_uint_t                    has_after;
    int64_t                       after_created;
    ngx_http_feed_user_t         *after_user;

    /* documents read a batch at a time; 0: the whole list, in no order */
    ngx_uint_t                    batch;

    /* only relationships with these users, when namong is not 0 */
    char                        **among;
    size_t                        namong;

    ngx_http_feed_follows_pt      each;
    void                         *data;

    /* documents whose user id is not one of ours, written by others */
    ngx_uint_t                    skipped;
} ngx_http_feed_follows_page_t;


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_follows_indexes;
extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_follow_counts_indexes;


ngx_int_t ngx_http_feed_follows_change(mongoc_client_t *client,
    const char *database, ngx_http_feed_follow_op_t *op,
    bson_error_t *error);
ngx_int_t ngx_http_feed_follows_count(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t followers,
    int64_t *n, bson_error_t *error);
mongoc_collection_t *ngx_http_feed_follows_counts(mongoc_client_t *client,
    const char *database);
ngx_int_t ngx_http_feed_follows_page(mongoc_client_t *client,
    const char *database, ngx_http_feed_follows_page_t *page,
    bson_error_t *error);


#endif /* _NGX_HTTP_FEED_FOLLOWS_STORE_H_INCLUDED_ */
