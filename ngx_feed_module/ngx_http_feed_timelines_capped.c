
/*
 * ngx_feed_module: the "capped" model of the timelines kept in MongoDB,
 * capped and segmented per user (seed 001): a counter per user, and the
 * entry of the counter's n-th post in the slot "<user>_<n mod cap>",
 * written by upsert, so that the oldest entry is overwritten.  Every
 * follower is written, whether they read or not.
 *
 *     timeline_capped       {_id: "ann_17", u: "ann", i: ObjectId, p|a}
 *     timeline_capped_users {_id: "ann", n: 1234, f: ObjectId, w: ObjectId}
 *
 * Deliveries come in about, not exactly, the order of the posts' ids: an
 * overwritten entry may be newer than some kept.  The entry a slot held is
 * read as it is overwritten, and "w" keeps the newest id ever overwritten:
 * every post from the later of the floor "f" (as in the time buckets
 * model: the user's first read, then each follow or unfollow) and "w" up
 * is kept.  A post is kept once: {u, i} is unique, and a slot whose write
 * would repeat a kept post is left as it was.
 */


#include "ngx_http_feed_timelines_store.h"


#define NGX_HTTP_FEED_TIMELINES_CAPPED  "timeline_capped"
#define NGX_HTTP_FEED_TIMELINES_USERS   "timeline_capped_users"


static ngx_int_t ngx_http_feed_timelines_capped_one(
    mongoc_collection_t *entries, mongoc_collection_t *users,
    ngx_http_feed_user_t *user, const bson_t *entry,
    const bson_oid_t *id, ngx_uint_t cap, bson_error_t *error);
static ngx_int_t ngx_http_feed_timelines_capped_count(
    mongoc_collection_t *users, ngx_http_feed_user_t *user, int64_t *n,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_timelines_capped_mark(
    mongoc_collection_t *users, ngx_http_feed_user_t *user,
    const bson_t *old, bson_error_t *error);
static void ngx_http_feed_timelines_capped_next(const bson_oid_t *id,
    bson_oid_t *next);


/* a user's entries, newest first; a post once per user */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_timelines_capped_indexes = {
    NGX_HTTP_FEED_TIMELINES_CAPPED,
    "[{\"key\": {\"u\": 1, \"i\": -1}, \"name\": \"user_id\","
    " \"unique\": true},"
    " {\"key\": {\"i\": 1}, \"name\": \"post\"}]"
};


/* a post into the slots of these users, one after the other */

ngx_int_t
ngx_http_feed_timelines_capped_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    bson_error_t *error)
{
    size_t                i;
    ngx_int_t             rc;
    bson_iter_t           it;
    mongoc_collection_t  *entries, *counters;

    if (!bson_iter_init_find(&it, entry, "i") || !BSON_ITER_HOLDS_OID(&it)) {
        return NGX_ERROR;
    }

    entries = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_TIMELINES_CAPPED);
    counters = mongoc_client_get_collection(client, database,
                                            NGX_HTTP_FEED_TIMELINES_USERS);

    rc = NGX_OK;

    for (i = 0; rc == NGX_OK && i < n; i++) {
        rc = ngx_http_feed_timelines_capped_one(entries, counters, &users[i],
                                                entry, bson_iter_oid(&it),
                                                tc->cap, error);
    }

    mongoc_collection_destroy(counters);
    mongoc_collection_destroy(entries);

    return rc;
}


/*
 * The user's next slot, written with the post unless the user has it
 * already; the entry it held, if newer than what "w" says, moves "w"
 */

static ngx_int_t
ngx_http_feed_timelines_capped_one(mongoc_collection_t *entries,
    mongoc_collection_t *users, ngx_http_feed_user_t *user,
    const bson_t *entry, const bson_oid_t *id, ngx_uint_t cap,
    bson_error_t *error)
{
    char                            slot[NGX_HTTP_FEED_USER_MAX + 32];
    bool                            ok;
    bson_t                          query, update, set, reply, old;
    int64_t                         n;
    ngx_int_t                       rc;
    bson_iter_t                     it;
    mongoc_find_and_modify_opts_t  *opts;

    /* a post the user has already: nothing, not even a slot */

    bson_init(&query);
    bson_append_utf8(&query, "u", 1, user->data, (int) user->len);
    BSON_APPEND_OID(&query, "i", id);

    rc = ngx_http_feed_mongo_find_one(entries, &query, NULL, &old, error);
    bson_destroy(&query);

    if (rc != NGX_DECLINED) {
        if (rc == NGX_OK) {
            bson_destroy(&old);
        }

        return rc == NGX_OK ? NGX_OK : NGX_ERROR;
    }

    if (ngx_http_feed_timelines_capped_count(users, user, &n, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_sprintf((u_char *) slot, "%s_%L%Z", user->data,
                (int64_t) (n % (int64_t) cap));

    bson_init(&query);
    BSON_APPEND_UTF8(&query, "_id", slot);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    bson_append_utf8(&set, "u", 1, user->data, (int) user->len);
    bson_concat(&set, entry);
    bson_append_document_end(&update, &set);

    opts = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(opts, &update);
    mongoc_find_and_modify_opts_set_flags(opts,
                                          MONGOC_FIND_AND_MODIFY_UPSERT);

    ok = mongoc_collection_find_and_modify_with_opts(entries, &query, opts,
                                                     &reply, error);

    mongoc_find_and_modify_opts_destroy(opts);
    bson_destroy(&update);
    bson_destroy(&query);

    if (!ok) {
        bson_destroy(&reply);

        /* written meanwhile by another delivery of the post */
        return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_OK : NGX_ERROR;
    }

    rc = NGX_OK;

    if (bson_iter_init_find(&it, &reply, "value")
        && BSON_ITER_HOLDS_DOCUMENT(&it))
    {
        uint32_t        len;
        const uint8_t  *data;

        bson_iter_document(&it, &len, &data);

        if (bson_init_static(&old, data, len)) {
            rc = ngx_http_feed_timelines_capped_mark(users, user, &old,
                                                     error);
        }
    }

    bson_destroy(&reply);

    return rc;
}


/* the user's counter, moved on: the number of the post being written */

static ngx_int_t
ngx_http_feed_timelines_capped_count(mongoc_collection_t *users,
    ngx_http_feed_user_t *user, int64_t *n, bson_error_t *error)
{
    bool                            ok;
    bson_t                          query, update, inc, reply, doc;
    uint32_t                        len;
    bson_iter_t                     it;
    const uint8_t                  *data;
    mongoc_find_and_modify_opts_t  *opts;

    bson_init(&query);
    bson_append_utf8(&query, "_id", 3, user->data, (int) user->len);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "n", 1);
    bson_append_document_end(&update, &inc);

    opts = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(opts, &update);
    mongoc_find_and_modify_opts_set_flags(opts,
        MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);

    ok = mongoc_collection_find_and_modify_with_opts(users, &query, opts,
                                                     &reply, error);

    mongoc_find_and_modify_opts_destroy(opts);
    bson_destroy(&update);
    bson_destroy(&query);

    *n = 0;

    if (ok && bson_iter_init_find(&it, &reply, "value")
        && BSON_ITER_HOLDS_DOCUMENT(&it))
    {
        bson_iter_document(&it, &len, &data);

        if (bson_init_static(&doc, data, len)) {
            *n = ngx_http_feed_bson_int(&doc, "n");
        }
    }

    bson_destroy(&reply);

    return (ok && *n > 0) ? NGX_OK : NGX_ERROR;
}


/* an overwritten entry: "w" is the newest id ever overwritten */

static ngx_int_t
ngx_http_feed_timelines_capped_mark(mongoc_collection_t *users,
    ngx_http_feed_user_t *user, const bson_t *old, bson_error_t *error)
{
    bool         ok;
    bson_t       query, update, max;
    bson_iter_t  it;

    if (!bson_iter_init_find(&it, old, "i") || !BSON_ITER_HOLDS_OID(&it)) {
        return NGX_OK;
    }

    bson_init(&query);
    bson_append_utf8(&query, "_id", 3, user->data, (int) user->len);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$max", &max);
    BSON_APPEND_OID(&max, "w", bson_iter_oid(&it));
    bson_append_document_end(&update, &max);

    ok = mongoc_collection_update_one(users, &query, &update, NULL, NULL,
                                      error);

    bson_destroy(&update);
    bson_destroy(&query);

    return ok ? NGX_OK : NGX_ERROR;
}


/* a page's entries, newest first, from the later of "f" and "w" up */

ngx_int_t
ngx_http_feed_timelines_capped_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_timelines_conf_t *tc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_timelines_page_t *page, bson_error_t *error)
{
    bson_t                filter, doc, opts, sort, ids;
    ngx_int_t             rc;
    bson_iter_t           it;
    const bson_t         *e;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_TIMELINES_USERS);

    bson_init(&filter);
    bson_append_utf8(&filter, "_id", 3, user->data, (int) user->len);
    rc = ngx_http_feed_timelines_floor_page(coll, &filter, want, page, &doc,
                                            error);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    if (bson_iter_init_find(&it, &doc, "w") && BSON_ITER_HOLDS_OID(&it)
        && bson_oid_compare(bson_iter_oid(&it), &page->bound) >= 0)
    {
        /* w itself was overwritten: the slots hold the ids past it */
        ngx_http_feed_timelines_capped_next(bson_iter_oid(&it),
                                            &page->bound);
    }

    bson_destroy(&doc);

    bson_init(&filter);
    bson_append_utf8(&filter, "u", 1, user->data, (int) user->len);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "i", &ids);
    BSON_APPEND_OID(&ids, "$gte", &page->bound);

    if (range->max_id) {
        BSON_APPEND_OID(&ids, "$lt", range->max_id);
    }

    bson_append_document_end(&filter, &ids);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "i", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) want + 1);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sort);
    BSON_APPEND_INT32(&sort, "i", 1);
    bson_append_document_end(&opts, &sort);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_TIMELINES_CAPPED);
    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    rc = NGX_OK;

    while (rc == NGX_OK && mongoc_cursor_next(cursor, &e)) {
        if (bson_iter_init_find(&it, e, "i") && BSON_ITER_HOLDS_OID(&it)) {
            rc = ngx_http_feed_timelines_take(page, bson_iter_oid(&it), range,
                                              want);
        }
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/* the id right after another: its 12 bytes plus one */

static void
ngx_http_feed_timelines_capped_next(const bson_oid_t *id, bson_oid_t *next)
{
    ngx_int_t  i;

    bson_oid_copy(id, next);

    for (i = 11; i >= 0; i--) {
        if (++next->bytes[i] != 0) {
            break;
        }
    }
}


/*
 * The user's floor: set at their first read (reset: 0, an existing one is
 * kept), or moved to now (reset: 1) when they have one
 */

ngx_int_t
ngx_http_feed_timelines_capped_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error)
{
    bson_t                selector;
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_TIMELINES_USERS);
    rc = ngx_http_feed_timelines_floor(coll, &selector, reset, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&selector);

    return rc;
}


/* a deleted post's entries gone: their slots are written again later */

ngx_int_t
ngx_http_feed_timelines_capped_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error)
{
    bool                  ok;
    bson_t                query;
    mongoc_collection_t  *coll;

    bson_init(&query);
    BSON_APPEND_OID(&query, "i", id);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_TIMELINES_CAPPED);
    ok = mongoc_collection_delete_many(coll, &query, NULL, NULL, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&query);

    return ok ? NGX_OK : NGX_ERROR;
}
