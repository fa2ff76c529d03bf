
/*
 * ngx_feed_module: the MongoDB indexes the stores need, made at start.
 */


#ifndef _NGX_HTTP_FEED_SCHEMA_H_INCLUDED_
#define _NGX_HTTP_FEED_SCHEMA_H_INCLUDED_


#include "ngx_http_feed_conf.h"


ngx_int_t ngx_http_feed_schema_init(ngx_cycle_t *cycle,
    ngx_http_feed_mongo_t *m, ngx_uint_t model);
void ngx_http_feed_schema_exit(void);


#endif /* _NGX_HTTP_FEED_SCHEMA_H_INCLUDED_ */
