
/*
 * ngx_feed_module: a user's timeline read marker, HTTP side.
 */


#ifndef _NGX_HTTP_FEED_MARKER_H_INCLUDED_
#define _NGX_HTTP_FEED_MARKER_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_markers_store.h"


extern ngx_http_feed_handler_t  ngx_http_feed_marker_handler;


ngx_int_t ngx_http_feed_marker_json(ngx_http_request_t *r,
    ngx_http_feed_marker_t *m, ngx_str_t *json);


#endif /* _NGX_HTTP_FEED_MARKER_H_INCLUDED_ */
