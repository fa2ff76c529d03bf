
/*
 * ngx_feed_module: what a new post may be.
 *
 * The request is a JSON object {"body": "...", "data": {...}}: libbson
 * parses it; here it is held to the contract, so that nothing else is
 * ever stored: valid UTF-8, no other field, body 1..N code points, data a
 * plain JSON object (libbson turns "$"-keys into BSON types, those are
 * refused) of bounded size.
 */


#include "ngx_http_feed_post.h"
#include "ngx_http_feed_json.h"


static ngx_uint_t ngx_http_feed_post_dollar_key(u_char *p, size_t len);
static ngx_int_t ngx_http_feed_post_check(ngx_http_feed_main_conf_t *fmcf,
    const bson_t *input, ngx_http_feed_error_t *err);
static ngx_int_t ngx_http_feed_post_check_data(bson_iter_t *it,
    ngx_uint_t depth);
static ngx_uint_t ngx_http_feed_utf8_chars(const char *s, uint32_t len);
static ngx_int_t ngx_http_feed_post_fail(ngx_http_feed_error_t *err,
    const ngx_http_feed_error_t *why);


#define NGX_HTTP_FEED_DATA_DEPTH  32


ngx_int_t
ngx_http_feed_post_parse(ngx_http_feed_main_conf_t *fmcf, u_char *p,
    size_t len, ngx_http_feed_post_new_t *np, ngx_http_feed_error_t *err)
{
    u_char  *q;
    bson_t   input;

    if (len == 0) {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_json);
    }

    if (!bson_utf8_validate((const char *) p, len, true)) {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_utf8);
    }

    for (q = p; q < p + len && (*q == ' ' || *q == '\t' || *q == '\r'
                                || *q == '\n'); q++)
    {
        /* void */
    }

    if (q == p + len || *q != '{') {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_json);
    }

    if (ngx_http_feed_json_one(p, len, &input) != NGX_OK) {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_json);
    }

    /* libbson reads {"$numberLong": "5"} as a number: refuse it first */

    if (ngx_http_feed_post_dollar_key(p, len)) {
        bson_destroy(&input);
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_data);
    }

    if (ngx_http_feed_post_check(fmcf, &input, err) != NGX_OK) {
        bson_destroy(&input);
        return NGX_DECLINED;
    }

    np->ts = ngx_http_feed_post_oid(&np->id, np->ts);
    np->doc = ngx_http_feed_post_doc(np, &input);

    bson_destroy(&input);

    return NGX_OK;
}


/* the post to store: np's id, author and time, the content's body, data */

bson_t *
ngx_http_feed_post_doc(ngx_http_feed_post_new_t *np, const bson_t *content)
{
    bson_t       *doc;
    bson_iter_t   it;

    doc = bson_new();
    BSON_APPEND_OID(doc, "_id", &np->id);
    BSON_APPEND_UTF8(doc, "author", np->author.data);

    if (bson_iter_init_find(&it, content, "body")) {
        BSON_APPEND_VALUE(doc, "body", bson_iter_value(&it));
    }

    BSON_APPEND_INT64(doc, "ts", np->ts);

    if (bson_iter_init_find(&it, content, "data")) {
        BSON_APPEND_VALUE(doc, "data", bson_iter_value(&it));
    }

    return doc;
}


/*
 * Whether a key below the top level starts with "$" (or its escape
 * \u0024), in text already known to be one valid JSON object.
 */

static ngx_uint_t
ngx_http_feed_post_dollar_key(u_char *p, size_t len)
{
    u_char      *last, *start;
    ngx_uint_t   depth;

    depth = 0;

    for (last = p + len; p < last; p++) {

        if (*p == '{' || *p == '[') {
            depth++;
            continue;
        }

        if (*p == '}' || *p == ']') {
            depth--;
            continue;
        }

        if (*p != '"') {
            continue;
        }

        start = ++p;

        while (p < last && *p != '"') {
            p += (*p == '\\') ? 2 : 1;
        }

        if (depth < 2
            || !(*start == '$'
                 || (last - start >= 6
                     && ngx_strncasecmp(start, (u_char *) "\\u0024", 6)
                        == 0)))
        {
            continue;
        }

        /* a string followed by ":" is a key */

        for (start = p + 1;
             start < last && (*start == ' ' || *start == '\t'
                              || *start == '\r' || *start == '\n');
             start++)
        {
            /* void */
        }

        if (start < last && *start == ':') {
            return 1;
        }
    }

    return 0;
}


static ngx_int_t
ngx_http_feed_post_check(ngx_http_feed_main_conf_t *fmcf,
    const bson_t *input, ngx_http_feed_error_t *err)
{
    const char     *key, *s;
    uint32_t        len;
    ngx_int_t       rc;
    bson_iter_t     it, child;
    ngx_uint_t      body, data;
    const uint8_t  *raw;

    if (!bson_validate(input, BSON_VALIDATE_UTF8
                              | BSON_VALIDATE_UTF8_ALLOW_NULL, NULL))
    {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_utf8);
    }

    body = 0;
    data = 0;

    if (!bson_iter_init(&it, input)) {
        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_not_json);
    }

    while (bson_iter_next(&it)) {
        key = bson_iter_key(&it);

        if (ngx_strcmp(key, "body") == 0) {
            if (body++) {
                goto duplicate;
            }

            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                goto invalid_body;
            }

            s = bson_iter_utf8(&it, &len);

            if (len == 0) {
                goto invalid_body;
            }

            if (ngx_http_feed_utf8_chars(s, len) > fmcf->post_max_chars) {
                return ngx_http_feed_post_fail(err,
                           &ngx_http_feed_err_body_size);
            }

            continue;
        }

        if (ngx_strcmp(key, "data") == 0) {
            if (data++) {
                goto duplicate;
            }

            rc = NGX_ERROR;

            if (BSON_ITER_HOLDS_DOCUMENT(&it)
                && bson_iter_recurse(&it, &child))
            {
                rc = ngx_http_feed_post_check_data(&child, 0);
            }

            if (rc == NGX_ABORT) {
                return ngx_http_feed_post_fail(err, &ngx_http_feed_err_number);
            }

            if (rc != NGX_OK) {
                return ngx_http_feed_post_fail(err, &ngx_http_feed_err_data);
            }

            bson_iter_document(&it, &len, &raw);

            if (len > fmcf->post_data_max_size) {
                return ngx_http_feed_post_fail(err,
                           &ngx_http_feed_err_data_size);
            }

            continue;
        }

        return ngx_http_feed_post_fail(err, &ngx_http_feed_err_field);
    }

    if (body == 0) {
        goto invalid_body;
    }

    return NGX_OK;

duplicate:

    return ngx_http_feed_post_fail(err, &ngx_http_feed_err_field_twice);

invalid_body:

    return ngx_http_feed_post_fail(err, &ngx_http_feed_err_body);
}


/* plain JSON values only, keys MongoDB and JSON agree on */

static ngx_int_t
ngx_http_feed_post_check_data(bson_iter_t *it, ngx_uint_t depth)
{
    double        d;
    ngx_int_t     rc;
    const char   *key;
    bson_iter_t   child;

    if (depth > NGX_HTTP_FEED_DATA_DEPTH) {
        return NGX_ERROR;
    }

    while (bson_iter_next(it)) {
        key = bson_iter_key(it);

        if (key[0] == '$' || ngx_strchr(key, '.') != NULL) {
            return NGX_ERROR;
        }

        switch (bson_iter_type(it)) {

        case BSON_TYPE_UTF8:
        case BSON_TYPE_BOOL:
        case BSON_TYPE_NULL:
        case BSON_TYPE_INT32:
        case BSON_TYPE_INT64:
            break;

        case BSON_TYPE_DOUBLE:
            d = bson_iter_double(it);

            if (d != d || d - d != 0) {
                /* NaN or infinite: not JSON at all */
                return NGX_ABORT;
            }

            break;

        case BSON_TYPE_DOCUMENT:
        case BSON_TYPE_ARRAY:
            if (!bson_iter_recurse(it, &child)) {
                return NGX_ERROR;
            }

            rc = ngx_http_feed_post_check_data(&child, depth + 1);
            if (rc != NGX_OK) {
                return rc;
            }

            break;

        default:
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* code points: every byte but UTF-8 continuation bytes starts one */

static ngx_uint_t
ngx_http_feed_utf8_chars(const char *s, uint32_t len)
{
    uint32_t    i;
    ngx_uint_t  n;

    n = 0;

    for (i = 0; i < len; i++) {
        if (((u_char) s[i] & 0xc0) != 0x80) {
            n++;
        }
    }

    return n;
}


/*
 * A post id: an ObjectId whose order, among the ids of one node, is the
 * order in which any of its workers made them.  4 bytes of seconds (what
 * ObjectId.getTimestamp() reads), 10 bits of milliseconds and 14 of a
 * sequence within the millisecond, then the node's 5 random bytes, so
 * that ids of two nodes differ.  Time and sequence come from one value in
 * the node's shared zone, (ms << 14) + sequence, that a compare-and-set
 * only ever moves up: a worker whose cached clock lags behind another's,
 * a clock set back, or over 16384 posts in a millisecond, take the next
 * value instead of an older one.  Returns the milliseconds of the id: the
 * post's time, so that times order as ids do.
 */

#define NGX_HTTP_FEED_ID_SEQ_BITS  14

#if (NGX_PTR_SIZE < 8)
#error "post ids need a 64-bit ngx_atomic_t"
#endif

int64_t
ngx_http_feed_post_oid(bson_oid_t *oid, int64_t ms)
{
    uint32_t                    sec, sub;
    ngx_atomic_uint_t           last, next;
    ngx_http_feed_ids_t        *ids;

    /* outside nginx's workers (no shared zone): this process's own */
    static ngx_http_feed_ids_t  own;

    ids = ngx_http_feed_node_ids;

    if (ids == NULL) {
        ids = &own;

        if (own.last == 0) {
            ngx_http_feed_random(own.node, sizeof(own.node));
        }
    }

    do {
        last = ids->last;
        next = (ngx_atomic_uint_t) ms << NGX_HTTP_FEED_ID_SEQ_BITS;

        if (next <= last) {
            next = last + 1;
        }

    } while (!ngx_atomic_cmp_set(&ids->last, last, next));

    ms = (int64_t) (next >> NGX_HTTP_FEED_ID_SEQ_BITS);
    sec = (uint32_t) (ms / 1000);
    sub = (uint32_t) (ms % 1000) << NGX_HTTP_FEED_ID_SEQ_BITS
          | (uint32_t) (next & ((1 << NGX_HTTP_FEED_ID_SEQ_BITS) - 1));

    oid->bytes[0] = (uint8_t) (sec >> 24);
    oid->bytes[1] = (uint8_t) (sec >> 16);
    oid->bytes[2] = (uint8_t) (sec >> 8);
    oid->bytes[3] = (uint8_t) sec;
    oid->bytes[4] = (uint8_t) (sub >> 16);
    oid->bytes[5] = (uint8_t) (sub >> 8);
    oid->bytes[6] = (uint8_t) sub;
    ngx_memcpy(&oid->bytes[7], ids->node, 5);

    return ms;
}


static ngx_int_t
ngx_http_feed_post_fail(ngx_http_feed_error_t *err,
    const ngx_http_feed_error_t *why)
{
    *err = *why;

    return NGX_DECLINED;
}
