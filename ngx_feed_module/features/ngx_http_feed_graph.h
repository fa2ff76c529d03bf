
/*
 * ngx_feed_module: the follow graph.
 */


#ifndef _NGX_HTTP_FEED_GRAPH_H_INCLUDED_
#define _NGX_HTTP_FEED_GRAPH_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_effects.h"


/* a list cursor decoded: "<ms>:<user>", and its base64url text */
#define NGX_HTTP_FEED_GRAPH_CURSOR_RAW  (NGX_INT64_LEN + 1                  \
                                         + NGX_HTTP_FEED_USER_MAX)
#define NGX_HTTP_FEED_GRAPH_CURSOR_MAX                                      \
    ngx_base64_encoded_length(NGX_HTTP_FEED_GRAPH_CURSOR_RAW)


/* where a list page ended: the last relationship in it */
typedef struct {
    ngx_http_feed_user_t          user;
    int64_t                       since;
} ngx_http_feed_graph_pos_t;


/*
 * One page of "following" or "followers", or of a user's blocks or
 * mutes (ngx_http_feed_filters.c), run in a thread
 */
typedef struct {
    ngx_http_feed_user_t          user;
    ngx_uint_t                    followers;  /* 0: following, 1: followers */
    u_char                        kind;       /* not 0: the filters of this
                                                 kind ('b', 'm') instead */
    ngx_uint_t                    limit;

    /* the client's cursor: the page begins after this relationship */
    ngx_uint_t                    has_cursor;
    int64_t                       cursor_ms;
    ngx_http_feed_user_t          cursor_id;

    /* the count was not in Redis: the thread counts, the loop caches it */
    ngx_uint_t                    need_count;
    int64_t                       count;

    /* documents whose user id is not one of ours, written by others */
    ngx_uint_t                    skipped;

    /* the answer, bson_malloc()ed by the thread, freed on the loop */
    char                         *json;
    size_t                        json_len;
} ngx_http_feed_graph_list_op_t;


/* a follow or an unfollow and its cache side effects, run in a thread */
typedef struct {
    ngx_http_feed_follow_op_t     op;
    ngx_http_feed_effects_t       fx;
} ngx_http_feed_graph_change_t;


extern ngx_http_feed_handler_t  ngx_http_feed_follow_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_following_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_followers_handler;


void ngx_http_feed_graph_follow_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
void ngx_http_feed_graph_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);

ngx_int_t ngx_http_feed_graph_follow_apply(mongoc_client_t *client,
    const char *database, ngx_http_feed_follow_op_t *op,
    bson_error_t *error);

ngx_int_t ngx_http_feed_graph_list_parse(ngx_http_request_t *r,
    ngx_http_feed_graph_list_op_t *op, const ngx_http_feed_error_t **err);
ngx_int_t ngx_http_feed_graph_list_send(ngx_http_request_t *r,
    ngx_http_feed_graph_list_op_t *op, const char *what);
ngx_int_t ngx_http_feed_graph_cursor_parse(ngx_str_t *text,
    ngx_http_feed_graph_list_op_t *op);

ngx_int_t ngx_http_feed_graph_effects(ngx_http_feed_effects_t *fx,
    ngx_http_feed_follow_op_t *op);
void ngx_http_feed_graph_owe(ngx_http_feed_effects_t *fx,
    ngx_http_feed_follow_op_t *op);


#endif /* _NGX_HTTP_FEED_GRAPH_H_INCLUDED_ */
