
/*
 * ngx_feed_module: a Redis Cluster behind one ngx_http_feed_redis_t (a
 * router): the slot map, a connection per master, redirections.  Only
 * the connection's files use this (ngx_http_feed_redis_connection.h):
 * everything above the Redis layer sees one client, whatever the
 * topology.
 */


#ifndef _NGX_HTTP_FEED_REDIS_CLUSTER_H_INCLUDED_
#define _NGX_HTTP_FEED_REDIS_CLUSTER_H_INCLUDED_


#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_redis_slot.h"


typedef struct ngx_http_feed_redis_cluster_s  ngx_http_feed_redis_cluster_t;


ngx_http_feed_redis_cluster_t *ngx_http_feed_redis_cluster_create(
    ngx_cycle_t *cycle, ngx_http_feed_redis_t *router,
    ngx_http_feed_redis_conf_t *conf);
void ngx_http_feed_redis_cluster_start(ngx_http_feed_redis_cluster_t *cl);
void ngx_http_feed_redis_cluster_destroy(ngx_http_feed_redis_cluster_t *cl);

ngx_http_feed_redis_t *ngx_http_feed_redis_cluster_route(
    ngx_http_feed_redis_cluster_t *cl, ngx_http_feed_redis_args_t *args);
ngx_uint_t ngx_http_feed_redis_cluster_slot(ngx_http_feed_redis_args_t *args);
ngx_http_feed_redis_t *ngx_http_feed_redis_cluster_slot_master(
    ngx_http_feed_redis_cluster_t *cl, ngx_uint_t slot);
ngx_uint_t ngx_http_feed_redis_cluster_owner(
    ngx_http_feed_redis_cluster_t *cl, const u_char *key, size_t len);
size_t ngx_http_feed_redis_cluster_tag_copy(ngx_http_feed_redis_cluster_t *cl,
    const u_char *key, size_t len, ngx_str_t *base, u_char *buf);
size_t ngx_http_feed_redis_cluster_mark(ngx_http_feed_redis_cluster_t *cl,
    const u_char *key, size_t len, u_char *buf);
void ngx_http_feed_redis_cluster_tag_copies(ngx_http_feed_redis_cluster_t *cl,
    ngx_str_t *base, ngx_http_feed_redis_tag_copy_pt handler, void *data);
ngx_http_feed_redis_t *ngx_http_feed_redis_cluster_redirect(
    ngx_http_feed_redis_cluster_t *cl, ngx_http_feed_redis_t *from,
    ngx_http_feed_redis_redirect_t *rr);

void ngx_http_feed_redis_cluster_stale(ngx_http_feed_redis_cluster_t *cl,
    const char *why);
void ngx_http_feed_redis_cluster_node_ready(ngx_http_feed_redis_cluster_t *cl,
    ngx_http_feed_redis_t *node);
ngx_int_t ngx_http_feed_redis_cluster_node_down(
    ngx_http_feed_redis_cluster_t *cl, ngx_http_feed_redis_t *node);

ngx_http_feed_redis_state_e ngx_http_feed_redis_cluster_state(
    ngx_http_feed_redis_cluster_t *cl);
ngx_uint_t ngx_http_feed_redis_cluster_pending(
    ngx_http_feed_redis_cluster_t *cl);
const char *ngx_http_feed_redis_cluster_run_id(
    ngx_http_feed_redis_cluster_t *cl);
ngx_http_feed_redis_conf_t *ngx_http_feed_redis_cluster_master(
    ngx_http_feed_redis_cluster_t *cl, ngx_uint_t n, u_char *buf,
    size_t *len);
ngx_uint_t ngx_http_feed_redis_cluster_masters(
    ngx_http_feed_redis_cluster_t *cl, ngx_uint_t *up);
ngx_uint_t ngx_http_feed_redis_cluster_nodes(
    ngx_http_feed_redis_cluster_t *cl);


/* the connection's side: a node's connection, the router's hooks */
ngx_msec_t ngx_http_feed_redis_blocked(ngx_http_feed_redis_t *rd);
ngx_http_feed_redis_t *ngx_http_feed_redis_create_node(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf, ngx_http_feed_redis_t *router);
void ngx_http_feed_redis_router_ready(ngx_http_feed_redis_t *router);
void ngx_http_feed_redis_router_retired(ngx_http_feed_redis_t *router,
    u_char *copy, size_t len);


#endif /* _NGX_HTTP_FEED_REDIS_CLUSTER_H_INCLUDED_ */
