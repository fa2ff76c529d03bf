
/*
 * ngx_feed_module: a table of nodes found by their string.
 *
 * nginx's string rbtree visits about log2(n) nodes a lookup, each in an
 * object of its own: with 10,000 readers of streamed timelines, a
 * delivery told to 500 of them took ~0.7 us a name, most of it waiting
 * for memory (bench part 13).  Here a lookup reads one bucket, then the
 * nodes of that bucket, about one.  The buckets double when the nodes
 * outnumber them; they never shrink (8 bytes a node at the most the
 * worker held).  A table that could not grow stays correct, its chains
 * longer.
 */


#include "ngx_http_feed_str_hash.h"


static void ngx_http_feed_str_hash_grow(ngx_http_feed_str_hash_t *h,
    ngx_log_t *log);


ngx_int_t
ngx_http_feed_str_hash_init(ngx_http_feed_str_hash_t *h, ngx_uint_t size,
    ngx_log_t *log)
{
    ngx_uint_t  n;

    for (n = 1; n < size; n <<= 1) { /* void */ }

    h->buckets = ngx_calloc(n * sizeof(ngx_http_feed_str_hash_node_t *),
                            log);
    if (h->buckets == NULL) {
        return NGX_ERROR;
    }

    h->size = n;
    h->n = 0;

    return NGX_OK;
}


void
ngx_http_feed_str_hash_insert(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_str_hash_node_t *node, ngx_log_t *log)
{
    ngx_http_feed_str_hash_node_t  **b;

    if (h->n >= h->size) {
        ngx_http_feed_str_hash_grow(h, log);
    }

    b = &h->buckets[node->hash & (h->size - 1)];

    node->next = *b;
    *b = node;

    h->n++;
}


void
ngx_http_feed_str_hash_delete(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_str_hash_node_t *node)
{
    ngx_http_feed_str_hash_node_t  **p;

    for (p = &h->buckets[node->hash & (h->size - 1)]; *p; p = &(*p)->next) {
        if (*p == node) {
            *p = node->next;
            node->next = NULL;
            h->n--;
            return;
        }
    }
}


ngx_http_feed_str_hash_node_t *
ngx_http_feed_str_hash_find(ngx_http_feed_str_hash_t *h, u_char *data,
    size_t len, uint32_t hash)
{
    ngx_http_feed_str_hash_node_t  *node;

    for (node = h->buckets[hash & (h->size - 1)]; node; node = node->next) {
        if (node->hash == hash && node->str.len == len
            && ngx_memcmp(node->str.data, data, len) == 0)
        {
            return node;
        }
    }

    return NULL;
}


void
ngx_http_feed_str_hash_free(ngx_http_feed_str_hash_t *h)
{
    ngx_free(h->buckets);
    h->buckets = NULL;
    h->size = 0;
    h->n = 0;
}


/* twice the buckets, each node moved to its own */

static void
ngx_http_feed_str_hash_grow(ngx_http_feed_str_hash_t *h, ngx_log_t *log)
{
    ngx_uint_t                       i, size;
    ngx_http_feed_str_hash_node_t  **buckets, *node, *next;

    size = h->size * 2;

    buckets = ngx_calloc(size * sizeof(ngx_http_feed_str_hash_node_t *),
                         log);
    if (buckets == NULL) {
        return;
    }

    for (i = 0; i < h->size; i++) {
        for (node = h->buckets[i]; node; node = next) {
            next = node->next;
            node->next = buckets[node->hash & (size - 1)];
            buckets[node->hash & (size - 1)] = node;
        }
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, log, 0,
                   "feed str hash: %ui buckets, %ui nodes", size, h->n);

    ngx_free(h->buckets);
    h->buckets = buckets;
    h->size = size;
}
