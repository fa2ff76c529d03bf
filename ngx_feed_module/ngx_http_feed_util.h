
/*
 * ngx_feed_module: what every request shares: the handler skeleton, user
 * and post ids, query arguments and pages, identity.
 */


#ifndef _NGX_HTTP_FEED_UTIL_H_INCLUDED_
#define _NGX_HTTP_FEED_UTIL_H_INCLUDED_


#include "ngx_http_feed_module.h"
#include "ngx_http_feed_errors.h"

#include <bson.h>


#define NGX_HTTP_FEED_USER_MAX      64
#define NGX_HTTP_FEED_LIMIT_MAX     100
#define NGX_HTTP_FEED_LIMIT_DEFAULT 20


/*
 * The largest feed_cache_size: a rebuild asks the fallback for that many
 * posts, so feed_timeline_source takes a limit up to it
 */
#define NGX_HTTP_FEED_CACHE_SIZE_MAX  100000


/* a user id as a C string, for the thread side */
typedef struct {
    size_t                        len;
    char                          data[NGX_HTTP_FEED_USER_MAX + 1];
} ngx_http_feed_user_t;


/* a page request: the client's, or the one asked of the fallback */
typedef struct {
    ngx_http_feed_user_t          user;
    ngx_uint_t                    limit;
    ngx_uint_t                    has_max;
    ngx_uint_t                    has_since;
    char                          max_id[25];
    char                          since_id[25];
} ngx_http_feed_page_t;


/* who asks for a page, and so where its user and limit come from */
typedef enum {
    NGX_HTTP_FEED_PAGE_CLIENT = 0,  /* the location's user, limit to 100 */
    NGX_HTTP_FEED_PAGE_SOURCE       /* ?user=, limit to the cache's size */
} ngx_http_feed_page_from_e;


/*
 * The steps of a handler: the arguments (NGX_DECLINED with the error to
 * answer), then the work, which returns NGX_DONE when a callback answers.
 */
typedef ngx_int_t (*ngx_http_feed_args_pt)(ngx_http_request_t *r,
    void *ctx, const ngx_http_feed_error_t **err);
typedef ngx_int_t (*ngx_http_feed_start_pt)(ngx_http_request_t *r,
    void *ctx);


/* what a location directive (feed_follow, feed_posts, ...) installs */
struct ngx_http_feed_handler_s {
    ngx_uint_t                    methods;
    char                         *allow;
    ngx_uint_t                    body;       /* methods whose body is read */
    size_t                        ctx_size;
    ngx_http_feed_args_pt         args;
    ngx_http_feed_start_pt        start;
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
void ngx_http_feed_finalize(ngx_http_request_t *r, ngx_int_t rc);
ngx_int_t ngx_http_feed_no_content(ngx_http_request_t *r);

ngx_int_t ngx_http_feed_user_valid(u_char *p, size_t len);
ngx_int_t ngx_http_feed_get_user(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, ngx_http_feed_user_t *user);
ngx_int_t ngx_http_feed_post_id(ngx_str_t *text, bson_oid_t *oid);
ngx_int_t ngx_http_feed_arg(ngx_http_request_t *r, char *name,
    ngx_str_t *value);
ngx_int_t ngx_http_feed_list_args(ngx_http_request_t *r,
    ngx_http_feed_user_t *user, ngx_uint_t *limit,
    const ngx_http_feed_error_t **err);
ngx_int_t ngx_http_feed_page_args(ngx_http_request_t *r,
    ngx_http_feed_page_from_e from, ngx_http_feed_page_t *page,
    const ngx_http_feed_error_t **err);
ngx_int_t ngx_http_feed_authorize(ngx_http_request_t *r,
    ngx_http_feed_user_t *user, const ngx_http_feed_error_t **err);

int64_t ngx_http_feed_now_ms(void);
void ngx_http_feed_random(u_char *buf, size_t len);


#endif /* _NGX_HTTP_FEED_UTIL_H_INCLUDED_ */
