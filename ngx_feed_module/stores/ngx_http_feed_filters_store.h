
/*
 * ngx_feed_module: the filters store, the only owner of blocks, mutes and
 * hidden posts in MongoDB: whom a user blocks or mutes, who blocks them,
 * and which posts they hid.
 */


#ifndef _NGX_HTTP_FEED_FILTERS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_FILTERS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_follows_store.h"


/* the kinds of a filter, as stored and as ngx_http_feed_filters_of's */
#define NGX_HTTP_FEED_FILTER_BLOCK      'b'
#define NGX_HTTP_FEED_FILTER_MUTE       'm'
#define NGX_HTTP_FEED_FILTER_BLOCKED    'B'
#define NGX_HTTP_FEED_FILTER_HIDDEN     'h'   /* dst is a post's id */


/* a block, a mute or a hidden post added or removed, run in a thread */
typedef struct {
    ngx_http_feed_user_t          src;
    ngx_http_feed_user_t          dst;
    u_char                        kind;       /* 'b', 'm' or 'h' */
    ngx_uint_t                    want;       /* 1: add, 0: remove */
    int64_t                       now;        /* ms since epoch */
    int64_t                       max;        /* feed_filter_max, or
                                                 feed_hidden_max for 'h' */

    /*
     * changed: the filter was added or removed now, or it is a block
     * whose clean-up (the follows between the two) was interrupted
     * before: the caller cleans up, then ngx_http_feed_filters_cleaned()
     */
    ngx_uint_t                    changed;
    ngx_uint_t                    over;       /* refused: src has max */
    bson_oid_t                    id;         /* the filter's document */
} ngx_http_feed_filter_op_t;


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_filters_indexes;


ngx_int_t ngx_http_feed_filters_change(mongoc_client_t *client,
    const char *database, ngx_http_feed_filter_op_t *op,
    bson_error_t *error);
ngx_int_t ngx_http_feed_filters_cleaned(mongoc_client_t *client,
    const char *database, ngx_http_feed_filter_op_t *op,
    bson_error_t *error);
ngx_int_t ngx_http_feed_filters_blocked(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_user_t *other, ngx_uint_t either, ngx_uint_t *blocked,
    bson_error_t *error);
ngx_int_t ngx_http_feed_filters_page(mongoc_client_t *client,
    const char *database, u_char kind, ngx_http_feed_follows_page_t *page,
    bson_error_t *error);
ngx_int_t ngx_http_feed_filters_count(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, u_char kind,
    int64_t *n, bson_error_t *error);

/*
 * The authors whose posts user must not see, as space-separated tokens
 * "<kind><id>": kind 'b' (user blocked id), 'm' (user muted id), 'B' (id
 * blocked user); an author may appear under several kinds; and the posts
 * user hid, kind 'h' and the post's id.  At most max tokens of kind 'B'
 * (newest first); all of kinds b, m and h.  *authors is
 * bson_malloc'ed (NULL and *len 0 when none), as ngx_http_feed_pull_followed
 * in ngx_http_feed_pull.c returns its list.
 */
ngx_int_t ngx_http_feed_filters_of(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t max,
    char **authors, size_t *len, bson_error_t *error);


#endif /* _NGX_HTTP_FEED_FILTERS_STORE_H_INCLUDED_ */
