
/*
 * ngx_feed_module: a user's timeline read marker, HTTP side.
 *
 *   feed_timeline_marker $user;   GET the marker, PUT moves it: 200
 *
 * MongoDB holds the marker (ngx_http_feed_markers_store.c), Redis a copy.
 *
 *   GET: the copy (X-Feed-Cache: HIT); without one, MongoDB (MISS), and
 *        the copy is filled back; with Redis down, MongoDB (BYPASS).
 *   PUT: the body and If-Match checked, MongoDB changed (one conditional
 *        update), then the copy set to what MongoDB now has, and only
 *        then the 200.
 *
 * The copy never goes back: Redis takes a copy only if it is newer than
 * the one it has (scripts/marker_set.lua), and versions only grow.  So a
 * GET's late fill cannot undo a PUT's copy, nor can two PUTs' copies
 * arrive in the wrong order.  A PUT whose copy Redis did not take drops
 * the copy and answers 503 (stored, the cache has yet to take it: retry),
 * as every write whose cache side effect failed does: it was not answered
 * 200, and its retry, whatever MongoDB says then, sets the copy.  A GET
 * never answers a marker older than one a PUT answered 200.
 */


#include "ngx_http_feed_marker.h"
#include "ngx_http_feed_markers_store.h"
#include "ngx_http_feed_json.h"


/* the largest body a PUT takes */
#define NGX_HTTP_FEED_MARKER_BODY_MAX  1024


typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t             *request;
    ngx_http_feed_main_conf_t      *fmcf;
    ngx_http_feed_marker_op_t       op;
    ngx_uint_t                      found;
    ngx_str_t                       json;
    const char                     *cache;
} ngx_http_feed_marker_ctx_t;


static ngx_int_t ngx_http_feed_marker_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_marker_if_match(ngx_http_request_t *r,
    ngx_http_feed_marker_op_t *op);
static ngx_int_t ngx_http_feed_marker_start(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_marker_cached(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_marker_read(ngx_http_feed_marker_ctx_t *ctx);
static void ngx_http_feed_marker_read_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_marker_found(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_marker_body(ngx_http_request_t *r);
static const ngx_http_feed_error_t *ngx_http_feed_marker_parse(
    ngx_str_t *body, ngx_http_feed_marker_op_t *op);
static void ngx_http_feed_marker_put_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_marker_stored(ngx_http_request_t *r,
    void *data);
static void ngx_http_feed_marker_set(void *data, redisReply *reply);
static void ngx_http_feed_marker_dropped(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_marker_send(ngx_http_request_t *r,
    ngx_str_t *json, int64_t version, const char *cache);


ngx_http_feed_handler_t  ngx_http_feed_marker_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_PUT, "GET, HEAD, PUT", NGX_HTTP_PUT,
    sizeof(ngx_http_feed_marker_ctx_t),
    ngx_http_feed_marker_args,
    ngx_http_feed_marker_start,
    NULL
};


/*
 * The user, the identity (a marker is the user's own, read or written),
 * and for a PUT its If-Match and the body's size when it is known
 */

static ngx_int_t
ngx_http_feed_marker_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    /* If-Match is ours: nginx's own check would answer 412 */
    r->disable_not_modified = 1;

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->op.user);
    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    rc = ngx_http_feed_authorize(r, &ctx->op.user, err);
    if (rc != NGX_OK || r->method != NGX_HTTP_PUT) {
        return rc;
    }

    if (r->headers_in.content_length_n > NGX_HTTP_FEED_MARKER_BODY_MAX) {
        *err = &ngx_http_feed_err_marker_size;
        return NGX_DECLINED;
    }

    if (ngx_http_feed_marker_if_match(r, &ctx->op) != NGX_OK) {
        *err = &ngx_http_feed_err_if_match;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


/* If-Match: a version, 0 to 2^63 - 1, as ETag gives it or quoted */

static ngx_int_t
ngx_http_feed_marker_if_match(ngx_http_request_t *r,
    ngx_http_feed_marker_op_t *op)
{
    u_char           *p;
    size_t            len;
    ngx_int_t         n;
    ngx_table_elt_t  *h;

    h = r->headers_in.if_match;

    if (h == NULL) {
        return NGX_OK;
    }

#if (nginx_version >= 1023000)
    if (h->next) {
        return NGX_DECLINED;
    }
#endif

    p = h->value.data;
    len = h->value.len;

    if (len >= 2 && p[0] == '"' && p[len - 1] == '"') {
        p++;
        len -= 2;
    }

    if (len == 0 || len > NGX_INT64_LEN - 1) {
        return NGX_DECLINED;
    }

    n = ngx_atoof(p, len);
    if (n == NGX_ERROR) {
        return NGX_DECLINED;
    }

    op->has_if_match = 1;
    op->if_match = n;

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_marker_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    ngx_int_t  rc;

    if (r->method == NGX_HTTP_PUT) {
        return ngx_http_feed_read_body(r, ngx_http_feed_marker_body);
    }

    if (ctx->fmcf->redis_client == NULL) {
        ctx->cache = "BYPASS";
        return ngx_http_feed_marker_read(ctx);
    }

    rc = ngx_http_feed_markers_cache_lookup(r, ctx->fmcf->redis_client,
                                            &ctx->op.user,
                                            ngx_http_feed_marker_cached, ctx);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        ctx->cache = "BYPASS";
        return ngx_http_feed_marker_read(ctx);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_marker_cached(void *data, redisReply *reply)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    int64_t    version;
    ngx_int_t  rc;
    ngx_str_t  json;

    if (ngx_http_feed_markers_cache_parse(reply, &json, &version) == NGX_OK) {
        rc = ngx_http_feed_marker_send(ctx->request, &json, version, "HIT");

    } else {
        ctx->cache = reply ? "MISS" : "BYPASS";
        rc = ngx_http_feed_marker_read(ctx);
    }

    if (rc != NGX_DONE) {
        ngx_http_feed_finalize(ctx->request, rc);
    }
}


static ngx_int_t
ngx_http_feed_marker_read(ngx_http_feed_marker_ctx_t *ctx)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed marker of \"%s\": reading, cache %s",
                   ctx->op.user.data, ctx->cache);

    return ngx_http_feed_mongo_request(ctx->request,
                                       ngx_http_feed_marker_read_run,
                                       ngx_http_feed_marker_found, ctx,
                                       NULL);
}


static void
ngx_http_feed_marker_read_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_marker_ctx_t  *ctx = t->data;

    t->rc = ngx_http_feed_markers_get(client, t->database, &ctx->op.user,
                                      &ctx->op.marker, &t->error);

    if (t->rc == NGX_DECLINED) {
        t->rc = NGX_OK;
        return;
    }

    ctx->found = (t->rc == NGX_OK);
}


/* read from MongoDB: answered, and the copy filled back on a miss */

static ngx_int_t
ngx_http_feed_marker_found(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    if (!ctx->found) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_no_marker);
    }

    if (ngx_http_feed_marker_json(r, &ctx->op.marker, &ctx->json) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->fmcf->redis_client && ngx_strcmp(ctx->cache, "MISS") == 0) {
        (void) ngx_http_feed_markers_cache_set(NULL, ctx->fmcf->redis_client,
                                               &ctx->op.user,
                                               &ctx->op.marker,
                                               &ctx->json, NULL, NULL);
    }

    return ngx_http_feed_marker_send(r, &ctx->json, ctx->op.marker.version,
                                     ctx->cache);
}


static void
ngx_http_feed_marker_body(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    ngx_str_t                     body;
    ngx_http_feed_marker_ctx_t   *ctx;
    const ngx_http_feed_error_t  *err;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (ngx_http_feed_read_whole_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    err = ngx_http_feed_marker_parse(&body, &ctx->op);
    if (err) {
        ngx_http_finalize_request(r, ngx_http_feed_error(r, err));
        return;
    }

    ctx->op.now = ngx_http_feed_now_ms();

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed marker of \"%s\": storing, force %ui, "
                   "If-Match %L", ctx->op.user.data, ctx->op.force,
                   ctx->op.has_if_match ? ctx->op.if_match : -1);

    rc = ngx_http_feed_mongo_request(r, ngx_http_feed_marker_put_run,
                                     ngx_http_feed_marker_stored, ctx, NULL);

    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }
}


/*
 * {"last_read_id": "<24 hex>", "force": true|false}: nothing else, each
 * once.  NULL when it is one, else the error to answer.
 */

static const ngx_http_feed_error_t *
ngx_http_feed_marker_parse(ngx_str_t *body, ngx_http_feed_marker_op_t *op)
{
    bson_t                        doc;
    uint32_t                      len;
    ngx_int_t                     rc;
    ngx_str_t                     id;
    ngx_uint_t                    has_id, has_force;
    bson_iter_t                   it;
    const char                   *key;
    const ngx_http_feed_error_t  *err;

    if (body->len > NGX_HTTP_FEED_MARKER_BODY_MAX) {
        return &ngx_http_feed_err_marker_size;
    }

    rc = ngx_http_feed_json_body(body, '{', &doc, &it);

    if (rc != NGX_OK) {
        return rc == NGX_ABORT ? &ngx_http_feed_err_not_utf8
                               : &ngx_http_feed_err_not_json;
    }

    err = NULL;
    has_id = 0;
    has_force = 0;

    while (err == NULL && bson_iter_next(&it)) {
        key = bson_iter_key(&it);

        if (ngx_strcmp(key, "last_read_id") == 0) {
            if (has_id++) {
                err = &ngx_http_feed_err_field_twice;
                break;
            }

            if (!BSON_ITER_HOLDS_UTF8(&it)) {
                err = &ngx_http_feed_err_marker_id;
                break;
            }

            id.data = (u_char *) bson_iter_utf8(&it, &len);
            id.len = len;

            if (ngx_http_feed_post_id(&id, &op->id) != NGX_OK) {
                err = &ngx_http_feed_err_marker_id;
            }

        } else if (ngx_strcmp(key, "force") == 0) {
            if (has_force++) {
                err = &ngx_http_feed_err_field_twice;
                break;
            }

            if (!BSON_ITER_HOLDS_BOOL(&it)) {
                err = &ngx_http_feed_err_marker_force;
                break;
            }

            op->force = bson_iter_bool(&it);

        } else {
            err = &ngx_http_feed_err_marker_field;
        }
    }

    bson_destroy(&doc);

    if (err == NULL && !has_id) {
        err = &ngx_http_feed_err_marker_id;
    }

    return err;
}


static void
ngx_http_feed_marker_put_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_marker_ctx_t  *ctx = t->data;

    t->rc = ngx_http_feed_markers_put(client, t->database, &ctx->op,
                                      &t->error);
}


/*
 * Stored: 409 on a stale If-Match; otherwise the copy in Redis is set to
 * what MongoDB has now (changed or not: a retry after a 503 sets it),
 * and the 200 waits for Redis to take it
 */

static ngx_int_t
ngx_http_feed_marker_stored(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    ngx_int_t  rc;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed marker of \"%s\": stored, changed %ui, "
                   "conflict %ui, version %L", ctx->op.user.data,
                   ctx->op.changed, ctx->op.conflict,
                   ctx->op.marker.version);

    if (ctx->op.conflict) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_version_conflict);
    }

    if (ngx_http_feed_marker_json(r, &ctx->op.marker, &ctx->json) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ctx->fmcf->redis_client == NULL) {
        return ngx_http_feed_marker_send(r, &ctx->json,
                                         ctx->op.marker.version, NULL);
    }

    rc = ngx_http_feed_markers_cache_set(r, ctx->fmcf->redis_client,
                                         &ctx->op.user, &ctx->op.marker,
                                         &ctx->json,
                                         ngx_http_feed_marker_set, ctx);
    if (rc == NGX_ERROR) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (rc == NGX_DECLINED) {
        /* Redis is down: a copy it may still hold is dropped by a retry */
        return ngx_http_feed_error(r, &ngx_http_feed_err_cache_pending);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_marker_set(void *data, redisReply *reply)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_feed_markers_cache_taken(reply) == NGX_OK) {
        rc = ngx_http_feed_marker_send(r, &ctx->json,
                                       ctx->op.marker.version, NULL);
        ngx_http_feed_finalize(r, rc);
        return;
    }

    ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                  "marker of \"%s\": redis did not take version %L, "
                  "dropping its copy", ctx->op.user.data,
                  ctx->op.marker.version);

    rc = ngx_http_feed_markers_cache_drop(r, ctx->fmcf->redis_client,
                                          &ctx->op.user,
                                          ngx_http_feed_marker_dropped, ctx);
    if (rc == NGX_OK) {
        return;
    }

    ngx_http_feed_finalize(r, rc == NGX_ERROR
                              ? NGX_HTTP_INTERNAL_SERVER_ERROR
                              : ngx_http_feed_error(r,
                                    &ngx_http_feed_err_cache_pending));
}


/* dropped or not, the PUT was not answered: 503, a retry sets the copy */

static void
ngx_http_feed_marker_dropped(void *data, redisReply *reply)
{
    ngx_http_feed_marker_ctx_t  *ctx = data;

    ngx_http_request_t  *r;

    r = ctx->request;

    if (ngx_http_feed_markers_cache_taken(reply) != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "marker of \"%s\": redis did not drop its copy",
                      ctx->op.user.data);
    }

    ngx_http_feed_finalize(r, ngx_http_feed_error(r,
                                  &ngx_http_feed_err_cache_pending));
}


/*
 * {"last_read_id":"...","updated_at":"2026-11-27T06:50:18.123Z",
 * "version":3}: the answer, and the copy Redis keeps of it (also filled
 * by unread counts, ngx_http_feed_timeline_unread.c), compact as every
 * JSON the module writes
 */

ngx_int_t
ngx_http_feed_marker_json(ngx_http_request_t *r, ngx_http_feed_marker_t *m,
    ngx_str_t *json)
{
    u_char     *p;
    char        id[25];
    ngx_tm_t    tm;
    ngx_uint_t  ms;

    bson_oid_to_string(&m->last_read_id, id);

    ngx_gmtime((time_t) (m->updated_at / 1000), &tm);
    ms = (ngx_uint_t) (m->updated_at % 1000);

    p = ngx_pnalloc(r->pool, sizeof("{\"last_read_id\":\"\","
                                    "\"updated_at\":\"\","
                                    "\"version\":}")
                             + 24 + sizeof("2026-11-27T06:50:18.123Z")
                             + NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    json->data = p;

    p = ngx_sprintf(p, "{\"last_read_id\":\"%s\","
                       "\"updated_at\":\"%4d-%02d-%02dT%02d:%02d:%02d"
                       ".%03uiZ\",\"version\":%L}",
                    id, tm.ngx_tm_year, tm.ngx_tm_mon, tm.ngx_tm_mday,
                    tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec, ms,
                    m->version);

    json->len = p - json->data;

    return NGX_OK;
}


/* 200 with ETag: <version>, and X-Feed-Cache for a GET */

static ngx_int_t
ngx_http_feed_marker_send(ngx_http_request_t *r, ngx_str_t *json,
    int64_t version, const char *cache)
{
    u_char     *p;
    ngx_str_t   value;

    p = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    value.data = p;
    value.len = ngx_sprintf(p, "%L", version) - p;

    if (ngx_http_feed_add_header(r, "ETag", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (cache) {
        value.data = (u_char *) cache;
        value.len = ngx_strlen(cache);

        if (ngx_http_feed_add_header(r, "X-Feed-Cache", &value) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    return ngx_http_feed_send_body(r, NGX_HTTP_OK, json->data, json->len);
}
