
/*
 * ngx_feed_module: the worker's readers of streamed timelines, shared by
 * their registry (ngx_http_feed_stream_users.c) and their round trips
 * (ngx_http_feed_stream_read.c).
 */


#ifndef _NGX_HTTP_FEED_STREAM_USERS_H_INCLUDED_
#define _NGX_HTTP_FEED_STREAM_USERS_H_INCLUDED_


#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_timeline_watch.h"


/*
 * ms before a reader whose read failed reads again, and before one that
 * found no list does, at first (twice as long each time, up to BACKOFF)
 */
#define NGX_HTTP_FEED_STREAM_RETRY    1000
#define NGX_HTTP_FEED_STREAM_BACKOFF  30000


/* deliveries told and not sent yet, past which the reader reads */
#define NGX_HTTP_FEED_STREAM_TOLD     8


/*
 * A delivery told (ngx_http_feed_stream_told.c): the post, "<id><JSON>",
 * shared by the readers of the users it reached
 */
typedef struct {
    ngx_uint_t                    refs;
    size_t                        len;
    u_char                        data[1];
} ngx_http_feed_stream_told_t;


/* a since_id read of a stream that resumes, in its reader's round trip */
typedef struct {
    ngx_http_feed_stream_user_t  *su;
    ngx_http_feed_stream_t       *stream;     /* NULL when it went away */
    ngx_http_feed_cached_t        cached;
    unsigned                      failed:1;
} ngx_http_feed_stream_backlog_t;


struct ngx_http_feed_stream_user_s {
    ngx_http_feed_str_hash_node_t  hn;        /* by the user's name */
    ngx_http_feed_user_t          user;
    ngx_queue_t                   streams;
    ngx_queue_t                   waiters;    /* long polls */
    ngx_queue_t                   all;        /* the worker's readers */
    ngx_queue_t                   wanted;     /* to be read */

    /* the last read: its ids newest first, and the oldest when full */
    u_char                        ids[NGX_HTTP_FEED_STREAM_WINDOW * 24];
    ngx_uint_t                    nids;
    u_char                        floor[24];

    /* the pull authors it was merged from, "author version\n" each */
    u_char                       *lists;
    size_t                        lists_len;

    ngx_http_feed_watch_mark_t    mark;       /* of the last read */
    ngx_http_feed_watch_mark_t    next;       /* of the read under way */
    ngx_msec_t                    kept_alive;
    ngx_msec_t                    failed_at;
    ngx_msec_t                    backoff;    /* while its list is missing */
    ngx_msec_t                    wanted_at;

    /* deliveries told since the last read, sent at the next settle */
    ngx_http_feed_stream_told_t **told;
    ngx_uint_t                    ntold;

    /*
     * the round trip under way: its pool, replies awaited, the window (in
     * that pool: a reader is held for hours, its reads last a moment)
     */
    ngx_pool_t                   *pool;
    ngx_uint_t                    pending;
    ngx_http_feed_cached_t       *page;

    unsigned                      full:1;     /* more entries than ids */
    unsigned                      ready:1;    /* read once */
    unsigned                      reading:1;
    unsigned                      again:1;
    unsigned                      queued:1;
    unsigned                      failed:1;
    unsigned                      broken:1;   /* its list is missing */
    unsigned                      window_ok:1;
    unsigned                      gone:1;     /* no stream left */
    unsigned                      stale:1;    /* only a read tells */
    unsigned                      filtered:1; /* the user has filters */
};


typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_str_hash_t      by_name;
    ngx_queue_t                   all;
    ngx_queue_t                   wanted;
    ngx_event_t                   settle;
    ngx_event_t                   tick;
    ngx_connection_t              dummy;
    ngx_uint_t                    users;
    ngx_uint_t                    reads;
    ngx_uint_t                    waiters;
} ngx_http_feed_stream_users_t;


extern ngx_http_feed_stream_users_t  *ngx_http_feed_stream_users;
extern ngx_http_feed_slots_t          ngx_http_feed_stream_user_slots;


void ngx_http_feed_stream_user_want(ngx_http_feed_stream_user_t *su);
void ngx_http_feed_stream_user_settle(ngx_http_feed_stream_user_t *su);
ngx_http_feed_stream_user_t *ngx_http_feed_stream_user_find(
    ngx_http_feed_user_t *user);
void ngx_http_feed_stream_user_wake(ngx_http_feed_stream_user_t *su,
    u_char *newest);
ngx_msec_t ngx_http_feed_stream_keep_alive(ngx_http_feed_main_conf_t *fmcf);

/* ngx_http_feed_stream_read.c */
void ngx_http_feed_stream_user_read(ngx_http_feed_stream_user_t *su);
void ngx_http_feed_stream_user_free(ngx_http_feed_stream_user_t *su);
ngx_uint_t ngx_http_feed_stream_has(u_char *ids, ngx_uint_t n, u_char *id);

/* ngx_http_feed_stream_told.c */
void ngx_http_feed_stream_told(u_char *msg, size_t len);
void ngx_http_feed_stream_user_send_told(ngx_http_feed_stream_user_t *su);
void ngx_http_feed_stream_user_drop_told(ngx_http_feed_stream_user_t *su);


#endif /* _NGX_HTTP_FEED_STREAM_USERS_H_INCLUDED_ */
