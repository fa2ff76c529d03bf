
/*
 * ngx_feed_module: fanout's thread side: what it reads from MongoDB (in
 * thread pool tasks): the post, and the author's followers a page at a
 * time, newest relationship first, from the follows store.
 */


#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_post.h"


static ngx_int_t ngx_http_feed_fanout_post(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_followers(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_follower(void *data,
    ngx_http_feed_user_t *user, int64_t created);


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
    ngx_int_t                      rc;
    ngx_http_feed_follows_page_t   fp;

    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = &page->author;
    fp.followers = 1;
    fp.has_after = page->has_cursor;
    fp.after_created = page->cursor_created;
    fp.after_user = &page->cursor_src;
    fp.batch = page->limit;
    fp.each = ngx_http_feed_fanout_follower;
    fp.data = page;

    page->users = bson_malloc(page->limit * sizeof(ngx_http_feed_user_t));
    page->nusers = 0;

    rc = ngx_http_feed_follows_page(client, database, &fp, error);

    page->skipped += fp.skipped;

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* NGX_DONE: the page is full */

static ngx_int_t
ngx_http_feed_fanout_follower(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_fanout_page_t  *page = data;

    page->users[page->nusers++] = *user;

    page->cursor_src = *user;
    page->cursor_created = created;

    return page->nusers < page->limit ? NGX_OK : NGX_DONE;
}
