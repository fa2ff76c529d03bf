
/*
 * Fuzz target: the table of nodes found by their string
 * (core/ngx_http_feed_str_hash.c), against a plain array of what it
 * should hold.
 *
 * Each byte of the input is an operation on one of 64 names: bits 0-1
 * insert (when absent), delete (when present) or find; bits 2-7 the name.
 * Names 48-63 all take the same hash, so that they share a bucket
 * whatever the table's size.  The table starts with one bucket: it grows
 * as the nodes come.  After each operation every name is looked up, and
 * the count checked.
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_str_hash.h"


#define NGX_HTTP_FEED_FUZZ_NAMES  64


typedef struct {
    ngx_http_feed_str_hash_node_t  hn;
    u_char                         name[8];
    ngx_uint_t                     in;
} ngx_http_feed_fuzz_name_t;


static void ngx_http_feed_fuzz_check(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_fuzz_name_t *names);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t                      i;
    ngx_uint_t                  k, op;
    ngx_http_feed_str_hash_t    h;
    ngx_http_feed_fuzz_name_t   names[NGX_HTTP_FEED_FUZZ_NAMES], *nm;

    ngx_http_feed_fuzz_init();

    for (k = 0; k < NGX_HTTP_FEED_FUZZ_NAMES; k++) {
        nm = &names[k];
        nm->hn.str.len = ngx_sprintf(nm->name, "u%ui", k) - nm->name;
        nm->hn.str.data = nm->name;
        nm->hn.hash = (k >= 48) ? 7 : ngx_crc32_short(nm->name,
                                                      nm->hn.str.len);
        nm->hn.next = NULL;
        nm->in = 0;
    }

    if (ngx_http_feed_str_hash_init(&h, 1, ngx_http_feed_fuzz_log)
        != NGX_OK)
    {
        return 0;
    }

    for (i = 0; i < size; i++) {
        op = data[i] & 3;
        nm = &names[data[i] >> 2];

        if (op == 0 && !nm->in) {
            ngx_http_feed_str_hash_insert(&h, &nm->hn, ngx_http_feed_fuzz_log);
            nm->in = 1;

        } else if (op == 1 && nm->in) {
            ngx_http_feed_str_hash_delete(&h, &nm->hn);
            nm->in = 0;
        }

        ngx_http_feed_fuzz_check(&h, names);
    }

    ngx_http_feed_str_hash_free(&h);

    return 0;
}


static void
ngx_http_feed_fuzz_check(ngx_http_feed_str_hash_t *h,
    ngx_http_feed_fuzz_name_t *names)
{
    ngx_uint_t                      k, n;
    ngx_http_feed_str_hash_node_t  *hn;

    n = 0;

    for (k = 0; k < NGX_HTTP_FEED_FUZZ_NAMES; k++) {
        hn = ngx_http_feed_str_hash_find(h, names[k].name,
                                         names[k].hn.str.len,
                                         names[k].hn.hash);

        ngx_http_feed_fuzz_assert(hn == (names[k].in ? &names[k].hn : NULL),
                                  "a name found that is not in, or not "
                                  "found while in");
        n += names[k].in;
    }

    ngx_http_feed_fuzz_assert(h->n == n, "the count is not the names in");
    ngx_http_feed_fuzz_assert(h->size >= 1 && (h->size & (h->size - 1)) == 0,
                              "the buckets are not a power of two");
    ngx_http_feed_fuzz_assert(h->n <= h->size,
                              "more nodes than buckets after an insert");
}
