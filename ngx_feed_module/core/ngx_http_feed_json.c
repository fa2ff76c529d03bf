
/*
 * ngx_feed_module: JSON responses, written by libbson.
 *
 * Every response of the module is application/json, errors included:
 * {"error":"<code>","message":"<text>"}.  Every JSON the module writes,
 * answered or stored in Redis, is compact: no whitespace outside strings.
 */


#include "ngx_http_feed_json.h"
#include "ngx_http_feed_args.h"


static ngx_str_t  ngx_http_feed_json_type = ngx_string("application/json");


ngx_int_t
ngx_http_feed_send_json(ngx_http_request_t *r, ngx_uint_t status,
    const bson_t *doc)
{
    char       *json;
    size_t      len;
    u_char     *p;

    json = ngx_http_feed_json_text(doc, &len);
    if (json == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_pnalloc(r->pool, len + 1);
    if (p == NULL) {
        bson_free(json);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(p, json, len);
    p[len] = '\n';

    bson_free(json);

    return ngx_http_feed_send_body(r, status, p, len + 1);
}


/*
 * A document's JSON, compact, in memory of libbson's (bson_free()): what
 * every JSON the module writes is made of, in a request or in a thread.
 * Relaxed extended JSON of plain types is plain JSON.
 */

char *
ngx_http_feed_json_text(const bson_t *doc, size_t *len)
{
    char  *json;

    json = bson_as_relaxed_extended_json(doc, len);
    if (json == NULL) {
        return NULL;
    }

    *len = ngx_http_feed_json_squeeze((u_char *) json, *len);
    json[*len] = '\0';

    return json;
}


/*
 * JSON without its whitespace outside strings, in place; the new length.
 * libbson 1.23 writes { "id" : "...", "author" : "bob" } and has no
 * compact mode: the spaces were 13% of a short post, in Redis and on the
 * wire.  In a string, a backslash escapes the byte after it, so that \"
 * does not end the string and \\" does.  Squeezing compact JSON changes
 * nothing.
 */

size_t
ngx_http_feed_json_squeeze(u_char *json, size_t len)
{
    u_char      c, *p, *q, *last;
    ngx_uint_t  in_string, escaped;

    in_string = 0;
    escaped = 0;
    last = json + len;

    for (p = json, q = json; p < last; p++) {
        c = *p;

        if (in_string) {
            if (escaped) {
                escaped = 0;

            } else if (c == '\\') {
                escaped = 1;

            } else if (c == '"') {
                in_string = 0;
            }

        } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
            continue;

        } else if (c == '"') {
            in_string = 1;
        }

        *q++ = c;
    }

    return q - json;
}


ngx_int_t
ngx_http_feed_send_error(ngx_http_request_t *r, ngx_uint_t status,
    const char *code, const char *message)
{
    bson_t     doc;
    ngx_int_t  rc;

    ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                  "feed request failed: %ui %s: %s", status, code, message);

    bson_init(&doc);

    if (!BSON_APPEND_UTF8(&doc, "error", code)
        || !BSON_APPEND_UTF8(&doc, "message", message))
    {
        bson_destroy(&doc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_feed_send_json(r, status, &doc);

    bson_destroy(&doc);

    return rc;
}


ngx_int_t
ngx_http_feed_send_body(ngx_http_request_t *r, ngx_uint_t status,
    u_char *data, size_t len)
{
    return ngx_http_feed_send_typed(r, status, &ngx_http_feed_json_type,
                                    data, len);
}


/* a body in memory, of any type: JSON everywhere but in feed_metrics */

ngx_int_t
ngx_http_feed_send_typed(ngx_http_request_t *r, ngx_uint_t status,
    ngx_str_t *type, u_char *data, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_type = *type;
    r->headers_out.content_type_len = type->len;
    r->headers_out.content_type_lowcase = NULL;
    r->headers_out.content_length_n = len;

    if (r->method == NGX_HTTP_HEAD || len == 0) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = data;
    b->last = data + len;
    b->memory = 1;
    b->last_buf = (r == r->main) ? 1 : 0;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


ngx_int_t
ngx_http_feed_add_header(ngx_http_request_t *r, const char *name,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.data = (u_char *) name;
    h->key.len = ngx_strlen(name);
    h->value = *value;

    return NGX_OK;
}


/* a document's JSON in the pool, without the newline a response ends with */

ngx_int_t
ngx_http_feed_json_copy(ngx_pool_t *pool, const bson_t *doc, ngx_str_t *json)
{
    char    *text;
    size_t   len;

    text = ngx_http_feed_json_text(doc, &len);
    if (text == NULL) {
        return NGX_ERROR;
    }

    json->data = ngx_pnalloc(pool, len);
    if (json->data == NULL) {
        bson_free(text);
        return NGX_ERROR;
    }

    ngx_memcpy(json->data, text, len);
    json->len = len;

    bson_free(text);

    return NGX_OK;
}


/*
 * The next item of an "items" array that is a post: a document whose
 * "id" is a post id (id then points into the item, NUL-terminated).  The
 * array may come from any application, so anything else is told apart:
 * NGX_DECLINED, an item that is not a post; NGX_DONE, no items are left.
 */

ngx_int_t
ngx_http_feed_json_next_post(bson_iter_t *it, bson_t *post, ngx_str_t *id)
{
    uint32_t        doclen, len;
    bson_oid_t      oid;
    bson_iter_t     field;
    const uint8_t  *raw;

    if (!bson_iter_next(it)) {
        return NGX_DONE;
    }

    if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
        return NGX_DECLINED;
    }

    bson_iter_document(it, &doclen, &raw);

    if (!bson_init_static(post, raw, doclen)
        || !bson_iter_init_find(&field, post, "id")
        || !BSON_ITER_HOLDS_UTF8(&field))
    {
        return NGX_DECLINED;
    }

    id->data = (u_char *) bson_iter_utf8(&field, &len);
    id->len = len;

    if (ngx_http_feed_post_id(id, &oid) != NGX_OK) {
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * Each post of an "items" array, its id and its JSON (copied into pool),
 * given to each(); items that are not posts are passed over.
 */

ngx_int_t
ngx_http_feed_json_posts(ngx_pool_t *pool, bson_t *items,
    ngx_http_feed_json_post_pt each, void *data)
{
    bson_t       post;
    ngx_int_t    rc;
    ngx_str_t    id, json;
    bson_iter_t  it;

    if (!bson_iter_init(&it, items)) {
        return NGX_ERROR;
    }

    for ( ;; ) {
        rc = ngx_http_feed_json_next_post(&it, &post, &id);

        if (rc == NGX_DONE) {
            return NGX_OK;
        }

        if (rc == NGX_DECLINED) {
            continue;
        }

        if (ngx_http_feed_json_copy(pool, &post, &json) != NGX_OK
            || each(data, &id, &json) != NGX_OK)
        {
            return NGX_ERROR;
        }
    }
}


/*
 * A request's body that must be one JSON document, an object (open '{')
 * or an array ('['; libbson reads it as a document keyed "0", "1", ...),
 * and it an iterator on its members.  NGX_DECLINED when it is not that,
 * NGX_ABORT when it is not UTF-8; doc is to be destroyed after NGX_OK.
 */

ngx_int_t
ngx_http_feed_json_body(ngx_str_t *body, u_char open, bson_t *doc,
    bson_iter_t *it)
{
    u_char  *q;

    /* an empty body's data may be NULL, which libbson does not take */

    if (body->len == 0) {
        return NGX_DECLINED;
    }

    if (!bson_utf8_validate((const char *) body->data, body->len, true)) {
        return NGX_ABORT;
    }

    for (q = body->data;
         q < body->data + body->len
         && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n');
         q++)
    {
        /* void */
    }

    if (q == body->data + body->len || *q != open
        || ngx_http_feed_json_one(body->data, body->len, doc) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    if (!bson_iter_init(it, doc)) {
        bson_destroy(doc);
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/*
 * Exactly one JSON document and nothing after it: bson_init_from_json()
 * alone would stop after the first of "{...}{...}".
 */

ngx_int_t
ngx_http_feed_json_one(u_char *p, size_t len, bson_t *doc)
{
    int                 rc;
    bson_t              extra;
    bson_error_t        error;
    bson_json_reader_t *reader;

    reader = bson_json_data_reader_new(false, len);
    if (reader == NULL) {
        return NGX_ERROR;
    }

    bson_json_data_reader_ingest(reader, p, len);

    bson_init(doc);

    rc = bson_json_reader_read(reader, doc, &error);

    if (rc == 1) {
        bson_init(&extra);
        rc = (bson_json_reader_read(reader, &extra, &error) == 0) ? 1 : -1;
        bson_destroy(&extra);
    }

    bson_json_reader_destroy(reader);

    if (rc != 1) {
        bson_destroy(doc);
        return NGX_DECLINED;
    }

    return NGX_OK;
}
