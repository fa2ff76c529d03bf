
/*
 * ngx_feed_module: the follow graph, thread side: what a follow and a
 * list page do in a thread pool task, through the follows store, and the
 * lists' cursors.
 */


#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_timelines_store.h"


/* a list page being made */
typedef struct {
    ngx_http_feed_graph_list_op_t  *op;
    bson_t                         *items;
    ngx_uint_t                      n;
    ngx_http_feed_graph_pos_t       last;
} ngx_http_feed_graph_page_t;


static ngx_int_t ngx_http_feed_graph_item(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static void ngx_http_feed_graph_cursor(char *buf, size_t size,
    ngx_http_feed_graph_pos_t *pos);


/*
 * A follow or an unfollow; whom the user follows changed: the timeline
 * kept for them in MongoDB, if any, is made again at their next read
 */

void
ngx_http_feed_graph_follow_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_follow_op_t  *op = t->data;

    t->rc = ngx_http_feed_follows_change(client, t->database, op, &t->error);

    if (t->rc == NGX_OK && op->changed && op->kept) {
        t->rc = ngx_http_feed_timelines_drop(client, t->database, op->kept,
                                             &op->src, &t->error);
    }
}


/*
 * A page, newest relationship first; the cursor, (created, other user) of
 * the last item, resumes exactly after it whatever changes meanwhile.
 */

void
ngx_http_feed_graph_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_graph_list_op_t  *op = t->data;

    char                           next[NGX_HTTP_FEED_GRAPH_CURSOR_MAX + 1];
    bson_t                         doc, items;
    ngx_int_t                      rc;
    ngx_http_feed_graph_page_t     gp;
    ngx_http_feed_follows_page_t   page;

    bson_init(&doc);
    bson_init(&items);

    ngx_memzero(&gp, sizeof(ngx_http_feed_graph_page_t));
    gp.op = op;
    gp.items = &items;

    ngx_memzero(&page, sizeof(ngx_http_feed_follows_page_t));
    page.user = &op->user;
    page.followers = op->followers;
    page.has_after = op->has_cursor;
    page.after_created = op->cursor_ms;
    page.after_user = &op->cursor_id;
    page.batch = op->limit + 1;
    page.each = ngx_http_feed_graph_item;
    page.data = &gp;

    t->rc = NGX_ERROR;

    rc = ngx_http_feed_follows_page(client, t->database, &page, &t->error);

    op->skipped = page.skipped;

    if (rc == NGX_ERROR) {
        goto done;
    }

    if (op->need_count
        && ngx_http_feed_follows_count(client, t->database, &op->user,
                                       op->followers, &op->count, &t->error)
           != NGX_OK)
    {
        goto done;
    }

    BSON_APPEND_INT64(&doc, "count", op->count);
    BSON_APPEND_ARRAY(&doc, "items", &items);

    if (rc == NGX_AGAIN) {
        ngx_http_feed_graph_cursor(next, sizeof(next), &gp.last);
        BSON_APPEND_UTF8(&doc, "next", next);

    } else {
        BSON_APPEND_NULL(&doc, "next");
    }

    op->json = bson_as_relaxed_extended_json(&doc, &op->json_len);

    t->rc = op->json ? NGX_OK : NGX_ERROR;

done:

    bson_destroy(&items);
    bson_destroy(&doc);
}


/* NGX_AGAIN: there is more after this page */

static ngx_int_t
ngx_http_feed_graph_item(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_graph_page_t  *gp = data;

    char         key[16];
    bson_t       item;
    const char  *k;

    if (gp->n == gp->op->limit) {
        return NGX_AGAIN;
    }

    bson_uint32_to_string(gp->n++, &k, key, sizeof(key));

    BSON_APPEND_DOCUMENT_BEGIN(gp->items, k, &item);
    BSON_APPEND_UTF8(&item, "id", user->data);
    BSON_APPEND_INT64(&item, "since", created);
    bson_append_document_end(gp->items, &item);

    gp->last.user = *user;
    gp->last.since = created;

    return NGX_OK;
}


/*
 * Cursors are opaque: base64url of "<created ms>:<other user>", the user
 * a valid id (so at most NGX_HTTP_FEED_GRAPH_CURSOR_RAW bytes in all);
 * written for the thread, so with no nginx pool.
 */

static void
ngx_http_feed_graph_cursor(char *buf, size_t size,
    ngx_http_feed_graph_pos_t *pos)
{
    u_char     raw[NGX_HTTP_FEED_GRAPH_CURSOR_RAW];
    ngx_str_t  src, dst;

    src.data = raw;
    src.len = ngx_snprintf(raw, sizeof(raw), "%L:%s", pos->since,
                           pos->user.data)
              - raw;

    if (ngx_base64_encoded_length(src.len) >= size) {
        buf[0] = '\0';
        return;
    }

    dst.data = (u_char *) buf;
    ngx_encode_base64url(&dst, &src);
    buf[dst.len] = '\0';
}


ngx_int_t
ngx_http_feed_graph_cursor_parse(ngx_str_t *text,
    ngx_http_feed_graph_list_op_t *op)
{
    off_t        ms;
    u_char      *p, *colon;
    ngx_str_t    dst;
    ngx_uint_t   neg;

    /* ngx_base64_decoded_length() counts unpadded input's last bytes up */
    u_char       raw[NGX_HTTP_FEED_GRAPH_CURSOR_RAW + 2];

    if (text->len == 0 || text->len > NGX_HTTP_FEED_GRAPH_CURSOR_MAX) {
        return NGX_DECLINED;
    }

    dst.data = raw;

    if (ngx_decode_base64url(&dst, text) != NGX_OK) {
        return NGX_DECLINED;
    }

    colon = ngx_strlchr(raw, raw + dst.len, ':');
    if (colon == NULL) {
        return NGX_DECLINED;
    }

    /*
     * Any time a document may hold, as the maker wrote it: another
     * application may have written dates before 1970 or far ahead.
     */

    neg = (*raw == '-');
    ms = ngx_atoof(raw + neg, colon - raw - neg);

    if (ms == NGX_ERROR) {
        return NGX_DECLINED;
    }

    p = colon + 1;

    if (!ngx_http_feed_user_valid(p, raw + dst.len - p)) {
        return NGX_DECLINED;
    }

    op->has_cursor = 1;
    op->cursor_ms = neg ? -ms : ms;
    op->cursor_id.len = raw + dst.len - p;
    ngx_memcpy(op->cursor_id.data, p, op->cursor_id.len);
    op->cursor_id.data[op->cursor_id.len] = '\0';

    return NGX_OK;
}
