
/*
 * ngx_feed_module: the "capped" model of the MongoDB timelines, capped
 * and segmented per user (seed 001): a counter per user, and the
 * entry of the counter's n-th post in the slot "<user>_<n mod cap>"
 * (cap: feed_timeline_capped_size), written by upsert, so that the oldest
 * entry is overwritten.  Every follower is written, whether they read or
 * not.
 *
 *     timeline_capped       {_id: "ann_17", u: "ann", i: ObjectId, n: 1217,
 *                            p|a}
 *     timeline_capped_users {_id: "ann", n: 1234, p: ObjectId, f: ObjectId,
 *                            w: ObjectId}
 *
 * A page of followers is written in rounds of three queries and two
 * bulks: the followers that have the post already; their counters; the
 * slots after them; then the numbers claimed (the counter moved on from
 * the value read, with "p" the post that took it, so that a round cut
 * short finds which claims held); then each slot written if it still
 * holds what was read ("n").  A slot that meanwhile got a later number
 * leaves the post out, as if overwritten.  A user whose claim did not hold
 * (concurrent posts to them, such as an author's own) takes the next
 * number by findAndModify ($inc), which always holds.
 *
 * Deliveries come in about, not exactly, the order of the posts' ids: an
 * overwritten entry may be newer than some kept.  "w" keeps the newest id
 * ever overwritten, raised before the overwrite: every post from the later
 * of the floor "f" (as in the time buckets model: the user's first read,
 * then each follow or unfollow) and "w" up that was delivered is kept, and
 * a read takes "w" after the slots.  A post is kept once: {u, i} is
 * unique.  Those not delivered yet are in flight: the page's reader
 * (ngx_http_feed_timeline_model.c) adds them.
 */


#include "ngx_http_feed_model.h"


#define NGX_HTTP_FEED_MODEL_CAPPED_COLL   "timeline_capped"
#define NGX_HTTP_FEED_MODEL_CAPPED_USERS  "timeline_capped_users"


/* what a round knows of a follower */
typedef struct {
    ngx_uint_t                    state;
#define NGX_HTTP_FEED_CAPPED_TODO     0       /* to claim a number */
#define NGX_HTTP_FEED_CAPPED_ASKED    1       /* claimed, not known if held */
#define NGX_HTTP_FEED_CAPPED_CLAIMED  2       /* its slot to be written */
#define NGX_HTTP_FEED_CAPPED_OVER     3       /* overwritten already */
#define NGX_HTTP_FEED_CAPPED_DONE     4
    int64_t                       n;          /* the counter as read */
    int64_t                       m;          /* the number of the post */
    int64_t                       old;        /* the slot's, as read; 0 */
    ngx_uint_t                    held;       /* the slot held "was" */
    ngx_uint_t                    lost;       /* a claim of it did not hold:
                                                 the next one by $inc */
    ngx_uint_t                    fresh;      /* numbered, slot not read */
    bson_oid_t                    was;
    char                          name[NGX_HTTP_FEED_USER_MAX + 24];
                                              /* the slot */
} ngx_http_feed_model_capped_user_t;


/* a page of followers being written */
typedef struct {
    ngx_http_feed_user_t               *users;
    size_t                              n;
    ngx_http_feed_model_key_t          *keys;
    ngx_http_feed_model_capped_user_t  *state;
    char                              **slots;
    u_char                             *pick;     /* those of a query */
    const bson_t                       *entry;
    const bson_oid_t                   *id;
    int64_t                             cap;
    mongoc_collection_t                *entries;
    mongoc_collection_t                *counters;
} ngx_http_feed_model_capped_page_t;


static ngx_int_t ngx_http_feed_model_capped_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_round(void *data,
    bson_error_t *error);
static size_t ngx_http_feed_model_capped_pick(
    ngx_http_feed_model_capped_page_t *pg, ngx_uint_t a, ngx_uint_t b);
static ngx_int_t ngx_http_feed_model_capped_query(
    ngx_http_feed_model_capped_page_t *pg, mongoc_collection_t *coll,
    bson_t *filter, const char *fields, ngx_uint_t what,
    bson_error_t *error);
static void ngx_http_feed_model_capped_found(
    ngx_http_feed_model_capped_page_t *pg, const bson_t *doc, ngx_uint_t what);
static ngx_int_t ngx_http_feed_model_capped_claim(
    ngx_http_feed_model_capped_page_t *pg, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_take(
    ngx_http_feed_model_capped_page_t *pg, size_t i, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_counter(
    mongoc_bulk_operation_t *bulk, ngx_http_feed_model_capped_page_t *pg,
    size_t i, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_write(
    ngx_http_feed_model_capped_page_t *pg, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_slots(
    mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t max, bson_oid_t **ids, size_t *n, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);
static ngx_int_t ngx_http_feed_model_capped_drop(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, bson_error_t *error);


/* what a query answers (ngx_http_feed_model_capped_found()) */
#define NGX_HTTP_FEED_CAPPED_HAS      0
#define NGX_HTTP_FEED_CAPPED_COUNTER  1
#define NGX_HTTP_FEED_CAPPED_SLOT     2


/* a user's entries, newest first; a post once per user */

static ngx_http_feed_mongo_indexes_t  ngx_http_feed_model_capped_indexes = {
    NGX_HTTP_FEED_MODEL_CAPPED_COLL,
    "[{\"key\": {\"u\": 1, \"i\": -1}, \"name\": \"user_id\","
    " \"unique\": true},"
    " {\"key\": {\"i\": 1}, \"name\": \"post\"}]"
};


ngx_http_feed_model_ops_t  ngx_http_feed_model_capped_ops = {
    &ngx_http_feed_model_capped_indexes,
    ngx_http_feed_model_capped_add,
    ngx_http_feed_model_capped_read,
    ngx_http_feed_model_capped_begin,
    NULL,                                   /* fill: begin makes none */
    NULL,                                   /* abandon */
    ngx_http_feed_model_capped_remove,
    ngx_http_feed_model_capped_drop
};


/* a post into the slots of these users, in rounds until all have it */

static ngx_int_t
ngx_http_feed_model_capped_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *users, size_t n, const bson_t *entry,
    const bson_oid_t *id, bson_error_t *error)
{
    size_t                             i;
    ngx_int_t                          rc;
    ngx_http_feed_model_capped_page_t  pg;

    pg.users = users;
    pg.n = n;
    pg.keys = ngx_http_feed_model_keys(users, n);
    pg.state = bson_malloc0(n * sizeof(ngx_http_feed_model_capped_user_t));
    pg.slots = bson_malloc(n * sizeof(char *));
    pg.pick = bson_malloc(n);
    pg.entry = entry;
    pg.id = id;
    pg.cap = (int64_t) mc->slots;
    pg.entries = mongoc_client_get_collection(client, database,
                                              NGX_HTTP_FEED_MODEL_CAPPED_COLL);
    pg.counters = mongoc_client_get_collection(client, database,
                                            NGX_HTTP_FEED_MODEL_CAPPED_USERS);

    for (i = 0; i < n; i++) {
        pg.slots[i] = pg.state[i].name;
    }

    rc = ngx_http_feed_model_rounds(ngx_http_feed_model_capped_round,
                                    &pg, "capped", error);

    mongoc_collection_destroy(pg.counters);
    mongoc_collection_destroy(pg.entries);
    bson_free(pg.pick);
    bson_free(pg.slots);
    bson_free(pg.state);
    bson_free(pg.keys);

    return rc;
}


/*
 * One round: who has the post, the counters of those with no number yet
 * (or whose claim may not have held), the slots of the numbers; then the
 * claims, then the slots.  NGX_AGAIN: some are not done.
 */

static ngx_int_t
ngx_http_feed_model_capped_round(void *data, bson_error_t *error)
{
    size_t                              i;
    bson_t                              filter;
    ngx_int_t                           rc;
    ngx_http_feed_model_capped_user_t  *f;
    ngx_http_feed_model_capped_page_t  *pg;

    pg = data;

    if (ngx_http_feed_model_capped_pick(pg, NGX_HTTP_FEED_CAPPED_TODO,
                                        NGX_HTTP_FEED_CAPPED_OVER))
    {
        bson_init(&filter);
        ngx_http_feed_model_in(&filter, "u", pg->users, pg->n, pg->pick,
                               NULL);
        BSON_APPEND_OID(&filter, "i", pg->id);

        if (ngx_http_feed_model_capped_query(pg, pg->entries, &filter,
                                             "u", NGX_HTTP_FEED_CAPPED_HAS,
                                             error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (ngx_http_feed_model_capped_pick(pg, NGX_HTTP_FEED_CAPPED_TODO,
                                        NGX_HTTP_FEED_CAPPED_ASKED))
    {
        bson_init(&filter);
        ngx_http_feed_model_in(&filter, "_id", pg->users, pg->n,
                               pg->pick, NULL);

        if (ngx_http_feed_model_capped_query(pg, pg->counters, &filter,
                                             "n p",
                                             NGX_HTTP_FEED_CAPPED_COUNTER,
                                             error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    /* the slot of each number, to be claimed or claimed */

    for (i = 0; i < pg->n; i++) {
        f = &pg->state[i];

        if (f->state == NGX_HTTP_FEED_CAPPED_TODO) {
            f->m = f->n + 1;
        }

        if (f->state <= NGX_HTTP_FEED_CAPPED_CLAIMED) {
            ngx_sprintf((u_char *) f->name, "%s_%L%Z", pg->users[i].data,
                        f->m % pg->cap);
            f->old = 0;
            f->held = 0;
            f->fresh = 0;
        }
    }

    if (ngx_http_feed_model_capped_pick(pg, NGX_HTTP_FEED_CAPPED_TODO,
                                        NGX_HTTP_FEED_CAPPED_CLAIMED))
    {
        bson_init(&filter);
        ngx_http_feed_model_in(&filter, "_id", pg->users, pg->n,
                               pg->pick, pg->slots);

        if (ngx_http_feed_model_capped_query(pg, pg->entries, &filter,
                                             "u i n",
                                             NGX_HTTP_FEED_CAPPED_SLOT,
                                             error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    rc = ngx_http_feed_model_capped_claim(pg, error);

    if (rc != NGX_OK) {
        return rc;
    }

    return ngx_http_feed_model_capped_write(pg, error);
}


/* pick[]: the users in states a to b; how many */

static size_t
ngx_http_feed_model_capped_pick(ngx_http_feed_model_capped_page_t *pg,
    ngx_uint_t a, ngx_uint_t b)
{
    size_t  i, m;

    for (i = 0, m = 0; i < pg->n; i++) {
        pg->pick[i] = (pg->state[i].state >= a && pg->state[i].state <= b);
        m += pg->pick[i];
    }

    return m;
}


/* a query of filter (destroyed), its answers taken as "what" says */

static ngx_int_t
ngx_http_feed_model_capped_query(ngx_http_feed_model_capped_page_t *pg,
    mongoc_collection_t *coll, bson_t *filter, const char *fields,
    ngx_uint_t what, bson_error_t *error)
{
    bson_t            opts, proj;
    ngx_int_t         rc;
    const char       *p;
    const bson_t     *doc;
    mongoc_cursor_t  *cursor;

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);

    for (p = fields; *p; p++) {
        if (*p != ' ') {
            bson_append_int32(&proj, p, 1, 1);
        }
    }

    bson_append_document_end(&opts, &proj);

    cursor = mongoc_collection_find_with_opts(coll, filter, &opts, NULL);

    while (mongoc_cursor_next(cursor, &doc)) {
        ngx_http_feed_model_capped_found(pg, doc, what);
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(filter);

    return rc;
}


/*
 * An answer: a user who has the post is done; a counter read tells a
 * claim that held (it has the number and the post); a slot read, what
 * its write overwrites, or that a later number took it
 */

static void
ngx_http_feed_model_capped_found(ngx_http_feed_model_capped_page_t *pg,
    const bson_t *doc, ngx_uint_t what)
{
    ssize_t                             k;
    uint32_t                            len;
    const char                         *name;
    bson_iter_t                         it;
    ngx_http_feed_model_capped_user_t  *f;

    if (!bson_iter_init_find(&it, doc,
                             what == NGX_HTTP_FEED_CAPPED_COUNTER ? "_id"
                                                                  : "u")
        || !BSON_ITER_HOLDS_UTF8(&it))
    {
        return;
    }

    name = bson_iter_utf8(&it, &len);
    k = ngx_http_feed_model_key(pg->keys, pg->n, name, len);

    if (k < 0) {
        return;
    }

    f = &pg->state[k];

    switch (what) {

    case NGX_HTTP_FEED_CAPPED_HAS:
        f->state = NGX_HTTP_FEED_CAPPED_DONE;
        return;

    case NGX_HTTP_FEED_CAPPED_COUNTER:
        f->n = ngx_http_feed_bson_int(doc, "n");

        if (f->state == NGX_HTTP_FEED_CAPPED_ASKED) {
            f->state = (f->n == f->m && bson_iter_init_find(&it, doc, "p")
                        && BSON_ITER_HOLDS_OID(&it)
                        && bson_oid_equal(bson_iter_oid(&it), pg->id))
                       ? NGX_HTTP_FEED_CAPPED_CLAIMED
                       : NGX_HTTP_FEED_CAPPED_TODO;
            f->lost = (f->state == NGX_HTTP_FEED_CAPPED_TODO);
        }

        return;

    default: /* NGX_HTTP_FEED_CAPPED_SLOT */
        f->old = ngx_http_feed_bson_int(doc, "n");
        f->held = bson_iter_init_find(&it, doc, "i")
                  && BSON_ITER_HOLDS_OID(&it);

        if (f->held) {
            bson_oid_copy(bson_iter_oid(&it), &f->was);
        }

        if (f->state == NGX_HTTP_FEED_CAPPED_CLAIMED && f->old >= f->m) {
            /* a later number's post is there: ours counts as overwritten */
            f->state = NGX_HTTP_FEED_CAPPED_OVER;
        }
    }
}


/*
 * The counters: each number claimed if the counter is still as read, "w"
 * raised to what the slots to be written hold, and to the post itself
 * where a later number took its slot.  NGX_AGAIN when some claim did not
 * hold (the next round reads which).
 */

static ngx_int_t
ngx_http_feed_model_capped_claim(ngx_http_feed_model_capped_page_t *pg,
    bson_error_t *error)
{
    size_t                              i;
    int64_t                             ops, done;
    ngx_int_t                           rc;
    ngx_http_feed_model_capped_user_t  *f;
    mongoc_bulk_operation_t            *bulk;

    for (i = 0; i < pg->n; i++) {
        f = &pg->state[i];

        if (f->state == NGX_HTTP_FEED_CAPPED_TODO && f->lost
            && ngx_http_feed_model_capped_take(pg, i, error) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    bulk = ngx_http_feed_model_unordered(pg->counters);
    ops = 0;
    rc = NGX_OK;

    for (i = 0; rc == NGX_OK && i < pg->n; i++) {
        f = &pg->state[i];

        if (f->state == NGX_HTTP_FEED_CAPPED_TODO
            || f->state == NGX_HTTP_FEED_CAPPED_OVER
            || (f->state == NGX_HTTP_FEED_CAPPED_CLAIMED && f->held))
        {
            rc = ngx_http_feed_model_capped_counter(bulk, pg, i, error);
            ops++;
        }
    }

    if (rc != NGX_OK || ops == 0) {
        mongoc_bulk_operation_destroy(bulk);
        return rc;
    }

    rc = ngx_http_feed_model_bulk(bulk, &done, error);
    mongoc_bulk_operation_destroy(bulk);

    for (i = 0; i < pg->n; i++) {
        f = &pg->state[i];

        if (f->state == NGX_HTTP_FEED_CAPPED_TODO) {
            f->state = (rc == NGX_OK && done == ops)
                       ? NGX_HTTP_FEED_CAPPED_CLAIMED
                       : NGX_HTTP_FEED_CAPPED_ASKED;

        } else if (f->state == NGX_HTTP_FEED_CAPPED_OVER && rc == NGX_OK
                   && done == ops)
        {
            f->state = NGX_HTTP_FEED_CAPPED_DONE;
        }
    }

    if (rc != NGX_OK) {
        return rc;
    }

    return done == ops ? NGX_OK : NGX_AGAIN;
}


/*
 * A number taken by $inc, which holds whatever the concurrent writes: for
 * a user whose conditional claim did not hold (findAndModify, one round
 * trip for that user)
 */

static ngx_int_t
ngx_http_feed_model_capped_take(ngx_http_feed_model_capped_page_t *pg,
    size_t i, bson_error_t *error)
{
    bool                                ok;
    bson_t                              query, update, inc, set, reply, doc;
    uint32_t                            len;
    bson_iter_t                         it;
    const uint8_t                      *data;
    ngx_http_feed_user_t               *user;
    ngx_http_feed_model_capped_user_t  *f;
    mongoc_find_and_modify_opts_t      *opts;

    f = &pg->state[i];
    user = &pg->users[i];

    bson_init(&query);
    bson_append_utf8(&query, "_id", 3, user->data, (int) user->len);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$inc", &inc);
    BSON_APPEND_INT64(&inc, "n", 1);
    bson_append_document_end(&update, &inc);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_OID(&set, "p", pg->id);
    bson_append_document_end(&update, &set);

    opts = mongoc_find_and_modify_opts_new();
    mongoc_find_and_modify_opts_set_update(opts, &update);
    mongoc_find_and_modify_opts_set_flags(opts,
        MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);

    ok = mongoc_collection_find_and_modify_with_opts(pg->counters, &query,
                                                     opts, &reply, error);

    mongoc_find_and_modify_opts_destroy(opts);
    bson_destroy(&update);
    bson_destroy(&query);

    f->m = 0;

    if (ok && bson_iter_init_find(&it, &reply, "value")
        && BSON_ITER_HOLDS_DOCUMENT(&it))
    {
        bson_iter_document(&it, &len, &data);

        if (bson_init_static(&doc, data, len)) {
            f->m = ngx_http_feed_bson_int(&doc, "n");
        }
    }

    bson_destroy(&reply);

    if (!ok || f->m <= 0) {
        return NGX_ERROR;
    }

    f->state = NGX_HTTP_FEED_CAPPED_CLAIMED;
    f->fresh = 1;
    f->held = 0;
    f->lost = 0;

    return NGX_OK;
}


/* one user's counter statement of the claims' bulk */

static ngx_int_t
ngx_http_feed_model_capped_counter(mongoc_bulk_operation_t *bulk,
    ngx_http_feed_model_capped_page_t *pg, size_t i, bson_error_t *error)
{
    bool                                ok;
    bson_t                              selector, update, set, max, opts;
    ngx_http_feed_user_t               *user;
    ngx_http_feed_model_capped_user_t  *f;

    f = &pg->state[i];
    user = &pg->users[i];

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);
    bson_init(&update);
    bson_init(&opts);

    if (f->state == NGX_HTTP_FEED_CAPPED_TODO) {
        /* still as read: a counter never set is null (a floor only) */
        if (f->n) {
            BSON_APPEND_INT64(&selector, "n", f->n);

        } else {
            BSON_APPEND_NULL(&selector, "n");
            BSON_APPEND_BOOL(&opts, "upsert", true);
        }

        BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
        BSON_APPEND_INT64(&set, "n", f->m);
        BSON_APPEND_OID(&set, "p", pg->id);
        bson_append_document_end(&update, &set);
    }

    if (f->state == NGX_HTTP_FEED_CAPPED_OVER || f->held) {
        BSON_APPEND_DOCUMENT_BEGIN(&update, "$max", &max);
        BSON_APPEND_OID(&max, "w", f->state == NGX_HTTP_FEED_CAPPED_OVER
                                   ? pg->id : &f->was);
        bson_append_document_end(&update, &max);
    }

    ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector, &update,
                                                    &opts, error);
    bson_destroy(&opts);
    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * The slots of the numbers claimed, each replaced if it still holds the
 * number read (or made).  A duplicate key: the slot changed meanwhile, or
 * the user got the post by another delivery; the next round finds which.
 */

static ngx_int_t
ngx_http_feed_model_capped_write(ngx_http_feed_model_capped_page_t *pg,
    bson_error_t *error)
{
    bool                                ok;
    size_t                              i;
    bson_t                              selector, doc, opts;
    int64_t                             ops, done;
    ngx_int_t                           rc;
    ngx_uint_t                          later;
    ngx_http_feed_user_t               *user;
    ngx_http_feed_model_capped_user_t  *f;
    mongoc_bulk_operation_t            *bulk;

    bulk = ngx_http_feed_model_unordered(pg->entries);
    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ops = 0;
    ok = true;
    later = 0;

    for (i = 0; ok && i < pg->n; i++) {
        f = &pg->state[i];
        user = &pg->users[i];

        if (f->state != NGX_HTTP_FEED_CAPPED_CLAIMED) {
            continue;
        }

        if (f->fresh) {
            /* its slot is read in the next round */
            later = 1;
            continue;
        }

        bson_init(&selector);
        BSON_APPEND_UTF8(&selector, "_id", f->name);

        if (f->old) {
            BSON_APPEND_INT64(&selector, "n", f->old);

        } else {
            BSON_APPEND_NULL(&selector, "n");
        }

        bson_init(&doc);
        bson_append_utf8(&doc, "u", 1, user->data, (int) user->len);
        BSON_APPEND_INT64(&doc, "n", f->m);
        bson_concat(&doc, pg->entry);

        ok = mongoc_bulk_operation_replace_one_with_opts(bulk, &selector,
                                                         &doc, &opts, error);
        bson_destroy(&doc);
        bson_destroy(&selector);
        ops++;
    }

    bson_destroy(&opts);

    if (!ok || ops == 0) {
        mongoc_bulk_operation_destroy(bulk);
        return ok ? (later ? NGX_AGAIN : NGX_OK) : NGX_ERROR;
    }

    rc = ngx_http_feed_model_bulk(bulk, &done, error);
    mongoc_bulk_operation_destroy(bulk);

    if (rc == NGX_OK && done == ops) {
        for (i = 0; i < pg->n; i++) {
            if (pg->state[i].state == NGX_HTTP_FEED_CAPPED_CLAIMED
                && !pg->state[i].fresh)
            {
                pg->state[i].state = NGX_HTTP_FEED_CAPPED_DONE;
            }
        }

        return later ? NGX_AGAIN : NGX_OK;
    }

    return rc == NGX_ERROR ? NGX_ERROR : NGX_AGAIN;
}


/*
 * A page's entries, newest first, from the later of "f" and "w" up.  The
 * slots are read first, then the counter: "w" is raised before a slot is
 * overwritten, so the "w" read after the slots is past every entry that
 * went while they were read.  Read before them, it could vouch for an
 * entry overwritten meanwhile, which the page would then lack.
 */

static ngx_int_t
ngx_http_feed_model_capped_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_model_conf_t *mc,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    size_t want, ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    size_t                i, n;
    bson_t                filter, doc;
    ngx_int_t             rc;
    bson_oid_t           *ids;
    bson_iter_t           it;
    mongoc_collection_t  *coll;

    if (ngx_http_feed_model_capped_slots(client, database, user, range,
                                         want + 1, &ids, &n, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_CAPPED_USERS);

    bson_init(&filter);
    bson_append_utf8(&filter, "_id", 3, user->data, (int) user->len);
    rc = ngx_http_feed_model_floor_page(coll, &filter, want, page, &doc,
                                        error);
    bson_destroy(&filter);
    mongoc_collection_destroy(coll);

    if (rc != NGX_OK) {
        bson_free(ids);
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    if (bson_iter_init_find(&it, &doc, "w") && BSON_ITER_HOLDS_OID(&it)
        && bson_oid_compare(bson_iter_oid(&it), &page->bound) >= 0)
    {
        /* w itself was overwritten: the slots hold the ids past it */
        ngx_http_feed_model_next(bson_iter_oid(&it), &page->bound);
    }

    bson_destroy(&doc);

    for (i = 0; i < n; i++) {
        if (ngx_http_feed_model_take(page, &ids[i], range, want)
            == NGX_DONE)
        {
            break;
        }
    }

    bson_free(ids);

    return NGX_OK;
}


/*
 * The ids of the user's newest entries below the page's max_id, at most
 * max: in *ids (n of them, bson_malloc()ed), newest first
 */

static ngx_int_t
ngx_http_feed_model_capped_slots(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, size_t max, bson_oid_t **ids,
    size_t *n, bson_error_t *error)
{
    bson_t                filter, opts, sort, proj, lt;
    ngx_int_t             rc;
    bson_iter_t           it;
    const bson_t         *e;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *coll;

    *ids = bson_malloc(max * sizeof(bson_oid_t));
    *n = 0;

    bson_init(&filter);
    bson_append_utf8(&filter, "u", 1, user->data, (int) user->len);

    if (range->max_id) {
        BSON_APPEND_DOCUMENT_BEGIN(&filter, "i", &lt);
        BSON_APPEND_OID(&lt, "$lt", range->max_id);
        bson_append_document_end(&filter, &lt);
    }

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "i", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) max);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "i", 1);
    bson_append_document_end(&opts, &proj);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_CAPPED_COLL);
    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    while (*n < max && mongoc_cursor_next(cursor, &e)) {
        if (bson_iter_init_find(&it, e, "i") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &(*ids)[(*n)++]);
        }
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);

    if (rc != NGX_OK) {
        bson_free(*ids);
        *ids = NULL;
        *n = 0;
    }

    return rc;
}


/* a first read: the user's floor, from which the slots hold every post */

static ngx_int_t
ngx_http_feed_model_capped_begin(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, int64_t now,
    ngx_uint_t *mine, bson_error_t *error)
{
    *mine = 0;

    return ngx_http_feed_model_capped_floor(client, database, user, 0,
                                            error);
}


/*
 * The user's floor: set at their first read (reset: 0, an existing one is
 * kept), or moved to now (reset: 1) when they have one
 */

static ngx_int_t
ngx_http_feed_model_capped_floor(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, ngx_uint_t reset,
    bson_error_t *error)
{
    bson_t                selector;
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    bson_append_utf8(&selector, "_id", 3, user->data, (int) user->len);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_CAPPED_USERS);
    rc = ngx_http_feed_model_floor(coll, &selector, reset, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&selector);

    return rc;
}


/* a deleted post's entries gone: their slots are written again later */

static ngx_int_t
ngx_http_feed_model_capped_remove(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error)
{
    bool                  ok;
    bson_t                query;
    mongoc_collection_t  *coll;

    bson_init(&query);
    BSON_APPEND_OID(&query, "i", id);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_MODEL_CAPPED_COLL);
    ok = mongoc_collection_delete_many(coll, &query, NULL, NULL, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&query);

    return ok ? NGX_OK : NGX_ERROR;
}


/* whom the user follows changed: their floor moved to now */

static ngx_int_t
ngx_http_feed_model_capped_drop(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, bson_error_t *error)
{
    return ngx_http_feed_model_capped_floor(client, database, user, 1,
                                            error);
}
