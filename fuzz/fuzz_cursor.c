
/*
 * Fuzz target: the follow-list cursor, both ways.
 *
 * A cursor comes back from clients as ?cursor=: the input is parsed as
 * one (ngx_http_feed_graph_cursor_parse).  A cursor is made from the last
 * follow document of a page, whose "created" and other user id are
 * whatever the follows collection holds, another application's writes
 * included: the input is also taken as such a document, read as the page
 * code reads it, made into a cursor in a buffer the size of the page
 * code's, and parsed back, which must give the same (created, id).
 *
 * The module's file is included: the cursor maker is one of its static
 * functions.
 */


#include "ngx_http_feed_fuzz.h"

#include "ngx_http_feed_graph_task.c"


static void ngx_http_feed_fuzz_round_trip(const uint8_t *data, size_t size);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_str_t                      text;
    ngx_http_feed_graph_list_op_t  op;

    ngx_http_feed_fuzz_init();

    /* what a client sends */

    ngx_memzero(&op, sizeof(ngx_http_feed_graph_list_op_t));
    text.data = (u_char *) data;
    text.len = size;

    if (ngx_http_feed_graph_cursor_parse(&text, &op) == NGX_OK) {
        ngx_http_feed_fuzz_assert(op.has_cursor, "a cursor taken unset");
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


/*
 * Input: 8 bytes of "created", then the other user's id, as a follows
 * document holds them; read as the page code reads that document.
 */

static void
ngx_http_feed_fuzz_round_trip(const uint8_t *data, size_t size)
{
    char                           next[NGX_HTTP_FEED_GRAPH_CURSOR_MAX + 1];
    bson_t                         doc;
    int64_t                        ms;
    ngx_str_t                      text;
    bson_iter_t                    it;
    ngx_http_feed_graph_list_op_t  op;
    ngx_http_feed_graph_pos_t      pos;

    if (size < sizeof(int64_t)) {
        return;
    }

    ngx_memcpy(&ms, data, sizeof(int64_t));
    data += sizeof(int64_t);
    size -= sizeof(int64_t);

    bson_init(&doc);

    if (!bson_append_utf8(&doc, "dst", 3, (const char *) data, size)
        || !BSON_APPEND_DATE_TIME(&doc, "created", ms))
    {
        abort();
    }

    ngx_memzero(&pos, sizeof(ngx_http_feed_graph_pos_t));

    if (ngx_http_feed_bson_user(&doc, "dst", &pos.user) != NGX_OK) {
        /* skipped by the page: no cursor is made of it */
        bson_destroy(&doc);
        return;
    }

    pos.since = bson_iter_init_find(&it, &doc, "created")
                && BSON_ITER_HOLDS_DATE_TIME(&it)
                ? bson_iter_date_time(&it) : 0;

    bson_destroy(&doc);

    ngx_http_feed_graph_cursor(next, sizeof(next), &pos);

    text.data = (u_char *) next;
    text.len = ngx_strlen(next);

    ngx_http_feed_fuzz_assert(text.len > 0, "no cursor made of a valid id");

    ngx_memzero(&op, sizeof(ngx_http_feed_graph_list_op_t));

    /*
     * Any "created" comes back, dates before 1970 or far ahead (another
     * application's writes) too; but INT64_MIN, whose digits overflow.
     */

    if (pos.since == INT64_MIN) {
        (void) ngx_http_feed_graph_cursor_parse(&text, &op);
        return;
    }

    ngx_http_feed_fuzz_assert(ngx_http_feed_graph_cursor_parse(&text, &op)
                              == NGX_OK,
                              "a cursor made is refused back");

    ngx_http_feed_fuzz_assert(op.cursor_ms == pos.since
                              && op.cursor_id.len == pos.user.len
                              && ngx_strcmp(op.cursor_id.data,
                                            pos.user.data) == 0,
                              "a cursor made parses to another place");
}
