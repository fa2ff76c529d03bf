
/*
 * ngx_feed_module: Redis Cluster's keyspace, as a client needs it: the
 * hash slot of a key, the redirections a node answers, the slot map a
 * node describes.  Pure functions of their input, no I/O.
 */


#ifndef _NGX_HTTP_FEED_REDIS_SLOT_H_INCLUDED_
#define _NGX_HTTP_FEED_REDIS_SLOT_H_INCLUDED_


#include <ngx_config.h>
#include <ngx_core.h>

#include <hiredis.h>


#define NGX_HTTP_FEED_REDIS_SLOTS    16384

/* a slot's hash tag, decimal digits (ngx_http_feed_redis_slot_tag()) */
#define NGX_HTTP_FEED_REDIS_TAG_LEN  NGX_INT_T_LEN


/* a node's address as Redis gives it: host (an IP) and port */
typedef struct {
    ngx_str_t                     host;
    in_port_t                     port;
} ngx_http_feed_redis_node_addr_t;


/* MOVED (the slot has a new owner) or ASK (only this command goes there) */
typedef struct {
    ngx_uint_t                    slot;
    ngx_uint_t                    ask;
    ngx_http_feed_redis_node_addr_t  addr;
} ngx_http_feed_redis_redirect_t;


/* called for each range of slots of CLUSTER SLOTS, with its master */
typedef ngx_int_t (*ngx_http_feed_redis_range_pt)(void *data,
    ngx_uint_t first, ngx_uint_t last,
    ngx_http_feed_redis_node_addr_t *master);


ngx_uint_t ngx_http_feed_redis_slot(const u_char *key, size_t len);
size_t ngx_http_feed_redis_slot_tag(ngx_uint_t slot, u_char *buf);
ngx_int_t ngx_http_feed_redis_redirect_parse(const char *err, size_t len,
    ngx_http_feed_redis_redirect_t *rr);
ngx_int_t ngx_http_feed_redis_slots_parse(redisReply *reply,
    ngx_http_feed_redis_range_pt handler, void *data);


#endif /* _NGX_HTTP_FEED_REDIS_SLOT_H_INCLUDED_ */
