
/*
 * ngx_feed_module: the push/pull hybrid.  Authors with feed_pull_threshold
 * followers or more are pulled: their posts go to a list of their own,
 * merged into their followers' pages when read, instead of to every
 * follower's timeline.
 */


#ifndef _NGX_HTTP_FEED_PULL_H_INCLUDED_
#define _NGX_HTTP_FEED_PULL_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/* what fanout does with a post, decided in its thread */
typedef enum {
    NGX_HTTP_FEED_PULL_PUSH = 0,    /* fanned out */
    NGX_HTTP_FEED_PULL_BOTH,        /* fanned out, and in the author's list */
    NGX_HTTP_FEED_PULL_TURN,        /* the same, and every follower it
                                       reaches adds the author to the pull
                                       authors it merges */
    NGX_HTTP_FEED_PULL_LIST         /* in the author's list only */
} ngx_http_feed_pull_action_e;


/* a pull author's list loaded: NGX_OK, or NGX_ERROR */
typedef void (*ngx_http_feed_pull_loaded_pt)(void *data, ngx_int_t rc);


ngx_int_t ngx_http_feed_pull_decide(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *author, const char *post_id,
    ngx_int_t threshold, ngx_msec_t stale, ngx_uint_t *action,
    ngx_uint_t *to_push, bson_error_t *error);
ngx_int_t ngx_http_feed_pull_turning(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *author, const char *post_id,
    bson_error_t *error);
ngx_int_t ngx_http_feed_pull_turn(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *author, const char *post_id,
    ngx_uint_t done, ngx_uint_t *changed, bson_error_t *error);
ngx_int_t ngx_http_feed_pull_followed(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, char **authors,
    size_t *len, bson_error_t *error);

ngx_int_t ngx_http_feed_pull_load(ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy, ngx_http_feed_user_t *author,
    ngx_http_feed_pull_loaded_pt handler, void *data);
void ngx_http_feed_pull_init(void);

ngx_int_t ngx_http_feed_pull_status(bson_t *doc,
    ngx_http_feed_main_conf_t *fmcf, int64_t authors);
ngx_int_t ngx_http_feed_pull_node_status(bson_t *doc,
    ngx_http_feed_stats_t *st);


#endif /* _NGX_HTTP_FEED_PULL_H_INCLUDED_ */
