
/*
 * ngx_feed_module: the follow graph in MongoDB (runs in thread pool tasks).
 *
 * An edge is {src, dst, status, created, updated} (seed 002's follow
 * document) plus a version "v", bumped by every real state change, and
 * "cv", the version the per-user counters already account for.
 *
 * Counters live in "follow_counts" {_id: user, following, followers, ops}.
 * An edge version is applied to each counter at most once: the update
 * only matches while "ops" lacks the version's id, and pushes it (the last
 * 64 are kept).  So a change interrupted half way (MongoDB gone between
 * two writes) is finished by the next request that touches the edge,
 * without counting anything twice, and nothing is ever half-written for
 * good.
 *
 * A user follows at most feed_follow_max users: a follow is refused when
 * the user's count is there already, and taken back when, counted after
 * it was written, the count went past it (concurrent follows).
 */


#include "ngx_http_feed_graph.h"


#define NGX_HTTP_FEED_GRAPH_RETRIES  5
#define NGX_HTTP_FEED_COUNT_OPS      64


typedef struct {
    bson_oid_t                    id;
    int64_t                       status;
    int64_t                       v;
    int64_t                       cv;
} ngx_http_feed_edge_t;


static ngx_int_t ngx_http_feed_graph_find_edge(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_change(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    ngx_uint_t found, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_create(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_count(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_count_one(mongoc_collection_t *counts,
    const char *user, const char *field, int64_t delta, const char *opid,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_over(mongoc_collection_t *counts,
    ngx_http_feed_follow_op_t *op, ngx_uint_t written, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_recount(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_read_count(mongoc_collection_t *counts,
    const char *user, const char *field, int64_t *n, bson_error_t *error);
static ngx_int_t ngx_http_feed_graph_page(mongoc_collection_t *follows,
    ngx_http_feed_list_op_t *op, bson_t *items,
    ngx_http_feed_graph_pos_t *last, bson_error_t *error);
static void ngx_http_feed_graph_cursor(char *buf, size_t size,
    ngx_http_feed_graph_pos_t *pos);


void
ngx_http_feed_graph_follow_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_follow_op_t  *op = t->data;

    ngx_int_t              rc, over;
    ngx_uint_t             i;
    mongoc_collection_t   *follows, *counts;
    ngx_http_feed_edge_t   edge;

    follows = mongoc_client_get_collection(client, t->database,
                                           NGX_HTTP_FEED_FOLLOWS);
    counts = mongoc_client_get_collection(client, t->database,
                                          NGX_HTTP_FEED_FOLLOW_COUNTS);

    t->rc = NGX_ERROR;

    for (i = 0; i < NGX_HTTP_FEED_GRAPH_RETRIES; i++) {

        rc = ngx_http_feed_graph_find_edge(follows, op, &edge, &t->error);
        if (rc == NGX_ERROR) {
            goto done;
        }

        /* first finish whatever an interrupted request left behind */

        if (rc == NGX_OK && edge.v != edge.cv
            && ngx_http_feed_graph_count(counts, follows, op, &edge,
                                         &t->error)
               != NGX_OK)
        {
            goto done;
        }

        if ((rc == NGX_OK ? edge.status : 0) == (int64_t) op->want) {
            op->changed = 0;
            t->rc = NGX_OK;
            goto done;
        }

        if (op->want) {
            over = ngx_http_feed_graph_over(counts, op, 0, &t->error);

            if (over != NGX_OK) {
                t->rc = (over == NGX_DECLINED) ? NGX_OK : NGX_ERROR;
                goto done;
            }
        }

        rc = ngx_http_feed_graph_change(follows, op, &edge, rc == NGX_OK,
                                        &t->error);
        if (rc == NGX_ERROR) {
            goto done;
        }

        if (rc == NGX_AGAIN) {
            /* someone else changed the edge meanwhile: look again */
            continue;
        }

        if (ngx_http_feed_graph_count(counts, follows, op, &edge, &t->error)
            != NGX_OK)
        {
            goto done;
        }

        if (op->want
            && ngx_http_feed_graph_recount(counts, follows, op, &edge,
                                           &t->error)
               != NGX_OK)
        {
            goto done;
        }

        op->changed = 1;
        t->rc = NGX_OK;
        goto done;
    }

    bson_set_error(&t->error, MONGOC_ERROR_STREAM, 0,
                   "too many concurrent changes of one relationship");

done:

    mongoc_collection_destroy(counts);
    mongoc_collection_destroy(follows);
}


static ngx_int_t
ngx_http_feed_graph_find_edge(mongoc_collection_t *follows,
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
ngx_http_feed_graph_change(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    ngx_uint_t found, bson_error_t *error)
{
    bool     ok;
    bson_t   selector, update, set, inc, reply;
    int64_t  matched;

    if (!found) {
        return ngx_http_feed_graph_create(follows, op, edge, error);
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
ngx_http_feed_graph_create(mongoc_collection_t *follows,
    ngx_http_feed_follow_op_t *op, ngx_http_feed_edge_t *edge,
    bson_error_t *error)
{
    bool     ok;
    bson_t   selector, update, set, opts, reply;
    int64_t  upserted;

    bson_oid_init(&edge->id, NULL);
    edge->status = 1;
    edge->v = 1;
    edge->cv = 0;

    bson_init(&selector);
    BSON_APPEND_UTF8(&selector, "src", op->src.data);
    BSON_APPEND_UTF8(&selector, "dst", op->dst.data);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$setOnInsert", &set);
    BSON_APPEND_OID(&set, "_id", &edge->id);
    BSON_APPEND_INT32(&set, "status", 1);
    BSON_APPEND_DATE_TIME(&set, "created", op->now);
    BSON_APPEND_DATE_TIME(&set, "updated", op->now);
    BSON_APPEND_INT64(&set, "v", 1);
    BSON_APPEND_INT64(&set, "cv", 0);
    bson_append_document_end(&update, &set);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ok = mongoc_collection_update_one(follows, &selector, &update, &opts,
                                      &reply, error);

    upserted = ok ? ngx_http_feed_bson_int(&reply, "upsertedCount") : 0;

    bson_destroy(&reply);
    bson_destroy(&opts);
    bson_destroy(&update);
    bson_destroy(&selector);

    if (!ok) {
        /* two upserts of one pair at once: one of them meets the index */
        return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_AGAIN
                                                         : NGX_ERROR;
    }

    return upserted ? NGX_OK : NGX_AGAIN;
}


/* applies the edge's current version to both users' counters, once */

static ngx_int_t
ngx_http_feed_graph_count(mongoc_collection_t *counts,
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

    if (ngx_http_feed_graph_count_one(counts, op->src.data, "following",
                                      delta, opid, error)
        != NGX_OK
        || ngx_http_feed_graph_count_one(counts, op->dst.data, "followers",
                                         delta, opid, error)
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
ngx_http_feed_graph_count_one(mongoc_collection_t *counts, const char *user,
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
ngx_http_feed_graph_over(mongoc_collection_t *counts,
    ngx_http_feed_follow_op_t *op, ngx_uint_t written, bson_error_t *error)
{
    int64_t  n;

    if (ngx_http_feed_graph_read_count(counts, op->src.data, "following", &n,
                                       error)
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
ngx_http_feed_graph_recount(mongoc_collection_t *counts,
    mongoc_collection_t *follows, ngx_http_feed_follow_op_t *op,
    ngx_http_feed_edge_t *edge, bson_error_t *error)
{
    ngx_int_t   rc;
    ngx_uint_t  i;

    rc = ngx_http_feed_graph_over(counts, op, 1, error);
    if (rc != NGX_DECLINED) {
        return rc;
    }

    for (i = 0; i < NGX_HTTP_FEED_GRAPH_RETRIES; i++) {

        op->want = 0;
        rc = ngx_http_feed_graph_change(follows, op, edge, 1, error);
        op->want = 1;

        if (rc == NGX_OK) {
            return ngx_http_feed_graph_count(counts, follows, op, edge,
                                             error);
        }

        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        /* changed meanwhile: an unfollow of the same pair did it for us */

        rc = ngx_http_feed_graph_find_edge(follows, op, edge, error);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        if (rc == NGX_DECLINED || edge->status == 0) {
            return NGX_OK;
        }
    }

    bson_set_error(error, MONGOC_ERROR_STREAM, 0,
                   "too many concurrent changes of one relationship");

    return NGX_ERROR;
}


/* a user's "following" or "followers", as counted: 0 without a count yet */

static ngx_int_t
ngx_http_feed_graph_read_count(mongoc_collection_t *counts, const char *user,
    const char *field, int64_t *n, bson_error_t *error)
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


/*
 * A page, newest relationship first: sorted by (created, other user)
 * descending, a total order, so the cursor (created, other user) of the
 * last item resumes exactly after it whatever changes meanwhile.
 */

void
ngx_http_feed_graph_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_list_op_t  *op = t->data;

    char                        next[NGX_HTTP_FEED_GRAPH_CURSOR_MAX + 1];
    bson_t                      doc, items;
    ngx_int_t                   rc;
    mongoc_collection_t        *follows, *counts;
    ngx_http_feed_graph_pos_t   last;

    follows = mongoc_client_get_collection(client, t->database,
                                           NGX_HTTP_FEED_FOLLOWS);
    counts = mongoc_client_get_collection(client, t->database,
                                          NGX_HTTP_FEED_FOLLOW_COUNTS);

    bson_init(&doc);
    bson_init(&items);

    t->rc = NGX_ERROR;

    rc = ngx_http_feed_graph_page(follows, op, &items, &last, &t->error);
    if (rc == NGX_ERROR) {
        goto done;
    }

    if (op->need_count
        && ngx_http_feed_graph_read_count(counts, op->user.data,
                                          op->followers ? "followers"
                                                        : "following",
                                          &op->count, &t->error)
           != NGX_OK)
    {
        goto done;
    }

    BSON_APPEND_INT64(&doc, "count", op->count);
    BSON_APPEND_ARRAY(&doc, "items", &items);

    if (rc == NGX_AGAIN) {
        ngx_http_feed_graph_cursor(next, sizeof(next), &last);
        BSON_APPEND_UTF8(&doc, "next", next);

    } else {
        BSON_APPEND_NULL(&doc, "next");
    }

    op->json = bson_as_relaxed_extended_json(&doc, &op->json_len);

    t->rc = op->json ? NGX_OK : NGX_ERROR;

done:

    bson_destroy(&items);
    bson_destroy(&doc);
    mongoc_collection_destroy(counts);
    mongoc_collection_destroy(follows);
}


/* NGX_AGAIN: there is more after this page */

static ngx_int_t
ngx_http_feed_graph_page(mongoc_collection_t *follows,
    ngx_http_feed_list_op_t *op, bson_t *items,
    ngx_http_feed_graph_pos_t *last, bson_error_t *error)
{
    char                   key[16];
    const char            *self, *other, *k;
    bson_t                 filter, opts, sort, proj, any, a, b, lt, lt2, item;
    int64_t                since;
    bson_iter_t            it;
    ngx_int_t              rc;
    ngx_uint_t             n;
    const bson_t          *doc;
    mongoc_cursor_t       *cursor;
    ngx_http_feed_user_t   id;

    self = op->followers ? "dst" : "src";
    other = op->followers ? "src" : "dst";

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, self, op->user.data);
    BSON_APPEND_INT32(&filter, "status", 1);

    if (op->has_cursor) {
        BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &any);

        BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &a);
        BSON_APPEND_DOCUMENT_BEGIN(&a, "created", &lt);
        BSON_APPEND_DATE_TIME(&lt, "$lt", op->cursor_ms);
        bson_append_document_end(&a, &lt);
        bson_append_document_end(&any, &a);

        BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &b);
        BSON_APPEND_DATE_TIME(&b, "created", op->cursor_ms);
        BSON_APPEND_DOCUMENT_BEGIN(&b, other, &lt2);
        BSON_APPEND_UTF8(&lt2, "$lt", op->cursor_id.data);
        bson_append_document_end(&b, &lt2);
        bson_append_document_end(&any, &b);

        bson_append_array_end(&filter, &any);
    }

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "created", -1);
    BSON_APPEND_INT32(&sort, other, -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, other, 1);
    BSON_APPEND_INT32(&proj, "created", 1);
    BSON_APPEND_INT32(&proj, "_id", 0);
    bson_append_document_end(&opts, &proj);

    /* no limit: ids that are not ours are skipped, not counted */
    BSON_APPEND_INT32(&opts, "batchSize", (int32_t) op->limit + 1);

    cursor = mongoc_collection_find_with_opts(follows, &filter, &opts, NULL);

    rc = NGX_OK;
    n = 0;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_bson_user(doc, other, &id) != NGX_OK) {
            op->skipped++;
            continue;
        }

        if (n == op->limit) {
            rc = NGX_AGAIN;
            break;
        }

        since = bson_iter_init_find(&it, doc, "created")
                && BSON_ITER_HOLDS_DATE_TIME(&it)
                ? bson_iter_date_time(&it) : 0;

        bson_uint32_to_string(n++, &k, key, sizeof(key));

        BSON_APPEND_DOCUMENT_BEGIN(items, k, &item);
        BSON_APPEND_UTF8(&item, "id", id.data);
        BSON_APPEND_INT64(&item, "since", since);
        bson_append_document_end(items, &item);

        last->user = id;
        last->since = since;
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/*
 * Cursors are opaque: base64url of "<created ms>:<other user>", the user
 * a valid id (so at most NGX_HTTP_FEED_GRAPH_CURSOR_RAW bytes in all);
 * written for the thread, so with no nginx pool.
 */

static void
ngx_http_feed_graph_cursor(char *buf, size_t size,
    ngx_http_feed_graph_pos_t *pos)
{
    u_char     raw[NGX_HTTP_FEED_GRAPH_CURSOR_RAW];
    ngx_str_t  src, dst;

    src.data = raw;
    src.len = ngx_snprintf(raw, sizeof(raw), "%L:%s", pos->since,
                           pos->user.data)
              - raw;

    if (ngx_base64_encoded_length(src.len) >= size) {
        buf[0] = '\0';
        return;
    }

    dst.data = (u_char *) buf;
    ngx_encode_base64url(&dst, &src);
    buf[dst.len] = '\0';
}


ngx_int_t
ngx_http_feed_graph_cursor_parse(ngx_str_t *text,
    ngx_http_feed_list_op_t *op)
{
    off_t        ms;
    u_char      *p, *colon;
    ngx_str_t    dst;
    ngx_uint_t   neg;

    /* ngx_base64_decoded_length() counts unpadded input's last bytes up */
    u_char       raw[NGX_HTTP_FEED_GRAPH_CURSOR_RAW + 2];

    if (text->len == 0 || text->len > NGX_HTTP_FEED_GRAPH_CURSOR_MAX) {
        return NGX_DECLINED;
    }

    dst.data = raw;

    if (ngx_decode_base64url(&dst, text) != NGX_OK) {
        return NGX_DECLINED;
    }

    colon = ngx_strlchr(raw, raw + dst.len, ':');
    if (colon == NULL) {
        return NGX_DECLINED;
    }

    /*
     * Any time a document may hold, as the maker wrote it: another
     * application may have written dates before 1970 or far ahead.
     */

    neg = (*raw == '-');
    ms = ngx_atoof(raw + neg, colon - raw - neg);

    if (ms == NGX_ERROR) {
        return NGX_DECLINED;
    }

    p = colon + 1;

    if (!ngx_http_feed_user_valid(p, raw + dst.len - p)) {
        return NGX_DECLINED;
    }

    op->has_cursor = 1;
    op->cursor_ms = neg ? -ms : ms;
    op->cursor_id.len = raw + dst.len - p;
    ngx_memcpy(op->cursor_id.data, p, op->cursor_id.len);
    op->cursor_id.data[op->cursor_id.len] = '\0';

    return NGX_OK;
}
