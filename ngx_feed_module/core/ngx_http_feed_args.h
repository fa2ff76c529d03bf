
/*
 * ngx_feed_module: what a request says: user and post ids, query
 * arguments, pages, and whether its identity may write.
 */


#ifndef _NGX_HTTP_FEED_ARGS_H_INCLUDED_
#define _NGX_HTTP_FEED_ARGS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
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

    /* ?unseen=1 of a timeline read: the posts the user saw left out */
    ngx_uint_t                    unseen;
} ngx_http_feed_page_t;


/* who asks for a page, and so where its user and limit come from */
typedef enum {
    NGX_HTTP_FEED_PAGE_CLIENT = 0,  /* the location's user, limit to 100 */
    NGX_HTTP_FEED_PAGE_SOURCE       /* ?user=, limit to the cache's size */
} ngx_http_feed_page_from_e;


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
ngx_int_t ngx_http_feed_pair_args(ngx_http_request_t *r,
    ngx_http_feed_user_t *src, ngx_http_feed_user_t *dst,
    const ngx_http_feed_error_t *self, const ngx_http_feed_error_t **err);
ngx_table_elt_t *ngx_http_feed_header(ngx_http_request_t *r,
    const char *name, ngx_uint_t *n);
ngx_int_t ngx_http_feed_reader(ngx_http_request_t *r,
    ngx_http_feed_user_t *user);


#endif /* _NGX_HTTP_FEED_ARGS_H_INCLUDED_ */
