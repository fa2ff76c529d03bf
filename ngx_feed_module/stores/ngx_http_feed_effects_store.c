
/*
 * ngx_feed_module: the effects store (runs in thread pool tasks), the only
 * code that knows the "cache_effects" collection.
 *
 * {_id: "<user>", t: 1, c: 1, k: 1, n: ObjectId, due: <ms>, a: <tries>,
 *  since: <ms>}: the cache side effects a write still owes the user (t:
 * the cached timeline dropped, c: the cached counts, k: the timeline in
 * the model of MongoDB timelines), written before the write itself, so
 * that no crash or failure after it can lose them.  "n" is the token of
 * whoever applies them now (a request, or a sweeper that claimed the
 * entry); the entry is deleted only by the holder of the current token
 * once it applied them all, so effects recorded meanwhile by another
 * write stay.  "due" is
 * when a sweeper may take it over; "since" when it was first recorded.
 */


#include "ngx_http_feed_effects_store.h"


#define NGX_HTTP_FEED_EFFECTS          "cache_effects"

/* a sweeper's retries: 100 ms, doubled at each try, at most a second */
#define NGX_HTTP_FEED_EFFECTS_BACKOFF  100
#define NGX_HTTP_FEED_EFFECTS_BACKOFF_MAX  1000


typedef ngx_int_t (*ngx_http_feed_effects_op_pt)(
    mongoc_bulk_operation_t *bulk, ngx_http_feed_user_t *user,
    const bson_oid_t *token, void *data, bson_error_t *error);


static ngx_int_t ngx_http_feed_effects_bulk(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *users, size_t stride,
    ngx_uint_t n, const bson_oid_t *tokens, ngx_uint_t one_token,
    ngx_http_feed_effects_op_pt op, void *data, bson_t *reply,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_effects_pend_one(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, const bson_oid_t *token, void *data,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_effects_clear_one(
    mongoc_bulk_operation_t *bulk, ngx_http_feed_user_t *user,
    const bson_oid_t *token, void *data, bson_error_t *error);
static ngx_int_t ngx_http_feed_effects_soon_one(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, const bson_oid_t *token, void *data,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_effects_claim(mongoc_collection_t *coll,
    const bson_t *doc, int64_t now, ngx_http_feed_effects_due_pt each,
    void *data, bson_error_t *error);
static void ngx_http_feed_effects_selector(bson_t *selector,
    ngx_http_feed_user_t *user, const bson_oid_t *token);


/* what a sweeper looks for, and how old the oldest entry is */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_effects_indexes = {
    NGX_HTTP_FEED_EFFECTS,
    "[{\"key\": {\"due\": 1}, \"name\": \"due\"},"
    " {\"key\": {\"since\": 1}, \"name\": \"since\"}]"
};


/* the arguments of a pend: the entries, the times */
typedef struct {
    ngx_http_feed_effect_t       *e;
    int64_t                       now;
    int64_t                       due;
} ngx_http_feed_effects_pend_t;


/*
 * Records the effects of e[0..n-1] under token, for a sweeper to apply
 * after due unless cleared first; an entry already there gains them, and
 * e[i].earlier says it was there: an earlier write's, maybe not applied.
 */

ngx_int_t
ngx_http_feed_effects_pend(mongoc_client_t *client, const char *database,
    ngx_http_feed_effect_t *e, ngx_uint_t n, const bson_oid_t *token,
    int64_t now, int64_t due, bson_error_t *error)
{
    u_char                        made[NGX_HTTP_FEED_EFFECTS_USERS];
    bson_t                        reply;
    ngx_int_t                     rc;
    ngx_uint_t                    i;
    ngx_http_feed_effects_pend_t  p;

    if (n > NGX_HTTP_FEED_EFFECTS_USERS) {
        bson_set_error(error, 0, 0, "too many users for one write");
        return NGX_ERROR;
    }

    p.e = e;
    p.now = now;
    p.due = due;

    rc = ngx_http_feed_effects_bulk(client, database, &e[0].user,
                                    sizeof(ngx_http_feed_effect_t), n,
                                    token, 1,
                                    ngx_http_feed_effects_pend_one, &p,
                                    &reply, error);
    if (rc == NGX_OK) {
        ngx_memzero(made, sizeof(made));
        ngx_http_feed_mongo_upserted(&reply, made, n);

        /* the entries the pend did not make were there before */

        for (i = 0; i < n; i++) {
            e[i].earlier = !made[i];
        }
    }

    bson_destroy(&reply);

    return rc;
}


static ngx_int_t
ngx_http_feed_effects_pend_one(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, const bson_oid_t *token, void *data,
    bson_error_t *error)
{
    ngx_http_feed_effects_pend_t  *p = data;

    bson_t                   selector, update, set, once, opts;
    ngx_uint_t               effects;
    ngx_http_feed_effect_t  *e;
    bool                     ok;

    e = (ngx_http_feed_effect_t *) ((u_char *) user
                                    - offsetof(ngx_http_feed_effect_t, user));
    effects = e->effects;

    bson_init(&selector);
    BSON_APPEND_UTF8(&selector, "_id", user->data);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);

    if (effects & NGX_HTTP_FEED_EFFECT_TIMELINE) {
        BSON_APPEND_INT32(&set, "t", 1);
    }

    if (effects & NGX_HTTP_FEED_EFFECT_COUNTS) {
        BSON_APPEND_INT32(&set, "c", 1);
    }

    if (effects & NGX_HTTP_FEED_EFFECT_MODEL) {
        BSON_APPEND_INT32(&set, "k", 1);
    }

    BSON_APPEND_OID(&set, "n", token);
    BSON_APPEND_INT64(&set, "due", p->due);
    BSON_APPEND_INT64(&set, "a", 0);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$setOnInsert", &once);
    BSON_APPEND_INT64(&once, "since", p->now);
    bson_append_document_end(&update, &once);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector, &update,
                                                    &opts, error);

    bson_destroy(&opts);
    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/* the entries of users[i] go, if tokens[i] still holds them */

ngx_int_t
ngx_http_feed_effects_clear(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *users, ngx_uint_t n, const bson_oid_t *tokens,
    bson_error_t *error)
{
    bson_t     reply;
    ngx_int_t  rc;

    rc = ngx_http_feed_effects_bulk(client, database, users,
                                    sizeof(ngx_http_feed_user_t), n, tokens,
                                    0, ngx_http_feed_effects_clear_one, NULL,
                                    &reply, error);
    bson_destroy(&reply);

    return rc;
}


static ngx_int_t
ngx_http_feed_effects_clear_one(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, const bson_oid_t *token, void *data,
    bson_error_t *error)
{
    bson_t  selector;
    bool    ok;

    ngx_http_feed_effects_selector(&selector, user, token);

    ok = mongoc_bulk_operation_remove_one_with_opts(bulk, &selector, NULL,
                                                    error);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * The entries of users[i], held by tokens[i], could not be applied: a
 * sweeper takes them at due rather than when their lease would end
 */

ngx_int_t
ngx_http_feed_effects_soon(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *users, ngx_uint_t n, const bson_oid_t *tokens,
    int64_t due, bson_error_t *error)
{
    bson_t     reply;
    ngx_int_t  rc;

    rc = ngx_http_feed_effects_bulk(client, database, users,
                                    sizeof(ngx_http_feed_user_t), n, tokens,
                                    0, ngx_http_feed_effects_soon_one, &due,
                                    &reply, error);
    bson_destroy(&reply);

    return rc;
}


static ngx_int_t
ngx_http_feed_effects_soon_one(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, const bson_oid_t *token, void *data,
    bson_error_t *error)
{
    int64_t  *due = data;

    bson_t  selector, update, set;
    bool    ok;

    ngx_http_feed_effects_selector(&selector, user, token);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "due", *due);
    bson_append_document_end(&update, &set);

    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector, &update,
                                                    NULL, error);
    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * One unordered bulk of op for each of n users (stride bytes apart), with
 * tokens[i], or tokens[0] for all when one_token; *reply is initialized.
 */

static ngx_int_t
ngx_http_feed_effects_bulk(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *users, size_t stride, ngx_uint_t n,
    const bson_oid_t *tokens, ngx_uint_t one_token,
    ngx_http_feed_effects_op_pt op, void *data, bson_t *reply,
    bson_error_t *error)
{
    bson_t                    opts;
    ngx_int_t                 rc;
    ngx_uint_t                i;
    ngx_http_feed_user_t     *user;
    mongoc_collection_t      *coll;
    mongoc_bulk_operation_t  *bulk;

    bson_init(reply);

    if (n == 0) {
        return NGX_OK;
    }

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_EFFECTS);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "ordered", false);
    bulk = mongoc_collection_create_bulk_operation_with_opts(coll, &opts);
    bson_destroy(&opts);

    rc = NGX_OK;

    for (i = 0; i < n && rc == NGX_OK; i++) {
        user = (ngx_http_feed_user_t *) ((u_char *) users + i * stride);
        rc = op(bulk, user, one_token ? &tokens[0] : &tokens[i], data,
                error);
    }

    if (rc == NGX_OK) {
        bson_destroy(reply);

        if (!mongoc_bulk_operation_execute(bulk, reply, error)) {
            rc = NGX_ERROR;
        }
    }

    mongoc_bulk_operation_destroy(bulk);
    mongoc_collection_destroy(coll);

    return rc;
}


/* {_id: user, n: token}: the entry as long as token holds it */

static void
ngx_http_feed_effects_selector(bson_t *selector, ngx_http_feed_user_t *user,
    const bson_oid_t *token)
{
    bson_init(selector);
    BSON_APPEND_UTF8(selector, "_id", user->data);
    BSON_APPEND_OID(selector, "n", token);
}


/*
 * The entries whose time has come, the longest waiting first, each
 * claimed with a new token and its next try put off (backoff), then
 * handed to each()
 */

ngx_int_t
ngx_http_feed_effects_claim_due(mongoc_client_t *client,
    const char *database, int64_t now, ngx_uint_t batch,
    ngx_http_feed_effects_due_pt each, void *data, bson_error_t *error)
{
    bson_t                filter, lte, opts, sort;
    ngx_int_t             rc;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "due", &lte);
    BSON_APPEND_INT64(&lte, "$lte", now);
    bson_append_document_end(&filter, &lte);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "due", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) batch);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_EFFECTS);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_effects_claim(coll, doc, now, each, data, error)
            != NGX_OK)
        {
            rc = NGX_ERROR;
            break;
        }
    }

    if (rc == NGX_OK && mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/* one entry taken over, unless another sweeper or a write came first */

static ngx_int_t
ngx_http_feed_effects_claim(mongoc_collection_t *coll, const bson_t *doc,
    int64_t now, ngx_http_feed_effects_due_pt each, void *data,
    bson_error_t *error)
{
    bson_t                      selector, update, set, inc, reply;
    int64_t                     backoff;
    bson_iter_t                 it;
    ngx_http_feed_effect_due_t  due;

    if (ngx_http_feed_bson_user(doc, "_id", &due.user) != NGX_OK
        || !bson_iter_init_find(&it, doc, "n") || !BSON_ITER_HOLDS_OID(&it))
    {
        return NGX_OK;
    }

    due.attempts = ngx_http_feed_bson_int(doc, "a");
    due.effects = 0;

    if (ngx_http_feed_bson_int(doc, "t")) {
        due.effects |= NGX_HTTP_FEED_EFFECT_TIMELINE;
    }

    if (ngx_http_feed_bson_int(doc, "c")) {
        due.effects |= NGX_HTTP_FEED_EFFECT_COUNTS;
    }

    if (ngx_http_feed_bson_int(doc, "k")) {
        due.effects |= NGX_HTTP_FEED_EFFECT_MODEL;
    }

    backoff = NGX_HTTP_FEED_EFFECTS_BACKOFF
              << ngx_min(due.attempts < 0 ? 0 : due.attempts, 4);
    backoff = ngx_min(backoff, NGX_HTTP_FEED_EFFECTS_BACKOFF_MAX);

    bson_oid_init(&due.token, NULL);

    ngx_http_feed_effects_selector(&selector, &due.user, bson_iter_oid(&it));

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_OID(&set, "n", &due.token);
    BSON_APPEND_INT64(&set, "due", now + backoff);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "a", 1);
    bson_append_document_end(&update, &inc);

    if (!mongoc_collection_update_one(coll, &selector, &update, NULL, &reply,
                                      error))
    {
        bson_destroy(&update);
        bson_destroy(&selector);
        return NGX_ERROR;
    }

    bson_destroy(&update);
    bson_destroy(&selector);

    if (ngx_http_feed_bson_int(&reply, "modifiedCount") == 1) {
        each(data, &due);
    }

    bson_destroy(&reply);

    return NGX_OK;
}


/* how many users have effects pending, and since when the oldest (ms) */

ngx_int_t
ngx_http_feed_effects_pending(mongoc_client_t *client, const char *database,
    int64_t *count, int64_t *oldest, bson_error_t *error)
{
    bson_t                filter, opts, sort;
    ngx_int_t             rc;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_EFFECTS);
    bson_init(&filter);
    *oldest = 0;

    *count = mongoc_collection_count_documents(coll, &filter, NULL, NULL,
                                               NULL, error);
    if (*count <= 0) {
        rc = (*count < 0) ? NGX_ERROR : NGX_OK;
        goto done;
    }

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "since", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", 1);
    BSON_APPEND_BOOL(&opts, "singleBatch", true);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    if (mongoc_cursor_next(cursor, &doc)) {
        *oldest = ngx_http_feed_bson_int(doc, "since");
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);

done:

    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    return rc;
}
