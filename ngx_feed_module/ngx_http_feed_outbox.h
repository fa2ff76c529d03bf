
/*
 * ngx_feed_module: the fanout queue (a Redis Stream) and its outbox.
 */


#ifndef _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_
#define _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_


#include "ngx_http_feed_module.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_post.h"


ngx_int_t ngx_http_feed_outbox_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *kind, const bson_oid_t *id,
    ngx_http_feed_user_t *author, int64_t ts, ngx_http_feed_redis_pt handler,
    void *data);
void ngx_http_feed_outbox_sent(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id, const char *kind);
ngx_int_t ngx_http_feed_outbox_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_outbox_exit(void);


#endif /* _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_ */
