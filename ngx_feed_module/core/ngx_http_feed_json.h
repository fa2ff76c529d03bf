
/*
 * ngx_feed_module: JSON responses, written by libbson and made compact,
 * and the posts of a JSON answer read back.
 */


#ifndef _NGX_HTTP_FEED_JSON_H_INCLUDED_
#define _NGX_HTTP_FEED_JSON_H_INCLUDED_


#include "ngx_http_feed_conf.h"

#include <bson.h>


char *ngx_http_feed_json_text(const bson_t *doc, size_t *len);
size_t ngx_http_feed_json_squeeze(u_char *json, size_t len);
ngx_int_t ngx_http_feed_send_json(ngx_http_request_t *r, ngx_uint_t status,
    const bson_t *doc);
ngx_int_t ngx_http_feed_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *code, const char *message);
ngx_int_t ngx_http_feed_send_body(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len);
ngx_int_t ngx_http_feed_send_typed(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len);
ngx_int_t ngx_http_feed_add_header(ngx_http_request_t *r, const char *name,
    ngx_str_t *value);

/* a post of an "items" array: its id and its JSON */
typedef ngx_int_t (*ngx_http_feed_json_post_pt)(void *data, ngx_str_t *id,
    ngx_str_t *json);


ngx_int_t ngx_http_feed_json_posts(ngx_pool_t *pool, bson_t *items,
    ngx_http_feed_json_post_pt each, void *data);
ngx_int_t ngx_http_feed_json_one(u_char *p, size_t len, bson_t *doc);
ngx_int_t ngx_http_feed_json_body(ngx_str_t *body, u_char open, bson_t *doc,
    bson_iter_t *it);
ngx_int_t ngx_http_feed_json_copy(ngx_pool_t *pool, const bson_t *doc,
    ngx_str_t *json);
ngx_int_t ngx_http_feed_json_next_post(bson_iter_t *it, bson_t *post,
    ngx_str_t *id);


#endif /* _NGX_HTTP_FEED_JSON_H_INCLUDED_ */
