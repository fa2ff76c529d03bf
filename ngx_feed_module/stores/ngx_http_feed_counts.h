
/*
 * ngx_feed_module: follow counts cached in Redis in front of MongoDB.
 */


#ifndef _NGX_HTTP_FEED_COUNTS_H_INCLUDED_
#define _NGX_HTTP_FEED_COUNTS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_util.h"


/* the cache generation seen by a reader, as Redis returned it */
typedef struct {
    size_t                        len;
    char                          data[24];
} ngx_http_feed_counts_gen_t;


ngx_int_t ngx_http_feed_counts_lookup(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    const char *field, ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_counts_parse(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, redisReply *reply, int64_t *count,
    ngx_http_feed_counts_gen_t *gen);
void ngx_http_feed_counts_warm(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user, const char *field,
    int64_t count, ngx_http_feed_counts_gen_t *gen);
ngx_int_t ngx_http_feed_counts_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);


#endif /* _NGX_HTTP_FEED_COUNTS_H_INCLUDED_ */
