
/*
 * ngx_feed_module: "feed_status", the node's state in JSON.
 */


#ifndef _NGX_HTTP_FEED_STATUS_H_INCLUDED_
#define _NGX_HTTP_FEED_STATUS_H_INCLUDED_


#include "ngx_http_feed_conf.h"


extern ngx_http_feed_handler_t  ngx_http_feed_status_handler;


#endif /* _NGX_HTTP_FEED_STATUS_H_INCLUDED_ */
