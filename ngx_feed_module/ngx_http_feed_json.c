
/*
 * ngx_feed_module: JSON responses, written by libbson.
 *
 * Every response of the module is application/json, errors included:
 * {"error": "<code>", "message": "<text>"}.
 */


#include "ngx_http_feed_json.h"


static ngx_str_t  ngx_http_feed_json_type = ngx_string("application/json");


ngx_int_t
ngx_http_feed_send_json(ngx_http_request_t *r, ngx_uint_t status,
    const bson_t *doc)
{
    char       *json;
    size_t      len;
    u_char     *p;

    /* relaxed extended JSON of plain types is plain JSON */

    json = bson_as_relaxed_extended_json(doc, &len);
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
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_chain_t   out;

    r->headers_out.status = status;
    r->headers_out.content_type = ngx_http_feed_json_type;
    r->headers_out.content_type_len = ngx_http_feed_json_type.len;
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
