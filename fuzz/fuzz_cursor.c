
/*
 * Fuzz target: the follow-list cursor, both ways.
 *
 * A cursor comes back from clients as ?cursor=: the input is parsed as
 * one (ngx_http_feed_graph_cursor_parse).  A cursor is made from the last
 * follow document of a page, whose "created" and other user id are
 * whatever the follows collection holds, another application's writes
 * included: the input is also taken as (created, id), made into a cursor
 * in a buffer the size of the page code's, and parsed back, which must
 * give the same (created, id) for every id a client may use.
 *
 * The module's file is included: the cursor maker is one of its static
 * functions.
 */


#include "ngx_http_feed_fuzz.h"

#include "ngx_http_feed_graph_store.c"


#define NGX_HTTP_FEED_FUZZ_MS_MAX  1000000000000000LL


static void ngx_http_feed_fuzz_round_trip(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_str_t                 text;
    ngx_http_feed_list_op_t   op;

    ngx_http_feed_fuzz_init();

    /* what a client sends */

    ngx_memzero(&op, sizeof(ngx_http_feed_list_op_t));
    text.data = (u_char *) data;
    text.len = size;

    if (ngx_http_feed_graph_cursor_parse(&text, &op) == NGX_OK) {
        ngx_http_feed_fuzz_assert(op.has_cursor && op.cursor_ms >= 0,
                                  "a cursor taken with a negative time");
        ngx_http_feed_fuzz_assert(ngx_http_feed_user_valid(
                                      (u_char *) op.cursor_id.data,
                                      op.cursor_id.len)
                                  && op.cursor_id.data[op.cursor_id.len]
                                     == '\0',
                                  "a cursor taken with an invalid user id");
    }

    /* what the page code makes */

    ngx_http_feed_fuzz_round_trip(data, size);

    return 0;
}


/* input: 8 bytes of "created", then the id (up to a NUL, as BSON has it) */

static void
ngx_http_feed_fuzz_round_trip(const uint8_t *data, size_t size)
{
    char                     *id, next[128];
    size_t                    len;
    int64_t                   ms;
    ngx_str_t                 text;
    ngx_uint_t                valid;
    ngx_http_feed_list_op_t   op;

    if (size < sizeof(int64_t)) {
        return;
    }

    ngx_memcpy(&ms, data, sizeof(int64_t));
    data += sizeof(int64_t);
    size -= sizeof(int64_t);

    /* a heap copy of the exact size: a read past it is reported */

    len = ngx_strnlen((u_char *) data, size);
    id = malloc(len + 1);
    if (id == NULL) {
        abort();
    }

    ngx_memcpy(id, data, len);
    id[len] = '\0';

    ngx_http_feed_graph_cursor(next, ms, id);

    text.data = (u_char *) next;
    text.len = ngx_strlen(next);

    ngx_memzero(&op, sizeof(ngx_http_feed_list_op_t));

    valid = ms >= 0 && ms < NGX_HTTP_FEED_FUZZ_MS_MAX
            && ngx_http_feed_user_valid((u_char *) id, len);

    if (ngx_http_feed_graph_cursor_parse(&text, &op) != NGX_OK) {
        ngx_http_feed_fuzz_assert(!valid, "a cursor made is refused back");

    } else if (valid) {
        ngx_http_feed_fuzz_assert(op.cursor_ms == ms
                                  && op.cursor_id.len == len
                                  && ngx_strcmp(op.cursor_id.data, id) == 0,
                                  "a cursor made parses to another place");
    }

    free(id);
}
