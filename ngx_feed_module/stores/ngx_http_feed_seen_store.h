
/*
 * ngx_feed_module: the seen store, the only code that knows the "feed:sn"
 * keys: the posts each reader saw, as Bloom filters in Redis
 * (scripts/lib/seen.lua), for reads with ?unseen=1.
 */


#ifndef _NGX_HTTP_FEED_SEEN_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_SEEN_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_util.h"


/* the most ids a request adds, or a check asks about */
#define NGX_HTTP_FEED_SEEN_MAX  500


ngx_int_t ngx_http_feed_seen_add(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    u_char *ids, ngx_uint_t n, ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_seen_added(redisReply *reply);
ngx_int_t ngx_http_feed_seen_check(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    u_char *ids, ngx_uint_t n, ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_seen_flags(redisReply *reply, ngx_uint_t n,
    u_char *flags);


#endif /* _NGX_HTTP_FEED_SEEN_STORE_H_INCLUDED_ */
