
/*
 * ngx_feed_module: the posts a reader saw, HTTP side.
 */


#ifndef _NGX_HTTP_FEED_SEEN_H_INCLUDED_
#define _NGX_HTTP_FEED_SEEN_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_util.h"


extern ngx_http_feed_handler_t  ngx_http_feed_seen_handler;


#endif /* _NGX_HTTP_FEED_SEEN_H_INCLUDED_ */
