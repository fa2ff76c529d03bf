
/*
 * ngx_feed_module: the follow graph, thread side: what a follow and a
 * list page do in a thread pool task, through the follows store (and the
 * filters store: the blocks a follow must respect, the pages of blocks
 * and mutes), and the lists' cursors.
 */


#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_json.h"


/* a list page being made */
typedef struct {
    ngx_http_feed_graph_list_op_t  *op;
    bson_t                         *items;
    ngx_uint_t                      n;
    ngx_http_feed_graph_pos_t       last;
} ngx_http_feed_graph_page_t;


static ngx_int_t ngx_http_feed_graph_follow_checked(mongoc_client_t *client,
    const char *database, ngx_http_feed_follow_op_t *op,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_list_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_follows_page_t *page,
    ngx_http_feed_graph_list_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_item(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static void ngx_http_feed_graph_cursor(char *buf, size_t size,
    ngx_http_feed_graph_pos_t *pos);


/*
 * The cache side effects are recorded first, so that none is lost
 * whatever happens after the write; then the write, then what it owes
 * (ngx_http_feed_effects.c)
 */

void
ngx_http_feed_graph_follow_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_graph_change_t  *ch = t->data;

    t->rc = ngx_http_feed_effects_record(client, t->database, &ch->fx,
                                         &t->error);
    if (t->rc != NGX_OK) {
        return;
    }

    if (ch->op.want) {
        t->rc = ngx_http_feed_graph_follow_checked(client, t->database,
                                                   &ch->op, &t->error);
    } else {
        t->rc = ngx_http_feed_graph_follow_apply(client, t->database,
                                                 &ch->op, &t->error);
    }

    if (t->rc != NGX_OK) {
        return;
    }

    ngx_http_feed_graph_owe(&ch->fx, &ch->op);

    t->rc = ngx_http_feed_effects_owed(client, t->database, &ch->fx,
                                       &t->error);
}


/*
 * What a follow or an unfollow may do to caches, recorded before it: the
 * follower's timeline (in Redis and in the model in MongoDB) and both users'
 * counts
 */

ngx_int_t
ngx_http_feed_graph_effects(ngx_http_feed_effects_t *fx,
    ngx_http_feed_follow_op_t *op)
{
    if (ngx_http_feed_effects_add(fx, &op->src, NGX_HTTP_FEED_EFFECTS_ALL)
        == NGX_ERROR
        || ngx_http_feed_effects_add(fx, &op->dst,
                                     NGX_HTTP_FEED_EFFECT_COUNTS)
           == NGX_ERROR)
    {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * What it did, after it: only a change is owed anything.  A follow drops
 * the follower's timeline (the followee's posts are merged by a rebuild);
 * an unfollow hides the followee's posts in it, as a mute does, so that a
 * stream of it is sent their deletes and reads stay hits.
 */

void
ngx_http_feed_graph_owe(ngx_http_feed_effects_t *fx,
    ngx_http_feed_follow_op_t *op)
{
    if (!op->changed) {
        return;
    }

    if (op->want) {
        ngx_http_feed_effects_owe(fx, &op->src, NGX_HTTP_FEED_EFFECTS_ALL);

    } else {
        ngx_http_feed_effects_owe(fx, &op->src,
                                  NGX_HTTP_FEED_EFFECTS_ALL
                                  & ~NGX_HTTP_FEED_EFFECT_TIMELINE);
        ngx_http_feed_effects_owe_filter(fx, &op->src, &op->dst,
                                         NGX_HTTP_FEED_TIMELINE_UNFOLLOWED,
                                         1);
    }

    ngx_http_feed_effects_owe(fx, &op->dst, NGX_HTTP_FEED_EFFECT_COUNTS);
}


/*
 * A follow or an unfollow, also a block's clean-up (filters.c); the
 * caches it changes are the effects' (ngx_http_feed_graph_owe)
 */

ngx_int_t
ngx_http_feed_graph_follow_apply(mongoc_client_t *client,
    const char *database, ngx_http_feed_follow_op_t *op, bson_error_t *error)
{
    return ngx_http_feed_follows_change(client, database, op, error);
}


/*
 * No follow between two users of whom one blocks the other: checked before
 * the follow is written (nothing is written), and after, as
 * feed_follow_max is.  A block cleans up after it is written, so of a
 * follow and a block at the same time, either the follow's second check
 * sees the block and the follow takes itself back (an unfollow, a change
 * like any), or the follow was written before the block and the block's
 * clean-up removes it.
 */

static ngx_int_t
ngx_http_feed_graph_follow_checked(mongoc_client_t *client,
    const char *database, ngx_http_feed_follow_op_t *op, bson_error_t *error)
{
    ngx_int_t  rc;

    if (ngx_http_feed_filters_blocked(client, database, &op->src, &op->dst,
                                      1, &op->blocked, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (op->blocked) {
        return NGX_OK;
    }

    if (ngx_http_feed_graph_follow_apply(client, database, op, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!op->changed || op->over) {
        return NGX_OK;
    }

    if (ngx_http_feed_filters_blocked(client, database, &op->src, &op->dst,
                                      1, &op->blocked, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (!op->blocked) {
        return NGX_OK;
    }

    op->want = 0;
    rc = ngx_http_feed_graph_follow_apply(client, database, op, error);
    op->want = 1;

    /* written, then taken back: caches are invalidated as for a change */
    op->changed = 1;

    return rc;
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

    rc = ngx_http_feed_graph_list_read(client, t->database, &page, op,
                                       &t->error);

    op->skipped = page.skipped;

    if (rc == NGX_ERROR) {
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

    op->json = ngx_http_feed_json_text(&doc, &op->json_len);

    t->rc = op->json ? NGX_OK : NGX_ERROR;

done:

    bson_destroy(&items);
    bson_destroy(&doc);
}


/*
 * The page from the follows store, or the filters store for a list of
 * blocks or mutes, and the count when Redis did not have it (a list of
 * filters is counted at each read: it is not cached)
 */

static ngx_int_t
ngx_http_feed_graph_list_read(mongoc_client_t *client, const char *database,
    ngx_http_feed_follows_page_t *page, ngx_http_feed_graph_list_op_t *op,
    bson_error_t *error)
{
    ngx_int_t  rc, crc;

    if (op->kind) {
        rc = ngx_http_feed_filters_page(client, database, op->kind, page,
                                        error);
    } else {
        rc = ngx_http_feed_follows_page(client, database, page, error);
    }

    if (rc == NGX_ERROR || !op->need_count) {
        return rc;
    }

    if (op->kind) {
        crc = ngx_http_feed_filters_count(client, database, &op->user,
                                          op->kind, &op->count, error);
    } else {
        crc = ngx_http_feed_follows_count(client, database, &op->user,
                                          op->followers, &op->count, error);
    }

    return crc == NGX_OK ? rc : NGX_ERROR;
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
