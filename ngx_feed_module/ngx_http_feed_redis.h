
/*
 * ngx_feed_module: a hiredis async context per worker, driven by the nginx
 * event loop.
 */


#ifndef _NGX_HTTP_FEED_REDIS_H_INCLUDED_
#define _NGX_HTTP_FEED_REDIS_H_INCLUDED_


#include "ngx_http_feed_module.h"

#include <hiredis.h>
#include <async.h>


typedef struct ngx_http_feed_redis_cmd_s  ngx_http_feed_redis_cmd_t;

/*
 * Called once per command: with the reply, or with NULL when the command
 * failed (Redis down, timed out, connection lost).  The reply is freed by
 * hiredis when the handler returns.
 */
typedef void (*ngx_http_feed_redis_pt)(void *data, redisReply *reply);

/* called each time a (re)connection is logged in and ready */
typedef void (*ngx_http_feed_redis_ready_pt)(ngx_http_feed_redis_t *rd,
    void *data);


/* a Lua script, loaded on every connection and run with EVALSHA */
typedef struct {
    const char                   *text;
    size_t                        len;
    char                          sha1[41];
} ngx_http_feed_redis_script_t;


typedef enum {
    NGX_HTTP_FEED_REDIS_DOWN = 0,
    NGX_HTTP_FEED_REDIS_CONNECTING,
    NGX_HTTP_FEED_REDIS_UP,
    NGX_HTTP_FEED_REDIS_EXITING
} ngx_http_feed_redis_state_e;


ngx_http_feed_redis_t *ngx_http_feed_redis_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf);
void ngx_http_feed_redis_start(ngx_http_feed_redis_t *rd);
void ngx_http_feed_redis_destroy(ngx_http_feed_redis_t *rd);

ngx_http_feed_redis_cmd_t *ngx_http_feed_redis_send(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data, int argc, const char **argv,
    const size_t *argvlen);
ngx_http_feed_redis_cmd_t *ngx_http_feed_redis_send_timeout(
    ngx_http_feed_redis_t *rd, ngx_msec_t timeout,
    ngx_http_feed_redis_pt handler, void *data, int argc, const char **argv,
    const size_t *argvlen);
ngx_int_t ngx_http_feed_redis_send_r(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_redis_pt handler, void *data,
    int argc, const char **argv, const size_t *argvlen);
void ngx_http_feed_redis_cancel(ngx_http_feed_redis_cmd_t *cmd);
ngx_int_t ngx_http_feed_redis_on_ready(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data);
ngx_int_t ngx_http_feed_redis_keep_reply(ngx_pool_t *pool, redisReply *reply);
void ngx_http_feed_redis_on_exit(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data);
void ngx_http_feed_redis_script_init(ngx_http_feed_redis_script_t *script);
ngx_int_t ngx_http_feed_redis_add_script(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_script_t *script);

ngx_http_feed_redis_state_e ngx_http_feed_redis_state(
    ngx_http_feed_redis_t *rd);
ngx_uint_t ngx_http_feed_redis_pending(ngx_http_feed_redis_t *rd);
const char *ngx_http_feed_redis_last_error(ngx_http_feed_redis_t *rd);
const char *ngx_http_feed_redis_run_id(ngx_http_feed_redis_t *rd);


#endif /* _NGX_HTTP_FEED_REDIS_H_INCLUDED_ */
