
/*
 * ngx_feed_module: what every request shares: the handler skeleton, how a
 * request answered from a callback is finished, the time.
 */


#ifndef _NGX_HTTP_FEED_UTIL_H_INCLUDED_
#define _NGX_HTTP_FEED_UTIL_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_errors.h"
#include "ngx_http_feed_args.h"


/*
 * The steps of a handler: the arguments (NGX_DECLINED with the error to
 * answer; none for a location without any), then the work, which returns
 * NGX_DONE when a callback answers.
 */
typedef ngx_int_t (*ngx_http_feed_args_pt)(ngx_http_request_t *r,
    void *ctx, const ngx_http_feed_error_t **err);
typedef ngx_int_t (*ngx_http_feed_start_pt)(ngx_http_request_t *r,
    void *ctx);


/* what a location directive (feed_follow, feed_posts, ...) installs */
struct ngx_http_feed_handler_s {
    ngx_uint_t                    methods;
    char                         *allow;      /* its 405's Allow header */
    ngx_uint_t                    body;       /* methods whose body is read */
    size_t                        ctx_size;
    ngx_http_feed_args_pt         args;
    ngx_http_feed_start_pt        start;

    /* the 405 of a location that words it its own way; NULL: the usual */
    const ngx_http_feed_error_t  *not_allowed;
};


/*
 * What every handler's request context starts with: the skeleton fills
 * it in, the handler's own fields follow.
 */
typedef struct {
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
} ngx_http_feed_ctx_t;


ngx_int_t ngx_http_feed_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_feed_read_body(ngx_http_request_t *r,
    ngx_http_client_body_handler_pt handler);
ngx_int_t ngx_http_feed_read_whole_body(ngx_http_request_t *r,
    ngx_str_t *body);
void ngx_http_feed_finalize(ngx_http_request_t *r, ngx_int_t rc);
ngx_int_t ngx_http_feed_last_reply(ngx_http_request_t *r,
    ngx_uint_t *waiting);
ngx_int_t ngx_http_feed_no_content(ngx_http_request_t *r);

ngx_str_t *ngx_http_feed_stream_of(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *author);
int64_t ngx_http_feed_now_ms(void);
void ngx_http_feed_random(u_char *buf, size_t len);


#endif /* _NGX_HTTP_FEED_UTIL_H_INCLUDED_ */
