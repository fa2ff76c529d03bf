
/*
 * ngx_feed_module: "feed_metrics", the node's counters for Prometheus.
 */


#ifndef _NGX_HTTP_FEED_METRICS_H_INCLUDED_
#define _NGX_HTTP_FEED_METRICS_H_INCLUDED_


#include "ngx_http_feed_conf.h"


extern ngx_http_feed_handler_t  ngx_http_feed_metrics_handler;


ngx_uint_t ngx_http_feed_metrics_endpoint(ngx_str_t *directive);
ngx_int_t ngx_http_feed_metrics_init(ngx_conf_t *cf);
ngx_int_t ngx_http_feed_endpoint_variable(ngx_http_request_t *r,
    ngx_http_variable_value_t *v, uintptr_t data);


#endif /* _NGX_HTTP_FEED_METRICS_H_INCLUDED_ */
