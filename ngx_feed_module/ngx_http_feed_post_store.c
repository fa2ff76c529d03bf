
/*
 * ngx_feed_module: posts in MongoDB (runs in thread pool tasks).
 *
 * {_id: ObjectId, author, body, ts, data?, deleted?, q?, qt?}: the id is
 * made by the module, so ids sort by creation time and serve as cursors.
 * "q" lists the queue entries ("post", "delete") the post still awaits,
 * "qt" when the outbox sweeper may take them over (see ngx_http_feed_outbox.c).
 */


#include "ngx_http_feed_post.h"


static ngx_int_t ngx_http_feed_post_page(mongoc_collection_t *posts,
    ngx_http_feed_post_op_t *op, bson_t *items, bson_error_t *error);
static void ngx_http_feed_post_store_json(ngx_http_feed_mongo_task_t *t,
    bson_t *doc);


void
ngx_http_feed_post_insert_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_new_t  *np = t->data;

    bson_t                doc, q;
    mongoc_collection_t  *posts;

    /* stored with its queue entry pending: never lost for fanout */

    bson_init(&doc);
    bson_concat(&doc, np->doc);
    BSON_APPEND_ARRAY_BEGIN(&doc, "q", &q);
    BSON_APPEND_UTF8(&q, "0", "post");
    bson_append_array_end(&doc, &q);
    BSON_APPEND_INT64(&doc, "qt", np->ts + NGX_HTTP_FEED_OUTBOX_GRACE);

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    t->rc = mongoc_collection_insert_one(posts, &doc, NULL, NULL, &t->error)
            ? NGX_OK : NGX_ERROR;

    mongoc_collection_destroy(posts);
    bson_destroy(&doc);
}


void
ngx_http_feed_post_get_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    bson_t                filter, ne, doc, out;
    ngx_int_t             rc;
    mongoc_collection_t  *posts;

    bson_init(&filter);
    BSON_APPEND_OID(&filter, "_id", &op->id);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "deleted", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(&filter, &ne);

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    rc = ngx_http_feed_mongo_find_one(posts, &filter, NULL, &doc, &t->error);

    mongoc_collection_destroy(posts);
    bson_destroy(&filter);

    if (rc == NGX_ERROR) {
        t->rc = NGX_ERROR;
        return;
    }

    t->rc = NGX_OK;

    if (rc == NGX_DECLINED) {
        return;
    }

    op->found = 1;

    bson_init(&out);

    if (ngx_http_feed_post_json(&doc, &out) == NGX_OK) {
        ngx_http_feed_post_store_json(t, &out);

    } else {
        t->rc = NGX_ERROR;
    }

    bson_destroy(&out);
    bson_destroy(&doc);
}


/* the author's own posts, newest first, between max_id and since_id */

void
ngx_http_feed_post_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    bson_t                doc, items;
    ngx_int_t             rc;
    mongoc_collection_t  *posts;

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    bson_init(&doc);
    bson_init(&items);

    rc = ngx_http_feed_post_page(posts, op, &items, &t->error);

    mongoc_collection_destroy(posts);

    t->rc = NGX_ERROR;

    if (rc != NGX_ERROR) {
        BSON_APPEND_ARRAY(&doc, "items", &items);

        if (op->has_next) {
            BSON_APPEND_UTF8(&doc, "next", op->next);

        } else {
            BSON_APPEND_NULL(&doc, "next");
        }

        t->rc = NGX_OK;
        ngx_http_feed_post_store_json(t, &doc);
    }

    bson_destroy(&items);
    bson_destroy(&doc);
}


static ngx_int_t
ngx_http_feed_post_page(mongoc_collection_t *posts,
    ngx_http_feed_post_op_t *op, bson_t *items, bson_error_t *error)
{
    char              key[16];
    bson_t            filter, ne, range, opts, sort, item;
    bson_iter_t       it;
    ngx_int_t         rc;
    ngx_uint_t        n;
    const char       *k;
    const bson_t     *doc;
    mongoc_cursor_t  *cursor;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "author", op->author.data);

    if (op->has_max || op->has_since) {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &range);

        if (op->has_max) {
            BSON_APPEND_OID(&range, "$lt", &op->max_id);
        }

        if (op->has_since) {
            BSON_APPEND_OID(&range, "$gt", &op->since_id);
        }

        bson_append_document_end(&filter, &range);
    }

    BSON_APPEND_DOCUMENT_BEGIN(&filter, "deleted", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(&filter, &ne);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) op->limit + 1);

    cursor = mongoc_collection_find_with_opts(posts, &filter, &opts, NULL);

    n = 0;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (n == op->limit) {
            op->has_next = 1;
            break;
        }

        bson_uint32_to_string(n++, &k, key, sizeof(key));

        BSON_APPEND_DOCUMENT_BEGIN(items, k, &item);
        (void) ngx_http_feed_post_json(doc, &item);
        bson_append_document_end(items, &item);

        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_to_string(bson_iter_oid(&it), op->next);
        }
    }

    if (!op->has_next) {
        op->next[0] = '\0';
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/*
 * Marks the post deleted, drops its content, and queues the delete entry,
 * all in one update: found only when uid is the author and it was there.
 */

void
ngx_http_feed_post_delete_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    bson_t                selector, ne, update, set, unset, add, reply;
    mongoc_collection_t  *posts;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", &op->id);
    BSON_APPEND_UTF8(&selector, "author", op->author.data);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "deleted", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(&selector, &ne);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_BOOL(&set, "deleted", true);
    BSON_APPEND_INT64(&set, "qt", op->now + NGX_HTTP_FEED_OUTBOX_GRACE);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "body", "");
    BSON_APPEND_UTF8(&unset, "data", "");
    bson_append_document_end(&update, &unset);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$addToSet", &add);
    BSON_APPEND_UTF8(&add, "q", "delete");
    bson_append_document_end(&update, &add);

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    t->rc = mongoc_collection_update_one(posts, &selector, &update, NULL,
                                         &reply, &t->error)
            ? NGX_OK : NGX_ERROR;

    if (t->rc == NGX_OK) {
        op->found = (ngx_http_feed_bson_int(&reply, "matchedCount") == 1);
    }

    mongoc_collection_destroy(posts);
    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&selector);
}


/* a stored post as the API shows it: {id, author, body, ts, data?} */

ngx_int_t
ngx_http_feed_post_json(const bson_t *stored, bson_t *out)
{
    char         hex[25];
    bson_iter_t  it;

    if (!bson_iter_init_find(&it, stored, "_id") || !BSON_ITER_HOLDS_OID(&it))
    {
        return NGX_ERROR;
    }

    bson_oid_to_string(bson_iter_oid(&it), hex);
    BSON_APPEND_UTF8(out, "id", hex);

    if (bson_iter_init_find(&it, stored, "author")) {
        BSON_APPEND_VALUE(out, "author", bson_iter_value(&it));
    }

    if (bson_iter_init_find(&it, stored, "body")) {
        BSON_APPEND_VALUE(out, "body", bson_iter_value(&it));
    }

    BSON_APPEND_INT64(out, "ts", ngx_http_feed_bson_int(stored, "ts"));

    if (bson_iter_init_find(&it, stored, "data")) {
        BSON_APPEND_VALUE(out, "data", bson_iter_value(&it));
    }

    return NGX_OK;
}


/* the answer's JSON, made in the thread: the loop only copies it out */

static void
ngx_http_feed_post_store_json(ngx_http_feed_mongo_task_t *t, bson_t *doc)
{
    ngx_http_feed_post_op_t  *op = t->data;

    op->json = bson_as_relaxed_extended_json(doc, &op->json_len);

    if (op->json == NULL) {
        t->rc = NGX_ERROR;
    }
}
