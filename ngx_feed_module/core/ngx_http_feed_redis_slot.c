
/*
 * ngx_feed_module: Redis Cluster's keyspace (the cluster specification's
 * "Keys distribution model" and "Redirection and resharding").
 */


#include "ngx_http_feed_redis_slot.h"


static ngx_int_t ngx_http_feed_redis_node_addr(u_char *p, u_char *last,
    ngx_http_feed_redis_node_addr_t *addr);
static ngx_int_t ngx_http_feed_redis_range(redisReply *range,
    ngx_http_feed_redis_range_pt handler, void *data);


/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis */

static uint16_t
ngx_http_feed_redis_crc16(const u_char *p, size_t len)
{
    uint16_t    crc;
    ngx_uint_t  bit;

    crc = 0;

    while (len--) {
        crc ^= (uint16_t) (*p++ << 8);

        for (bit = 0; bit < 8; bit++) {
            crc = (crc & 0x8000) ? (uint16_t) ((crc << 1) ^ 0x1021)
                                 : (uint16_t) (crc << 1);
        }
    }

    return crc;
}


/*
 * Only the part between the first "{" and the first "}" after it is
 * hashed when it is not empty: keys of one user share "{uid}" and so a
 * slot, which a script touching several of them needs.
 */

ngx_uint_t
ngx_http_feed_redis_slot(const u_char *key, size_t len)
{
    const u_char  *open, *close;

    open = ngx_strlchr((u_char *) key, (u_char *) key + len, '{');

    if (open) {
        close = ngx_strlchr((u_char *) open + 1, (u_char *) key + len, '}');

        if (close && close > open + 1) {
            key = open + 1;
            len = close - key;
        }
    }

    return ngx_http_feed_redis_crc16(key, len)
           & (NGX_HTTP_FEED_REDIS_SLOTS - 1);
}


/*
 * A hash tag of that slot: the smallest decimal number whose CRC16 falls
 * in it.  A key named "<base>{<tag>}" lives on the slot's master: what a
 * script needs of a set that every read checks, which has a copy on each
 * master (every slot has one below 110000, 1469's being the largest:
 * fuzz_redis_cluster checks it and the last slots of three masters).
 */

size_t
ngx_http_feed_redis_slot_tag(ngx_uint_t slot, u_char *buf)
{
    u_char      *p;
    ngx_uint_t   n;

    for (n = 0; n < 1000000; n++) {
        p = ngx_sprintf(buf, "%ui", n);

        if ((ngx_http_feed_redis_crc16(buf, p - buf)
             & (NGX_HTTP_FEED_REDIS_SLOTS - 1))
            == slot)
        {
            return p - buf;
        }
    }

    return 0;
}


/*
 * "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381": NGX_OK, with
 * the slot and the address (an empty host means the node that answered);
 * NGX_DECLINED for any other error.
 */

ngx_int_t
ngx_http_feed_redis_redirect_parse(const char *err, size_t len,
    ngx_http_feed_redis_redirect_t *rr)
{
    u_char  *p, *last, *space;

    p = (u_char *) err;
    last = p + len;

    if (len > 6 && ngx_strncmp(p, "MOVED ", 6) == 0) {
        rr->ask = 0;
        p += 6;

    } else if (len > 4 && ngx_strncmp(p, "ASK ", 4) == 0) {
        rr->ask = 1;
        p += 4;

    } else {
        return NGX_DECLINED;
    }

    space = ngx_strlchr(p, last, ' ');
    if (space == NULL || space == p) {
        return NGX_DECLINED;
    }

    rr->slot = ngx_atoi(p, space - p);

    if (rr->slot == (ngx_uint_t) NGX_ERROR
        || rr->slot >= NGX_HTTP_FEED_REDIS_SLOTS)
    {
        return NGX_DECLINED;
    }

    return ngx_http_feed_redis_node_addr(space + 1, last, &rr->addr);
}


/* "host:port", the port after the last colon (an IPv6 host has colons) */

static ngx_int_t
ngx_http_feed_redis_node_addr(u_char *p, u_char *last,
    ngx_http_feed_redis_node_addr_t *addr)
{
    u_char     *colon;
    ngx_int_t   port;

    for (colon = last - 1; colon >= p && *colon != ':'; colon--) {
        /* void */
    }

    if (colon < p || colon + 1 == last) {
        return NGX_DECLINED;
    }

    port = ngx_atoi(colon + 1, last - colon - 1);

    if (port < 1 || port > 65535) {
        return NGX_DECLINED;
    }

    addr->host.data = p;
    addr->host.len = colon - p;
    addr->port = (in_port_t) port;

    return NGX_OK;
}


/*
 * CLUSTER SLOTS: an array of [first, last, master, replica...], each node
 * [host, port, id, ...].  handler is called for every range; NGX_ERROR
 * for a reply of another shape.
 */

ngx_int_t
ngx_http_feed_redis_slots_parse(redisReply *reply,
    ngx_http_feed_redis_range_pt handler, void *data)
{
    size_t  i;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        return NGX_ERROR;
    }

    for (i = 0; i < reply->elements; i++) {
        if (ngx_http_feed_redis_range(reply->element[i], handler, data)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_redis_range(redisReply *range,
    ngx_http_feed_redis_range_pt handler, void *data)
{
    redisReply                       *node;
    ngx_http_feed_redis_node_addr_t   master;

    if (range->type != REDIS_REPLY_ARRAY || range->elements < 3
        || range->element[0]->type != REDIS_REPLY_INTEGER
        || range->element[1]->type != REDIS_REPLY_INTEGER
        || range->element[0]->integer < 0
        || range->element[1]->integer < range->element[0]->integer
        || range->element[1]->integer >= NGX_HTTP_FEED_REDIS_SLOTS)
    {
        return NGX_ERROR;
    }

    node = range->element[2];

    if (node->type != REDIS_REPLY_ARRAY || node->elements < 2
        || node->element[0]->type != REDIS_REPLY_STRING
        || node->element[1]->type != REDIS_REPLY_INTEGER
        || node->element[1]->integer < 1
        || node->element[1]->integer > 65535)
    {
        return NGX_ERROR;
    }

    /* "" or "?": the node does not know its address, the asked one has it */

    master.host.data = (u_char *) node->element[0]->str;
    master.host.len = node->element[0]->len;

    if (master.host.len == 1 && master.host.data[0] == '?') {
        master.host.len = 0;
    }

    master.port = (in_port_t) node->element[1]->integer;

    return handler(data, (ngx_uint_t) range->element[0]->integer,
                   (ngx_uint_t) range->element[1]->integer, &master);
}
