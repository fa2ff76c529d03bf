
/*
 * ngx_feed_module: posts with an Idempotency-Key (Mastodon's semantics):
 * a retry of a post, with the same key and content within an hour, gets
 * the first one's answer and makes nothing.
 *
 *   loop:    the key checked, the content hashed (sha1 of its parsed
 *            form, so that the same JSON written otherwise is the same)
 *   thread:  the key claimed (ngx_http_feed_idempotency_store.c) with the
 *            id of the post to make; a key held by an earlier request
 *            with the same content gives that post's id instead
 *   thread:  the post inserted with that id: only one insert of an id
 *            succeeds, so of every request with the key, exactly one
 *            makes the post (and enqueues it), even when the first died
 *            between its claim and its post; the others answer the post
 *            they read
 */


#include "ngx_http_feed_post.h"
#include "ngx_http_feed_idempotency_store.h"

#include <ngx_sha1.h>


/*
 * A member of an object being hashed, kept as its offset: libbson declares
 * bson_iter_t 128-byte aligned, which no allocator here gives.
 */
typedef struct {
    const char                   *key;
    uint32_t                      offset;
    uint32_t                      key_len;
} ngx_http_feed_post_member_t;


static ngx_int_t ngx_http_feed_post_key_valid(ngx_str_t *key);
static ngx_int_t ngx_http_feed_post_hash_value(ngx_sha1_t *sha1,
    const bson_iter_t *it, ngx_log_t *log);
static ngx_int_t ngx_http_feed_post_hash_object(ngx_sha1_t *sha1,
    const bson_iter_t *it, ngx_log_t *log);
static int ngx_libc_cdecl ngx_http_feed_post_hash_cmp(const void *one,
    const void *two);
static void ngx_http_feed_post_hash_int(ngx_sha1_t *sha1, u_char type,
    uint64_t v);
static void ngx_http_feed_post_renew(ngx_http_feed_post_new_t *np,
    const bson_oid_t *id, int64_t ts);
static void ngx_http_feed_post_replace(ngx_http_feed_post_new_t *np,
    bson_t *doc);


/* a double that is an integer this small is hashed as that integer */
#define NGX_HTTP_FEED_HASH_EXACT  9007199254740992.0    /* 2^53 */


/*
 * The Idempotency-Key header, if any, copied into np: NGX_DECLINED with
 * err for one that is not 1 to 64 characters of UTF-8 without control
 * characters, or given twice.
 */

ngx_int_t
ngx_http_feed_post_key(ngx_http_request_t *r, ngx_http_feed_post_new_t *np,
    const ngx_http_feed_error_t **err)
{
    ngx_uint_t        n;
    ngx_table_elt_t  *h;

    h = ngx_http_feed_header(r, "Idempotency-Key", &n);

    if (n == 0) {
        return NGX_OK;
    }

    if (n > 1 || ngx_http_feed_post_key_valid(&h->value) != NGX_OK) {
        *err = &ngx_http_feed_err_idempotency_key;
        return NGX_DECLINED;
    }

    ngx_memcpy(np->key, h->value.data, h->value.len);
    np->key[h->value.len] = '\0';
    np->keyed = 1;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post: idempotency key \"%V\"", &h->value);

    return NGX_OK;
}


/*
 * 1 to 64 code points of valid UTF-8, none a control character: C0, DEL
 * or C1 (U+0080 to U+009F, 0xc2 0x80 to 0xc2 0x9f in UTF-8)
 */

static ngx_int_t
ngx_http_feed_post_key_valid(ngx_str_t *key)
{
    u_char      c, *p, *last;
    ngx_uint_t  chars;

    if (key->len == 0 || key->len >= NGX_HTTP_FEED_POST_KEY_SIZE
        || !bson_utf8_validate((const char *) key->data, key->len, false))
    {
        return NGX_DECLINED;
    }

    chars = 0;
    last = key->data + key->len;

    for (p = key->data; p < last; p++) {
        c = *p;

        if (c < 0x20 || c == 0x7f
            || (c == 0xc2 && p + 1 < last && p[1] >= 0x80 && p[1] <= 0x9f))
        {
            return NGX_DECLINED;
        }

        if ((c & 0xc0) != 0x80) {
            chars++;
        }
    }

    return chars <= NGX_HTTP_FEED_POST_KEY_MAX ? NGX_OK : NGX_DECLINED;
}


/*
 * The content's sha1 into np->hash: body, then data, as parsed.  Objects
 * are hashed with their keys sorted, numbers by value (1, 1.0 and an
 * int64 1 alike), so that only what the content says counts, not how the
 * JSON was written.  The depth is bounded by the input's checks.
 */

ngx_int_t
ngx_http_feed_post_hash(ngx_http_feed_post_new_t *np, ngx_log_t *log)
{
    u_char       digest[20];
    ngx_sha1_t   sha1;
    bson_iter_t  it;

    ngx_sha1_init(&sha1);

    if (bson_iter_init_find(&it, np->doc, "body")) {
        ngx_sha1_update(&sha1, "B", 1);

        if (ngx_http_feed_post_hash_value(&sha1, &it, log) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    if (bson_iter_init_find(&it, np->doc, "data")) {
        ngx_sha1_update(&sha1, "D", 1);

        if (ngx_http_feed_post_hash_value(&sha1, &it, log) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    ngx_sha1_final(digest, &sha1);

    *ngx_hex_dump((u_char *) np->hash, digest, sizeof(digest)) = '\0';

    return NGX_OK;
}


/* a type letter, then the value; containers end with "e" */

static ngx_int_t
ngx_http_feed_post_hash_value(ngx_sha1_t *sha1, const bson_iter_t *it,
    ngx_log_t *log)
{
    double        d;
    uint32_t      len;
    uint64_t      bits;
    const char   *s;
    bson_iter_t   child;

    switch (bson_iter_type(it)) {

    case BSON_TYPE_UTF8:
        s = bson_iter_utf8(it, &len);
        ngx_http_feed_post_hash_int(sha1, 's', len);
        ngx_sha1_update(sha1, s, len);
        return NGX_OK;

    case BSON_TYPE_BOOL:
        ngx_http_feed_post_hash_int(sha1, 'b', bson_iter_bool(it));
        return NGX_OK;

    case BSON_TYPE_NULL:
        ngx_sha1_update(sha1, "n", 1);
        return NGX_OK;

    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
        ngx_http_feed_post_hash_int(sha1, 'i',
                                    (uint64_t) bson_iter_as_int64(it));
        return NGX_OK;

    case BSON_TYPE_DOUBLE:
        d = bson_iter_double(it);

        /* in range first: casting a larger double to int64_t is undefined */

        if (d < NGX_HTTP_FEED_HASH_EXACT && d > -NGX_HTTP_FEED_HASH_EXACT
            && d == (double) (int64_t) d)
        {
            ngx_http_feed_post_hash_int(sha1, 'i', (uint64_t) (int64_t) d);
            return NGX_OK;
        }

        ngx_memcpy(&bits, &d, sizeof(double));
        ngx_http_feed_post_hash_int(sha1, 'd', bits);
        return NGX_OK;

    case BSON_TYPE_DOCUMENT:
        return ngx_http_feed_post_hash_object(sha1, it, log);

    case BSON_TYPE_ARRAY:
        if (!bson_iter_recurse(it, &child)) {
            return NGX_ERROR;
        }

        ngx_sha1_update(sha1, "a", 1);

        while (bson_iter_next(&child)) {
            if (ngx_http_feed_post_hash_value(sha1, &child, log) != NGX_OK) {
                return NGX_ERROR;
            }
        }

        ngx_sha1_update(sha1, "e", 1);
        return NGX_OK;

    default:
        /* the input's checks let no other type through */
        return NGX_ERROR;
    }
}


/* an object's members sorted by key: "k", the key and its NUL, the value */

static ngx_int_t
ngx_http_feed_post_hash_object(ngx_sha1_t *sha1, const bson_iter_t *it,
    ngx_log_t *log)
{
    uint32_t                      len;
    ngx_int_t                     rc;
    ngx_uint_t                    i, n;
    bson_iter_t                   child, member;
    const uint8_t                *data;
    ngx_http_feed_post_member_t  *m;

    bson_iter_document(it, &len, &data);

    if (data == NULL || !bson_iter_init_from_data(&child, data, len)) {
        return NGX_ERROR;
    }

    for (n = 0; bson_iter_next(&child); n++) { /* void */ }

    m = ngx_alloc((n ? n : 1) * sizeof(ngx_http_feed_post_member_t), log);
    if (m == NULL) {
        return NGX_ERROR;
    }

    (void) bson_iter_init_from_data(&child, data, len);

    for (i = 0; i < n && bson_iter_next(&child); i++) {
        m[i].key = bson_iter_key(&child);
        m[i].key_len = bson_iter_key_len(&child);
        m[i].offset = bson_iter_offset(&child);
    }

    ngx_qsort(m, n, sizeof(ngx_http_feed_post_member_t),
              ngx_http_feed_post_hash_cmp);

    ngx_sha1_update(sha1, "o", 1);

    rc = NGX_OK;

    for (i = 0; i < n && rc == NGX_OK; i++) {
        ngx_sha1_update(sha1, "k", 1);
        ngx_sha1_update(sha1, m[i].key, m[i].key_len + 1);

        rc = bson_iter_init_from_data_at_offset(&member, data, len,
                                                m[i].offset, m[i].key_len)
             ? ngx_http_feed_post_hash_value(sha1, &member, log)
             : NGX_ERROR;
    }

    ngx_sha1_update(sha1, "e", 1);

    ngx_free(m);

    return rc;
}


static int ngx_libc_cdecl
ngx_http_feed_post_hash_cmp(const void *one, const void *two)
{
    const ngx_http_feed_post_member_t  *a = one;
    const ngx_http_feed_post_member_t  *b = two;

    return ngx_strcmp(a->key, b->key);
}


/* the type letter and 8 bytes, big-endian: the same hash on every node */

static void
ngx_http_feed_post_hash_int(ngx_sha1_t *sha1, u_char type, uint64_t v)
{
    u_char      buf[9];
    ngx_uint_t  i;

    buf[0] = type;

    for (i = 0; i < 8; i++) {
        buf[8 - i] = (u_char) (v >> (8 * i));
    }

    ngx_sha1_update(sha1, buf, sizeof(buf));
}


/*
 * Thread side: the key claimed, then the post of the key inserted.  An
 * insert that finds the post there (made by an earlier or a concurrent
 * request with the key) answers that post, and enqueues nothing: only the
 * request whose insert made the post enqueues it.
 */

void
ngx_http_feed_post_keyed_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_new_t  *np = t->data;

    bson_t                       *stored;
    ngx_int_t                     rc;
    ngx_http_feed_idempotency_t   ik;

    ik.user = &np->author;
    ik.key = np->key;
    ik.hash = np->hash;
    ik.now = np->ts;
    bson_oid_copy(&np->id, &ik.id);
    ik.ts = np->ts;

    rc = ngx_http_feed_idempotency_claim(client, t->database, &ik,
                                         &t->error);

    t->rc = (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
    np->outcome = rc;

    if (rc != NGX_OK && rc != NGX_DONE) {
        return;
    }

    if (rc == NGX_DONE) {
        ngx_http_feed_post_renew(np, &ik.id, ik.ts);
    }

    /* due from now: the key's post may be an hour old */

    rc = ngx_http_feed_posts_insert(client, t->database, np->doc, ik.now,
                                    np->model, &t->error);

    if (rc != NGX_DECLINED) {
        t->rc = rc;
        np->outcome = NGX_OK;
        return;
    }

    rc = ngx_http_feed_posts_find(client, t->database, &np->id, &stored,
                                  &t->error);

    t->rc = (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
    np->outcome = (rc == NGX_OK) ? NGX_DONE : NGX_ABORT;

    if (rc == NGX_OK) {
        ngx_http_feed_post_replace(np, stored);
    }
}


/* the new post as the key's post: its id and time, the same content */

static void
ngx_http_feed_post_renew(ngx_http_feed_post_new_t *np, const bson_oid_t *id,
    int64_t ts)
{
    bson_oid_copy(id, &np->id);
    np->ts = ts;

    ngx_http_feed_post_replace(np, ngx_http_feed_post_doc(np, np->doc));
}


static void
ngx_http_feed_post_replace(ngx_http_feed_post_new_t *np, bson_t *doc)
{
    bson_destroy(np->doc);
    np->doc = doc;
}
