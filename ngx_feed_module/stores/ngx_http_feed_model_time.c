
/*
 * ngx_feed_module: the "time_buckets" model of the MongoDB timelines
 * (Socialite's FanoutOnWriteTimeBuckets, seed 003): one document
 * per user per period of feed_timeline_bucket_time, the period of the
 * post's id, every follower written, whether they read or not.
 *
 *     timeline_time {_id: {u: user, t: period}, c: [entry, ...]}
 *     timeline_time {_id: {u: user, t: -1}, f: ObjectId, d: ObjectId}
 *
 * Entries are as in the cache model, sorted by id, uncapped.  The second
 * document is the user's floor: the buckets hold every post of whom the
 * user follows from f up.  It is set at the user's first read (2 s ahead,
 * for the clocks of the nginx nodes that make the ids), and moved to now
 * at each follow or unfollow of a user who has one: posts older than it
 * come from fanout on read.
 *
 * With feed_timeline_bucket_keep, the write that makes a user's bucket
 * deletes their buckets older than the newest "keep" periods, after it
 * raised their mark "d" to the start of the oldest period kept: the
 * buckets hold every post from the later of f and d up.
 */


#include "ngx_http_feed_model.h"


#define NGX_HTTP_FEED_MODEL_TIME_COLL  "timeline_time"


static ngx_int_t ngx_http_feed_model_time_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_bulk(mongoc_collection_t *coll,
    ngx_http_feed_user_t *users, size_t n, size_t *again, u_char *opened,
    int64_t t, const bson_t *update, const bson_oid_t *id,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_trim(mongoc_collection_t *coll,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *users,
    size_t n, const u_char *opened, int64_t t, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_bucket(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page);
static ngx_int_t ngx_http_feed_model_time_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_time_drop(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, bson_error_t *error);


/* a user's buckets, newest first; the entries' ids, for deletes */

static ngx_http_feed_mongo_indexes_t  ngx_http_feed_model_time_indexes = {
    NGX_HTTP_FEED_MODEL_TIME_COLL,
    "[{\"key\": {\"_id.u\": 1, \"_id.t\": -1}, \"name\": \"user_period\"},"
    " {\"key\": {\"c.i\": 1}, \"name\": \"entries\"}]"
};


ngx_http_feed_model_ops_t  ngx_http_feed_model_time_ops = {
    &ngx_http_feed_model_time_indexes,
    ngx_http_feed_model_time_add,
    ngx_http_feed_model_time_read,
    ngx_http_feed_model_time_begin,
    NULL,                                   /* fill: begin makes none */
    NULL,                                   /* abandon */
    ngx_http_feed_model_time_remove,
    ngx_http_feed_model_time_drop
};


/*
 * A post into the bucket of its period of each user, made when missing
 * (upsert), once: the update matches only a bucket without it.  An upsert
 * that meets the bucket made meanwhile, or one that has the post, fails
 * (duplicate key); those are tried again as plain updates, which add the
 * post to the first and leave the second alone.
 */

static ngx_int_t
ngx_http_feed_model_time_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error)
{
    size_t                 i, m, *again;
    bson_t                 update, each;
    u_char                *opened;
    int64_t                t;
    ngx_int_t              rc;
    mongoc_collection_t   *coll;
    ngx_http_feed_user_t  *retry;

    t = (int64_t) bson_oid_get_time_t(id) / mc->bucket;

    bson_init(&each);
    BSON_APPEND_DOCUMENT(&each, "0", entry);
    bson_init(&update);
    ngx_http_feed_model_push(&update, &each, 0);

    again = bson_malloc((n + 1) * sizeof(size_t));
    opened = bson_malloc0(n);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_TIME_COLL);

    rc = ngx_http_feed_model_time_bulk(coll, users, n, again, opened, t,
                                       &update, id, error);

    if (rc == NGX_AGAIN) {
        /* again[]: how many, then which */
        m = again[0];
        retry = bson_malloc(m * sizeof(ngx_http_feed_user_t));

        for (i = 0; i < m; i++) {
            retry[i] = users[again[i + 1]];
        }

        rc = ngx_http_feed_model_time_bulk(coll, retry, m, NULL, NULL, t,
                                           &update, id, error);
        bson_free(retry);
    }

    if (rc == NGX_OK && mc->keep) {
        rc = ngx_http_feed_model_time_trim(coll, mc, users, n, opened, t,
                                           error);
    }

    mongoc_collection_destroy(coll);
    bson_free(opened);
    bson_free(again);
    bson_destroy(&update);
    bson_destroy(&each);

    return rc;
}


/*
 * One unordered bulk of the update, one per user, as upserts with again.
 * Then duplicate keys are not errors: NGX_AGAIN, again[0] of them, their
 * users' indexes in again[1...]; and opened[] marks the users whose
 * bucket the upsert made.
 */

static ngx_int_t
ngx_http_feed_model_time_bulk(mongoc_collection_t *coll,
    ngx_http_feed_user_t *users, size_t n, size_t *again, u_char *opened,
    int64_t t, const bson_t *update, const bson_oid_t *id,
    bson_error_t *error)
{
    bool                      ok;
    size_t                    i, m;
    bson_t                    selector, ne, opts, reply;
    bson_iter_t               it, e, f;
    mongoc_bulk_operation_t  *bulk;

    bulk = ngx_http_feed_model_unordered(coll);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", again ? true : false);

    ok = true;

    for (i = 0; ok && i < n; i++) {
        bson_init(&selector);
        ngx_http_feed_model_bucket_id(&selector, "_id", &users[i], "t",
                                      t);
        BSON_APPEND_DOCUMENT_BEGIN(&selector, "c.i", &ne);
        BSON_APPEND_OID(&ne, "$ne", id);
        bson_append_document_end(&selector, &ne);

        ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector,
                                                        update, &opts, error);
        bson_destroy(&selector);
    }

    bson_destroy(&opts);

    if (!ok) {
        mongoc_bulk_operation_destroy(bulk);
        return NGX_ERROR;
    }

    ok = mongoc_bulk_operation_execute(bulk, &reply, error) != 0;
    mongoc_bulk_operation_destroy(bulk);

    if (opened) {
        ngx_http_feed_mongo_upserted(&reply, opened, n);
    }

    if (ok || again == NULL || !bson_iter_init_find(&it, &reply, "writeErrors")
        || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &e))
    {
        bson_destroy(&reply);
        return ok ? NGX_OK : NGX_ERROR;
    }

    m = 0;

    while (bson_iter_next(&e)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&e) || !bson_iter_recurse(&e, &f)) {
            continue;
        }

        i = n;

        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "code") == 0
                && bson_iter_as_int64(&f) != MONGOC_ERROR_DUPLICATE_KEY)
            {
                bson_destroy(&reply);
                return NGX_ERROR;
            }

            if (strcmp(bson_iter_key(&f), "index") == 0) {
                i = (size_t) bson_iter_as_int64(&f);
            }
        }

        if (i < n) {
            again[++m] = i;
        }
    }

    bson_destroy(&reply);

    if (m == 0) {
        return NGX_ERROR;
    }

    again[0] = m;

    return NGX_AGAIN;
}


/*
 * The users who got the bucket of period t keep the newest "keep" periods:
 * from the start of period t - keep + 1 up, the buckets hold every post
 */

static ngx_int_t
ngx_http_feed_model_time_trim(mongoc_collection_t *coll,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *users,
    size_t n, const u_char *opened, int64_t t, bson_error_t *error)
{
    size_t       i, m;
    int64_t     *cut;
    ngx_int_t    rc;
    bson_oid_t  *mark;

    for (i = 0, m = 0; i < n; i++) {
        m += opened[i];
    }

    if (m == 0 || t - (int64_t) mc->keep + 1 <= 0) {
        return NGX_OK;
    }

    cut = bson_malloc(n * sizeof(int64_t));
    mark = bson_malloc(n * sizeof(bson_oid_t));

    for (i = 0; i < n; i++) {
        cut[i] = t - (int64_t) mc->keep + 1;
        ngx_http_feed_model_oid_at(&mark[i], (time_t) (cut[i] * mc->bucket));
    }

    rc = ngx_http_feed_model_trim(coll, "t", users, n, opened, cut, mark,
                                  error);

    bson_free(mark);
    bson_free(cut);

    return rc;
}


/*
 * The buckets of a page's range, newest first, until want entries from
 * the floor up are taken, or the floor's period is passed
 */

static ngx_int_t
ngx_http_feed_model_time_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    bson_t                filter, opts, sort, t;
    ngx_int_t             rc;
    const bson_t         *bucket;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    rc = ngx_http_feed_model_bucket_page(client, database,
                                         NGX_HTTP_FEED_MODEL_TIME_COLL, "t",
                                         user, want, page, &coll, error);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    /* the periods from the page's top down to the floor's */

    bson_init(&filter);
    bson_append_utf8(&filter, "_id.u", 5, user->data, (int) user->len);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id.t", &t);
    BSON_APPEND_INT64(&t, "$gte",
                      (int64_t) bson_oid_get_time_t(&page->bound)
                      / mc->bucket);

    if (range->max_id) {
        BSON_APPEND_INT64(&t, "$lte",
                          (int64_t) bson_oid_get_time_t(range->max_id)
                          / mc->bucket);
    }

    bson_append_document_end(&filter, &t);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id.t", -1);
    bson_append_document_end(&opts, &sort);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    rc = NGX_OK;

    while (rc == NGX_OK && mongoc_cursor_next(cursor, &bucket)) {
        rc = ngx_http_feed_model_time_bucket(bucket, range, want, page);
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    if (rc == NGX_OK && mc->keep) {
        rc = ngx_http_feed_model_bucket_recheck(coll, "t", user, page,
                                                error);
    }

    mongoc_collection_destroy(coll);

    return rc;
}


/* one bucket's entries, newest first; NGX_DONE: no older one wanted */

static ngx_int_t
ngx_http_feed_model_time_bucket(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page)
{
    size_t        n;
    ngx_int_t     rc;
    bson_oid_t   *all;

    all = ngx_http_feed_model_ids(doc, &n);

    rc = NGX_OK;

    while (n-- && rc == NGX_OK) {
        rc = ngx_http_feed_model_take(page, &all[n], range, want);
    }

    bson_free(all);

    return rc;
}


/* a first read: the user's floor, from which the buckets hold every post */

static ngx_int_t
ngx_http_feed_model_time_begin(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, int64_t now, ngx_uint_t *mine,
    bson_error_t *error)
{
    *mine = 0;

    return ngx_http_feed_model_bucket_floor(client, database,
                                            NGX_HTTP_FEED_MODEL_TIME_COLL,
                                            "t", user, 0, error);
}


/* a deleted post out of every bucket */

static ngx_int_t
ngx_http_feed_model_time_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error)
{
    return ngx_http_feed_model_delete_post(client, database,
                                           NGX_HTTP_FEED_MODEL_TIME_COLL, id,
                                           error);
}


/* whom the user follows changed: their floor moved to now */

static ngx_int_t
ngx_http_feed_model_time_drop(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, bson_error_t *error)
{
    return ngx_http_feed_model_bucket_floor(client, database,
                                            NGX_HTTP_FEED_MODEL_TIME_COLL,
                                            "t", user, 1, error);
}
