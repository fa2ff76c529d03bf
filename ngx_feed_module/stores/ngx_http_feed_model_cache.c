
/*
 * ngx_feed_module: the "cache" model of the MongoDB timelines
 * (feed_timeline_store cache, seeds 000 and 003: Socialite's
 * FanoutOnWriteToCache), one document per user who reads, capped.
 * Thread side only.
 *
 *     timeline_cache {_id: user, c: [entry, ...], o: ObjectId, b?: ms}
 *
 * An entry is {i: post id, p: the post (embed)} or {i, a: author (link)},
 * kept sorted by i, the newest last, at most feed_cache_size.  Fanout adds
 * a post to the documents of the followers that have one (upsert: false),
 * once: a redelivered post finds itself there.  A document is made when
 * its user reads a first page and has none: first empty and marked "b"
 * (being made), so that the posts fanned out meanwhile land in it, then
 * filled with what fanout on read answered.  It holds every post of the
 * user's followees from its bound up: the later of "o" (the oldest post of
 * that answer, or the zero id when the answer held every post there was)
 * and its oldest entry (the cap trims the oldest ones, a delete takes one
 * out).
 */


#include "ngx_http_feed_model.h"


#define NGX_HTTP_FEED_MODEL_CACHE_COLL  "timeline_cache"


static const bson_oid_t  ngx_http_feed_model_zero;


static ngx_int_t ngx_http_feed_model_cache_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_entries(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page);
static ngx_int_t ngx_http_feed_model_cache_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_fill(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, const bson_t *items, ngx_uint_t complete,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_abandon(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t building,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_cache_drop(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, bson_error_t *error);
static mongoc_collection_t *ngx_http_feed_model_cache_coll(
    mongoc_client_t *client, const char *database);


/* the entries' ids, for deletes */

static ngx_http_feed_mongo_indexes_t  ngx_http_feed_model_cache_indexes = {
    NGX_HTTP_FEED_MODEL_CACHE_COLL,
    "[{\"key\": {\"c.i\": 1}, \"name\": \"entries\"}]"
};


ngx_http_feed_model_ops_t  ngx_http_feed_model_cache_ops = {
    &ngx_http_feed_model_cache_indexes,
    ngx_http_feed_model_cache_add,
    ngx_http_feed_model_cache_read,
    ngx_http_feed_model_cache_begin,
    ngx_http_feed_model_cache_fill,
    ngx_http_feed_model_cache_abandon,
    ngx_http_feed_model_cache_remove,
    ngx_http_feed_model_cache_drop
};


/*
 * A post into the documents of these users that have one, once: a single
 * update of every document of the page without it (upsert: false), so
 * that the followers who never read cost MongoDB one key lookup each and
 * no statement of their own
 */

static ngx_int_t
ngx_http_feed_model_cache_add(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *users, size_t n,
    const bson_t *entry, const bson_oid_t *id, bson_error_t *error)
{
    bool                  ok;
    bson_t                selector, update, each, ne;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    ngx_http_feed_model_in(&selector, "_id", users, n, NULL, NULL);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "c.i", &ne);
    BSON_APPEND_OID(&ne, "$ne", id);
    bson_append_document_end(&selector, &ne);

    bson_init(&each);
    BSON_APPEND_DOCUMENT(&each, "0", entry);

    bson_init(&update);
    ngx_http_feed_model_push(&update, &each, mc->cap);

    coll = ngx_http_feed_model_cache_coll(client, database);

    ok = mongoc_collection_update_many(coll, &selector, &update, NULL, NULL,
                                       error);

    mongoc_collection_destroy(coll);
    bson_destroy(&update);
    bson_destroy(&each);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/* the entries of a user's document in the range of a page, newest first */

static ngx_int_t
ngx_http_feed_model_cache_read(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    bson_t                filter, doc;
    ngx_int_t             rc;
    bson_iter_t           it;
    mongoc_collection_t  *coll;

    bson_init(&filter);
    bson_append_utf8(&filter, "_id", 3, user->data, (int) user->len);

    coll = ngx_http_feed_model_cache_coll(client, database);
    rc = ngx_http_feed_mongo_find_one(coll, &filter, NULL, &doc, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    if (bson_iter_init_find(&it, &doc, "b")) {
        page->state = NGX_HTTP_FEED_MODEL_PAGE_BUILDING;
        page->building = ngx_http_feed_bson_int(&doc, "b");
        bson_destroy(&doc);
        return NGX_OK;
    }

    rc = ngx_http_feed_model_cache_entries(&doc, range, want, page);

    bson_destroy(&doc);

    return rc;
}


/* the candidates: entries from the bound up, in range, newest first */

static ngx_int_t
ngx_http_feed_model_cache_entries(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page)
{
    size_t              n;
    bson_oid_t          bound, *all;
    bson_iter_t         it;

    bson_oid_copy(&ngx_http_feed_model_zero, &bound);

    if (bson_iter_init_find(&it, doc, "o") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), &bound);
    }

    all = ngx_http_feed_model_ids(doc, &n);

    /*
     * What the cap trimmed, or a delete took out, is not here any more:
     * the document holds every post from its oldest entry up only.  Whole
     * when it has none, and had every post when made.
     */

    if (n && bson_oid_compare(&all[0], &bound) > 0) {
        bson_oid_copy(&all[0], &bound);
    }

    page->whole = (n == 0
                   && bson_oid_equal(&bound, &ngx_http_feed_model_zero));
    page->ids = bson_malloc((want ? want : 1) * sizeof(bson_oid_t));
    page->state = NGX_HTTP_FEED_MODEL_PAGE_THERE;

    bson_oid_copy(&bound, &page->bound);

    while (n--) {
        if (ngx_http_feed_model_take(page, &all[n], range, want)
            == NGX_DONE)
        {
            break;
        }
    }

    bson_free(all);

    return NGX_OK;
}


/*
 * A document made for a user who reads, empty and marked as being made:
 * *mine when this call made it (another reader may have, or it is there)
 */

static ngx_int_t
ngx_http_feed_model_cache_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error)
{
    bool                  ok;
    bson_t                doc, c;
    mongoc_collection_t  *coll;

    bson_init(&doc);
    bson_append_utf8(&doc, "_id", 3, user->data, (int) user->len);
    BSON_APPEND_ARRAY_BEGIN(&doc, "c", &c);
    bson_append_array_end(&doc, &c);
    BSON_APPEND_INT64(&doc, "b", now);

    coll = ngx_http_feed_model_cache_coll(client, database);
    ok = mongoc_collection_insert_one(coll, &doc, NULL, NULL, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&doc);

    *mine = ok;

    if (!ok && error->code == MONGOC_ERROR_DUPLICATE_KEY) {
        return NGX_OK;
    }

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * The document filled with what fanout on read answered ("items", posts
 * as the API shows them, newest first), and ready; complete: that was
 * every post there is
 */

static ngx_int_t
ngx_http_feed_model_cache_fill(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    const bson_t *items, ngx_uint_t complete, bson_error_t *error)
{
    char                  key[16];
    bool                  ok;
    size_t                n;
    bson_t                selector, update, each, entry, post, set, unset;
    bson_oid_t            oldest;
    const char           *k, *id;
    bson_iter_t           it, p;
    const uint8_t        *data;
    uint32_t              len;
    mongoc_collection_t  *coll;

    bson_oid_copy(&ngx_http_feed_model_zero, &oldest);

    bson_init(&each);
    n = 0;

    if (!bson_iter_init(&it, items)) {
        bson_destroy(&each);
        return NGX_ERROR;
    }

    while (bson_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }

        bson_iter_document(&it, &len, &data);

        if (!bson_init_static(&post, data, len)
            || !bson_iter_init_find(&p, &post, "id")
            || !BSON_ITER_HOLDS_UTF8(&p))
        {
            continue;
        }

        id = bson_iter_utf8(&p, NULL);

        if (!bson_oid_is_valid(id, strlen(id))) {
            continue;
        }

        bson_oid_init_from_string(&oldest, id);

        bson_init(&entry);
        BSON_APPEND_OID(&entry, "i", &oldest);

        if (mc->embed) {
            BSON_APPEND_DOCUMENT(&entry, "p", &post);

        } else if (bson_iter_init_find(&p, &post, "author")) {
            BSON_APPEND_VALUE(&entry, "a", bson_iter_value(&p));
        }

        bson_uint32_to_string((uint32_t) n++, &k, key, sizeof(key));
        BSON_APPEND_DOCUMENT(&each, k, &entry);
        bson_destroy(&entry);
    }

    if (complete) {
        bson_oid_copy(&ngx_http_feed_model_zero, &oldest);
    }

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);

    bson_init(&update);
    ngx_http_feed_model_push(&update, &each, mc->cap);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_OID(&set, "o", &oldest);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "b", "");
    bson_append_document_end(&update, &unset);

    coll = ngx_http_feed_model_cache_coll(client, database);
    ok = mongoc_collection_update_one(coll, &selector, &update, NULL, NULL,
                                      error);
    mongoc_collection_destroy(coll);

    bson_destroy(&update);
    bson_destroy(&selector);
    bson_destroy(&each);

    return ok ? NGX_OK : NGX_ERROR;
}


/* a document whose making was left (its reader failed): made again later */

static ngx_int_t
ngx_http_feed_model_cache_abandon(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t building,
    bson_error_t *error)
{
    bool                  ok;
    bson_t                selector;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);
    BSON_APPEND_INT64(&selector, "b", building);

    coll = ngx_http_feed_model_cache_coll(client, database);
    ok = mongoc_collection_delete_one(coll, &selector, NULL, NULL, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/* a deleted post out of every document */

static ngx_int_t
ngx_http_feed_model_cache_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error)
{
    return ngx_http_feed_model_delete_post(client, database,
                                           NGX_HTTP_FEED_MODEL_CACHE_COLL, id,
                                           error);
}


/* whom a user follows changed: their document goes, made again at a read */

static ngx_int_t
ngx_http_feed_model_cache_drop(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, bson_error_t *error)
{
    bool                  ok;
    bson_t                selector;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);

    coll = ngx_http_feed_model_cache_coll(client, database);
    ok = mongoc_collection_delete_one(coll, &selector, NULL, NULL, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


static mongoc_collection_t *
ngx_http_feed_model_cache_coll(mongoc_client_t *client, const char *database)
{
    return mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_CACHE_COLL);
}
