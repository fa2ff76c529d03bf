
/*
 * ngx_feed_module: the fanout queue (a Redis Stream) and its outbox.
 */


#ifndef _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_
#define _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_post.h"


/* an entry's writes answered: sent is 1 when Redis took them all */
typedef void (*ngx_http_feed_outbox_pt)(void *data, ngx_uint_t sent);


/*
 * The replies an entry awaits: the XADD, and for a delete the mark that
 * reads check first; the caller's memory, for as long as they are awaited
 */
typedef struct {
    ngx_http_feed_outbox_pt       handler;
    void                         *data;
    ngx_uint_t                    waiting;
    ngx_uint_t                    failed;
} ngx_http_feed_outbox_join_t;


ngx_int_t ngx_http_feed_outbox_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *kind, const bson_oid_t *id,
    ngx_http_feed_user_t *author, int64_t ts,
    ngx_http_feed_outbox_join_t *join);
void ngx_http_feed_outbox_sent(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id, const char *kind);
void ngx_http_feed_outbox_soon(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id);
ngx_int_t ngx_http_feed_outbox_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_outbox_exit(void);


#endif /* _NGX_HTTP_FEED_OUTBOX_H_INCLUDED_ */
