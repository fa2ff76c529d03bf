
/*
 * Fuzz target: the body of POST /users/{uid}/posts, as the request body
 * handler hands it to ngx_http_feed_post_parse().
 *
 * Checked: no memory error; a body refused gets a 400 or 413 with an
 * error code; a body taken makes a document with exactly the author, a
 * non-empty UTF-8 body, the time, and data only if given as an object,
 * with no key, at any depth, that starts with "$" or holds a dot, and
 * whose content hashes (ngx_http_feed_post_hash(), for Idempotency-Key).
 */


#include "ngx_http_feed_fuzz.h"
#include "ngx_http_feed_post.h"


static void ngx_http_feed_fuzz_check_post(ngx_http_feed_post_new_t *np);


int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ngx_int_t                  rc;
    ngx_http_feed_error_t      err;
    ngx_http_feed_post_new_t   np;

    ngx_http_feed_fuzz_init();

    ngx_memzero(&np, sizeof(ngx_http_feed_post_new_t));
    ngx_memzero(&err, sizeof(ngx_http_feed_error_t));

    ngx_memcpy(np.author.data, "alice", sizeof("alice"));
    np.author.len = sizeof("alice") - 1;
    np.ts = 1700000000123;

    rc = ngx_http_feed_post_parse(ngx_http_feed_fuzz_fmcf, (u_char *) data,
                                  size, &np, &err);

    if (rc != NGX_OK) {
        ngx_http_feed_fuzz_assert(rc == NGX_DECLINED, "an unexpected rc");
        ngx_http_feed_fuzz_assert(err.status == NGX_HTTP_BAD_REQUEST
                                  || err.status
                                     == NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                                  "a refusal that is not 400 or 413");
        ngx_http_feed_fuzz_assert(err.code && err.message,
                                  "a refusal without an error code");
        return 0;
    }

    ngx_http_feed_fuzz_check_post(&np);

    /* with an Idempotency-Key, every post taken is hashed */

    ngx_http_feed_fuzz_assert(ngx_http_feed_post_hash(&np,
                                                      ngx_http_feed_fuzz_log)
                              == NGX_OK
                              && ngx_strlen(np.hash) == 40,
                              "a post taken whose content does not hash");

    bson_destroy(np.doc);

    return 0;
}


static void
ngx_http_feed_fuzz_check_post(ngx_http_feed_post_new_t *np)
{
    char         *json;
    size_t        len;
    uint32_t      blen;
    ngx_uint_t    n;
    const char   *key, *body;
    bson_iter_t   it;

    /* strings may hold U+0000 (JSON allows it, BSON keeps the length) */

    ngx_http_feed_fuzz_assert(bson_validate(np->doc,
                                            BSON_VALIDATE_UTF8
                                            | BSON_VALIDATE_UTF8_ALLOW_NULL
                                            | BSON_VALIDATE_DOLLAR_KEYS
                                            | BSON_VALIDATE_DOT_KEYS,
                                            NULL),
                              "a document stored with invalid UTF-8 or "
                              "a $ or dotted key");

    ngx_http_feed_fuzz_assert(bson_iter_init(&it, np->doc), "no document");

    n = 0;

    while (bson_iter_next(&it)) {
        key = bson_iter_key(&it);
        n++;

        if (ngx_strcmp(key, "body") == 0) {
            ngx_http_feed_fuzz_assert(BSON_ITER_HOLDS_UTF8(&it),
                                      "a body that is not a string");
            body = bson_iter_utf8(&it, &blen);
            ngx_http_feed_fuzz_assert(blen > 0 && body != NULL,
                                      "an empty body stored");

        } else if (ngx_strcmp(key, "data") == 0) {
            ngx_http_feed_fuzz_assert(BSON_ITER_HOLDS_DOCUMENT(&it),
                                      "data that is not an object");

        } else {
            ngx_http_feed_fuzz_assert(ngx_strcmp(key, "_id") == 0
                                      || ngx_strcmp(key, "author") == 0
                                      || ngx_strcmp(key, "ts") == 0,
                                      "a field nobody asked for stored");
        }
    }

    ngx_http_feed_fuzz_assert(n >= 4 && n <= 5, "fields missing");

    /* what a read gives back must be JSON again */

    json = bson_as_relaxed_extended_json(np->doc, &len);
    ngx_http_feed_fuzz_assert(json != NULL, "a post that is not JSON");
    bson_free(json);
}
