
/*
 * ngx_feed_module: "feed_timeline_source", a home timeline built by fanout
 * on read from MongoDB.
 *
 * The timeline location asks it, by subrequest, for
 *
 *     GET <fallback>?user=U&limit=N[&max_id=ID][&since_id=ID]
 *
 * and it answers {"items": [post, ...]}: the newest N posts of U and of
 * everyone U follows, with max_id > id > since_id, deleted ones left out.
 * Any location answering that contract can stand in for it, proxy_pass to
 * an application included.
 *
 * In a thread: whom U follows (the follows store), then the newest posts
 * of U and those authors (the posts store).
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_json.h"


typedef struct {
    ngx_http_feed_page_t          page;
    char                         *json;
    size_t                        json_len;
} ngx_http_feed_source_op_t;


/* the authors of a timeline, as they are read */
typedef struct {
    char                        **authors;
    size_t                        n;
    size_t                        size;
} ngx_http_feed_source_authors_t;


static ngx_int_t ngx_http_feed_source_args(ngx_http_request_t *r,
    ngx_http_feed_page_t *page, const char **code, const char **message);
static void ngx_http_feed_source_done(ngx_http_feed_mongo_task_t *t);
static char **ngx_http_feed_source_authors(mongoc_client_t *client,
    const char *database, ngx_http_feed_page_t *page, size_t *n,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_source_author(void *data,
    ngx_http_feed_user_t *user, int64_t created);


ngx_http_feed_handler_t  ngx_http_feed_timeline_source_handler = {
    ngx_http_feed_timeline_source
};


ngx_int_t
ngx_http_feed_timeline_source(ngx_http_request_t *r)
{
    ngx_int_t                     rc;
    const char                   *code, *message;
    ngx_http_feed_mongo_task_t   *t;
    ngx_http_feed_source_op_t    *op;
    ngx_http_feed_main_conf_t    *fmcf;

    ngx_http_feed_stat(requests, 1);

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return ngx_http_feed_not_allowed(r, "GET, HEAD");
    }

    op = ngx_pcalloc(r->pool, sizeof(ngx_http_feed_source_op_t));
    if (op == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_feed_source_args(r, &op->page, &code, &message) != NGX_OK) {
        return ngx_http_feed_bad_request(r, code, message);
    }

    rc = ngx_http_discard_request_body(r);
    if (rc != NGX_OK) {
        return rc;
    }

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_feed_module);

    t = ngx_http_feed_mongo_task(r->pool, fmcf->mongo_client,
                                 ngx_http_feed_timeline_source_run,
                                 ngx_http_feed_source_done, op);
    if (t == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    t->result = &op->json;

    if (ngx_http_feed_mongo_post_r(r, t) != NGX_OK) {
        return ngx_http_feed_db_busy(r);
    }

    r->main->count++;

    return NGX_DONE;
}


/*
 * NGX_DECLINED with the error to answer: the caller answers it, and stops
 * there (an answer sent here returned NGX_OK, and the request went on to
 * answer again).
 */

static ngx_int_t
ngx_http_feed_source_args(ngx_http_request_t *r, ngx_http_feed_page_t *page,
    const char **code, const char **message)
{
    ngx_int_t  n;
    ngx_str_t  value;

    if (ngx_http_feed_arg(r, "user", &value) != NGX_OK
        || !ngx_http_feed_user_valid(value.data, value.len))
    {
        *code = "invalid_user_id";
        *message = NGX_HTTP_FEED_USER_ID_TEXT;
        return NGX_DECLINED;
    }

    ngx_memcpy(page->user.data, value.data, value.len);
    page->user.data[value.len] = '\0';
    page->user.len = value.len;

    page->limit = NGX_HTTP_FEED_LIMIT_DEFAULT;

    if (ngx_http_feed_arg(r, "limit", &value) == NGX_OK) {
        n = ngx_atoi(value.data, value.len);

        if (n < 1 || n > NGX_HTTP_FEED_CACHE_SIZE_MAX) {
            *code = "invalid_limit";
            *message = "limit is a number from 1 to 100000";
            return NGX_DECLINED;
        }

        page->limit = n;
    }

    if (ngx_http_feed_timeline_bounds(r, page) != NGX_OK) {
        *code = "invalid_post_id";
        *message = NGX_HTTP_FEED_POST_ID_TEXT;
        return NGX_DECLINED;
    }

    return NGX_OK;
}


static void
ngx_http_feed_source_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_source_op_t  *op = t->data;

    u_char              *p;
    ngx_http_request_t  *r;

    r = t->request;

    if (t->rc != NGX_OK) {
        bson_free(op->json);
        ngx_http_finalize_request(r, ngx_http_feed_db_failed(r, &t->error));
        return;
    }

    p = ngx_pnalloc(r->pool, op->json_len);
    if (p == NULL) {
        bson_free(op->json);
        ngx_http_finalize_request(r, NGX_HTTP_INTERNAL_SERVER_ERROR);
        return;
    }

    ngx_memcpy(p, op->json, op->json_len);
    bson_free(op->json);

    ngx_http_finalize_request(r, ngx_http_feed_send_body(r, NGX_HTTP_OK, p,
                                                         op->json_len));
}


void
ngx_http_feed_timeline_source_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_source_op_t  *op = t->data;

    char                         **authors;
    size_t                         n, i;
    bson_t                         doc, items;
    bson_oid_t                     max_id, since_id;
    ngx_http_feed_posts_range_t    range;

    t->rc = NGX_ERROR;

    authors = ngx_http_feed_source_authors(client, t->database, &op->page,
                                           &n, &t->error);
    if (authors == NULL) {
        return;
    }

    range.max_id = NULL;
    range.since_id = NULL;
    range.limit = op->page.limit;

    if (op->page.has_max) {
        bson_oid_init_from_string(&max_id, op->page.max_id);
        range.max_id = &max_id;
    }

    if (op->page.has_since) {
        bson_oid_init_from_string(&since_id, op->page.since_id);
        range.since_id = &since_id;
    }

    bson_init(&doc);
    bson_init(&items);

    if (ngx_http_feed_posts_timeline(client, t->database, authors, n, &range,
                                     &items, &t->error)
        == NGX_OK)
    {
        BSON_APPEND_ARRAY(&doc, "items", &items);

        op->json = bson_as_relaxed_extended_json(&doc, &op->json_len);
        t->rc = op->json ? NGX_OK : NGX_ERROR;
    }

    bson_destroy(&items);
    bson_destroy(&doc);

    for (i = 0; i < n; i++) {
        bson_free(authors[i]);
    }

    bson_free(authors);
}


/* the user, and everyone the user follows */

static char **
ngx_http_feed_source_authors(mongoc_client_t *client, const char *database,
    ngx_http_feed_page_t *page, size_t *n, bson_error_t *error)
{
    ngx_http_feed_source_authors_t  a;
    ngx_http_feed_follows_page_t    fp;

    a.size = 64;
    a.authors = bson_malloc(a.size * sizeof(char *));
    a.authors[0] = bson_strdup(page->user.data);
    a.n = 1;

    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = &page->user;
    fp.each = ngx_http_feed_source_author;
    fp.data = &a;

    if (ngx_http_feed_follows_page(client, database, &fp, error)
        == NGX_ERROR)
    {
        while (a.n) {
            bson_free(a.authors[--a.n]);
        }

        bson_free(a.authors);
        a.authors = NULL;
    }

    *n = a.n;

    return a.authors;
}


static ngx_int_t
ngx_http_feed_source_author(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_source_authors_t  *a = data;

    if (a->n == a->size) {
        a->size *= 2;
        a->authors = bson_realloc(a->authors, a->size * sizeof(char *));
    }

    a->authors[a->n++] = bson_strndup(user->data, user->len);

    return NGX_OK;
}
