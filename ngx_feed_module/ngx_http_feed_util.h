
/*
 * ngx_feed_module: request helpers shared by every flow: user ids,
 * query arguments, identity, the common error answers.
 */


#ifndef _NGX_HTTP_FEED_UTIL_H_INCLUDED_
#define _NGX_HTTP_FEED_UTIL_H_INCLUDED_


#include "ngx_http_feed_module.h"

#include <bson.h>


#define NGX_HTTP_FEED_USER_MAX      64
#define NGX_HTTP_FEED_LIMIT_MAX     100
#define NGX_HTTP_FEED_LIMIT_DEFAULT 20


/* what every flow answers about the ids it is given, in one place */
#define NGX_HTTP_FEED_USER_ID_TEXT  "user ids are 1 to 64 of A-Z a-z 0-9 _ . -"
#define NGX_HTTP_FEED_POST_ID_TEXT                                            \
    "post ids are 24 lowercase hexadecimal digits"


/* a user id as a C string, for the thread side */
typedef struct {
    size_t                        len;
    char                          data[NGX_HTTP_FEED_USER_MAX + 1];
} ngx_http_feed_user_t;


ngx_int_t ngx_http_feed_user_valid(u_char *p, size_t len);
ngx_int_t ngx_http_feed_get_user(ngx_http_request_t *r,
    ngx_http_complex_value_t *cv, ngx_http_feed_user_t *user);
ngx_int_t ngx_http_feed_arg_limit(ngx_http_request_t *r, ngx_uint_t *limit);
ngx_int_t ngx_http_feed_list_args(ngx_http_request_t *r,
    ngx_http_feed_user_t *user, ngx_uint_t *limit, const char **code,
    const char **message);
ngx_int_t ngx_http_feed_arg(ngx_http_request_t *r, char *name,
    ngx_str_t *value);
ngx_int_t ngx_http_feed_check_identity(ngx_http_request_t *r,
    ngx_http_feed_user_t *user);

ngx_int_t ngx_http_feed_bad_request(ngx_http_request_t *r, const char *code,
    const char *message);
ngx_int_t ngx_http_feed_not_allowed(ngx_http_request_t *r, char *allow);
ngx_int_t ngx_http_feed_unavailable(ngx_http_request_t *r,
    const char *message);
ngx_int_t ngx_http_feed_no_content(ngx_http_request_t *r);
ngx_int_t ngx_http_feed_db_busy(ngx_http_request_t *r);
void ngx_http_feed_finalize(ngx_http_request_t *r, ngx_int_t rc);
ngx_int_t ngx_http_feed_reject(ngx_http_request_t *r, ngx_uint_t status,
    const char *code, const char *message);
ngx_int_t ngx_http_feed_authorize(ngx_http_request_t *r,
    ngx_http_feed_user_t *user);
ngx_int_t ngx_http_feed_db_failed(ngx_http_request_t *r, bson_error_t *error);
int64_t ngx_http_feed_now_ms(void);
void ngx_http_feed_random(u_char *buf, size_t len);


#endif /* _NGX_HTTP_FEED_UTIL_H_INCLUDED_ */
