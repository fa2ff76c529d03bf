
/*
 * ngx_feed_module: the models of the home timelines in MongoDB, behind
 * the Redis cache (feed_timeline_store, seeds 000 and 003: Socialite's
 * models).  Thread side only.
 *
 * Each model has a table of operations (ngx_http_feed_model_ops_t): the
 * configured model's is picked once, into the configuration a thread
 * gets (ngx_http_feed_model_conf()), and the functions below call through
 * it, with what every model would otherwise do first.  The rest of this
 * file is what the models share.
 */


#include "ngx_http_feed_model.h"


/* the models, by feed_timeline_store's value (ngx_http_feed_model_e) */

static ngx_http_feed_model_ops_t  *ngx_http_feed_models[] = {
    NULL,                                   /* read: fanout on read only */
    &ngx_http_feed_model_time_ops,
    &ngx_http_feed_model_size_ops,
    &ngx_http_feed_model_cache_ops,
    &ngx_http_feed_model_capped_ops
};


/* the model configured, and what it needs of the configuration */

void
ngx_http_feed_model_conf(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_model_conf_t *mc)
{
    mc->ops = ngx_http_feed_models[fmcf->timeline_store];
    mc->embed = fmcf->cache_embed;
    mc->cap = fmcf->cache_size;
    mc->bucket = (int64_t) fmcf->timeline_bucket_time;
    mc->size = fmcf->timeline_bucket_size;
    mc->slots = fmcf->timeline_capped_size;
    mc->keep = fmcf->timeline_bucket_keep;
}


/* the indexes of a model's collections; NULL: none (read) */

ngx_http_feed_mongo_indexes_t *
ngx_http_feed_model_indexes(ngx_uint_t model)
{
    return ngx_http_feed_models[model] ? ngx_http_feed_models[model]->indexes
                                       : NULL;
}


/* a post into these users' timelines, once */

ngx_int_t
ngx_http_feed_model_add(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *users, size_t n,
    const bson_t *entry, bson_error_t *error)
{
    bson_iter_t  it;

    if (n == 0) {
        return NGX_OK;
    }

    if (!bson_iter_init_find(&it, entry, "i") || !BSON_ITER_HOLDS_OID(&it)) {
        return NGX_ERROR;
    }

    return mc->ops->add(client, database, mc, users, n, entry,
                        bson_iter_oid(&it), error);
}


/* what a user's timeline has in the range of a page, newest first */

ngx_int_t
ngx_http_feed_model_read(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, size_t want,
    ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    ngx_memzero(page, sizeof(ngx_http_feed_model_page_t));

    return mc->ops->read(client, database, mc, user, range, want, page,
                         error);
}


/*
 * A user who reads and has no timeline in the model: one begun, *mine
 * when this call made a document that the read is to fill
 */

ngx_int_t
ngx_http_feed_model_begin(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    int64_t now, ngx_uint_t *mine, bson_error_t *error)
{
    return mc->ops->begin(client, database, user, now, mine, error);
}


/*
 * The document begun filled with what fanout on read answered ("items",
 * posts as the API shows them, newest first); complete: that was every
 * post there is
 */

ngx_int_t
ngx_http_feed_model_fill(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    const bson_t *items, ngx_uint_t complete, bson_error_t *error)
{
    if (mc->ops->fill == NULL) {
        return NGX_OK;
    }

    return mc->ops->fill(client, database, mc, user, items, complete,
                         error);
}


/* a document whose making was left (its reader failed): made again later */

ngx_int_t
ngx_http_feed_model_abandon(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, ngx_http_feed_user_t *user,
    int64_t building, bson_error_t *error)
{
    if (mc->ops->abandon == NULL) {
        return NGX_OK;
    }

    return mc->ops->abandon(client, database, user, building, error);
}


/* a deleted post out of every timeline */

ngx_int_t
ngx_http_feed_model_remove(mongoc_client_t *client, const char *database,
    ngx_http_feed_model_conf_t *mc, const bson_oid_t *id,
    bson_error_t *error)
{
    return mc->ops->remove(client, database, id, error);
}


/*
 * Whom a user follows changed: what the model has of their timeline is
 * not trusted any more.  By feed_timeline_store's value, for the cache
 * side effects, which keep no more of the configuration.
 */

ngx_int_t
ngx_http_feed_model_drop(mongoc_client_t *client, const char *database,
    ngx_uint_t model, ngx_http_feed_user_t *user, bson_error_t *error)
{
    return ngx_http_feed_models[model]->drop(client, database, user, error);
}


/* what a post's JSON (as the API shows it) becomes in a timeline */

ngx_int_t
ngx_http_feed_model_entry(const char *json, size_t len, ngx_uint_t embed,
    bson_t *entry)
{
    bson_t       post;
    uint32_t     alen;
    bson_oid_t   oid;
    const char  *id, *author;
    bson_iter_t  it;

    if (!bson_init_from_json(&post, json, (ssize_t) len, NULL)) {
        return NGX_ERROR;
    }

    id = NULL;
    author = NULL;
    alen = 0;

    if (bson_iter_init_find(&it, &post, "id") && BSON_ITER_HOLDS_UTF8(&it)) {
        id = bson_iter_utf8(&it, NULL);
    }

    if (bson_iter_init_find(&it, &post, "author")
        && BSON_ITER_HOLDS_UTF8(&it))
    {
        author = bson_iter_utf8(&it, &alen);
    }

    if (id == NULL || author == NULL || !bson_oid_is_valid(id, strlen(id))) {
        bson_destroy(&post);
        return NGX_ERROR;
    }

    bson_oid_init_from_string(&oid, id);

    bson_init(entry);
    BSON_APPEND_OID(entry, "i", &oid);

    if (embed) {
        BSON_APPEND_DOCUMENT(entry, "p", &post);

    } else {
        bson_append_utf8(entry, "a", 1, author, (int) alen);
    }

    bson_destroy(&post);

    return NGX_OK;
}


/* $push of entries, kept sorted by id, the newest cap of them (0: all) */

void
ngx_http_feed_model_push(bson_t *update, const bson_t *each,
    ngx_uint_t cap)
{
    bson_t  push, c, sort;

    BSON_APPEND_DOCUMENT_BEGIN(update, "$push", &push);
    BSON_APPEND_DOCUMENT_BEGIN(&push, "c", &c);
    BSON_APPEND_ARRAY(&c, "$each", each);
    BSON_APPEND_DOCUMENT_BEGIN(&c, "$sort", &sort);
    BSON_APPEND_INT32(&sort, "i", 1);
    bson_append_document_end(&c, &sort);

    if (cap) {
        BSON_APPEND_INT64(&c, "$slice", -(int64_t) cap);
    }

    bson_append_document_end(&push, &c);
    bson_append_document_end(update, &push);
}


/* the ids of a document's entries, in "c", as kept: bson_malloc()ed */

bson_oid_t *
ngx_http_feed_model_ids(const bson_t *doc, size_t *n)
{
    size_t        k;
    bson_oid_t   *all;
    bson_iter_t   it, c, e;

    *n = 0;

    if (!bson_iter_init_find(&it, doc, "c") || !BSON_ITER_HOLDS_ARRAY(&it)
        || !bson_iter_recurse(&it, &c))
    {
        return NULL;
    }

    all = NULL;
    k = 0;

    while (bson_iter_next(&c)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&c) || !bson_iter_recurse(&c, &e)
            || !bson_iter_find(&e, "i") || !BSON_ITER_HOLDS_OID(&e))
        {
            continue;
        }

        if (*n == k) {
            k = k ? 2 * k : 64;
            all = bson_realloc(all, k * sizeof(bson_oid_t));
        }

        bson_oid_copy(bson_iter_oid(&e), &all[(*n)++]);
    }

    return all;
}


/*
 * One more entry, newest first, taken when in the page's range (at most
 * want of them, each id once: a post fanned out while its document was
 * being made may be there twice, side by side).  NGX_DONE: no older one
 * is wanted.  Once want are taken, they stand for their own range only:
 * the bound moves up to the last.
 */

ngx_int_t
ngx_http_feed_model_take(ngx_http_feed_model_page_t *page,
    const bson_oid_t *id, ngx_http_feed_posts_range_t *range, size_t want)
{
    if (bson_oid_compare(id, &page->bound) < 0) {
        return NGX_DONE;
    }

    if ((range->max_id && bson_oid_compare(id, range->max_id) >= 0)
        || (page->n && bson_oid_equal(id, &page->ids[page->n - 1])))
    {
        return NGX_OK;
    }

    if (range->since_id && bson_oid_compare(id, range->since_id) <= 0) {
        return NGX_DONE;
    }

    if (page->n == want) {
        bson_oid_copy(&page->ids[page->n - 1], &page->bound);
        page->whole = 0;
        return NGX_DONE;
    }

    bson_oid_copy(id, &page->ids[page->n++]);

    return NGX_OK;
}


/*
 * The page vouches for the ids from "from" up only, when that is above
 * its bound: the entries below it go, fanout on read answers for them
 */

void
ngx_http_feed_model_raise(ngx_http_feed_model_page_t *page,
    const bson_oid_t *from)
{
    if (bson_oid_compare(from, &page->bound) <= 0) {
        return;
    }

    bson_oid_copy(from, &page->bound);
    page->whole = 0;

    while (page->n
           && bson_oid_compare(&page->ids[page->n - 1], &page->bound) < 0)
    {
        page->n--;
    }
}


/* the id right after another: its 12 bytes plus one */

void
ngx_http_feed_model_next(const bson_oid_t *id, bson_oid_t *next)
{
    ngx_int_t  i;

    bson_oid_copy(id, next);

    for (i = 11; i >= 0; i--) {
        if (++next->bytes[i] != 0) {
            break;
        }
    }
}


/* the lowest id of a time: where the posts of that second begin */

void
ngx_http_feed_model_oid_at(bson_oid_t *oid, time_t at)
{
    uint8_t   data[12];
    uint32_t  t;

    t = (uint32_t) at;

    ngx_memzero(data, sizeof(data));
    data[0] = (uint8_t) (t >> 24);
    data[1] = (uint8_t) (t >> 16);
    data[2] = (uint8_t) (t >> 8);
    data[3] = (uint8_t) t;

    bson_oid_init_from_data(oid, data);
}


/*
 * A deleted post out of the entries ("c") of every document that has it,
 * in the collection "name"
 */

ngx_int_t
ngx_http_feed_model_delete_post(mongoc_client_t *client,
    const char *database, const char *name, const bson_oid_t *id,
    bson_error_t *error)
{
    bool                  ok;
    bson_t                selector, update, pull, c;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "c.i", id);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$pull", &pull);
    BSON_APPEND_DOCUMENT_BEGIN(&pull, "c", &c);
    BSON_APPEND_OID(&c, "i", id);
    bson_append_document_end(&pull, &c);
    bson_append_document_end(&update, &pull);

    coll = mongoc_client_get_collection(client, database, name);
    ok = mongoc_collection_update_many(coll, &selector, &update, NULL, NULL,
                                       error);
    mongoc_collection_destroy(coll);

    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * A user's floor "f", in the document of selector: set at their first
 * read (reset: 0; one already there is kept), or moved to now (reset: 1,
 * whom they follow changed) when there, a user who never read needing
 * none.  2 s ahead of this node's clock, for the other nodes' clocks that
 * make the posts' ids.
 */

ngx_int_t
ngx_http_feed_model_floor(mongoc_collection_t *coll, bson_t *selector,
    ngx_uint_t reset, bson_error_t *error)
{
    bool        ok;
    bson_t      update, set, opts, has;
    bson_oid_t  floor;

    ngx_http_feed_model_oid_at(&floor, time(NULL) + 2);

    if (!reset) {
        BSON_APPEND_DOCUMENT_BEGIN(selector, "f", &has);
        BSON_APPEND_BOOL(&has, "$exists", false);
        bson_append_document_end(selector, &has);
    }

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_OID(&set, "f", &floor);
    bson_append_document_end(&update, &set);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", reset ? false : true);

    ok = mongoc_collection_update_one(coll, selector, &update, &opts, NULL,
                                      error);

    bson_destroy(&opts);
    bson_destroy(&update);

    /* there, with its floor: the upsert met it (another first read) */

    if (!ok && error->code == MONGOC_ERROR_DUPLICATE_KEY && !reset) {
        return NGX_OK;
    }

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * The start of a page of a model with floors: the document of selector
 * (its copy in *doc, to be bson_destroy()ed), the page's bound its floor
 * "f", room for want entries.  NGX_DECLINED when the user has no floor
 * (they never read).
 */

ngx_int_t
ngx_http_feed_model_floor_page(mongoc_collection_t *coll,
    const bson_t *selector, size_t want, ngx_http_feed_model_page_t *page,
    bson_t *doc, bson_error_t *error)
{
    ngx_int_t    rc;
    bson_iter_t  it;

    rc = ngx_http_feed_mongo_find_one(coll, selector, NULL, doc, error);

    if (rc != NGX_OK) {
        return rc;
    }

    if (!bson_iter_init_find(&it, doc, "f") || !BSON_ITER_HOLDS_OID(&it)) {
        /* written to, never read: no floor yet */
        bson_destroy(doc);
        return NGX_DECLINED;
    }

    bson_oid_copy(bson_iter_oid(&it), &page->bound);

    /* buckets went (feed_timeline_bucket_keep): the kept ones from "d" */

    if (bson_iter_init_find(&it, doc, "d") && BSON_ITER_HOLDS_OID(&it)
        && bson_oid_compare(bson_iter_oid(&it), &page->bound) > 0)
    {
        bson_oid_copy(bson_iter_oid(&it), &page->bound);
    }

    page->state = NGX_HTTP_FEED_MODEL_PAGE_THERE;
    page->ids = bson_malloc((want ? want : 1) * sizeof(bson_oid_t));

    return NGX_OK;
}


/*
 * The _id of a bucket of the models that keep them per user: {u: user,
 * <field>: v}, v -1 for the user's floor
 */

void
ngx_http_feed_model_bucket_id(bson_t *doc, const char *key,
    ngx_http_feed_user_t *user, const char *field, int64_t v)
{
    bson_t  id;

    BSON_APPEND_DOCUMENT_BEGIN(doc, key, &id);
    bson_append_utf8(&id, "u", 1, user->data, (int) user->len);
    BSON_APPEND_INT64(&id, field, v);
    bson_append_document_end(doc, &id);
}


/* the floor of a user of a bucket model, in the collection "name" */

ngx_int_t
ngx_http_feed_model_bucket_floor(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, ngx_uint_t reset, bson_error_t *error)
{
    bson_t                selector;
    ngx_int_t             rc;
    mongoc_collection_t  *coll;

    bson_init(&selector);
    ngx_http_feed_model_bucket_id(&selector, "_id", user, field, -1);

    coll = mongoc_client_get_collection(client, database, name);
    rc = ngx_http_feed_model_floor(coll, &selector, reset, error);
    mongoc_collection_destroy(coll);
    bson_destroy(&selector);

    return rc;
}


/*
 * The start of a page of a bucket model: the bound its user's floor, and
 * the collection "name" in *coll.  NGX_DECLINED when the user has none
 * (they never read).
 */

ngx_int_t
ngx_http_feed_model_bucket_page(mongoc_client_t *client,
    const char *database, const char *name, const char *field,
    ngx_http_feed_user_t *user, size_t want,
    ngx_http_feed_model_page_t *page, mongoc_collection_t **coll,
    bson_error_t *error)
{
    bson_t     selector, doc;
    ngx_int_t  rc;

    *coll = mongoc_client_get_collection(client, database, name);

    bson_init(&selector);
    ngx_http_feed_model_bucket_id(&selector, "_id", user, field, -1);
    rc = ngx_http_feed_model_floor_page(*coll, &selector, want, page,
                                        &doc, error);
    bson_destroy(&selector);

    if (rc == NGX_OK) {
        bson_destroy(&doc);
        return NGX_OK;
    }

    mongoc_collection_destroy(*coll);
    *coll = NULL;

    return rc;
}


/*
 * After a page of a bucket model was read, while fanout may delete old
 * buckets (feed_timeline_bucket_keep): the user's mark "d" again.  A
 * bucket goes only after the mark is raised past it, so a mark above the
 * bound means that some buckets under it may have gone while they were
 * read: the page holds the ids from the mark up only.
 */

ngx_int_t
ngx_http_feed_model_bucket_recheck(mongoc_collection_t *coll,
    const char *field, ngx_http_feed_user_t *user,
    ngx_http_feed_model_page_t *page, bson_error_t *error)
{
    bson_t       selector, proj, doc;
    ngx_int_t    rc;
    bson_iter_t  it;

    bson_init(&selector);
    ngx_http_feed_model_bucket_id(&selector, "_id", user, field, -1);
    bson_init(&proj);
    BSON_APPEND_INT32(&proj, "d", 1);

    rc = ngx_http_feed_mongo_find_one(coll, &selector, &proj, &doc, error);

    bson_destroy(&proj);
    bson_destroy(&selector);

    if (rc == NGX_DECLINED) {
        /* the floor went meanwhile: the buckets vouch for nothing */
        page->state = NGX_HTTP_FEED_MODEL_PAGE_NONE;
        bson_free(page->ids);
        page->ids = NULL;
        page->n = 0;
        return NGX_OK;
    }

    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    if (bson_iter_init_find(&it, &doc, "d") && BSON_ITER_HOLDS_OID(&it)) {
        ngx_http_feed_model_raise(page, bson_iter_oid(&it));
    }

    bson_destroy(&doc);

    return NGX_OK;
}


/*
 * The buckets of these users (pick[] set) numbered below cut[i] go
 * (feed_timeline_bucket_keep).  First the mark "d" of each one's floor is
 * raised to mark[i], from which the buckets kept hold every post; then
 * the buckets are deleted, in the same ordered bulk, so that none goes
 * before its user's mark is up.  A user without a floor never read: the
 * update matches nothing, and their first read sets a floor above all.
 */

ngx_int_t
ngx_http_feed_model_trim(mongoc_collection_t *coll, const char *field,
    ngx_http_feed_user_t *users, size_t n, const u_char *pick,
    const int64_t *cut, const bson_oid_t *mark, bson_error_t *error)
{
    bool                      ok;
    char                      name[16];
    size_t                    i;
    int64_t                   done;
    ngx_int_t                 rc;
    bson_t                    selector, update, max, range;
    mongoc_bulk_operation_t  *bulk;

    bulk = mongoc_collection_create_bulk_operation_with_opts(coll, NULL);

    ok = true;

    for (i = 0; ok && i < n; i++) {
        if (!pick[i]) {
            continue;
        }

        bson_init(&selector);
        ngx_http_feed_model_bucket_id(&selector, "_id", &users[i], field,
                                      -1);
        bson_init(&update);
        BSON_APPEND_DOCUMENT_BEGIN(&update, "$max", &max);
        BSON_APPEND_OID(&max, "d", &mark[i]);
        bson_append_document_end(&update, &max);

        ok = mongoc_bulk_operation_update_one_with_opts(bulk, &selector,
                                                        &update, NULL, error);
        bson_destroy(&update);
        bson_destroy(&selector);
    }

    (void) bson_snprintf(name, sizeof(name), "_id.%s", field);

    for (i = 0; ok && i < n; i++) {
        if (!pick[i]) {
            continue;
        }

        bson_init(&selector);
        bson_append_utf8(&selector, "_id.u", 5, users[i].data,
                         (int) users[i].len);
        BSON_APPEND_DOCUMENT_BEGIN(&selector, name, &range);
        BSON_APPEND_INT64(&range, "$gte", 0);
        BSON_APPEND_INT64(&range, "$lt", cut[i]);
        bson_append_document_end(&selector, &range);

        ok = mongoc_bulk_operation_remove_many_with_opts(bulk, &selector,
                                                         NULL, error);
        bson_destroy(&selector);
    }

    rc = ok ? ngx_http_feed_model_bulk(bulk, &done, error) : NGX_ERROR;

    mongoc_bulk_operation_destroy(bulk);

    /* a duplicate key cannot come of these: any failure is one */
    return rc == NGX_OK ? NGX_OK : NGX_ERROR;
}