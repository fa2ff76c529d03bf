
/*
 * ngx_feed_module: the "size_buckets" model of the MongoDB timelines
 * (Socialite's FanoutOnWriteSizedBuckets, seed 003): each user's
 * posts in buckets of at most feed_timeline_bucket_size entries, numbered
 * from 0, every follower written, whether they read or not.
 *
 *     timeline_size {_id: {u: user, s: 0, 1, ...}, n: 57, c: [entry, ...],
 *                    h: newest id, l: oldest id}
 *     timeline_size {_id: {u: user, s: -1}, f: ObjectId, d: ObjectId}
 *
 * "n" counts the entries ever pushed (a delete does not lower it), so a
 * full bucket stays full.  A user's buckets fill in order: a post is
 * pushed only into their newest bucket, by an update that matches only
 * while it is not full and has not the post; the bucket after it is
 * opened (an upsert of its _id) only once it is full.  So two deliveries
 * of a post, even concurrent, cannot both push it: into one bucket they
 * are serialized by the update, and two different buckets cannot both be
 * the newest not full.  The floor "f" is as in the time buckets model.
 *
 * Deliveries come in about, not exactly, the order of the ids: a bucket's
 * entries are kept in the order they came, and "h" and "l" bound its ids,
 * so that a read takes the buckets by "h", newest first.
 *
 * With feed_timeline_bucket_keep, the write that opens a user's bucket
 * deletes those older than the newest "keep", after it raised their mark
 * "d" past the newest id of those that go: the buckets hold every post
 * from the later of f and d up.
 */


#include "ngx_http_feed_model.h"


#define NGX_HTTP_FEED_MODEL_SIZE_COLL  "timeline_size"


/* what a round knows of a follower */
typedef struct {
    int64_t                       s;        /* their newest bucket, or -1 */
    int64_t                       n;        /* its "n"; -1: to be opened */
    ngx_uint_t                    has;      /* the post is theirs already */
    int64_t                       opened;   /* the newest bucket a round
                                               opened, or -1 */
    bson_oid_t                    gone;     /* the newest id of the buckets
                                               to be trimmed */
} ngx_http_feed_model_size_user_t;


/* a page of followers being written */
typedef struct {
    ngx_http_feed_user_t             *users;
    size_t                            n;
    ngx_http_feed_model_key_t        *keys;
    ngx_http_feed_model_size_user_t  *state;
    u_char                           *pick;     /* those of a query */
    const bson_t                     *entry;
    const bson_oid_t                 *id;
    int64_t                           size;
    mongoc_collection_t              *coll;
} ngx_http_feed_model_size_page_t;


static ngx_int_t ngx_http_feed_model_size_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_round(void *data,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_state(
    mongoc_collection_t *coll, ngx_http_feed_model_size_page_t *pg,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_newest(
    mongoc_collection_t *coll, ngx_http_feed_model_size_page_t *pg,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_scan(
    mongoc_collection_t *coll, const bson_t *filter, const bson_t *opts,
    ngx_http_feed_model_size_page_t *pg, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_write(
    mongoc_collection_t *coll, ngx_http_feed_model_size_page_t *pg,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_push(
    mongoc_bulk_operation_t *bulk, ngx_http_feed_model_size_page_t *pg,
    size_t i, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_open(
    mongoc_bulk_operation_t *bulk, ngx_http_feed_user_t *user, int64_t s,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_trim(
    ngx_http_feed_model_size_page_t *pg, ngx_uint_t keep, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_gone(
    ngx_http_feed_model_size_page_t *pg, const int64_t *cut,
    bson_error_t *error);
static ssize_t ngx_http_feed_model_size_whose(
    ngx_http_feed_model_size_page_t *pg, const bson_t *doc, bson_iter_t *it);
static ngx_int_t ngx_http_feed_model_size_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error);
static void ngx_http_feed_model_size_bucket(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, const bson_oid_t *bound,
    size_t want, bson_oid_t **ids, size_t *m);
static int ngx_http_feed_model_size_cmp_oid(const void *a,
    const void *b);
static ngx_int_t ngx_http_feed_model_size_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_size_drop(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, bson_error_t *error);


/*
 * A user's bucket not full, those that have a post (for writes and
 * deletes), and their buckets by their newest id (for reads)
 */

static ngx_http_feed_mongo_indexes_t  ngx_http_feed_model_size_indexes = {
    NGX_HTTP_FEED_MODEL_SIZE_COLL,
    "[{\"key\": {\"_id.u\": 1, \"n\": 1}, \"name\": \"user_open\"},"
    " {\"key\": {\"_id.u\": 1, \"h\": -1}, \"name\": \"user_newest\"},"
    " {\"key\": {\"c.i\": 1}, \"name\": \"entries\"}]"
};


ngx_http_feed_model_ops_t  ngx_http_feed_model_size_ops = {
    &ngx_http_feed_model_size_indexes,
    ngx_http_feed_model_size_add,
    ngx_http_feed_model_size_read,
    ngx_http_feed_model_size_begin,
    NULL,                                   /* fill: begin makes none */
    NULL,                                   /* abandon */
    ngx_http_feed_model_size_remove,
    ngx_http_feed_model_size_drop
};


/*
 * A post into the newest bucket of each of these users that has it not:
 * rounds of one query and one ordered bulk, until every user has it.  A
 * round is short when a concurrent delivery filled a bucket or pushed the
 * same post: the next one finds where things are.
 */

static ngx_int_t
ngx_http_feed_model_size_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error)
{
    size_t                           i;
    ngx_int_t                        rc;
    ngx_http_feed_model_size_page_t  pg;

    pg.users = users;
    pg.n = n;
    pg.keys = ngx_http_feed_model_keys(users, n);
    pg.state = bson_malloc(n * sizeof(ngx_http_feed_model_size_user_t));

    /*
     * What any round opened, a round cut short by concurrent deliveries
     * too: its bucket is there, or is opened by the next round
     */

    for (i = 0; i < n; i++) {
        pg.state[i].opened = -1;
    }
    pg.pick = bson_malloc(n);
    pg.entry = entry;
    pg.id = id;
    pg.size = (int64_t) mc->size;

    pg.coll = mongoc_client_get_collection(client, database,
                                           NGX_HTTP_FEED_MODEL_SIZE_COLL);

    rc = ngx_http_feed_model_rounds(ngx_http_feed_model_size_round,
                                    &pg, "size buckets", error);

    if (rc == NGX_OK && mc->keep) {
        rc = ngx_http_feed_model_size_trim(&pg, mc->keep, error);
    }

    mongoc_collection_destroy(pg.coll);
    bson_free(pg.pick);
    bson_free(pg.state);
    bson_free(pg.keys);

    return rc;
}


/* one round: where each user is, then the bulk */

static ngx_int_t
ngx_http_feed_model_size_round(void *data, bson_error_t *error)
{
    ngx_http_feed_model_size_page_t *pg;

    pg = data;

    if (ngx_http_feed_model_size_state(pg->coll, pg, error) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_feed_model_size_write(pg->coll, pg, error);
}


/*
 * Where each user is: their bucket not full, or one that has the post
 * already; the users with neither, their newest bucket
 */

static ngx_int_t
ngx_http_feed_model_size_state(mongoc_collection_t *coll,
    ngx_http_feed_model_size_page_t *pg, bson_error_t *error)
{
    size_t      i, lost;
    bson_t      filter, or, clause, lt, opts, proj, c, m;
    ngx_int_t   rc;

    for (i = 0; i < pg->n; i++) {
        pg->state[i].s = -1;
        pg->state[i].n = -1;
        pg->state[i].has = 0;
    }

    bson_init(&filter);
    ngx_http_feed_model_in(&filter, "_id.u", pg->users, pg->n, NULL,
                           NULL);

    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &or);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "0", &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&clause, "n", &lt);
    BSON_APPEND_INT64(&lt, "$lt", pg->size);
    bson_append_document_end(&clause, &lt);
    bson_append_document_end(&or, &clause);
    BSON_APPEND_DOCUMENT_BEGIN(&or, "1", &clause);
    BSON_APPEND_OID(&clause, "c.i", pg->id);
    bson_append_document_end(&or, &clause);
    bson_append_array_end(&filter, &or);

    /* "c" comes back only with the post: whether it has it */
    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "n", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&proj, "c", &c);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "$elemMatch", &m);
    BSON_APPEND_OID(&m, "i", pg->id);
    bson_append_document_end(&c, &m);
    bson_append_document_end(&proj, &c);
    bson_append_document_end(&opts, &proj);

    rc = ngx_http_feed_model_size_scan(coll, &filter, &opts, pg, error);
    bson_destroy(&opts);
    bson_destroy(&filter);

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    lost = 0;

    for (i = 0; i < pg->n; i++) {
        pg->pick[i] = (!pg->state[i].has && pg->state[i].s < 0);
        lost += pg->pick[i];
    }

    if (lost == 0) {
        return NGX_OK;
    }

    return ngx_http_feed_model_size_newest(coll, pg, error);
}


/*
 * The users whose buckets are all full, or who have none (pick[]): their
 * newest bucket, the next one to be opened after it when it is full
 */

static ngx_int_t
ngx_http_feed_model_size_newest(mongoc_collection_t *coll,
    ngx_http_feed_model_size_page_t *pg, bson_error_t *error)
{
    size_t                            i;
    bson_t                            filter, ge, opts, proj;
    ngx_int_t                         rc;
    ngx_http_feed_model_size_user_t  *f;

    bson_init(&filter);
    ngx_http_feed_model_in(&filter, "_id.u", pg->users, pg->n, pg->pick,
                           NULL);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id.s", &ge);
    BSON_APPEND_INT64(&ge, "$gte", 0);
    bson_append_document_end(&filter, &ge);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "n", 1);
    bson_append_document_end(&opts, &proj);

    rc = ngx_http_feed_model_size_scan(coll, &filter, &opts, pg, error);
    bson_destroy(&opts);
    bson_destroy(&filter);

    for (i = 0; i < pg->n; i++) {
        f = &pg->state[i];

        if (f->has || (f->s >= 0 && f->n < pg->size)) {
            continue;
        }

        /* none (the first is 0), or the newest is full: the next opened */
        f->s++;
        f->n = -1;
    }

    return rc;
}


/*
 * The buckets a query found: the users' that have the post (those with
 * "c", projected only when it holds the post), and their newest others
 */

static ngx_int_t
ngx_http_feed_model_size_scan(mongoc_collection_t *coll,
    const bson_t *filter, const bson_t *opts,
    ngx_http_feed_model_size_page_t *pg, bson_error_t *error)
{
    int64_t                           s;
    ssize_t                           k;
    ngx_int_t                         rc;
    bson_iter_t                       it, id;
    const bson_t                     *doc;
    mongoc_cursor_t                  *cursor;
    ngx_http_feed_model_size_user_t  *f;

    cursor = mongoc_collection_find_with_opts(coll, filter, opts, NULL);

    while (mongoc_cursor_next(cursor, &doc)) {
        k = ngx_http_feed_model_size_whose(pg, doc, &it);

        if (k < 0 || !bson_iter_recurse(&it, &id)
            || !bson_iter_find(&id, "s")
            || (s = bson_iter_as_int64(&id)) < 0)
        {
            continue;
        }

        f = &pg->state[k];

        if (bson_iter_init_find(&it, doc, "c")) {
            f->has = 1;

        } else if (s > f->s) {
            /* one not full only, unless a round was cut short */
            f->s = s;
            f->n = ngx_http_feed_bson_int(doc, "n");
        }
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);

    return rc;
}


/*
 * The page's user whose bucket doc is (their index), or -1; *it at its
 * "_id"
 */

static ssize_t
ngx_http_feed_model_size_whose(ngx_http_feed_model_size_page_t *pg,
    const bson_t *doc, bson_iter_t *it)
{
    uint32_t      len;
    const char   *name;
    bson_iter_t   id;

    if (!bson_iter_init_find(it, doc, "_id")
        || !BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &id)
        || !bson_iter_find(&id, "u") || !BSON_ITER_HOLDS_UTF8(&id))
    {
        return -1;
    }

    name = bson_iter_utf8(&id, &len);

    return ngx_http_feed_model_key(pg->keys, pg->n, name, len);
}


/*
 * One ordered bulk: for each user without the post, their next bucket
 * opened when needed, the push, and the bucket after it opened when the
 * push fills it.  Ordered, so that a failure stops it before a bucket is
 * opened after one not full.  NGX_AGAIN: some update matched nothing.
 */

static ngx_int_t
ngx_http_feed_model_size_write(mongoc_collection_t *coll,
    ngx_http_feed_model_size_page_t *pg, bson_error_t *error)
{
    size_t                            i;
    int64_t                           ops, done;
    ngx_int_t                         rc;
    ngx_http_feed_model_size_user_t  *f;
    mongoc_bulk_operation_t          *bulk;

    bulk = mongoc_collection_create_bulk_operation_with_opts(coll, NULL);

    ops = 0;
    rc = NGX_OK;

    for (i = 0; rc == NGX_OK && i < pg->n; i++) {
        f = &pg->state[i];

        if (f->has) {
            continue;
        }

        if (f->n < 0) {
            rc = ngx_http_feed_model_size_open(bulk, &pg->users[i], f->s,
                                               error);
            f->opened = ngx_max(f->opened, f->s);
            f->n = 0;
            ops++;
        }

        if (rc == NGX_OK) {
            rc = ngx_http_feed_model_size_push(bulk, pg, i, error);
            ops += (f->n + 1 == pg->size) ? 2 : 1;
        }
    }

    if (rc != NGX_OK || ops == 0) {
        mongoc_bulk_operation_destroy(bulk);
        return rc;
    }

    /* two openings of a bucket at once: where things are, again */
    rc = ngx_http_feed_model_bulk(bulk, &done, error);
    mongoc_bulk_operation_destroy(bulk);

    if (rc != NGX_OK) {
        return rc;
    }

    return done == ops ? NGX_OK : NGX_AGAIN;
}


/*
 * The post into a user's bucket while not full and without it; the next
 * bucket opened when this push fills it
 */

static ngx_int_t
ngx_http_feed_model_size_push(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_model_size_page_t *pg, size_t i, bson_error_t *error)
{
    bool                              ok;
    bson_t                            selector, lt, ne, update;
    bson_t                            push, inc, max, min;
    ngx_http_feed_model_size_user_t  *f;

    f = &pg->state[i];

    bson_init(&selector);
    ngx_http_feed_model_bucket_id(&selector, "_id", &pg->users[i], "s",
                                  f->s);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "n", &lt);
    BSON_APPEND_INT64(&lt, "$lt", pg->size);
    bson_append_document_end(&selector, &lt);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "c.i", &ne);
    BSON_APPEND_OID(&ne, "$ne", pg->id);
    bson_append_document_end(&selector, &ne);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$push", &push);
    BSON_APPEND_DOCUMENT(&push, "c", pg->entry);
    bson_append_document_end(&update, &push);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "n", 1);
    bson_append_document_end(&update, &inc);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$max", &max);
    BSON_APPEND_OID(&max, "h", pg->id);
    bson_append_document_end(&update, &max);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$min", &min);
    BSON_APPEND_OID(&min, "l", pg->id);
    bson_append_document_end(&update, &min);

    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector, &update,
                                                    NULL, error);
    bson_destroy(&update);
    bson_destroy(&selector);

    if (!ok) {
        return NGX_ERROR;
    }

    /*
     * Full after this push, whether it is ours or a concurrent one's that
     * made it fail: "n" was one short when read, and only grows
     */

    if (f->n + 1 == pg->size) {
        f->opened = ngx_max(f->opened, f->s + 1);
        return ngx_http_feed_model_size_open(bulk, &pg->users[i],
                                             f->s + 1, error);
    }

    return NGX_OK;
}


/* a user's bucket s opened, empty, unless there (an upsert of its _id) */

static ngx_int_t
ngx_http_feed_model_size_open(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_user_t *user, int64_t s, bson_error_t *error)
{
    bool    ok;
    bson_t  selector, update, set, opts;

    bson_init(&selector);
    ngx_http_feed_model_bucket_id(&selector, "_id", user, "s", s);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$setOnInsert", &set);
    BSON_APPEND_INT64(&set, "n", 0);
    bson_append_document_end(&update, &set);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector, &update,
                                                    &opts, error);

    bson_destroy(&opts);
    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * The users whose newest bucket this write opened keep the newest "keep"
 * (feed_timeline_bucket_keep): the older ones go, the buckets kept holding
 * every post newer than the newest id of those that go
 */

static ngx_int_t
ngx_http_feed_model_size_trim(ngx_http_feed_model_size_page_t *pg,
    ngx_uint_t keep, bson_error_t *error)
{
    size_t                            i, m;
    int64_t                          *cut;
    ngx_int_t                         rc;
    bson_oid_t                       *mark;
    ngx_http_feed_model_size_user_t  *f;

    cut = bson_malloc(pg->n * sizeof(int64_t));

    for (i = 0, m = 0; i < pg->n; i++) {
        f = &pg->state[i];
        cut[i] = f->opened - (int64_t) keep + 1;
        pg->pick[i] = (f->opened >= 0 && cut[i] > 0);
        m += pg->pick[i];
    }

    if (m == 0) {
        bson_free(cut);
        return NGX_OK;
    }

    rc = ngx_http_feed_model_size_gone(pg, cut, error);

    if (rc == NGX_OK) {
        mark = bson_malloc(pg->n * sizeof(bson_oid_t));

        for (i = 0; i < pg->n; i++) {
            ngx_http_feed_model_next(&pg->state[i].gone, &mark[i]);
        }

        rc = ngx_http_feed_model_trim(pg->coll, "s", pg->users, pg->n,
                                      pg->pick, cut, mark, error);
        bson_free(mark);
    }

    bson_free(cut);

    return rc;
}


/*
 * The newest id of each picked user's buckets below their cut (those
 * that go: a bucket's entries came in about the order of their ids, not
 * exactly); a user without such buckets is picked no more
 */

static ngx_int_t
ngx_http_feed_model_size_gone(ngx_http_feed_model_size_page_t *pg,
    const int64_t *cut, bson_error_t *error)
{
    char              key[16];
    size_t            i, m;
    ssize_t           k;
    ngx_int_t         rc;
    bson_t            filter, or, clause, range, opts, proj;
    const char       *s;
    bson_iter_t       it;
    const bson_t     *doc;
    mongoc_cursor_t  *cursor;

    bson_init(&filter);
    BSON_APPEND_ARRAY_BEGIN(&filter, "$or", &or);

    for (i = 0, m = 0; i < pg->n; i++) {
        ngx_memzero(&pg->state[i].gone, sizeof(bson_oid_t));

        if (!pg->pick[i]) {
            continue;
        }

        pg->pick[i] = 0;

        bson_uint32_to_string((uint32_t) m++, &s, key, sizeof(key));
        BSON_APPEND_DOCUMENT_BEGIN(&or, s, &clause);
        bson_append_utf8(&clause, "_id.u", 5, pg->users[i].data,
                         (int) pg->users[i].len);
        BSON_APPEND_DOCUMENT_BEGIN(&clause, "_id.s", &range);
        BSON_APPEND_INT64(&range, "$gte", 0);
        BSON_APPEND_INT64(&range, "$lt", cut[i]);
        bson_append_document_end(&clause, &range);
        bson_append_document_end(&or, &clause);
    }

    bson_append_array_end(&filter, &or);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "h", 1);
    bson_append_document_end(&opts, &proj);

    cursor = mongoc_collection_find_with_opts(pg->coll, &filter, &opts, NULL);

    while (mongoc_cursor_next(cursor, &doc)) {
        k = ngx_http_feed_model_size_whose(pg, doc, &it);

        if (k < 0) {
            continue;
        }

        /* a bucket there to go, its entries' newest id if any */
        pg->pick[k] = 1;

        if (bson_iter_init_find(&it, doc, "h") && BSON_ITER_HOLDS_OID(&it)
            && bson_oid_compare(bson_iter_oid(&it), &pg->state[k].gone) > 0)
        {
            bson_oid_copy(bson_iter_oid(&it), &pg->state[k].gone);
        }
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/*
 * The buckets of a page's range by their newest id, newest first, until
 * the next can hold none of the want newest entries from the floor up
 */

static ngx_int_t
ngx_http_feed_model_size_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    size_t                m, i;
    bson_t                filter, opts, sort, h, l;
    ngx_int_t             rc;
    bson_oid_t           *ids;
    bson_iter_t           it;
    const bson_t         *bucket;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    rc = ngx_http_feed_model_bucket_page(client, database,
                                         NGX_HTTP_FEED_MODEL_SIZE_COLL, "s",
                                         user, want, page, &coll, error);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    bson_init(&filter);
    bson_append_utf8(&filter, "_id.u", 5, user->data, (int) user->len);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "h", &h);
    BSON_APPEND_OID(&h, "$gte", &page->bound);

    if (range->since_id) {
        BSON_APPEND_OID(&h, "$gt", range->since_id);
    }

    bson_append_document_end(&filter, &h);

    if (range->max_id) {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "l", &l);
        BSON_APPEND_OID(&l, "$lt", range->max_id);
        bson_append_document_end(&filter, &l);
    }

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "h", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &sort);
    BSON_APPEND_INT32(&sort, "c.i", 1);
    BSON_APPEND_INT32(&sort, "h", 1);
    bson_append_document_end(&opts, &sort);

    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    /* the want + 1 newest entries in range so far, newest first */
    ids = NULL;
    m = 0;

    while (mongoc_cursor_next(cursor, &bucket)) {
        if (m > want && bson_iter_init_find(&it, bucket, "h")
            && BSON_ITER_HOLDS_OID(&it)
            && bson_oid_compare(bson_iter_oid(&it), &ids[want]) < 0)
        {
            /* all its entries are older than the want + 1 taken */
            break;
        }

        ngx_http_feed_model_size_bucket(bucket, range, &page->bound,
                                        want, &ids, &m);
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    for (i = 0; rc == NGX_OK && i < m; i++) {
        if (ngx_http_feed_model_take(page, &ids[i], range, want)
            == NGX_DONE)
        {
            break;
        }
    }

    bson_free(ids);
    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    if (rc == NGX_OK && mc->keep) {
        rc = ngx_http_feed_model_bucket_recheck(coll, "s", user, page,
                                                error);
    }

    mongoc_collection_destroy(coll);

    return rc;
}


/*
 * A bucket's entries in range (from bound up) added to *ids, kept sorted
 * newest first, each once, at most want + 1 of them
 */

static void
ngx_http_feed_model_size_bucket(const bson_t *doc,
    ngx_http_feed_posts_range_t *range, const bson_oid_t *bound,
    size_t want, bson_oid_t **ids, size_t *m)
{
    size_t       n, i, k;
    bson_oid_t  *all, *to;

    all = ngx_http_feed_model_ids(doc, &n);

    if (n == 0) {
        return;
    }

    /* a bucket may hold more than feed_timeline_bucket_size says now */
    to = bson_realloc(*ids, (*m + n) * sizeof(bson_oid_t));
    *ids = to;

    for (i = 0; i < n; i++) {
        if (bson_oid_compare(&all[i], bound) < 0
            || (range->max_id && bson_oid_compare(&all[i], range->max_id) >= 0)
            || (range->since_id
                && bson_oid_compare(&all[i], range->since_id) <= 0))
        {
            continue;
        }

        bson_oid_copy(&all[i], &to[(*m)++]);
    }

    bson_free(all);

    qsort(to, *m, sizeof(bson_oid_t), ngx_http_feed_model_size_cmp_oid);

    for (i = 1, k = (*m ? 1 : 0); i < *m; i++) {
        if (!bson_oid_equal(&to[i], &to[k - 1])) {
            bson_oid_copy(&to[i], &to[k++]);
        }
    }

    *m = ngx_min(k, want + 1);
}


/* ids newest first */

static int
ngx_http_feed_model_size_cmp_oid(const void *a, const void *b)
{
    return bson_oid_compare((const bson_oid_t *) b, (const bson_oid_t *) a);
}


/* a first read: the user's floor, from which the buckets hold every post */

static ngx_int_t
ngx_http_feed_model_size_begin(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, int64_t now, ngx_uint_t *mine,
    bson_error_t *error)
{
    *mine = 0;

    return ngx_http_feed_model_bucket_floor(client, database,
                                            NGX_HTTP_FEED_MODEL_SIZE_COLL,
                                            "s", user, 0, error);
}


/* a deleted post out of every bucket ("n" stays: a full one stays full) */

static ngx_int_t
ngx_http_feed_model_size_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error)
{
    return ngx_http_feed_model_delete_post(client, database,
                                           NGX_HTTP_FEED_MODEL_SIZE_COLL, id,
                                           error);
}


/* whom the user follows changed: their floor moved to now */

static ngx_int_t
ngx_http_feed_model_size_drop(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, bson_error_t *error)
{
    return ngx_http_feed_model_bucket_floor(client, database,
                                            NGX_HTTP_FEED_MODEL_SIZE_COLL,
                                            "s", user, 1, error);
}
