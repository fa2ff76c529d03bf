
/*
 * ngx_feed_module: posts, HTTP side.
 *
 *   feed_posts $user;           POST a new post, GET the author's posts
 *   feed_post $id;              GET one post
 *   feed_user_post $user $id;   DELETE a post of $user
 *
 * MongoDB is the content store (ngx_http_feed_posts_store.c); every new
 * post and every delete is appended to the fanout queue
 * (ngx_http_feed_outbox.c).
 */


#include "ngx_http_feed_post.h"
#include "ngx_http_feed_outbox.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_timeline_cache.h"


typedef struct ngx_http_feed_post_ctx_s  ngx_http_feed_post_ctx_t;

typedef ngx_int_t (*ngx_http_feed_post_answer_pt)(
    ngx_http_feed_post_ctx_t *ctx);

struct ngx_http_feed_post_ctx_s {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_post_new_t      np;       /* a POST's new post */
    ngx_http_feed_post_op_t       op;       /* a GET's or DELETE's query */

    /* the queue entry being appended, and what to answer after */
    const char                   *kind;
    bson_oid_t                   *queued;
    ngx_http_feed_post_answer_pt  answer;
    ngx_http_feed_outbox_join_t   join;

    /* Redis did not take the entry's writes: the outbox has them */
    ngx_uint_t                    unsent;

    /* a delete's answer waits until no worker answers a copy without it */
    ngx_event_t                   settle;
};


static ngx_int_t ngx_http_feed_post_author_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_post_author_start(ngx_http_request_t *r,
    void *data);

static ngx_int_t ngx_http_feed_post_json_type(ngx_http_request_t *r);
static void ngx_http_feed_post_body(ngx_http_request_t *r);
static void ngx_http_feed_post_doc_cleanup(void *data);
static ngx_int_t ngx_http_feed_post_store(ngx_http_request_t *r,
    ngx_http_feed_post_ctx_t *ctx);
static ngx_int_t ngx_http_feed_post_inserted(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_post_keyed(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_post_enqueue(ngx_http_feed_post_ctx_t *ctx,
    const char *kind, bson_oid_t *id, ngx_http_feed_user_t *author,
    int64_t ts, ngx_http_feed_post_answer_pt answer);
static void ngx_http_feed_post_enqueued(void *data, ngx_uint_t sent);
static ngx_int_t ngx_http_feed_post_created(ngx_http_feed_post_ctx_t *ctx);
static ngx_int_t ngx_http_feed_post_gone(ngx_http_feed_post_ctx_t *ctx);
static void ngx_http_feed_post_settled(ngx_event_t *ev);

static ngx_int_t ngx_http_feed_post_list_args(ngx_http_request_t *r,
    ngx_http_feed_post_op_t *op, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_post_listed(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_post_link(ngx_http_request_t *r,
    ngx_http_feed_post_op_t *op);

static ngx_int_t ngx_http_feed_post_get_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_post_get_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_post_found(ngx_http_request_t *r,
    void *data);

static ngx_int_t ngx_http_feed_post_delete_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_post_delete_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_post_deleted(ngx_http_request_t *r,
    void *data);


ngx_http_feed_handler_t  ngx_http_feed_posts_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD|NGX_HTTP_POST, "GET, HEAD, POST",
    NGX_HTTP_POST,
    sizeof(ngx_http_feed_post_ctx_t),
    ngx_http_feed_post_author_args,
    ngx_http_feed_post_author_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_post_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_post_ctx_t),
    ngx_http_feed_post_get_args,
    ngx_http_feed_post_get_start,
    NULL
};

ngx_http_feed_handler_t  ngx_http_feed_user_post_handler = {
    NGX_HTTP_DELETE, "DELETE", 0,
    sizeof(ngx_http_feed_post_ctx_t),
    ngx_http_feed_post_delete_args,
    ngx_http_feed_post_delete_start,
    NULL
};


/*
 * POST: the author and the type are checked before the body is read, the
 * body before it is stored; GET: the author's page of posts.
 */

static ngx_int_t
ngx_http_feed_post_author_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_http_feed_loc_conf_t  *flcf;

    if (r->method != NGX_HTTP_POST) {
        return ngx_http_feed_post_list_args(r, &ctx->op, err);
    }

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->np.author);

    if (rc != NGX_OK) {
        *err = &ngx_http_feed_err_user_id;
        return rc;
    }

    rc = ngx_http_feed_authorize(r, &ctx->np.author, err);
    if (rc != NGX_OK) {
        return rc;
    }

    if (ngx_http_feed_post_json_type(r) != NGX_OK) {
        *err = &ngx_http_feed_err_media_type;
        return NGX_DECLINED;
    }

    return ngx_http_feed_post_key(r, &ctx->np, err);
}


static ngx_int_t
ngx_http_feed_post_author_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    if (r->method == NGX_HTTP_POST) {
        return ngx_http_feed_read_body(r, ngx_http_feed_post_body);
    }

    return ngx_http_feed_mongo_request(r, ngx_http_feed_post_list_run,
                                       ngx_http_feed_post_listed, &ctx->op,
                                       &ctx->op.json);
}


/* application/json, with parameters or not, in any case */

static ngx_int_t
ngx_http_feed_post_json_type(ngx_http_request_t *r)
{
    u_char      c;
    ngx_str_t  *type;

    if (r->headers_in.content_type == NULL) {
        return NGX_DECLINED;
    }

    type = &r->headers_in.content_type->value;

    if (type->len < 16
        || ngx_strncasecmp(type->data, (u_char *) "application/json", 16)
           != 0)
    {
        return NGX_DECLINED;
    }

    if (type->len == 16) {
        return NGX_OK;
    }

    c = type->data[16];

    return (c == ';' || c == ' ' || c == '\t') ? NGX_OK : NGX_DECLINED;
}


static void
ngx_http_feed_post_body(ngx_http_request_t *r)
{
    ngx_int_t                  rc;
    ngx_str_t                  body;
    ngx_pool_cleanup_t        *cln;
    ngx_http_feed_error_t      err;
    ngx_http_feed_post_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    if (ngx_http_feed_read_whole_body(r, &body) != NGX_OK) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ctx->np.ts = ngx_http_feed_now_ms();
    ctx->np.model = ctx->fmcf->timeline_store;

    if (ngx_http_feed_post_parse(ctx->fmcf, body.data, body.len, &ctx->np,
                                 &err)
        != NGX_OK)
    {
        ngx_http_finalize_request(r, ngx_http_feed_error(r, &err));
        return;
    }

    /* the keyed task may replace the document: freed wherever it is */

    cln->handler = ngx_http_feed_post_doc_cleanup;
    cln->data = &ctx->np;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post of \"%s\": %uz bytes read, storing",
                   ctx->np.author.data, body.len);

    rc = ngx_http_feed_post_store(r, ctx);
    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }
}


/* with an Idempotency-Key, the key is claimed before the post is stored */

static ngx_int_t
ngx_http_feed_post_store(ngx_http_request_t *r, ngx_http_feed_post_ctx_t *ctx)
{
    if (!ctx->np.keyed) {
        return ngx_http_feed_mongo_request(r, ngx_http_feed_post_insert_run,
                                           ngx_http_feed_post_inserted,
                                           &ctx->np, NULL);
    }

    if (ngx_http_feed_post_hash(&ctx->np, r->connection->log) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post of \"%s\": content %s, claiming the key",
                   ctx->np.author.data, ctx->np.hash);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_post_keyed_run,
                                       ngx_http_feed_post_keyed, &ctx->np,
                                       NULL);
}


static void
ngx_http_feed_post_doc_cleanup(void *data)
{
    ngx_http_feed_post_new_t  *np = data;

    bson_destroy(np->doc);
}


static ngx_int_t
ngx_http_feed_post_inserted(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_new_t  *np = data;

    ngx_http_feed_post_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post of \"%s\": inserted", np->author.data);

    ngx_http_feed_stat(posts_created, 1);

    /* stored: from here on the post is accepted, whatever Redis does */

    return ngx_http_feed_post_enqueue(ctx, "post", &np->id, &np->author,
                                      np->ts, ngx_http_feed_post_created);
}


/*
 * A keyed post: made here (enqueued as any other), or made by an earlier
 * or concurrent request with the key (answered as it is, enqueued by the
 * request that made it).
 */

static ngx_int_t
ngx_http_feed_post_keyed(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_new_t  *np = data;

    ngx_http_feed_post_ctx_t  *ctx;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post of \"%s\": key \"%s\" done: %i",
                   np->author.data, np->key, np->outcome);

    switch (np->outcome) {

    case NGX_OK:
        return ngx_http_feed_post_inserted(r, data);

    case NGX_DONE:
        ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);
        return ngx_http_feed_post_created(ctx);

    case NGX_DECLINED:
        return ngx_http_feed_error(r, &ngx_http_feed_err_key_reused);

    default: /* NGX_ABORT */
        return ngx_http_feed_error(r, &ngx_http_feed_err_key_post_gone);
    }
}


/*
 * Appends the queue entry, then answers: an entry that could not be
 * appended is left to the outbox, due at once.  A new post's answer does
 * not depend on it; a delete's does (ngx_http_feed_post_gone).  NGX_DONE:
 * the answer follows the append.
 */

static ngx_int_t
ngx_http_feed_post_enqueue(ngx_http_feed_post_ctx_t *ctx, const char *kind,
    bson_oid_t *id, ngx_http_feed_user_t *author, int64_t ts,
    ngx_http_feed_post_answer_pt answer)
{
    ctx->kind = kind;
    ctx->queued = id;
    ctx->answer = answer;
    ctx->join.handler = ngx_http_feed_post_enqueued;
    ctx->join.data = ctx;

    if (ngx_http_feed_outbox_send(ctx->request, ctx->fmcf, kind, id, author,
                                  ts, &ctx->join)
        != NGX_OK)
    {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                       "feed %s of \"%s\": left to the outbox", kind,
                       author->data);

        ctx->unsent = 1;
        ngx_http_feed_outbox_soon(ctx->fmcf, id);

        return answer(ctx);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_post_enqueued(void *data, ngx_uint_t sent)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed %s: %s", ctx->kind,
                   sent ? "enqueued" : "left to the outbox");

    if (sent) {
        ngx_http_feed_outbox_sent(ctx->fmcf, ctx->queued, ctx->kind);

    } else {
        ctx->unsent = 1;
        ngx_http_feed_outbox_soon(ctx->fmcf, ctx->queued);
    }

    ngx_http_feed_finalize(ctx->request, ctx->answer(ctx));
}


static ngx_int_t
ngx_http_feed_post_created(ngx_http_feed_post_ctx_t *ctx)
{
    u_char              *p;
    bson_t               out;
    ngx_int_t            rc;
    ngx_str_t            location;
    ngx_http_request_t  *r;

    r = ctx->request;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed post of \"%s\": answered", ctx->np.author.data);

    /* bson_oid_to_string() ends the 24 digits with a NUL */

    p = ngx_pnalloc(r->pool, sizeof("/posts/") + 24);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    location.data = p;
    p = ngx_cpymem(p, "/posts/", sizeof("/posts/") - 1);
    bson_oid_to_string(&ctx->np.id, (char *) p);
    location.len = sizeof("/posts/") - 1 + 24;

    if (ngx_http_feed_add_header(r, "Location", &location) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    bson_init(&out);

    if (ngx_http_feed_posts_json(ctx->np.doc, &out) != NGX_OK) {
        bson_destroy(&out);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    rc = ngx_http_feed_send_json(r, NGX_HTTP_CREATED, &out);

    bson_destroy(&out);

    return rc;
}


/*
 * GET: the author's posts, the page's bounds as post ids, and who reads
 * them, when feed_identity tells
 */

static ngx_int_t
ngx_http_feed_post_list_args(ngx_http_request_t *r,
    ngx_http_feed_post_op_t *op, const ngx_http_feed_error_t **err)
{
    ngx_int_t             rc;
    ngx_http_feed_page_t  page;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));

    rc = ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_CLIENT, &page, err);
    if (rc != NGX_OK) {
        return rc;
    }

    rc = ngx_http_feed_reader(r, &op->reader);
    if (rc == NGX_ERROR) {
        return NGX_ERROR;
    }

    op->has_reader = (rc == NGX_OK);

    op->author = page.user;
    op->limit = page.limit;
    op->has_max = page.has_max;
    op->has_since = page.has_since;

    if (page.has_max) {
        bson_oid_init_from_string(&op->max_id, page.max_id);
    }

    if (page.has_since) {
        bson_oid_init_from_string(&op->since_id, page.since_id);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_post_listed(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_op_t  *op = data;

    if (op->blocked) {
        ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed posts of \"%s\": \"%s\" is blocked",
                       op->author.data, op->reader.data);

        return ngx_http_feed_error(r, &ngx_http_feed_err_blocked_reader);
    }

    if (op->has_next && ngx_http_feed_post_link(r, op) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return ngx_http_feed_mongo_send(r, op->json, op->json_len, 1);
}


/* Link: </users/u/posts?limit=20&max_id=...[&since_id=...]>; rel="next" */

static ngx_int_t
ngx_http_feed_post_link(ngx_http_request_t *r, ngx_http_feed_post_op_t *op)
{
    u_char     *p;
    size_t      len;
    char        since[25];
    ngx_str_t   link;

    len = sizeof("<?limit=&max_id=&since_id=>; rel=\"next\"") + r->uri.len
          + NGX_INT_T_LEN + 2 * 24;

    link.data = ngx_pnalloc(r->pool, len);
    if (link.data == NULL) {
        return NGX_ERROR;
    }

    p = ngx_sprintf(link.data, "<%V?limit=%ui&max_id=%s", &r->uri,
                    op->limit, op->next);

    if (op->has_since) {
        bson_oid_to_string(&op->since_id, since);
        p = ngx_sprintf(p, "&since_id=%s", since);
    }

    p = ngx_cpymem(p, ">; rel=\"next\"", sizeof(">; rel=\"next\"") - 1);
    link.len = p - link.data;

    return ngx_http_feed_add_header(r, "Link", &link);
}


/* GET /posts/{id} */

static ngx_int_t
ngx_http_feed_post_get_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    ngx_str_t                  id;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    if (ngx_http_complex_value(r, flcf->user, &id) != NGX_OK) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_post_id(&id, &ctx->op.id) != NGX_OK) {
        *err = &ngx_http_feed_err_post_id;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_post_get_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    return ngx_http_feed_mongo_request(r, ngx_http_feed_post_get_run,
                                       ngx_http_feed_post_found, &ctx->op,
                                       &ctx->op.json);
}


static ngx_int_t
ngx_http_feed_post_found(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_op_t  *op = data;

    if (!op->found) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_no_post);
    }

    return ngx_http_feed_mongo_send(r, op->json, op->json_len, 1);
}


/* DELETE /users/{uid}/posts/{id} */

static ngx_int_t
ngx_http_feed_post_delete_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    ngx_int_t                  rc;
    ngx_str_t                  id;
    ngx_http_feed_loc_conf_t  *flcf;

    flcf = ngx_http_get_module_loc_conf(r, ngx_http_feed_module);

    rc = ngx_http_feed_get_user(r, flcf->user, &ctx->op.author);

    if (rc == NGX_ERROR
        || ngx_http_complex_value(r, flcf->target, &id) != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (rc == NGX_DECLINED) {
        *err = &ngx_http_feed_err_user_id;
        return NGX_DECLINED;
    }

    if (ngx_http_feed_post_id(&id, &ctx->op.id) != NGX_OK) {
        *err = &ngx_http_feed_err_post_id;
        return NGX_DECLINED;
    }

    return ngx_http_feed_authorize(r, &ctx->op.author, err);
}


static ngx_int_t
ngx_http_feed_post_delete_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_ctx_t  *ctx = data;

    /*
     * Cached timelines skip a deleted post from the moment Redis knows of
     * it: without Redis that cannot be promised, so nothing is done.
     */

    if (ctx->fmcf->redis_enabled
        && ngx_http_feed_redis_state(ctx->fmcf->redis_client)
           != NGX_HTTP_FEED_REDIS_UP)
    {
        return ngx_http_feed_error(r, &ngx_http_feed_err_cache_down);
    }

    ctx->op.now = ngx_http_feed_now_ms();

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed delete of a post of \"%s\": deleting",
                   ctx->op.author.data);

    return ngx_http_feed_mongo_request(r, ngx_http_feed_post_delete_run,
                                       ngx_http_feed_post_deleted, &ctx->op,
                                       &ctx->op.json);
}


static ngx_int_t
ngx_http_feed_post_deleted(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_post_op_t  *op = data;

    ngx_http_feed_post_ctx_t  *ctx;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed delete of a post of \"%s\": found %ui",
                   op->author.data, op->found);

    if (!op->found) {
        return ngx_http_feed_error(r, &ngx_http_feed_err_no_user_post);
    }

    /* deleted by an earlier try that Redis refused: sent again */

    if (op->found != NGX_HTTP_FEED_POSTS_PENDING) {
        ngx_http_feed_stat(posts_deleted, 1);
    }

    ctx = ngx_http_get_module_ctx(r, ngx_http_feed_module);

    return ngx_http_feed_post_enqueue(ctx, "delete", &op->id, &op->author, 0,
                                      ngx_http_feed_post_gone);
}


/*
 * 204 once Redis took the delete (reads skip the post from now on); 503
 * when it did not: deleted in MongoDB, and completed by a retry or by the
 * outbox about a second after Redis takes writes again
 */

static ngx_int_t
ngx_http_feed_post_gone(ngx_http_feed_post_ctx_t *ctx)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed delete of a post of \"%s\": answered, %s",
                   ctx->op.author.data,
                   ctx->unsent ? "left to the outbox" : "in redis");

    if (ctx->unsent) {
        return ngx_http_feed_error(ctx->request,
                                   &ngx_http_feed_err_cache_pending);
    }

    /*
     * Workers answer their copies of first pages without asking Redis
     * while they heard a heartbeat lately (the watch): the delete, told
     * on the same channels before, has been heard by every one that still
     * answers so once that time passed, here or on another node
     */

    if (ctx->fmcf->cache_local && ctx->fmcf->cache_tracking) {
        ctx->settle.handler = ngx_http_feed_post_settled;
        ctx->settle.data = ctx;
        ctx->settle.log = ctx->request->connection->log;

        ngx_add_timer(&ctx->settle, NGX_HTTP_FEED_LOCAL_SETTLE);
        ctx->request->main->count++;

        return NGX_DONE;
    }

    return ngx_http_feed_no_content(ctx->request);
}


static void
ngx_http_feed_post_settled(ngx_event_t *ev)
{
    ngx_http_feed_post_ctx_t  *ctx = ev->data;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ctx->request->connection->log, 0,
                   "feed delete of a post of \"%s\": settled",
                   ctx->op.author.data);

    ngx_http_feed_finalize(ctx->request,
                           ngx_http_feed_no_content(ctx->request));
}
