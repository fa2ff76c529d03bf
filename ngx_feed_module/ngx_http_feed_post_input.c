
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


static ngx_int_t ngx_http_feed_post_check(ngx_http_feed_main_conf_t *fmcf,
    const bson_t *input, ngx_http_feed_error_t *err);
static ngx_int_t ngx_http_feed_post_check_data(bson_iter_t *it,
    ngx_uint_t depth);
static ngx_uint_t ngx_http_feed_utf8_chars(const char *s, uint32_t len);
static ngx_int_t ngx_http_feed_post_fail(ngx_http_feed_error_t *err,
    ngx_uint_t status, const char *code, const char *message);


#define NGX_HTTP_FEED_DATA_DEPTH  32


ngx_int_t
ngx_http_feed_post_parse(ngx_http_feed_main_conf_t *fmcf, u_char *p,
    size_t len, ngx_http_feed_post_new_t *np, ngx_http_feed_error_t *err)
{
    u_char        *q;
    bson_t         input;
    bson_iter_t    it;
    bson_error_t   error;

    if (len == 0) {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_json",
                                       "the request is not a JSON object");
    }

    if (!bson_utf8_validate((const char *) p, len, true)) {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_utf8",
                                       "the request is not valid UTF-8");
    }

    for (q = p; q < p + len && (*q == ' ' || *q == '\t' || *q == '\r'
                                || *q == '\n'); q++)
    {
        /* void */
    }

    if (q == p + len || *q != '{') {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_json",
                                       "the request is not a JSON object");
    }

    if (!bson_init_from_json(&input, (const char *) p, len, &error)) {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_json",
                                       "the request is not a JSON object");
    }

    if (ngx_http_feed_post_check(fmcf, &input, err) != NGX_OK) {
        bson_destroy(&input);
        return NGX_DECLINED;
    }

    /* the document as stored: the outbox fields say it awaits the queue */

    bson_oid_init(&np->id, NULL);

    bson_init(&np->doc);
    BSON_APPEND_OID(&np->doc, "_id", &np->id);
    BSON_APPEND_UTF8(&np->doc, "author", np->author.data);

    if (bson_iter_init_find(&it, &input, "body")) {
        BSON_APPEND_VALUE(&np->doc, "body", bson_iter_value(&it));
    }

    BSON_APPEND_INT64(&np->doc, "ts", np->ts);

    if (bson_iter_init_find(&it, &input, "data")) {
        BSON_APPEND_VALUE(&np->doc, "data", bson_iter_value(&it));
    }

    bson_destroy(&input);

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_post_check(ngx_http_feed_main_conf_t *fmcf,
    const bson_t *input, ngx_http_feed_error_t *err)
{
    const char     *key, *s;
    uint32_t        len;
    bson_iter_t     it, child;
    ngx_uint_t      body, data;
    const uint8_t  *raw;

    if (!bson_validate(input, BSON_VALIDATE_UTF8
                              | BSON_VALIDATE_UTF8_ALLOW_NULL, NULL))
    {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_utf8",
                                       "the request is not valid UTF-8");
    }

    body = 0;
    data = 0;

    if (!bson_iter_init(&it, input)) {
        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "invalid_json",
                                       "the request is not a JSON object");
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
                           NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                           "body_too_long", "body is too long");
            }

            continue;
        }

        if (ngx_strcmp(key, "data") == 0) {
            if (data++) {
                goto duplicate;
            }

            if (!BSON_ITER_HOLDS_DOCUMENT(&it)
                || !bson_iter_recurse(&it, &child)
                || ngx_http_feed_post_check_data(&child, 0) != NGX_OK)
            {
                return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                           "invalid_data",
                           "data must be a JSON object without keys that "
                           "start with $ or contain a dot");
            }

            bson_iter_document(&it, &len, &raw);

            if (len > fmcf->post_data_max_size) {
                return ngx_http_feed_post_fail(err,
                           NGX_HTTP_REQUEST_ENTITY_TOO_LARGE,
                           "data_too_large", "data is too large");
            }

            continue;
        }

        return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                       "unknown_field",
                                       "only body and data may be given");
    }

    if (body == 0) {
        goto invalid_body;
    }

    return NGX_OK;

duplicate:

    return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST,
                                   "duplicate_field",
                                   "a field is given twice");

invalid_body:

    return ngx_http_feed_post_fail(err, NGX_HTTP_BAD_REQUEST, "invalid_body",
                                   "body must be a non-empty string");
}


/* plain JSON values only, keys MongoDB and JSON agree on */

static ngx_int_t
ngx_http_feed_post_check_data(bson_iter_t *it, ngx_uint_t depth)
{
    double        d;
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
                /* NaN or infinite: not JSON */
                return NGX_ERROR;
            }

            break;

        case BSON_TYPE_DOCUMENT:
        case BSON_TYPE_ARRAY:
            if (!bson_iter_recurse(it, &child)
                || ngx_http_feed_post_check_data(&child, depth + 1)
                   != NGX_OK)
            {
                return NGX_ERROR;
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


/* a post id: exactly 24 lowercase hex digits */

ngx_int_t
ngx_http_feed_post_id(ngx_str_t *text, bson_oid_t *oid)
{
    u_char      c;
    char        hex[25];
    ngx_uint_t  i;

    if (text->len != 24) {
        return NGX_DECLINED;
    }

    for (i = 0; i < 24; i++) {
        c = text->data[i];

        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return NGX_DECLINED;
        }

        hex[i] = c;
    }

    hex[24] = '\0';

    bson_oid_init_from_string(oid, hex);

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_post_fail(ngx_http_feed_error_t *err, ngx_uint_t status,
    const char *code, const char *message)
{
    err->status = status;
    err->code = code;
    err->message = message;

    return NGX_DECLINED;
}
