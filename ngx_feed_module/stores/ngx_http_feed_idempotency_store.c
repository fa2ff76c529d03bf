
/*
 * ngx_feed_module: the idempotency store (runs in thread pool tasks), the
 * only code that knows the "idempotency" collection.
 *
 * {_id: {u: user, k: key}, h: "<sha1 of the content>", p: ObjectId,
 *  ts: 1763700000123, at: ISODate}: the first request with a key claims
 * it with the id and time of the post it makes ("p", "ts"), before that
 * post is stored.  The key's uniqueness is the _id's: of two requests
 * with one key, exactly one insert succeeds, and the other reads what the
 * first claimed.  A TTL index on "at" drops a key an hour after its claim;
 * MongoDB deletes late, so a key found older than that is claimed again.
 */


#include "ngx_http_feed_idempotency_store.h"


#define NGX_HTTP_FEED_IDEMPOTENCY        "idempotency"

/* a key that vanishes (expired) or is claimed again between two reads */
#define NGX_HTTP_FEED_IDEMPOTENCY_TRIES  3


static ngx_int_t ngx_http_feed_idempotency_insert(mongoc_collection_t *keys,
    ngx_http_feed_idempotency_t *ik, bson_error_t *error);
static ngx_int_t ngx_http_feed_idempotency_held(mongoc_collection_t *keys,
    const bson_t *doc, ngx_http_feed_idempotency_t *ik, bson_error_t *error);
static ngx_int_t ngx_http_feed_idempotency_renew(mongoc_collection_t *keys,
    const bson_oid_t *old, ngx_http_feed_idempotency_t *ik,
    bson_error_t *error);
static void ngx_http_feed_idempotency_id(bson_t *doc,
    ngx_http_feed_idempotency_t *ik);
static void ngx_http_feed_idempotency_fields(bson_t *doc,
    ngx_http_feed_idempotency_t *ik);


/* keys expire an hour after their claim (NGX_HTTP_FEED_IDEMPOTENCY_TTL) */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_idempotency_indexes = {
    NGX_HTTP_FEED_IDEMPOTENCY,
    "[{\"key\": {\"at\": 1}, \"name\": \"expiry\","
    " \"expireAfterSeconds\": 3600}]"
};


/*
 * NGX_OK: the key is this request's now (new, or expired and claimed
 * again), ik->id its post to make; NGX_DONE: an earlier request with the
 * same content holds it, ik->id and ik->ts are that request's post (made
 * or not yet); NGX_DECLINED: it holds it for other content.
 */

ngx_int_t
ngx_http_feed_idempotency_claim(mongoc_client_t *client,
    const char *database, ngx_http_feed_idempotency_t *ik,
    bson_error_t *error)
{
    bson_t                filter, doc;
    ngx_int_t             rc;
    ngx_uint_t            i;
    mongoc_collection_t  *keys;

    keys = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_IDEMPOTENCY);

    bson_init(&filter);
    ngx_http_feed_idempotency_id(&filter, ik);

    rc = NGX_AGAIN;

    for (i = 0; i < NGX_HTTP_FEED_IDEMPOTENCY_TRIES && rc == NGX_AGAIN; i++)
    {
        rc = ngx_http_feed_idempotency_insert(keys, ik, error);
        if (rc != NGX_DECLINED) {
            break;
        }

        rc = ngx_http_feed_mongo_find_one(keys, &filter, NULL, &doc, error);

        if (rc == NGX_DECLINED) {
            /* expired and deleted since the insert failed */
            rc = NGX_AGAIN;
            continue;
        }

        if (rc == NGX_OK) {
            rc = ngx_http_feed_idempotency_held(keys, &doc, ik, error);
            bson_destroy(&doc);
        }
    }

    if (rc == NGX_AGAIN) {
        bson_set_error(error, MONGOC_ERROR_COLLECTION,
                       MONGOC_ERROR_COLLECTION_UPDATE_FAILED,
                       "idempotency key changed %d times in a row",
                       NGX_HTTP_FEED_IDEMPOTENCY_TRIES);
        rc = NGX_ERROR;
    }

    bson_destroy(&filter);
    mongoc_collection_destroy(keys);

    return rc;
}


/* NGX_DECLINED: the key is there already */

static ngx_int_t
ngx_http_feed_idempotency_insert(mongoc_collection_t *keys,
    ngx_http_feed_idempotency_t *ik, bson_error_t *error)
{
    bson_t  doc;

    bson_init(&doc);
    ngx_http_feed_idempotency_id(&doc, ik);
    ngx_http_feed_idempotency_fields(&doc, ik);

    if (mongoc_collection_insert_one(keys, &doc, NULL, NULL, error)) {
        bson_destroy(&doc);
        return NGX_OK;
    }

    bson_destroy(&doc);

    return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_DECLINED
                                                      : NGX_ERROR;
}


/*
 * What the key found holds: NGX_AGAIN when it expired but another request
 * claimed it first.  A key without a post is not one of ours: refused.
 */

static ngx_int_t
ngx_http_feed_idempotency_held(mongoc_collection_t *keys, const bson_t *doc,
    ngx_http_feed_idempotency_t *ik, bson_error_t *error)
{
    int64_t       at;
    const char   *hash;
    bson_iter_t   it;
    bson_oid_t    old;

    if (!bson_iter_init_find(&it, doc, "p") || !BSON_ITER_HOLDS_OID(&it)) {
        return NGX_DECLINED;
    }

    bson_oid_copy(bson_iter_oid(&it), &old);

    at = 0;

    if (bson_iter_init_find(&it, doc, "at") && BSON_ITER_HOLDS_DATE_TIME(&it))
    {
        at = bson_iter_date_time(&it);
    }

    if (ik->now - at >= (int64_t) NGX_HTTP_FEED_IDEMPOTENCY_TTL * 1000) {
        return ngx_http_feed_idempotency_renew(keys, &old, ik, error);
    }

    hash = NULL;

    if (bson_iter_init_find(&it, doc, "h") && BSON_ITER_HOLDS_UTF8(&it)) {
        hash = bson_iter_utf8(&it, NULL);
    }

    if (hash == NULL || ngx_strcmp(hash, ik->hash) != 0) {
        return NGX_DECLINED;
    }

    bson_oid_copy(&old, &ik->id);
    ik->ts = ngx_http_feed_bson_int(doc, "ts");

    return NGX_DONE;
}


/* an expired key claimed again, unless someone else did it first */

static ngx_int_t
ngx_http_feed_idempotency_renew(mongoc_collection_t *keys,
    const bson_oid_t *old, ngx_http_feed_idempotency_t *ik,
    bson_error_t *error)
{
    bool    ok;
    bson_t  selector, update, set, reply;

    bson_init(&selector);
    ngx_http_feed_idempotency_id(&selector, ik);
    BSON_APPEND_OID(&selector, "p", old);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    ngx_http_feed_idempotency_fields(&set, ik);
    bson_append_document_end(&update, &set);

    ok = mongoc_collection_update_one(keys, &selector, &update, NULL, &reply,
                                      error);

    bson_destroy(&update);
    bson_destroy(&selector);

    if (!ok) {
        bson_destroy(&reply);
        return NGX_ERROR;
    }

    ok = (ngx_http_feed_bson_int(&reply, "matchedCount") == 1);

    bson_destroy(&reply);

    return ok ? NGX_OK : NGX_AGAIN;
}


/* {_id: {u, k}}: always in this order, as MongoDB compares them */

static void
ngx_http_feed_idempotency_id(bson_t *doc, ngx_http_feed_idempotency_t *ik)
{
    bson_t  id;

    BSON_APPEND_DOCUMENT_BEGIN(doc, "_id", &id);
    BSON_APPEND_UTF8(&id, "u", ik->user->data);
    BSON_APPEND_UTF8(&id, "k", ik->key);
    bson_append_document_end(doc, &id);
}


static void
ngx_http_feed_idempotency_fields(bson_t *doc, ngx_http_feed_idempotency_t *ik)
{
    BSON_APPEND_UTF8(doc, "h", ik->hash);
    BSON_APPEND_OID(doc, "p", &ik->id);
    BSON_APPEND_INT64(doc, "ts", ik->ts);
    BSON_APPEND_DATE_TIME(doc, "at", ik->now);
}
