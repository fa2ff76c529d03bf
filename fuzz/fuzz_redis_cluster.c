
/*
 * Fuzz target: what the module reads of a Redis Cluster
 * (ngx_http_feed_redis_slot.c).  The first byte chooses:
 *
 *   0  the rest is a key: its hash slot is below 16384, and a key with a
 *      hash tag ("{...}", not empty) has its tag's slot;
 *   1  the rest is an error reply: a MOVED or ASK read from it names a
 *      slot below 16384, a port, and a host inside the input;
 *   2  the rest is RESP, as hiredis reads it, given to the reader of
 *      CLUSTER SLOTS: every range it passes on is within the 16384 slots
 *      with a port, and a reply it accepts passes on its ranges only.
 *
 * Before any input: the slots of keys as a real Redis 7.0 computes them
 * (CLUSTER KEYSLOT), the examples of the cluster specification among them,
 * and the hash tags of a few slots.
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_redis_slot.h"


#define NGX_HTTP_FEED_FUZZ_RESP_MAX  100000


typedef struct {
    const char   *key;
    ngx_uint_t    slot;
} ngx_http_feed_fuzz_slot_t;


static ngx_http_feed_fuzz_slot_t  ngx_http_feed_fuzz_known_slots[] = {
    { "123456789", 12739 },             /* CRC16 XMODEM's check: 0x31c3 */
    { "foo", 12182 },
    { "bar", 5061 },
    { "{user1000}.following", 3443 },
    { "{user1000}.followers", 3443 },
    { "foo{}{bar}", 8363 },             /* an empty tag: the whole key */
    { "foo{{bar}}zap", 4015 },          /* the tag is "{bar" */
    { "foo{bar}{zap}", 5061 },          /* the first tag only: "bar" */
    { "", 0 },
    { "feed:tl:{42}", 8000 },
    { "a{", 14311 },
    { NULL, 0 }
};


/*
 * Hash tags of slots (ngx_http_feed_redis_slot_tag()): the last slots of
 * the three masters redis-cli makes, and the slot whose smallest tag is
 * the largest of all 16384 (checked once, by a search of them all).
 */
static ngx_http_feed_fuzz_slot_t  ngx_http_feed_fuzz_known_tags[] = {
    { "3560", 0 },
    { "41402", 5460 },
    { "5405", 10922 },
    { "39296", 16383 },
    { "109757", 1469 },
    { NULL, 0 }
};


static void ngx_http_feed_fuzz_known(void);
static void ngx_http_feed_fuzz_key(const uint8_t *data, size_t size);
static void ngx_http_feed_fuzz_redirect(const uint8_t *data, size_t size);
static void ngx_http_feed_fuzz_slots(const uint8_t *data, size_t size);
static ngx_int_t ngx_http_feed_fuzz_range(void *data, ngx_uint_t first,
    ngx_uint_t last, ngx_http_feed_redis_node_addr_t *master);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ngx_uint_t  checked;

    ngx_http_feed_fuzz_init();

    if (!checked) {
        ngx_http_feed_fuzz_known();
        checked = 1;
    }

    if (size == 0) {
        return 0;
    }

    switch (data[0] % 3) {

    case 0:
        ngx_http_feed_fuzz_key(data + 1, size - 1);
        break;

    case 1:
        ngx_http_feed_fuzz_redirect(data + 1, size - 1);
        break;

    default:
        ngx_http_feed_fuzz_slots(data + 1, size - 1);
    }

    return 0;
}


static void
ngx_http_feed_fuzz_known(void)
{
    u_char                      tag[NGX_HTTP_FEED_REDIS_TAG_LEN];
    size_t                      len;
    ngx_http_feed_fuzz_slot_t  *k;

    for (k = ngx_http_feed_fuzz_known_slots; k->key; k++) {
        if (ngx_http_feed_redis_slot((u_char *) k->key, strlen(k->key))
            != k->slot)
        {
            fprintf(stderr, "slot of \"%s\" is not %u\n", k->key,
                    (unsigned) k->slot);
            abort();
        }
    }

    for (k = ngx_http_feed_fuzz_known_tags; k->key; k++) {
        len = ngx_http_feed_redis_slot_tag(k->slot, tag);

        if (len != strlen(k->key) || ngx_memcmp(tag, k->key, len) != 0) {
            fprintf(stderr, "tag of slot %u is not \"%s\"\n",
                    (unsigned) k->slot, k->key);
            abort();
        }
    }
}


static void
ngx_http_feed_fuzz_key(const uint8_t *data, size_t size)
{
    u_char      *key, *open, *close;
    ngx_uint_t   slot;

    /* a copy of its own: ASan sees a read past the key */

    key = malloc(size ? size : 1);
    if (key == NULL) {
        abort();
    }

    ngx_memcpy(key, data, size);

    slot = ngx_http_feed_redis_slot(key, size);

    if (slot >= NGX_HTTP_FEED_REDIS_SLOTS) {
        abort();
    }

    open = memchr(key, '{', size);
    close = open ? memchr(open + 1, '}', key + size - open - 1) : NULL;

    if (close && close > open + 1
        && ngx_http_feed_redis_slot(open + 1, close - open - 1) != slot)
    {
        abort();
    }

    free(key);
}


static void
ngx_http_feed_fuzz_redirect(const uint8_t *data, size_t size)
{
    char                            *err;
    ngx_http_feed_redis_redirect_t   rr;

    err = malloc(size ? size : 1);
    if (err == NULL) {
        abort();
    }

    ngx_memcpy(err, data, size);

    if (ngx_http_feed_redis_redirect_parse(err, size, &rr) == NGX_OK) {

        if (rr.slot >= NGX_HTTP_FEED_REDIS_SLOTS || rr.addr.port == 0
            || rr.addr.host.data < (u_char *) err
            || rr.addr.host.data + rr.addr.host.len > (u_char *) err + size
            || (rr.ask != 0 && rr.ask != 1))
        {
            abort();
        }
    }

    free(err);
}


static void
ngx_http_feed_fuzz_slots(const uint8_t *data, size_t size)
{
    void         *reply;
    ngx_uint_t    ranges;
    redisReader  *reader;

    if (!ngx_http_feed_fuzz_resp_bounded(data, size,
                                         NGX_HTTP_FEED_FUZZ_RESP_MAX))
    {
        return;
    }

    reader = redisReaderCreate();
    if (reader == NULL) {
        abort();
    }

    if (redisReaderFeed(reader, (const char *) data, size) != REDIS_OK) {
        abort();
    }

    while (redisReaderGetReply(reader, &reply) == REDIS_OK && reply) {
        ranges = 0;

        if (ngx_http_feed_redis_slots_parse(reply, ngx_http_feed_fuzz_range,
                                            &ranges)
            == NGX_OK
            && ranges != ((redisReply *) reply)->elements)
        {
            abort();
        }

        freeReplyObject(reply);
    }

    redisReaderFree(reader);
}


static ngx_int_t
ngx_http_feed_fuzz_range(void *data, ngx_uint_t first, ngx_uint_t last,
    ngx_http_feed_redis_node_addr_t *master)
{
    ngx_uint_t  *ranges = data;

    if (first > last || last >= NGX_HTTP_FEED_REDIS_SLOTS
        || master->port == 0)
    {
        abort();
    }

    if (master->host.len) {
        /* read, for ASan */
        (void) ngx_hash_key(master->host.data, master->host.len);
    }

    (*ranges)++;

    return NGX_OK;
}
