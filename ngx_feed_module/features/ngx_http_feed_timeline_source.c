
/*
 * ngx_feed_module: "feed_timeline_source", a home timeline built by fanout
 * on read from MongoDB.
 *
 * The timeline location asks it, by subrequest, for
 *
 *     GET <fallback>?user=U&limit=N[&max_id=ID][&since_id=ID]
 *
 * and it answers {"items":[post,...]}: the newest N posts of U and of
 * everyone U follows, with max_id > id > since_id, deleted ones left out.
 * Any location answering that contract can stand in for it, proxy_pass to
 * an application included.
 *
 * In a thread, whom U follows (the follows store); then the newest posts
 * of U and those authors (the posts store), by chunks of authors read in
 * parallel under feed_timeline_rebuild_deadline, those of
 * feed_timeline_window first (ngx_http_feed_timeline_chunks.c).  Past the
 * deadline the page is made of the chunks that answered and says so:
 *
 *     {"items":[post,...],"partial":true}
 *
 * and the timeline does not keep it (a fallback that is an application
 * may answer so too).  The models of the MongoDB timelines read in one
 * thread, their fanout on read included.
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_model.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_timeline_chunks.h"


/* the request's context, which the thread reads too */
typedef struct {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t           *request;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_page_t          page;

    /* feed_timeline_window's, from the time the request was started */
    time_t                        edge;
    ngx_http_feed_posts_window_t  window;

    /*
     * fanout on read: when it began, and the authors the thread read; in
     * the models' thread, its deadline
     */
    ngx_msec_t                    started;
    ngx_http_feed_posts_cut_t     cut;
    char                        **authors;
    size_t                        nauthors;

    /* the answer, {"items":[...]}, as the thread made it */
    char                         *json;
    size_t                        json_len;
} ngx_http_feed_timeline_source_op_t;


/* the authors of a timeline, as they are read */
typedef struct {
    char                        **authors;
    size_t                        n;        /* how many authors are read */
    size_t                        size;     /* how many authors fit */
} ngx_http_feed_timeline_source_authors_t;


static ngx_int_t ngx_http_feed_timeline_source_args(ngx_http_request_t *r,
    void *data, const ngx_http_feed_error_t **err);
static ngx_int_t ngx_http_feed_timeline_source_start(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_timeline_source_answer(ngx_http_request_t *r,
    void *data);
static ngx_int_t ngx_http_feed_timeline_source_chunks(ngx_http_request_t *r,
    ngx_http_feed_timeline_source_op_t *op);
static void ngx_http_feed_timeline_source_merged(ngx_http_feed_chunks_t *ch);
static ngx_int_t ngx_http_feed_timeline_source_page(ngx_http_request_t *r,
    ngx_http_feed_chunks_t *ch);
static void ngx_http_feed_timeline_source_cleanup(void *data);
static ngx_int_t ngx_http_feed_timeline_source_fanout(
    ngx_http_feed_mongo_task_t *t, mongoc_client_t *client,
    ngx_http_feed_timeline_source_op_t *op,
    ngx_http_feed_posts_range_t *range, bson_t *items);
static char **ngx_http_feed_timeline_source_authors(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, size_t *n,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_source_author(void *data,
    ngx_http_feed_user_t *user, int64_t created);


ngx_http_feed_handler_t  ngx_http_feed_timeline_source_handler = {
    NGX_HTTP_GET|NGX_HTTP_HEAD, "GET, HEAD", 0,
    sizeof(ngx_http_feed_timeline_source_op_t),
    ngx_http_feed_timeline_source_args,
    ngx_http_feed_timeline_source_start,
    NULL
};


static ngx_int_t
ngx_http_feed_timeline_source_args(ngx_http_request_t *r, void *data,
    const ngx_http_feed_error_t **err)
{
    ngx_http_feed_timeline_source_op_t  *op = data;

    return ngx_http_feed_page_args(r, NGX_HTTP_FEED_PAGE_SOURCE, &op->page,
                                   err);
}


static ngx_int_t
ngx_http_feed_timeline_source_start(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_timeline_source_op_t  *op = data;

    ngx_pool_cleanup_t  *cln;

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed timeline source of \"%s\": %ui posts",
                   op->page.user.data, op->page.limit);

    /*
     * The edge is taken here, as the thread must not read nginx's cached
     * time; a window longer than the epoch's age holds every post.
     */

    op->edge = 0;
    op->started = ngx_current_msec;

    if (op->fmcf->timeline_deadline) {
        op->cut.at = ngx_http_feed_now_ms() + op->fmcf->timeline_deadline;
    }

    if (op->fmcf->timeline_window
        && ngx_time() > op->fmcf->timeline_window)
    {
        op->edge = ngx_time() - op->fmcf->timeline_window;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    cln->handler = ngx_http_feed_timeline_source_cleanup;
    cln->data = op;

    return ngx_http_feed_mongo_request(r, ngx_http_feed_timeline_source_run,
                                       ngx_http_feed_timeline_source_answer,
                                       op, &op->json);
}


/*
 * The answer as the thread wrote it: the timeline reads it as it is.
 * Reads that went past the window are counted, so that operators see
 * whether it is too short for their readers.  Fanout on read goes on with
 * the authors the thread read.
 */

static ngx_int_t
ngx_http_feed_timeline_source_answer(ngx_http_request_t *r, void *data)
{
    ngx_http_feed_timeline_source_op_t  *op = data;

    if (op->authors) {
        return ngx_http_feed_timeline_source_chunks(r, op);
    }

    if (op->cut.late) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "timeline rebuild partial: %ui of %ui chunks of "
                      "authors missing", op->cut.late, op->cut.chunks);

        ngx_http_feed_stat(rebuild_partial, 1);
        ngx_http_feed_stat(rebuild_late_chunks, op->cut.late);
    }

    if (op->edge) {
        ngx_http_feed_stat(window_reads, 1);

        if (op->window.older) {
            ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                           "feed timeline source of \"%s\": read past "
                           "its window, at %T", op->page.user.data,
                           op->edge);

            ngx_http_feed_stat(window_older, 1);
        }
    }

    return ngx_http_feed_mongo_send(r, op->json, op->json_len, 0);
}


/* the authors' posts, by chunks read in parallel */

static ngx_int_t
ngx_http_feed_timeline_source_chunks(ngx_http_request_t *r,
    ngx_http_feed_timeline_source_op_t *op)
{
    ngx_http_feed_chunks_t      *ch;
    ngx_http_feed_chunks_ask_t   ask;

    ask.authors = op->authors;
    ask.nauthors = op->nauthors;
    ask.limit = op->page.limit;
    ask.max_id = op->page.has_max ? op->page.max_id : NULL;
    ask.since_id = op->page.has_since ? op->page.since_id : NULL;
    ask.edge = op->edge;
    ask.started = op->started;

    ch = ngx_http_feed_chunks_start(r, op->fmcf, &ask,
                                    ngx_http_feed_timeline_source_merged,
                                    op);
    if (ch == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    op->authors = NULL;

    if (ch->finished) {
        return ngx_http_feed_timeline_source_page(r, ch);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_timeline_source_merged(ngx_http_feed_chunks_t *ch)
{
    ngx_int_t            rc;
    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    r = ch->request;
    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    rc = ngx_http_feed_timeline_source_page(r, ch);

    ngx_http_finalize_request(r, rc);
    ngx_http_run_posted_requests(c);
}


/*
 * {"items":[...]}, with "partial":true when chunks are missing: each
 * post's JSON as its chunk's thread wrote it
 */

static ngx_int_t
ngx_http_feed_timeline_source_page(ngx_http_request_t *r,
    ngx_http_feed_chunks_t *ch)
{
    size_t      len;
    u_char     *body, *p;
    ngx_int_t   rc;
    ngx_uint_t  i;

    if (ch->windowed) {
        ngx_http_feed_stat(window_reads, 1);
        ngx_http_feed_stat(window_older, ch->older ? 1 : 0);
    }

    ngx_http_feed_stat(rebuild_late_chunks, ch->late);

    if (ch->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                      "timeline rebuild: no chunk of %ui answered: %s",
                      ch->nchunks, ch->error.message);

        rc = ngx_http_feed_db_failed(r, &ch->error);
        ngx_http_feed_chunks_release(ch);
        return rc;
    }

    len = sizeof("{\"items\":[],\"partial\":true}");

    for (i = 0; i < ch->npage; i++) {
        len += ch->page[i].len + 1;
    }

    body = ngx_pnalloc(r->pool, len);
    if (body == NULL) {
        ngx_http_feed_chunks_release(ch);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    p = ngx_cpymem(body, "{\"items\":[", sizeof("{\"items\":[") - 1);

    for (i = 0; i < ch->npage; i++) {
        if (i) {
            *p++ = ',';
        }

        p = ngx_cpymem(p, ch->page[i].json, ch->page[i].len);
    }

    *p++ = ']';

    if (ch->partial) {
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "timeline rebuild partial: %ui of %ui chunks of "
                      "authors missing", ch->late, ch->nchunks);

        ngx_http_feed_stat(rebuild_partial, 1);
        p = ngx_cpymem(p, ",\"partial\":true", sizeof(",\"partial\":true") - 1);
    }

    *p++ = '}';

    ngx_http_feed_chunks_release(ch);

    return ngx_http_feed_send_body(r, NGX_HTTP_OK, body, p - body);
}


/*
 * The page, by fanout on read, or from the model of the MongoDB timelines
 * (feed_timeline_store, ngx_http_feed_timeline_model.c)
 */

void
ngx_http_feed_timeline_source_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_timeline_source_op_t  *op = t->data;

    bson_t                         doc, items;
    ngx_int_t                      rc;
    bson_oid_t                     max_id, since_id;
    ngx_http_feed_posts_range_t    range;

    t->rc = NGX_ERROR;

    range.max_id = NULL;
    range.since_id = NULL;
    range.limit = op->page.limit;
    range.window = NULL;
    range.cut = NULL;

    if (op->cut.at) {
        range.cut = &op->cut;
    }

    if (op->edge) {
        ngx_http_feed_posts_window_init(&op->window, op->edge);
        range.window = &op->window;
    }

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

    if (op->fmcf->timeline_store == NGX_HTTP_FEED_MODEL_READ) {
        rc = ngx_http_feed_timeline_source_fanout(t, client, op, &range,
                                                  &items);
        if (rc == NGX_DONE) {
            t->rc = NGX_OK;
            goto done;
        }

    } else {
        rc = ngx_http_feed_timeline_model(client, t->database, op->fmcf,
                                          &op->page.user, &range, &items,
                                          &t->error);
    }

    if (rc == NGX_OK) {
        BSON_APPEND_ARRAY(&doc, "items", &items);

        if (op->cut.late) {
            BSON_APPEND_BOOL(&doc, "partial", true);
        }

        op->json = ngx_http_feed_json_text(&doc, &op->json_len);
        t->rc = op->json ? NGX_OK : NGX_ERROR;
    }

done:

    bson_destroy(&items);
    bson_destroy(&doc);
}


/*
 * Fanout on read: whom the user follows, then their posts.  A reader of
 * one chunk of authors (most) has them read here, in the same thread;
 * NGX_DONE: the authors are left in op for chunks read in parallel on the
 * way back (ngx_http_feed_timeline_chunks.c).
 */

static ngx_int_t
ngx_http_feed_timeline_source_fanout(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client, ngx_http_feed_timeline_source_op_t *op,
    ngx_http_feed_posts_range_t *range, bson_t *items)
{
    ngx_int_t    rc;
    char       **authors;
    size_t       n;

    authors = ngx_http_feed_timeline_source_authors(client, t->database,
                                                    &op->page.user, &n,
                                                    &t->error);
    if (authors == NULL) {
        return NGX_ERROR;
    }

    if (n > NGX_HTTP_FEED_POSTS_CHUNK) {
        op->authors = authors;
        op->nauthors = n;
        return NGX_DONE;
    }

    rc = ngx_http_feed_posts_timeline(client, t->database, authors, n, range,
                                      items, &t->error);

    ngx_http_feed_chunks_free_authors(authors, n);

    return rc;
}


/* authors the thread read that no chunk read took */

static void
ngx_http_feed_timeline_source_cleanup(void *data)
{
    ngx_http_feed_timeline_source_op_t  *op = data;

    if (op->authors) {
        ngx_http_feed_chunks_free_authors(op->authors, op->nauthors);
        op->authors = NULL;
    }
}


/* fanout on read: the newest posts in range of the user and followees */

ngx_int_t
ngx_http_feed_timeline_source_read(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error)
{
    char       **authors;
    size_t       n;
    ngx_int_t    rc;

    authors = ngx_http_feed_timeline_source_authors(client, database, user,
                                                    &n, error);
    if (authors == NULL) {
        return NGX_ERROR;
    }

    rc = ngx_http_feed_posts_timeline(client, database, authors, n, range,
                                      items, error);

    ngx_http_feed_chunks_free_authors(authors, n);

    return rc;
}


/* the user, and everyone the user follows */

static char **
ngx_http_feed_timeline_source_authors(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user, size_t *n,
    bson_error_t *error)
{
    ngx_http_feed_follows_page_t             fp;
    ngx_http_feed_timeline_source_authors_t  a;

    a.size = 64;
    a.authors = bson_malloc(a.size * sizeof(char *));
    a.authors[0] = bson_strdup(user->data);
    a.n = 1;

    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = user;
    fp.each = ngx_http_feed_timeline_source_author;
    fp.data = &a;

    if (ngx_http_feed_follows_page(client, database, &fp, error)
        == NGX_ERROR)
    {
        ngx_http_feed_chunks_free_authors(a.authors, a.n);
        a.authors = NULL;
        a.n = 0;
    }

    *n = a.n;

    return a.authors;
}


static ngx_int_t
ngx_http_feed_timeline_source_author(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_timeline_source_authors_t  *a = data;

    if (a->n == a->size) {
        a->size *= 2;
        a->authors = bson_realloc(a->authors, a->size * sizeof(char *));
    }

    a->authors[a->n++] = bson_strndup(user->data, user->len);

    return NGX_OK;
}
