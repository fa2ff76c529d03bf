
/*
 * ngx_feed_module: fanout on write, inside the nginx workers.
 */


#ifndef _NGX_HTTP_FEED_FANOUT_H_INCLUDED_
#define _NGX_HTTP_FEED_FANOUT_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_model.h"


typedef struct ngx_http_feed_fanout_consumers_s
    ngx_http_feed_fanout_consumers_t;


/* the queue's state, as XPENDING gives it (ngx_http_feed_fanout_queue.c) */
typedef struct {
    int64_t                       pending;
    int64_t                       lag;          /* ms, of the oldest */
    ngx_uint_t                    partitions;   /* XPENDING sent */
    ngx_uint_t                    answered;
    unsigned                      known:1;      /* every partition answered */

    void                        (*done)(void *data);   /* at each reply */
    void                         *data;
} ngx_http_feed_fanout_queue_t;


/* one page of an author's followers, read by a thread */
typedef struct {
    ngx_http_feed_user_t          author;
    char                          post_id[25];
    ngx_uint_t                    want_post;
    ngx_uint_t                    limit;
    ngx_int_t                     pull_threshold;
    ngx_msec_t                    pull_stale; /* a turn not heard of for
                                                 this long is taken over */

    /* where the page starts: after (created, src) of the last one */
    ngx_uint_t                    has_cursor;
    int64_t                       cursor_created;
    ngx_http_feed_user_t          cursor_src;

    /* results, bson_malloc()ed by the thread, freed on the loop */
    ngx_uint_t                    found;      /* the post exists */
    ngx_uint_t                    pull;       /* what to do with it:
                                                 ngx_http_feed_pull_action_e
                                                 */
    ngx_uint_t                    to_push;    /* it turned its author back
                                                 to push */
    char                         *json;       /* the post's JSON */
    size_t                        json_len;
    ngx_http_feed_user_t         *users;
    ngx_uint_t                    nusers;

    /* follows whose user id is not one of ours, written by others */
    ngx_uint_t                    skipped;

    /*
     * feed_timeline_store: the post into the followers' timelines in the
     * model (its entry, made by the first page's thread, held for the
     * others),
     * or a deleted post out of them all
     */
    ngx_http_feed_model_conf_t    model;
    ngx_uint_t                    removing;
    bson_t                       *model_entry;
} ngx_http_feed_fanout_page_t;


void ngx_http_feed_fanout_page_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);

ngx_int_t ngx_http_feed_fanout_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_fanout_exit(void);
ngx_int_t ngx_http_feed_fanout_status(bson_t *doc);
ngx_int_t ngx_http_feed_fanout_queue_ask(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_fanout_queue_t *q);

ngx_http_feed_fanout_consumers_t *ngx_http_feed_fanout_consumers_create(
    ngx_cycle_t *cycle, ngx_http_feed_redis_t *rd,
    ngx_http_feed_main_conf_t *fmcf, ngx_str_t *stream, const char *self,
    size_t len);
void ngx_http_feed_fanout_consumers_clean(
    ngx_http_feed_fanout_consumers_t *cs);


#endif /* _NGX_HTTP_FEED_FANOUT_H_INCLUDED_ */
