
/*
 * ngx_feed_module: the follows store (runs in thread pool tasks), the only
 * code that knows the "follows" and "follow_counts" collections.
 *
 * An edge is {src, dst, status, created, updated} (seed 002's follow
 * document) plus a version "v", bumped by every real state change, and
 * "cv", the version the per-user counters already account for.
 *
 * Counters live in "follow_counts" {_id: user, following, followers, ops}.
 * They are kept here, not in a store of their own, because an edge and its
 * counts change together.  An edge version is applied to each counter at
 * most once: the update only matches while "ops" lacks the version's id,
 * and pushes it (the last 64 are kept).  So a change interrupted half way
 * (MongoDB gone between two writes) is finished by the next request that
 * touches the edge, without counting anything twice, and nothing is ever
 * half-written for good.
 *
 * A user follows at most feed_follow_max users: a follow is refused when
 * the user's count is there already, and taken back when, counted after
 * it was written, the count went past it (concurrent follows).
 *
 * Lists of followers and followees, whoever reads them (the graph's
 * lists, fanout, the fallback timeline source), come from one query,
 * ngx_http_feed_follows_page().
 */


#include "ngx_http_feed_follows_store.h"


#define NGX_HTTP_FEED_FOLLOWS        "follows"
#define NGX_HTTP_FEED_FOLLOW_COUNTS  "follow_counts"

#define NGX_HTTP_FEED_FOLLOWS_RETRIES  5
#define NGX_HTTP_FEED_COUNT_OPS        64


typedef struct {
    bson_oid_t                    id;
    int64_t                       status;
    int64_t                       v;
    int64_t                       cv;
} ngx_http_feed_edge_t;


static ngx_int_t ngx_http_feed_follows_change_edge(
    mongoc_collection_t *follows, mongoc_collection_t *counts,
    ngx_http_feed_follow_op_t *op, bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_find_edge(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_write(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    ngx_uint_t found, bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_create(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_apply(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_count_one(mongoc_collection_t *counts,
    const char *user, const char *field, int64_t delta, const char *opid,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_over(mongoc_collection_t *counts,
    ngx_http_feed_follow_op_t *op, ngx_uint_t written, bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_recount(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_contended(bson_error_t *error);
static ngx_int_t ngx_http_feed_follows_read_count(
    mongoc_collection_t *counts, const char *user, const char *field,
    int64_t *n, bson_error_t *error);
static void ngx_http_feed_follows_among(bson_t *filter, const char *other,
    char **among, size_t n);
static void ngx_http_feed_follows_filter(ngx_http_feed_follows_page_t *page,
    const char *self, const char *other, bson_t *filter);
static void ngx_http_feed_follows_opts(ngx_http_feed_follows_page_t *page,
    const char *other, bson_t *opts);


/*
 * seed 002's three indexes; the list ones end with the other user, so
 * that (created, other user) pages come straight from the index
 */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_follows_indexes = {
    NGX_HTTP_FEED_FOLLOWS,
    "[{\"key\": {\"src\": 1, \"dst\": 1}, \"name\": \"src_dst\","
    "  \"unique\": true},"
    " {\"key\": {\"dst\": 1, \"status\": 1, \"created\": -1, \"src\": -1},"
    "  \"name\": \"dst_status_created\"},"
    " {\"key\": {\"src\": 1, \"status\": 1, \"created\": -1, \"dst\": -1},"
    "  \"name\": \"src_status_created\"}]"
};


/* the few pull authors (the authors store) are found by a sparse index */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_follow_counts_indexes = {
    NGX_HTTP_FEED_FOLLOW_COUNTS,
    "[{\"key\": {\"pull\": 1}, \"name\": \"pull\", \"sparse\": true}]"
};


/*
 * The counters' collection, for the authors store: an author's push/pull
 * mode is kept in their counters document, read with the follower count
 */

mongoc_collection_t *
ngx_http_feed_follows_counts(mongoc_client_t *client, const char *database)
{
    return mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_FOLLOW_COUNTS);
}


/* a follow or an unfollow: op->changed when it changed the edge */

ngx_int_t
ngx_http_feed_follows_change(mongoc_client_t *client, const char *database,
    ngx_http_feed_follow_op_t *op, bson_error_t *error)
{
    ngx_int_t             rc;
    mongoc_collection_t  *follows, *counts;

    follows = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FOLLOWS);
    counts = mongoc_client_get_collection(client, database,
                                          NGX_HTTP_FEED_FOLLOW_COUNTS);

    rc = ngx_http_feed_follows_change_edge(follows, counts, op, error);

    mongoc_collection_destroy(counts);
    mongoc_collection_destroy(follows);

    return rc;
}


static ngx_int_t
ngx_http_feed_follows_change_edge(mongoc_collection_t *follows,
    mongoc_collection_t *counts, ngx_http_feed_follow_op_t *op,
    bson_error_t *error)
{
    ngx_int_t             rc, over;
    ngx_uint_t            i;
    ngx_http_feed_edge_t  edge;

    for (i = 0; i < NGX_HTTP_FEED_FOLLOWS_RETRIES; i++) {

        rc = ngx_http_feed_follows_find_edge(follows, op, &edge, error);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        /* first finish whatever an interrupted request left behind */

        if (rc == NGX_OK && edge.v != edge.cv
            && ngx_http_feed_follows_apply(counts, follows, op, &edge, error)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        if ((rc == NGX_OK ? edge.status : 0) == (int64_t) op->want) {
            op->changed = 0;
            return NGX_OK;
        }

        if (op->want) {
            over = ngx_http_feed_follows_over(counts, op, 0, error);

            if (over != NGX_OK) {
                return (over == NGX_DECLINED) ? NGX_OK : NGX_ERROR;
            }
        }

        rc = ngx_http_feed_follows_write(follows, op, &edge, rc == NGX_OK,
                                         error);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_AGAIN) {
            /* someone else changed the edge meanwhile: look again */
            continue;
        }

        if (ngx_http_feed_follows_apply(counts, follows, op, &edge, error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        if (op->want
            && ngx_http_feed_follows_recount(counts, follows, op, &edge,
                                             error)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        op->changed = 1;
        return NGX_OK;
    }

    return ngx_http_feed_follows_contended(error);
}


static ngx_int_t
ngx_http_feed_follows_find_edge(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error)
{
    bson_t       filter, doc;
    bson_iter_t  it;
    ngx_int_t    rc;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "src", op->src.data);
    BSON_APPEND_UTF8(&filter, "dst", op->dst.data);

    rc = ngx_http_feed_mongo_find_one(follows, &filter, NULL, &doc, error);

    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return rc;
    }

    if (bson_iter_init_find(&it, &doc, "_id") && BSON_ITER_HOLDS_OID(&it)) {
        bson_oid_copy(bson_iter_oid(&it), &edge->id);
    }

    edge->status = ngx_http_feed_bson_int(&doc, "status");
    edge->v = ngx_http_feed_bson_int(&doc, "v");
    edge->cv = ngx_http_feed_bson_int(&doc, "cv");

    bson_destroy(&doc);

    return NGX_OK;
}


/*
 * Writes the new state as the next version of the edge, only if nobody
 * changed it since we read it: NGX_AGAIN when somebody did.
 */

static ngx_int_t
ngx_http_feed_follows_write(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    ngx_uint_t found, bson_error_t *error)
{
    bool     ok;
    bson_t   selector, update, set, inc, reply;
    int64_t  matched;

    if (!found) {
        return ngx_http_feed_follows_create(follows, op, edge, error);
    }

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", &edge->id);
    BSON_APPEND_INT64(&selector, "v", edge->v);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT32(&set, "status", (int32_t) op->want);
    BSON_APPEND_DATE_TIME(&set, "updated", op->now);

    if (op->want) {
        /* a follow after an unfollow is a new relationship */
        BSON_APPEND_DATE_TIME(&set, "created", op->now);
    }

    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "v", 1);
    bson_append_document_end(&update, &inc);

    ok = mongoc_collection_update_one(follows, &selector, &update, NULL,
                                      &reply, error);

    matched = ok ? ngx_http_feed_bson_int(&reply, "matchedCount") : 0;

    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&selector);

    if (!ok) {
        return NGX_ERROR;
    }

    if (matched == 0) {
        return NGX_AGAIN;
    }

    edge->status = op->want;
    edge->v++;

    return NGX_OK;
}


/*
 * The first follow of a pair, by upsert: only the upsert that inserts owns
 * the new edge; one that finds it already there lost a race (NGX_AGAIN).
 */

static ngx_int_t
ngx_http_feed_follows_create(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error)
{
    bson_t     selector, set;
    ngx_int_t  rc;

    bson_oid_init(&edge->id, NULL);
    edge->status = 1;
    edge->v = 1;
    edge->cv = 0;

    bson_init(&selector);
    BSON_APPEND_UTF8(&selector, "src", op->src.data);
    BSON_APPEND_UTF8(&selector, "dst", op->dst.data);

    bson_init(&set);
    BSON_APPEND_OID(&set, "_id", &edge->id);
    BSON_APPEND_INT32(&set, "status", 1);
    BSON_APPEND_DATE_TIME(&set, "created", op->now);
    BSON_APPEND_DATE_TIME(&set, "updated", op->now);
    BSON_APPEND_INT64(&set, "v", 1);
    BSON_APPEND_INT64(&set, "cv", 0);

    rc = ngx_http_feed_mongo_insert_new(follows, &selector, &set, error);

    bson_destroy(&set);
    bson_destroy(&selector);

    return rc;
}


/* applies the edge's current version to both users' counters, once */

static ngx_int_t
ngx_http_feed_follows_apply(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error)
{
    bool     ok;
    char     opid[64];
    bson_t   selector, update, set, lt;
    int64_t  delta;

    bson_oid_to_string(&edge->id, opid);
    snprintf(opid + 24, sizeof(opid) - 24, ":%lld", (long long) edge->v);

    delta = edge->status ? 1 : -1;

    if (ngx_http_feed_follows_count_one(counts, op->src.data, "following",
                                        delta, opid, error)
        != NGX_OK
        || ngx_http_feed_follows_count_one(counts, op->dst.data,
                                           "followers", delta, opid, error)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", &edge->id);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "cv", &lt);
    BSON_APPEND_INT64(&lt, "$lt", edge->v);
    bson_append_document_end(&selector, &lt);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "cv", edge->v);
    bson_append_document_end(&update, &set);

    ok = mongoc_collection_update_one(follows, &selector, &update, NULL,
                                      NULL, error);

    bson_destroy(&update);
    bson_destroy(&selector);

    if (ok) {
        edge->cv = edge->v;
    }

    return ok ? NGX_OK : NGX_ERROR;
}


static ngx_int_t
ngx_http_feed_follows_count_one(mongoc_collection_t *counts, const char *user,
    const char *field, int64_t delta, const char *opid, bson_error_t *error)
{
    bool    ok;
    bson_t  selector, ne, update, inc, push, each, arr, opts;

    bson_init(&selector);
    BSON_APPEND_UTF8(&selector, "_id", user);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "ops", &ne);
    BSON_APPEND_UTF8(&ne, "$ne", opid);
    bson_append_document_end(&selector, &ne);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, field, delta);
    bson_append_document_end(&update, &inc);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$push", &push);
    BSON_APPEND_DOCUMENT_BEGIN(&push, "ops", &each);
    BSON_APPEND_ARRAY_BEGIN(&each, "$each", &arr);
    BSON_APPEND_UTF8(&arr, "0", opid);
    bson_append_array_end(&each, &arr);
    BSON_APPEND_INT32(&each, "$slice", -NGX_HTTP_FEED_COUNT_OPS);
    bson_append_document_end(&push, &each);
    bson_append_document_end(&update, &push);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ok = mongoc_collection_update_one(counts, &selector, &update, &opts,
                                      NULL, error);

    bson_destroy(&opts);
    bson_destroy(&update);
    bson_destroy(&selector);

    if (ok) {
        return NGX_OK;
    }

    /* the upsert met the user's document: this op was applied already */

    return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_OK : NGX_ERROR;
}


/*
 * feed_follow_max, checked twice.  Before a follow is written (written 0):
 * the user must follow fewer.  After it was written and counted (1): no
 * more; concurrent follows of one user all passed the first check, and
 * each one that finds the count over the limit now takes itself back.
 * The last of them to count sees all the others, so together they never
 * leave more than the limit (near it, maybe less: each saw the others).
 * NGX_DECLINED (and op->over): over it.
 */

static ngx_int_t
ngx_http_feed_follows_over(mongoc_collection_t *counts,
    ngx_http_feed_follow_op_t *op, ngx_uint_t written, bson_error_t *error)
{
    int64_t  n;

    if (ngx_http_feed_follows_read_count(counts, op->src.data, "following",
                                         &n, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (n + (written ? 0 : 1) <= op->max) {
        return NGX_OK;
    }

    op->over = 1;

    return NGX_DECLINED;
}


/*
 * A follow written and counted: if that went over the limit, an unfollow
 * of the same edge, counted, takes it back.
 */

static ngx_int_t
ngx_http_feed_follows_recount(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    rc = ngx_http_feed_follows_over(counts, op, 1, error);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    for (i = 0; i < NGX_HTTP_FEED_FOLLOWS_RETRIES; i++) {

        op->want = 0;
        rc = ngx_http_feed_follows_write(follows, op, edge, 1, error);
        op->want = 1;

        if (rc == NGX_OK) {
            return ngx_http_feed_follows_apply(counts, follows, op, edge,
                                               error);
        }

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        /* changed meanwhile: an unfollow of the same pair did it for us */

        rc = ngx_http_feed_follows_find_edge(follows, op, edge, error);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED || edge->status == 0) {
            return NGX_OK;
        }
    }

    return ngx_http_feed_follows_contended(error);
}


/* retried and still changed by others each time: given up */

static ngx_int_t
ngx_http_feed_follows_contended(bson_error_t *error)
{
    bson_set_error(error, MONGOC_ERROR_STREAM, 0,
                   "too many concurrent changes of one relationship");

    return NGX_ERROR;
}


/* a user's "following" or "followers", as counted: 0 without a count yet */

static ngx_int_t
ngx_http_feed_follows_read_count(mongoc_collection_t *counts,
    const char *user, const char *field, int64_t *n, bson_error_t *error)
{
    bson_t     filter, proj, doc;
    ngx_int_t  rc;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "_id", user);

    bson_init(&proj);
    BSON_APPEND_INT32(&proj, field, 1);

    rc = ngx_http_feed_mongo_find_one(counts, &filter, &proj, &doc, error);

    bson_destroy(&proj);
    bson_destroy(&filter);

    *n = 0;

    if (rc == NGX_OK) {
        *n = ngx_http_feed_bson_int(&doc, field);
        bson_destroy(&doc);
    }

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


ngx_int_t
ngx_http_feed_follows_count(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_uint_t followers, int64_t *n,
    bson_error_t *error)
{
    ngx_int_t             rc;
    mongoc_collection_t  *counts;

    counts = mongoc_client_get_collection(client, database,
                                          NGX_HTTP_FEED_FOLLOW_COUNTS);

    rc = ngx_http_feed_follows_read_count(counts, user->data,
                                          followers ? "followers"
                                                    : "following",
                                          n, error);

    mongoc_collection_destroy(counts);

    return rc;
}


/*
 * A page, newest relationship first: sorted by (created, other user)
 * descending, a total order, so the (created, other user) of the last
 * relationship resumes exactly after it whatever changes meanwhile.  No
 * limit: ids that are not ours are skipped, not counted, and the caller
 * stops the page when it has enough.  The whole list (page->batch 0) is
 * read in no order: sorting it would cost for nothing.
 */

ngx_int_t
ngx_http_feed_follows_page(mongoc_client_t *client, const char *database,
    ngx_http_feed_follows_page_t *page, bson_error_t *error)
{
    bson_t                filter, opts;
    ngx_int_t             rc;
    const char           *self, *other;
    mongoc_collection_t  *follows;

    self = page->followers ? "dst" : "src";
    other = page->followers ? "src" : "dst";

    ngx_http_feed_follows_filter(page, self, other, &filter);
    ngx_http_feed_follows_opts(page, other, &opts);

    follows = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_FOLLOWS);

    rc = ngx_http_feed_mongo_each_user(follows, &filter, &opts, other,
                                       "created", page->each, page->data,
                                       &page->skipped, error);

    mongoc_collection_destroy(follows);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/* the user's active relationships, after the page's start if it has one */

static void
ngx_http_feed_follows_filter(ngx_http_feed_follows_page_t *page,
    const char *self, const char *other, bson_t *filter)
{
    bson_init(filter);
    BSON_APPEND_UTF8(filter, self, page->user->data);
    BSON_APPEND_INT32(filter, "status", 1);

    if (page->namong) {
        ngx_http_feed_follows_among(filter, other, page->among,
                                    page->namong);
    }

    if (page->has_after) {
        ngx_http_feed_mongo_after(filter, "created", page->after_created,
                                  other, page->after_user->data);
    }
}


/* only relationships with one of these users: other in [among] */

static void
ngx_http_feed_follows_among(bson_t *filter, const char *other, char **among,
    size_t n)
{
    char         key[16];
    size_t       i;
    bson_t       in, list;
    const char  *k;

    BSON_APPEND_DOCUMENT_BEGIN(filter, other, &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &list);

    for (i = 0; i < n; i++) {
        bson_uint32_to_string((uint32_t) i, &k, key, sizeof(key));
        BSON_APPEND_UTF8(&list, k, among[i]);
    }

    bson_append_array_end(&in, &list);
    bson_append_document_end(filter, &in);
}


/*
 * A page: in the order of the {self, status, created, other} index, a
 * batch at a time.  The whole list: the other user only, in no order.
 */

static void
ngx_http_feed_follows_opts(ngx_http_feed_follows_page_t *page,
    const char *other, bson_t *opts)
{
    bson_t  proj;

    bson_init(opts);

    if (page->batch) {
        ngx_http_feed_mongo_newest(opts, "created", other, page->batch);
        return;
    }

    BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, other, 1);
    BSON_APPEND_INT32(&proj, "_id", 0);
    bson_append_document_end(opts, &proj);
}
