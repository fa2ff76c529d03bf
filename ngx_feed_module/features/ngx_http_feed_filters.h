
/*
 * ngx_feed_module: blocks, mutes and hidden posts, the graph side.
 */


#ifndef _NGX_HTTP_FEED_FILTERS_H_INCLUDED_
#define _NGX_HTTP_FEED_FILTERS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_util.h"


extern ngx_http_feed_handler_t  ngx_http_feed_block_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_mute_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_blocks_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_mutes_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_hide_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_hidden_handler;


#endif /* _NGX_HTTP_FEED_FILTERS_H_INCLUDED_ */
