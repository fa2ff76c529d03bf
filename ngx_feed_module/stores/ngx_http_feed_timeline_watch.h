
/*
 * ngx_feed_module: the watch of one copy of the pull authors' lists (the
 * single Redis's, or a cluster master's), ngx_http_feed_timeline_watch.c;
 * the worker's watches, one per copy, ngx_http_feed_timeline_watch_set.c.
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_WATCH_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_WATCH_H_INCLUDED_


#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_timeline_live.h"


/* the channel a copy's changes are published on, and its copy's suffix */
#define NGX_HTTP_FEED_WATCH_CHANNEL_LEN  (16 + NGX_HTTP_FEED_PULL_COPY_LEN)

/* ms between heartbeats */
#define NGX_HTTP_FEED_WATCH_BEAT       100


typedef struct ngx_http_feed_watch_s  ngx_http_feed_watch_t;


/* what feed_status shows, summed over the watches */
typedef struct {
    ngx_uint_t                    watches;
    ngx_uint_t                    subscribed;
    ngx_msec_int_t                heard_ms_ago;
    ngx_uint_t                    authors;
    ngx_uint_t                    messages;
    ngx_uint_t                    passed_over;
    ngx_uint_t                    tracking;
    ngx_uint_t                    invalidations;
    ngx_uint_t                    deleted;
    ngx_uint_t                    deliveries;
} ngx_http_feed_watch_counts_t;


size_t ngx_http_feed_watch_channel(ngx_str_t *copy, u_char *buf);
ngx_http_feed_watch_t *ngx_http_feed_watch_create(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_conf_t *conf,
    ngx_str_t *copy);
void ngx_http_feed_watch_destroy(ngx_http_feed_watch_t *w);
ngx_str_t *ngx_http_feed_watch_copy(ngx_http_feed_watch_t *w);
ngx_str_t *ngx_http_feed_watch_addr(ngx_http_feed_watch_t *w);
void ngx_http_feed_watch_beat(ngx_http_feed_watch_t *w);
void ngx_http_feed_watch_live(ngx_http_feed_watch_t *w, ngx_uint_t on);
ngx_uint_t ngx_http_feed_watch_live_vouch(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m);
ngx_uint_t ngx_http_feed_watch_vouch(ngx_http_feed_watch_t *w,
    ngx_str_t *lists);
void ngx_http_feed_watch_mark(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m);
void ngx_http_feed_watch_learn(ngx_http_feed_watch_t *w, ngx_str_t *lists,
    ngx_http_feed_watch_mark_t *m);
void ngx_http_feed_watch_count(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_counts_t *c);
size_t ngx_http_feed_watch_deletes_channel(ngx_str_t *copy, u_char *buf);
ngx_uint_t ngx_http_feed_watch_track(ngx_http_feed_watch_t *w,
    ngx_http_feed_watch_mark_t *m);
ngx_uint_t ngx_http_feed_watch_tracks(ngx_http_feed_watch_t *w,
    ngx_http_feed_user_t *user, ngx_http_feed_watch_mark_t *m,
    ngx_uint_t fresh);


#endif /* _NGX_HTTP_FEED_TIMELINE_WATCH_H_INCLUDED_ */
