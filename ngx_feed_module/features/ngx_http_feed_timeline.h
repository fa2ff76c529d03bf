
/*
 * ngx_feed_module: home timelines.
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_posts_store.h"




extern ngx_http_feed_handler_t  ngx_http_feed_timeline_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_timeline_source_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_timeline_unread_handler;


ngx_int_t ngx_http_feed_timeline_init(void);
ngx_int_t ngx_http_feed_cache_status_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);

ngx_int_t ngx_http_feed_timeline_source_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error);
ngx_int_t ngx_http_feed_timeline_model(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error);
void ngx_http_feed_timeline_source_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);


#endif /* _NGX_HTTP_FEED_TIMELINE_H_INCLUDED_ */
