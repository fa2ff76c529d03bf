
/*
 * ngx_feed_module: the live mark of a node, set while a worker streams
 * timelines, and the channel where deliveries are told meanwhile
 * (ngx_http_feed_timeline_live.c).
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_LIVE_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_LIVE_H_INCLUDED_


#include "ngx_http_feed_timeline_cache.h"


/* "feed:live<copy>" and "feed:tlc<copy>", the copy's tag included */
#define NGX_HTTP_FEED_LIVE_KEY_LEN  (16 + NGX_HTTP_FEED_PULL_COPY_LEN)

/* the mark's arguments of a delivery: its key and channel */
#define NGX_HTTP_FEED_LIVE_ARGS_LEN  (2 * NGX_HTTP_FEED_REDIS_TAG_COPY_MAX)


typedef struct ngx_http_feed_live_s  ngx_http_feed_live_t;


ngx_http_feed_live_t *ngx_http_feed_timeline_live_create(ngx_str_t *copy,
    ngx_log_t *log);
void ngx_http_feed_timeline_live_destroy(ngx_http_feed_live_t *l);
void ngx_http_feed_timeline_live_beat(ngx_http_feed_live_t *l,
    ngx_http_feed_main_conf_t *fmcf, ngx_uint_t now);
ngx_uint_t ngx_http_feed_timeline_live_vouch(ngx_http_feed_live_t *l,
    uint64_t stamp);
void ngx_http_feed_timeline_live_streaming(ngx_uint_t on);
void ngx_http_feed_timeline_live_forget(ngx_http_feed_live_t *l);
ngx_uint_t ngx_http_feed_timeline_live_on(void);
size_t ngx_http_feed_timeline_live_channel(ngx_str_t *copy, u_char *buf);
void ngx_http_feed_timeline_live_args(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, u_char *buf,
    ngx_uint_t key);


#endif /* _NGX_HTTP_FEED_TIMELINE_LIVE_H_INCLUDED_ */
