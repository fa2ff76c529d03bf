
/*
 * ngx_feed_module: social timelines at the edge.  The wiring: the
 * directives, the main configuration's defaults, the process hooks.
 */


#ifndef _NGX_HTTP_FEED_MODULE_H_INCLUDED_
#define _NGX_HTTP_FEED_MODULE_H_INCLUDED_


#include "ngx_http_feed_conf.h"


/*
 * The main configuration as create_main_conf leaves it, and its defaults:
 * the one list of them, which the fuzz harness uses too.
 */
void ngx_http_feed_main_conf_unset(ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_main_conf_defaults(ngx_http_feed_main_conf_t *fmcf);


#endif /* _NGX_HTTP_FEED_MODULE_H_INCLUDED_ */
