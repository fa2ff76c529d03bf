
/*
 * ngx_feed_module: the authors store (runs in thread pool tasks): the
 * push/pull mode of authors who were ever pull authors, as "pull" (and the
 * post that turned it, "pull_token") in their counters document, which the
 * follows store keeps: one read gives fanout both the follower count and
 * the mode.  A sparse index on "pull" keeps the few pull authors quick to
 * find however many users there are.  A mode moves only from the one its
 * writer read (a conditional update), so that two workers fanning out two
 * posts of one author at once cannot both turn it.
 */


#include "ngx_http_feed_authors_store.h"
#include "ngx_http_feed_follows_store.h"

/* users asked about at once, in an $in */
#define NGX_HTTP_FEED_AUTHORS_BATCH  500


static void ngx_http_feed_authors_filter(bson_t *filter,
    ngx_http_feed_user_t *user, ngx_http_feed_author_mode_t *mode);
static ngx_int_t ngx_http_feed_authors_batch(mongoc_collection_t *coll,
    char **users, size_t n, ngx_http_feed_authors_pt each, void *data,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_authors_find(mongoc_collection_t *coll,
    bson_t *filter, size_t max, ngx_http_feed_authors_pt each, void *data,
    bson_error_t *error);
static void ngx_http_feed_authors_pulling(bson_t *doc);


/* the author's mode: push (no document) when never a pull author */

ngx_int_t
ngx_http_feed_authors_get(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_http_feed_author_mode_t *mode,
    bson_error_t *error)
{
    bson_t                filter, doc;
    uint32_t              len;
    ngx_int_t             rc;
    bson_iter_t           it;
    const char           *s;
    mongoc_collection_t  *coll;

    ngx_memzero(mode, sizeof(ngx_http_feed_author_mode_t));

    coll = ngx_http_feed_follows_counts(client, database);

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "_id", user->data);

    rc = ngx_http_feed_mongo_find_one(coll, &filter, NULL, &doc, error);

    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    if (rc != NGX_OK) {
        return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
    }

    mode->followers = ngx_http_feed_bson_int(&doc, "followers");

    if (bson_iter_init_find(&it, &doc, "pull") && BSON_ITER_HOLDS_UTF8(&it)) {
        s = bson_iter_utf8(&it, &len);
        mode->mode = (len == 1) ? (u_char) s[0] : NGX_HTTP_FEED_AUTHOR_PUSH;
    }

    if (bson_iter_init_find(&it, &doc, "pull_token")
        && BSON_ITER_HOLDS_UTF8(&it))
    {
        s = bson_iter_utf8(&it, &len);

        if (len == 24) {
            ngx_memcpy(mode->token, s, 24);
        }
    }

    if (bson_iter_init_find(&it, &doc, "pull_changed")
        && BSON_ITER_HOLDS_DATE_TIME(&it))
    {
        mode->changed = bson_iter_date_time(&it);
    }

    bson_destroy(&doc);

    return NGX_OK;
}


/*
 * The time in a thread, where nginx's cached time is not kept current:
 * ms since the epoch
 */

int64_t
ngx_http_feed_authors_now(void)
{
    struct timeval  tv;

    ngx_gettimeofday(&tv);

    return (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000;
}


/*
 * From one mode to another (or to the same, to say it is alive), only if
 * the author is still in the first (with its token): *changed says
 * whether it was.  An author never moved has no "pull" yet.
 */

ngx_int_t
ngx_http_feed_authors_set(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_http_feed_author_mode_t *from,
    ngx_http_feed_author_mode_t *to, ngx_uint_t *changed,
    bson_error_t *error)
{
    char                  m[2];
    bool                  ok;
    bson_t                filter, update, set, reply;
    mongoc_collection_t  *coll;

    *changed = 0;

    m[0] = (char) to->mode;
    m[1] = '\0';

    coll = ngx_http_feed_follows_counts(client, database);

    ngx_http_feed_authors_filter(&filter, user, from);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_UTF8(&set, "pull", m);
    BSON_APPEND_UTF8(&set, "pull_token", to->token);
    BSON_APPEND_DATE_TIME(&set, "pull_changed", ngx_http_feed_authors_now());
    bson_append_document_end(&update, &set);

    ok = mongoc_collection_update_one(coll, &filter, &update, NULL, &reply,
                                      error);

    if (ok) {
        *changed = (ngx_http_feed_bson_int(&reply, "matchedCount") > 0);
    }

    bson_destroy(&reply);
    bson_destroy(&filter);
    bson_destroy(&update);
    mongoc_collection_destroy(coll);

    return ok ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_feed_authors_filter(bson_t *filter, ngx_http_feed_user_t *user,
    ngx_http_feed_author_mode_t *mode)
{
    char    m[2];
    bson_t  none;

    m[0] = (char) mode->mode;
    m[1] = '\0';

    bson_init(filter);
    BSON_APPEND_UTF8(filter, "_id", user->data);

    if (mode->mode == NGX_HTTP_FEED_AUTHOR_PUSH) {
        BSON_APPEND_DOCUMENT_BEGIN(filter, "pull", &none);
        BSON_APPEND_BOOL(&none, "$exists", false);
        bson_append_document_end(filter, &none);
        return;
    }

    BSON_APPEND_UTF8(filter, "pull", m);

    if (mode->mode == NGX_HTTP_FEED_AUTHOR_SWITCHING) {
        BSON_APPEND_UTF8(filter, "pull_token", mode->token);
    }
}


/*
 * Which of these users are pull authors (turning to pull included: their
 * posts go to their lists already), asked a batch of ids at a time.
 */

ngx_int_t
ngx_http_feed_authors_pulled(mongoc_client_t *client, const char *database,
    char **users, size_t n, ngx_http_feed_authors_pt each, void *data,
    bson_error_t *error)
{
    size_t                i, k;
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    coll = ngx_http_feed_follows_counts(client, database);

    rc = NGX_OK;

    for (i = 0; i < n && rc == NGX_OK; i += k) {
        k = ngx_min(n - i, NGX_HTTP_FEED_AUTHORS_BATCH);
        rc = ngx_http_feed_authors_batch(coll, users + i, k, each, data,
                                         error);
    }

    mongoc_collection_destroy(coll);

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


static ngx_int_t
ngx_http_feed_authors_batch(mongoc_collection_t *coll, char **users,
    size_t n, ngx_http_feed_authors_pt each, void *data, bson_error_t *error)
{
    char          key[16];
    size_t        i;
    bson_t        filter, id, in;
    ngx_int_t     rc;
    const char   *k;

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &id);
    BSON_APPEND_ARRAY_BEGIN(&id, "$in", &in);

    for (i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t) i, &k, key, sizeof(key));
        BSON_APPEND_UTF8(&in, k, users[i]);
    }

    bson_append_array_end(&id, &in);
    bson_append_document_end(&filter, &id);
    ngx_http_feed_authors_pulling(&filter);

    rc = ngx_http_feed_authors_find(coll, &filter, 0, each, data, error);

    bson_destroy(&filter);

    return rc;
}


/* mode: turning to pull, or pull */

static void
ngx_http_feed_authors_pulling(bson_t *doc)
{
    bson_t  mode, in;

    BSON_APPEND_DOCUMENT_BEGIN(doc, "pull", &mode);
    BSON_APPEND_ARRAY_BEGIN(&mode, "$in", &in);
    BSON_APPEND_UTF8(&in, "0", "s");
    BSON_APPEND_UTF8(&in, "1", "p");
    bson_append_array_end(&mode, &in);
    bson_append_document_end(doc, &mode);
}


/*
 * Every pull author (turning to pull included), if there are at most
 * max: NGX_DECLINED when there are more.
 */

ngx_int_t
ngx_http_feed_authors_all(mongoc_client_t *client, const char *database,
    size_t max, ngx_http_feed_authors_pt each, void *data,
    bson_error_t *error)
{
    bson_t                filter;
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    coll = ngx_http_feed_follows_counts(client, database);

    bson_init(&filter);
    ngx_http_feed_authors_pulling(&filter);

    rc = ngx_http_feed_authors_find(coll, &filter, max, each, data, error);

    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    return rc;
}


/*
 * The users whose counters match filter, each given to each(); with max,
 * NGX_DECLINED when more than max match.
 */

static ngx_int_t
ngx_http_feed_authors_find(mongoc_collection_t *coll, bson_t *filter,
    size_t max, ngx_http_feed_authors_pt each, void *data,
    bson_error_t *error)
{
    size_t                 n;
    bson_t                 opts, proj;
    ngx_int_t              rc;
    const bson_t          *doc;
    mongoc_cursor_t       *cursor;
    ngx_http_feed_user_t   user;

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "_id", 1);
    bson_append_document_end(&opts, &proj);

    if (max) {
        BSON_APPEND_INT64(&opts, "limit", (int64_t) max + 1);
    }

    cursor = mongoc_collection_find_with_opts(coll, filter, &opts, NULL);

    rc = NGX_OK;
    n = 0;

    while (rc == NGX_OK && mongoc_cursor_next(cursor, &doc)) {
        if (max && n++ == max) {
            rc = NGX_DECLINED;
            break;
        }

        if (ngx_http_feed_bson_user(doc, "_id", &user) == NGX_OK) {
            rc = each(data, &user);
        }
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);

    return rc;
}


/* how many authors are pull authors now, for feed_status */

ngx_int_t
ngx_http_feed_authors_count(mongoc_client_t *client, const char *database,
    int64_t *n, bson_error_t *error)
{
    bson_t                filter;
    mongoc_collection_t  *coll;

    coll = ngx_http_feed_follows_counts(client, database);

    bson_init(&filter);
    ngx_http_feed_authors_pulling(&filter);

    *n = mongoc_collection_count_documents(coll, &filter, NULL, NULL, NULL,
                                           error);

    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    return *n < 0 ? NGX_ERROR : NGX_OK;
}
