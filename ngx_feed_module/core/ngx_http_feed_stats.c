
/*
 * ngx_feed_module: the node's counters, histograms, gauges and post id
 * sequence, in a shared zone that every worker adds to; ngx_http_feed_stats.h
 * says what each holds.
 */


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_util.h"


static ngx_int_t ngx_http_feed_stats_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);


/* this worker's own counters, and the node's, in the shared zone */
ngx_http_feed_stats_t   ngx_http_feed_stats;
ngx_http_feed_stats_t  *ngx_http_feed_node_stats;
ngx_http_feed_ids_t    *ngx_http_feed_node_ids;


/* what the node's shared zone holds */
typedef struct {
    ngx_http_feed_stats_t         stats;
    ngx_http_feed_ids_t           ids;
    ngx_http_feed_gauges_t        gauges[NGX_HTTP_FEED_GAUGE_SLOTS];
} ngx_http_feed_node_t;


/*
 * The node's counters, gauges and post id sequence: a small shared zone
 * that every worker adds to (the node, and room for the slab pool's own
 * pages).  A reload keeps it, its counts, the old workers' gauges and its
 * sequence, when it has the same name and size.  The name says the
 * layout's size: a reload into a build whose counters differ starts a zone
 * of its own rather than read the old one with the new layout.
 */

ngx_shm_zone_t *
ngx_http_feed_stats_zone(ngx_conf_t *cf, void *tag)
{
    u_char          *p;
    ngx_str_t        name;
    ngx_shm_zone_t  *zone;

    name.data = ngx_pnalloc(cf->pool, sizeof("ngx_http_feed_stats_")
                                      + NGX_SIZE_T_LEN);
    if (name.data == NULL) {
        return NULL;
    }

    p = ngx_sprintf(name.data, "ngx_http_feed_stats_%uz",
                    sizeof(ngx_http_feed_node_t));
    name.len = p - name.data;

    zone = ngx_shared_memory_add(cf, &name,
                                 8 * 4096 + sizeof(ngx_http_feed_node_t),
                                 tag);
    if (zone == NULL) {
        return NULL;
    }

    zone->init = ngx_http_feed_stats_init_zone;

    return zone;
}


static ngx_int_t
ngx_http_feed_stats_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    ngx_slab_pool_t       *shpool;
    ngx_http_feed_node_t  *node;

    if (data) {
        shm_zone->data = data;
        return NGX_OK;
    }

    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (shm_zone->shm.exists) {
        shm_zone->data = shpool->data;
        return NGX_OK;
    }

    node = ngx_slab_calloc(shpool, sizeof(ngx_http_feed_node_t));
    if (node == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_random(node->ids.node, sizeof(node->ids.node));

    shpool->data = node;
    shm_zone->data = node;

    return NGX_OK;
}


/* at a worker's start: its own counters zeroed, the node's found */

void
ngx_http_feed_stats_init_process(ngx_shm_zone_t *zone, ngx_log_t *log)
{
    ngx_http_feed_node_t  *node;

    ngx_memzero(&ngx_http_feed_stats, sizeof(ngx_http_feed_stats_t));

    node = zone->data;
    ngx_http_feed_node_stats = &node->stats;
    ngx_http_feed_node_ids = &node->ids;

    ngx_http_feed_gauges_take(node->gauges, log);
}


void
ngx_http_feed_stats_exit_process(ngx_log_t *log)
{
    ngx_http_feed_gauges_give_back(log);
}


/*
 * The latency histograms' upper bounds, in ms: from a Redis round trip to
 * a MongoDB call that timed out; ngx_http_feed_metrics.c prints them.
 */

const ngx_msec_int_t  ngx_http_feed_bucket_ms[NGX_HTTP_FEED_BUCKETS - 1] = {
    1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000
};


ngx_uint_t
ngx_http_feed_bucket(ngx_msec_int_t ms)
{
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_FEED_BUCKETS - 1; i++) {
        if (ms <= ngx_http_feed_bucket_ms[i]) {
            return i;
        }
    }

    return NGX_HTTP_FEED_BUCKETS - 1;
}
