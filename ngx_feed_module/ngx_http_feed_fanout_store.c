
/*
 * ngx_feed_module: what fanout reads from MongoDB (in thread pool tasks):
 * the post, and the author's followers a page at a time, by the
 * {dst, status, created, src} index, newest relationship first.
 */


#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_graph.h"
#include "ngx_http_feed_post.h"


static ngx_int_t ngx_http_feed_fanout_post(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_followers(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);


void
ngx_http_feed_fanout_page_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_fanout_page_t  *page = t->data;

    t->rc = NGX_ERROR;

    if (page->want_post) {
        if (ngx_http_feed_fanout_post(client, t->database, page, &t->error)
            != NGX_OK)
        {
            return;
        }

        if (!page->found) {
            t->rc = NGX_OK;
            return;
        }
    }

    if (page->limit == 0) {
        t->rc = NGX_OK;
        return;
    }

    t->rc = ngx_http_feed_fanout_followers(client, t->database, page,
                                           &t->error);
}


/* the post as the cache keeps it; not found when absent or deleted */

static ngx_int_t
ngx_http_feed_fanout_post(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, bson_error_t *error)
{
    bson_t                filter, ne, doc, out;
    ngx_int_t             rc;
    bson_oid_t            oid;
    mongoc_collection_t  *posts;

    bson_oid_init_from_string(&oid, page->post_id);

    bson_init(&filter);
    BSON_APPEND_OID(&filter, "_id", &oid);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "deleted", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(&filter, &ne);

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    rc = ngx_http_feed_mongo_find_one(posts, &filter, NULL, &doc, error);

    mongoc_collection_destroy(posts);
    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    page->found = 1;

    bson_init(&out);

    if (ngx_http_feed_post_json(&doc, &out) == NGX_OK) {
        page->json = bson_as_relaxed_extended_json(&out, &page->json_len);
    }

    bson_destroy(&out);
    bson_destroy(&doc);

    return page->json ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_feed_fanout_followers(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, bson_error_t *error)
{
    bson_t                filter, any, a, b, lt, lt2, opts, sort, proj;
    ngx_int_t             rc;
    bson_iter_t           it;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *follows;
    ngx_http_feed_user_t *u;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "dst", page->author.data);
    BSON_APPEND_INT32(&filter, "status", 1);

    if (page->has_cursor) {
        BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &any);

        BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &a);
        BSON_APPEND_DOCUMENT_BEGIN(&a, "created", &lt);
        BSON_APPEND_DATE_TIME(&lt, "$lt", page->cursor_created);
        bson_append_document_end(&a, &lt);
        bson_append_document_end(&any, &a);

        BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &b);
        BSON_APPEND_DATE_TIME(&b, "created", page->cursor_created);
        BSON_APPEND_DOCUMENT_BEGIN(&b, "src", &lt2);
        BSON_APPEND_UTF8(&lt2, "$lt", page->cursor_src.data);
        bson_append_document_end(&b, &lt2);
        bson_append_document_end(&any, &b);

        bson_append_array_end(&filter, &any);
    }

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "created", -1);
    BSON_APPEND_INT32(&sort, "src", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "src", 1);
    BSON_APPEND_INT32(&proj, "created", 1);
    BSON_APPEND_INT32(&proj, "_id", 0);
    bson_append_document_end(&opts, &proj);

    /* no limit: ids that are not ours are skipped, not counted */
    BSON_APPEND_INT32(&opts, "batchSize", (int32_t) page->limit);

    follows = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FOLLOWS);

    cursor = mongoc_collection_find_with_opts(follows, &filter, &opts, NULL);

    page->users = bson_malloc(page->limit * sizeof(ngx_http_feed_user_t));
    page->nusers = 0;

    while (page->nusers < page->limit && mongoc_cursor_next(cursor, &doc)) {
        u = &page->users[page->nusers];

        if (ngx_http_feed_bson_user(doc, "src", u) != NGX_OK) {
            page->skipped++;
            continue;
        }

        page->nusers++;

        page->cursor_src = *u;
        page->cursor_created = bson_iter_init_find(&it, doc, "created")
                               && BSON_ITER_HOLDS_DATE_TIME(&it)
                               ? bson_iter_date_time(&it) : 0;
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(follows);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}
