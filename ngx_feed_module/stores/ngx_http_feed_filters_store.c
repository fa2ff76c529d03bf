
/*
 * ngx_feed_module: the filters store (runs in thread pool tasks), the only
 * code that knows the "filters" collection: who blocks or mutes whom.
 *
 * A filter is {_id, src, dst, kind, created}: src blocks (kind "b") or
 * mutes ("m") dst since created, or hid ("h") the post whose id is dst.
 * A removed filter is deleted: a filter added again is a new one, its
 * created the time of the new add.  A block
 * also holds "c": 0 until its clean-up (the follows between the two, made
 * by the graph) is done, then 1; an add that finds c 0 (an earlier one was
 * interrupted) counts as a change, and its caller cleans up again.
 *
 * A user has at most feed_filter_max filters, blocks and mutes together,
 * and feed_hidden_max hidden posts: checked before the add is written,
 * and again after (concurrent adds),
 * where an add over the limit deletes itself, as follows do with
 * feed_follow_max (ngx_http_feed_follows_store.c).
 */


#include "ngx_http_feed_filters_store.h"


#define NGX_HTTP_FEED_FILTERS          "filters"
#define NGX_HTTP_FEED_FILTERS_RETRIES  5

/* a user's filters read in one batch (feed_filter_max is 10000 by default) */
#define NGX_HTTP_FEED_FILTERS_BATCH    100000


/* the tokens of ngx_http_feed_filters_of, being written */
typedef struct {
    bson_string_t                *out;
    u_char                        kind;
} ngx_http_feed_filters_tokens_t;


static ngx_int_t ngx_http_feed_filters_add(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_find(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_insert(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_over(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, ngx_uint_t written, bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_delete(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, ngx_uint_t by_id, bson_error_t *error);
static void ngx_http_feed_filters_pair(bson_t *doc,
    ngx_http_feed_filter_op_t *op);
static ngx_int_t ngx_http_feed_filters_tokens(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t max,
    ngx_http_feed_filters_tokens_t *tk, bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_mine(mongoc_collection_t *filters,
    bson_t *filter, bson_t *opts, ngx_http_feed_filters_tokens_t *tk,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_filters_token(void *data,
    ngx_http_feed_user_t *user, int64_t created);


/*
 * The pair, unique; a user's filters of a kind, newest first (lists and
 * counts); who blocked a user, newest first (ngx_http_feed_filters_of).
 */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_filters_indexes = {
    NGX_HTTP_FEED_FILTERS,
    "[{\"key\": {\"src\": 1, \"kind\": 1, \"dst\": 1}, \"name\": \"pair\","
    "  \"unique\": true},"
    " {\"key\": {\"src\": 1, \"kind\": 1, \"created\": -1, \"dst\": -1},"
    "  \"name\": \"src_kind_created\"},"
    " {\"key\": {\"dst\": 1, \"kind\": 1, \"created\": -1, \"src\": -1},"
    "  \"name\": \"dst_kind_created\"}]"
};


/* an add or a removal: op->changed when it changed something */

ngx_int_t
ngx_http_feed_filters_change(mongoc_client_t *client, const char *database,
    ngx_http_feed_filter_op_t *op, bson_error_t *error)
{
    ngx_int_t             rc;
    mongoc_collection_t  *filters;

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    op->changed = 0;
    op->over = 0;

    if (op->want) {
        rc = ngx_http_feed_filters_add(filters, op, error);

    } else {
        rc = ngx_http_feed_filters_delete(filters, op, 0, error);
    }

    mongoc_collection_destroy(filters);

    return rc;
}


static ngx_int_t
ngx_http_feed_filters_add(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    for (i = 0; i < NGX_HTTP_FEED_FILTERS_RETRIES; i++) {

        rc = ngx_http_feed_filters_find(filters, op, error);
        if (rc != NGX_DECLINED) {
            return rc;
        }

        rc = ngx_http_feed_filters_over(filters, op, 0, error);
        if (rc != NGX_OK) {
            return (rc == NGX_DECLINED) ? NGX_OK : NGX_ERROR;
        }

        rc = ngx_http_feed_filters_insert(filters, op, error);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_AGAIN) {
            /* the same add at the same time: look again */
            continue;
        }

        rc = ngx_http_feed_filters_over(filters, op, 1, error);
        if (rc != NGX_DECLINED) {
            op->changed = (rc == NGX_OK);
            return rc;
        }

        /* over the limit with others added meanwhile: taken back */

        return ngx_http_feed_filters_delete(filters, op, 1, error);
    }

    bson_set_error(error, MONGOC_ERROR_STREAM, 0,
                   "too many concurrent changes of one filter");

    return NGX_ERROR;
}


/*
 * The filter there already: NGX_OK, changed when it is a block whose
 * clean-up was interrupted; NGX_DECLINED when there is none
 */

static ngx_int_t
ngx_http_feed_filters_find(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error)
{
    bson_t       filter, doc;
    ngx_int_t    rc;
    bson_iter_t  it;

    bson_init(&filter);
    ngx_http_feed_filters_pair(&filter, op);

    rc = ngx_http_feed_mongo_find_one(filters, &filter, NULL, &doc, error);

    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return rc;
    }

    if (bson_iter_init_find(&it, &doc, "_id") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), &op->id);
    }

    op->changed = (op->kind == NGX_HTTP_FEED_FILTER_BLOCK
                   && bson_iter_init_find(&it, &doc, "c")
                   && BSON_ITER_HOLDS_NUMBER(&it)
                   && bson_iter_as_int64(&it) == 0);

    bson_destroy(&doc);

    return NGX_OK;
}


/* NGX_AGAIN: the same add at the same time inserted it */

static ngx_int_t
ngx_http_feed_filters_insert(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, bson_error_t *error)
{
    bson_t     selector, set;
    ngx_int_t  rc;

    bson_oid_init(&op->id, NULL);

    bson_init(&selector);
    ngx_http_feed_filters_pair(&selector, op);

    bson_init(&set);
    BSON_APPEND_OID(&set, "_id", &op->id);
    BSON_APPEND_DATE_TIME(&set, "created", op->now);

    if (op->kind == NGX_HTTP_FEED_FILTER_BLOCK) {
        BSON_APPEND_INT32(&set, "c", 0);
    }

    rc = ngx_http_feed_mongo_insert_new(filters, &selector, &set, error);

    bson_destroy(&set);
    bson_destroy(&selector);

    return rc;
}


/*
 * feed_filter_max (blocks and mutes together) or feed_hidden_max, before
 * the add is written (written 0) and after (1): NGX_DECLINED (and
 * op->over) when past it
 */

static ngx_int_t
ngx_http_feed_filters_over(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, ngx_uint_t written, bson_error_t *error)
{
    bson_t   filter, in, kinds;
    int64_t  n;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "src", op->src.data);

    if (op->kind == NGX_HTTP_FEED_FILTER_HIDDEN) {
        BSON_APPEND_UTF8(&filter, "kind", "h");

    } else {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "kind", &in);
        BSON_APPEND_ARRAY_BEGIN(&in, "$in", &kinds);
        BSON_APPEND_UTF8(&kinds, "0", "b");
        BSON_APPEND_UTF8(&kinds, "1", "m");
        bson_append_array_end(&in, &kinds);
        bson_append_document_end(&filter, &in);
    }

    n = mongoc_collection_count_documents(filters, &filter, NULL, NULL, NULL,
                                          error);

    bson_destroy(&filter);

    if (n < 0) {
        return NGX_ERROR;
    }

    if (n + (written ? 0 : 1) <= op->max) {
        return NGX_OK;
    }

    op->over = 1;

    return NGX_DECLINED;
}


/*
 * A removal (by_id 0; changed when there was one), or an add taken back
 * (1): only the document this add inserted
 */

static ngx_int_t
ngx_http_feed_filters_delete(mongoc_collection_t *filters,
    ngx_http_feed_filter_op_t *op, ngx_uint_t by_id, bson_error_t *error)
{
    bool     ok;
    bson_t   selector, reply;
    int64_t  deleted;

    bson_init(&selector);

    if (by_id) {
        BSON_APPEND_OID(&selector, "_id", &op->id);

    } else {
        ngx_http_feed_filters_pair(&selector, op);
    }

    ok = mongoc_collection_delete_one(filters, &selector, NULL, &reply,
                                      error);

    deleted = ok ? ngx_http_feed_bson_int(&reply, "deletedCount") : 0;

    bson_destroy(&reply);
    bson_destroy(&selector);

    if (!by_id) {
        op->changed = (deleted != 0);
    }

    return ok ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_feed_filters_pair(bson_t *doc, ngx_http_feed_filter_op_t *op)
{
    char  kind[2];

    kind[0] = (char) op->kind;
    kind[1] = '\0';

    BSON_APPEND_UTF8(doc, "src", op->src.data);
    BSON_APPEND_UTF8(doc, "kind", kind);
    BSON_APPEND_UTF8(doc, "dst", op->dst.data);
}


/* a block's clean-up done: a later add of it is no change */

ngx_int_t
ngx_http_feed_filters_cleaned(mongoc_client_t *client, const char *database,
    ngx_http_feed_filter_op_t *op, bson_error_t *error)
{
    bool                  ok;
    bson_t                selector, update, set;
    mongoc_collection_t  *filters;

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", &op->id);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT32(&set, "c", 1);
    bson_append_document_end(&update, &set);

    ok = mongoc_collection_update_one(filters, &selector, &update, NULL,
                                      NULL, error);

    bson_destroy(&update);
    bson_destroy(&selector);
    mongoc_collection_destroy(filters);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * *blocked: user blocks other, or (either) one of them blocks the other
 */

ngx_int_t
ngx_http_feed_filters_blocked(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_http_feed_user_t *other,
    ngx_uint_t either, ngx_uint_t *blocked, bson_error_t *error)
{
    bson_t                filter, any, a, b, doc;
    ngx_int_t             rc;
    mongoc_collection_t  *filters;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "kind", "b");
    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &any);

    BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &a);
    BSON_APPEND_UTF8(&a, "src", user->data);
    BSON_APPEND_UTF8(&a, "dst", other->data);
    bson_append_document_end(&any, &a);

    if (either) {
        BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &b);
        BSON_APPEND_UTF8(&b, "src", other->data);
        BSON_APPEND_UTF8(&b, "dst", user->data);
        bson_append_document_end(&any, &b);
    }

    bson_append_array_end(&filter, &any);

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    rc = ngx_http_feed_mongo_find_one(filters, &filter, NULL, &doc, error);

    mongoc_collection_destroy(filters);
    bson_destroy(&filter);

    if (rc == NGX_OK) {
        bson_destroy(&doc);
    }

    *blocked = (rc == NGX_OK);

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/*
 * A page of a user's filters of a kind (page->followers 0), or of who
 * has the user under it (1), newest first by (created, other user), as
 * the follows' pages (ngx_http_feed_follows_page).
 */

ngx_int_t
ngx_http_feed_filters_page(mongoc_client_t *client, const char *database,
    u_char kind, ngx_http_feed_follows_page_t *page, bson_error_t *error)
{
    char                  k[2];
    bson_t                filter, opts;
    ngx_int_t             rc;
    const char           *self, *other;
    mongoc_collection_t  *filters;

    self = page->followers ? "dst" : "src";
    other = page->followers ? "src" : "dst";

    k[0] = (char) kind;
    k[1] = '\0';

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, self, page->user->data);
    BSON_APPEND_UTF8(&filter, "kind", k);

    if (page->has_after) {
        ngx_http_feed_mongo_after(&filter, "created", page->after_created,
                                  other, page->after_user->data);
    }

    bson_init(&opts);
    ngx_http_feed_mongo_newest(&opts, "created", other, page->batch);

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    rc = ngx_http_feed_mongo_each_user(filters, &filter, &opts, other,
                                       "created", page->each, page->data,
                                       &page->skipped, error);

    mongoc_collection_destroy(filters);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/* how many filters of a kind a user has */

ngx_int_t
ngx_http_feed_filters_count(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, u_char kind, int64_t *n, bson_error_t *error)
{
    char                  k[2];
    bson_t                filter;
    mongoc_collection_t  *filters;

    k[0] = (char) kind;
    k[1] = '\0';

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "src", user->data);
    BSON_APPEND_UTF8(&filter, "kind", k);

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    *n = mongoc_collection_count_documents(filters, &filter, NULL, NULL,
                                           NULL, error);

    mongoc_collection_destroy(filters);
    bson_destroy(&filter);

    return *n < 0 ? NGX_ERROR : NGX_OK;
}


ngx_int_t
ngx_http_feed_filters_of(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_uint_t max, char **authors, size_t *len,
    bson_error_t *error)
{
    ngx_int_t                        rc;
    ngx_http_feed_filters_tokens_t   tk;

    *authors = NULL;
    *len = 0;

    tk.out = bson_string_new(NULL);

    rc = ngx_http_feed_filters_tokens(client, database, user, max, &tk,
                                      error);

    if (rc == NGX_ERROR || tk.out->len == 0) {
        bson_string_free(tk.out, true);
        return rc;
    }

    *len = tk.out->len;
    *authors = bson_string_free(tk.out, false);

    return NGX_OK;
}


/*
 * Whom user blocks and mutes, and the posts user hid, all of them: a user
 * has at most feed_filter_max and feed_hidden_max; then who blocked user,
 * the newest max only: anybody may block anybody, so these have no bound
 * of their own.  One query
 * each, in one batch each: a rebuild, or a read without Redis, waits for
 * them.
 */

static ngx_int_t
ngx_http_feed_filters_tokens(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_uint_t max,
    ngx_http_feed_filters_tokens_t *tk, bson_error_t *error)
{
    bson_t                opts, filter, in, projection;
    ngx_int_t             rc;
    ngx_uint_t            skipped;
    mongoc_collection_t  *filters;

    filters = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FILTERS);

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "src", (const char *) user->data);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "kind", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &projection);
    BSON_APPEND_UTF8(&projection, "0", "b");
    BSON_APPEND_UTF8(&projection, "1", "m");
    BSON_APPEND_UTF8(&projection, "2", "h");
    bson_append_array_end(&in, &projection);
    bson_append_document_end(&filter, &in);

    bson_init(&opts);
    BSON_APPEND_INT32(&opts, "batchSize", NGX_HTTP_FEED_FILTERS_BATCH);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &projection);
    BSON_APPEND_INT32(&projection, "dst", 1);
    BSON_APPEND_INT32(&projection, "kind", 1);
    bson_append_document_end(&opts, &projection);

    rc = ngx_http_feed_filters_mine(filters, &filter, &opts, tk, error);

    bson_destroy(&filter);
    bson_destroy(&opts);

    if (rc == NGX_OK && max) {

        /* who blocked user: user's blocks read the other way round */

        bson_init(&filter);
        BSON_APPEND_UTF8(&filter, "dst", (const char *) user->data);
        BSON_APPEND_UTF8(&filter, "kind", "b");

        bson_init(&opts);
        ngx_http_feed_mongo_newest(&opts, "created", "src", max);
        BSON_APPEND_INT64(&opts, "limit", (int64_t) max);

        tk->kind = NGX_HTTP_FEED_FILTER_BLOCKED;
        skipped = 0;

        rc = ngx_http_feed_mongo_each_user(filters, &filter, &opts, "src",
                                           "created",
                                           ngx_http_feed_filters_token, tk,
                                           &skipped, error);

        bson_destroy(&filter);
        bson_destroy(&opts);
    }

    mongoc_collection_destroy(filters);

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* whom user blocks or mutes and the posts user hid, each with its kind */

static ngx_int_t
ngx_http_feed_filters_mine(mongoc_collection_t *filters, bson_t *filter,
    bson_t *opts, ngx_http_feed_filters_tokens_t *tk, bson_error_t *error)
{
    ngx_int_t              rc;
    bson_iter_t            it;
    const bson_t          *doc;
    mongoc_cursor_t       *cursor;
    ngx_http_feed_user_t   user;

    cursor = mongoc_collection_find_with_opts(filters, filter, opts, NULL);

    rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_bson_user(doc, "dst", &user) != NGX_OK
            || !bson_iter_init_find(&it, doc, "kind")
            || !BSON_ITER_HOLDS_UTF8(&it))
        {
            continue;
        }

        tk->kind = bson_iter_utf8(&it, NULL)[0];

        (void) ngx_http_feed_filters_token(tk, &user, 0);
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);

    return rc;
}


/* one token; the queries' limits bound how many */

static ngx_int_t
ngx_http_feed_filters_token(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_filters_tokens_t  *tk = data;

    bson_string_append_printf(tk->out, "%s%c%s", tk->out->len ? " " : "",
                              tk->kind, user->data);

    return NGX_OK;
}
