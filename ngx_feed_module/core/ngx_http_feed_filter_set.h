
/*
 * ngx_feed_module: a user's read filters (blocks and mutes) as a set of
 * authors whose posts the user does not see, and the posts the user hid,
 * looked up while a page is made from the fallback's answer.
 */


#ifndef _NGX_HTTP_FEED_FILTER_SET_H_INCLUDED_
#define _NGX_HTTP_FEED_FILTER_SET_H_INCLUDED_


#include "ngx_http_feed_conf.h"


/* "#" and a post's id, the key of a hidden post */
#define NGX_HTTP_FEED_FILTER_POST_LEN  25


typedef struct {
    ngx_str_t                    *authors;    /* sorted, after done() */
    ngx_uint_t                    n;
    ngx_uint_t                    size;
    unsigned                      loaded:1;   /* known, even when empty */
} ngx_http_feed_filter_set_t;


ngx_int_t ngx_http_feed_filter_set_init(ngx_pool_t *pool,
    ngx_http_feed_filter_set_t *f, ngx_uint_t n);
void ngx_http_feed_filter_set_add(ngx_http_feed_filter_set_t *f,
    u_char *data, size_t len);
ngx_int_t ngx_http_feed_filter_set_add_post(ngx_pool_t *pool,
    ngx_http_feed_filter_set_t *f, u_char *id, size_t len);
void ngx_http_feed_filter_set_done(ngx_http_feed_filter_set_t *f);
ngx_int_t ngx_http_feed_filter_set_tokens(ngx_pool_t *pool,
    ngx_str_t *tokens, ngx_http_feed_filter_set_t *f);
ngx_uint_t ngx_http_feed_filter_set_has(ngx_http_feed_filter_set_t *f,
    u_char *data, size_t len);
ngx_uint_t ngx_http_feed_filter_set_hides(ngx_http_feed_filter_set_t *f,
    u_char *id, size_t len);


#endif /* _NGX_HTTP_FEED_FILTER_SET_H_INCLUDED_ */
