
/*
 * ngx_feed_module: a table of nodes found by their string, that grows as
 * they come, for what a worker looks up by the thousand at a time (the
 * readers of streamed timelines, each delivery told naming hundreds).
 */


#ifndef _NGX_HTTP_FEED_STR_HASH_H_INCLUDED_
#define _NGX_HTTP_FEED_STR_HASH_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>


/* in the object it finds, which holds its string */
typedef struct ngx_http_feed_str_hash_node_s  ngx_http_feed_str_hash_node_t;

struct ngx_http_feed_str_hash_node_s {
    ngx_http_feed_str_hash_node_t  *next;     /* in its bucket */
    ngx_str_t                       str;
    uint32_t                        hash;     /* ngx_crc32_short(str) */
};


typedef struct {
    ngx_http_feed_str_hash_node_t **buckets;
    ngx_uint_t                      size;     /* a power of two */
    ngx_uint_t                      n;
} ngx_http_feed_str_hash_t;


ngx_int_t ngx_http_feed_str_hash_init(ngx_http_feed_str_hash_t *h,
    ngx_uint_t size, ngx_log_t *log);
void ngx_http_feed_str_hash_insert(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_str_hash_node_t *node, ngx_log_t *log);
void ngx_http_feed_str_hash_delete(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_str_hash_node_t *node);
ngx_http_feed_str_hash_node_t *ngx_http_feed_str_hash_find(
    ngx_http_feed_str_hash_t *h, u_char *data, size_t len, uint32_t hash);
void ngx_http_feed_str_hash_free(ngx_http_feed_str_hash_t *h);


#endif /* _NGX_HTTP_FEED_STR_HASH_H_INCLUDED_ */
