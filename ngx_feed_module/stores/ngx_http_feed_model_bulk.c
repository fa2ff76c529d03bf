
/*
 * ngx_feed_module: what the MongoDB timeline models that write a page of
 * followers in rounds share (size_buckets, capped): the page's users in a
 * query ($in), the query's answers found back among them, and a bulk's
 * outcome.  Thread side only.
 */


#include "ngx_http_feed_model.h"


static int ngx_http_feed_model_key_cmp(const void *a, const void *b);


/* the users of a page sorted by id, bson_malloc()ed */

ngx_http_feed_model_key_t *
ngx_http_feed_model_keys(ngx_http_feed_user_t *users, size_t n)
{
    size_t                          i;
    ngx_http_feed_model_key_t      *keys;

    keys = bson_malloc((n ? n : 1) * sizeof(ngx_http_feed_model_key_t));

    for (i = 0; i < n; i++) {
        keys[i].name = users[i].data;
        keys[i].len = users[i].len;
        keys[i].index = i;
    }

    qsort(keys, n, sizeof(ngx_http_feed_model_key_t),
          ngx_http_feed_model_key_cmp);

    return keys;
}


/* the page's index of a user named in an answer, or -1 */

ssize_t
ngx_http_feed_model_key(ngx_http_feed_model_key_t *keys, size_t n,
    const char *name, size_t len)
{
    ngx_http_feed_model_key_t       key, *found;

    key.name = name;
    key.len = len;

    found = bsearch(&key, keys, n, sizeof(ngx_http_feed_model_key_t),
                    ngx_http_feed_model_key_cmp);

    return found ? (ssize_t) found->index : -1;
}


static int
ngx_http_feed_model_key_cmp(const void *a, const void *b)
{
    int                                   rc;
    const ngx_http_feed_model_key_t      *x, *y;

    x = a;
    y = b;

    rc = ngx_memcmp(x->name, y->name, ngx_min(x->len, y->len));

    if (rc != 0) {
        return rc;
    }

    return (x->len > y->len) - (x->len < y->len);
}


/*
 * {field: {$in: [...]}} of the page's users whose pick[] is set (all
 * without pick), or of their names[] when given (the slots of capped)
 */

void
ngx_http_feed_model_in(bson_t *filter, const char *field,
    ngx_http_feed_user_t *users, size_t n, const u_char *pick,
    char **names)
{
    char         key[16];
    size_t       i, m;
    bson_t       in, c;
    const char  *k;

    BSON_APPEND_DOCUMENT_BEGIN(filter, field, &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &c);

    for (i = 0, m = 0; i < n; i++) {
        if (pick && !pick[i]) {
            continue;
        }

        bson_uint32_to_string((uint32_t) m++, &k, key, sizeof(key));

        if (names) {
            bson_append_utf8(&c, k, -1, names[i], -1);

        } else {
            bson_append_utf8(&c, k, -1, users[i].data, (int) users[i].len);
        }
    }

    bson_append_array_end(&in, &c);
    bson_append_document_end(filter, &in);
}


/*
 * The rounds of a page's writes, until one is done (NGX_OK), fails, or
 * NGX_HTTP_FEED_MODEL_TRIES were each cut short by concurrent writes
 * (NGX_AGAIN): an error then, the stream entry left pending
 */

ngx_int_t
ngx_http_feed_model_rounds(ngx_http_feed_model_round_pt round,
    void *data, const char *model, bson_error_t *error)
{
    ngx_int_t   rc;
    ngx_uint_t  k;

    rc = NGX_AGAIN;

    for (k = 0; rc == NGX_AGAIN && k < NGX_HTTP_FEED_MODEL_TRIES; k++) {
        rc = round(data, error);
    }

    if (rc == NGX_AGAIN) {
        bson_set_error(error, MONGOC_ERROR_COMMAND,
                       MONGOC_ERROR_COMMAND_INVALID_ARG,
                       "%s: %d rounds lost to concurrent writes", model,
                       NGX_HTTP_FEED_MODEL_TRIES);
        rc = NGX_ERROR;
    }

    return rc;
}


/* a bulk whose statements all run, whatever fails */

mongoc_bulk_operation_t *
ngx_http_feed_model_unordered(mongoc_collection_t *coll)
{
    bson_t                    opts;
    mongoc_bulk_operation_t  *bulk;

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "ordered", false);
    bulk = mongoc_collection_create_bulk_operation_with_opts(coll, &opts);
    bson_destroy(&opts);

    return bulk;
}


/*
 * A bulk run: *done the statements that matched or upserted a document.
 * NGX_AGAIN when its only failures were duplicate keys (a write that met
 * a concurrent one): the round is tried again.
 */

ngx_int_t
ngx_http_feed_model_bulk(mongoc_bulk_operation_t *bulk, int64_t *done,
    bson_error_t *error)
{
    bool         ok;
    bson_t       reply;
    ngx_int_t    rc;
    bson_iter_t  it, e, f;

    ok = mongoc_bulk_operation_execute(bulk, &reply, error) != 0;

    *done = ngx_http_feed_bson_int(&reply, "nMatched")
            + ngx_http_feed_bson_int(&reply, "nUpserted")
            + ngx_http_feed_bson_int(&reply, "nInserted");

    if (ok) {
        bson_destroy(&reply);
        return NGX_OK;
    }

    /* failed writes all of a duplicate key, and nothing else failed */

    rc = NGX_ERROR;

    if (bson_iter_init_find(&it, &reply, "writeConcernErrors")
        && bson_iter_recurse(&it, &e) && bson_iter_next(&e))
    {
        bson_destroy(&reply);
        return NGX_ERROR;
    }

    if (bson_iter_init_find(&it, &reply, "writeErrors")
        && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &e))
    {
        while (bson_iter_next(&e)) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&e) || !bson_iter_recurse(&e, &f)
                || !bson_iter_find(&f, "code")
                || bson_iter_as_int64(&f) != MONGOC_ERROR_DUPLICATE_KEY)
            {
                rc = NGX_ERROR;
                break;
            }

            rc = NGX_AGAIN;
        }
    }

    bson_destroy(&reply);

    return rc;
}
