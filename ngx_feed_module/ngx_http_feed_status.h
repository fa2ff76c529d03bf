
/*
 * ngx_feed_module: "feed_status", the node's state in JSON.
 */


#ifndef _NGX_HTTP_FEED_STATUS_H_INCLUDED_
#define _NGX_HTTP_FEED_STATUS_H_INCLUDED_


#include "ngx_http_feed_module.h"


char *ngx_http_feed_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf);


#endif /* _NGX_HTTP_FEED_STATUS_H_INCLUDED_ */
