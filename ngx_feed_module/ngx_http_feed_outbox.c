
/*
 * ngx_feed_module: the fanout queue (a Redis Stream) and its outbox.
 *
 * A post is stored with the queue entries it still awaits ("q") before its
 * 201; the request then appends the entry (XADD) and, once Redis has it,
 * drops it from "q".  If Redis is down, or the worker dies in between, the
 * entry stays in "q": the first worker's sweeper takes over posts whose
 * "qt" has passed (claiming them by moving "qt", so two nginx nodes do not
 * both take one) and appends their entries when Redis is back.  Every
 * accepted post thus reaches the stream at least once; in the normal path
 * exactly once.
 */


#include "ngx_http_feed_outbox.h"
#include "ngx_http_feed_timeline_cache.h"


#define NGX_HTTP_FEED_SWEEP_EVERY  1000
#define NGX_HTTP_FEED_SWEEP_LEASE  30000
#define NGX_HTTP_FEED_SWEEP_BATCH  100


typedef struct {
    const char                   *kind;
    bson_oid_t                    id;
    ngx_http_feed_user_t          author;
    int64_t                       ts;
} ngx_http_feed_outbox_item_t;


typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_mongo_task_t   *task;
    ngx_event_t                   timer;
    ngx_connection_t              dummy;

    int64_t                       now;
    ngx_uint_t                    busy;
    ngx_uint_t                    waiting;
    ngx_uint_t                    nitems;
    ngx_http_feed_outbox_item_t   items[2 * NGX_HTTP_FEED_SWEEP_BATCH];
} ngx_http_feed_sweeper_t;


typedef struct {
    bson_oid_t                    id;
    const char                   *kind;
} ngx_http_feed_outbox_clear_t;


static void ngx_http_feed_outbox_clear_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_sweep(ngx_event_t *ev);
static void ngx_http_feed_sweep_ready(ngx_http_feed_redis_t *rd, void *data);
static void ngx_http_feed_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_sweep_claim(mongoc_collection_t *posts,
    ngx_http_feed_sweeper_t *s, const bson_t *doc, bson_error_t *error);
static void ngx_http_feed_sweep_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_sweep_sent(void *data, redisReply *reply);
static void ngx_http_feed_sweep_rearm(ngx_http_feed_sweeper_t *s);


static ngx_http_feed_sweeper_t  ngx_http_feed_sweeper;


/* XADD stream MAXLEN ~ N * type T id I author A [ts S] */

ngx_int_t
ngx_http_feed_outbox_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *kind, const bson_oid_t *id,
    ngx_http_feed_user_t *author, int64_t ts, ngx_http_feed_redis_pt handler,
    void *data)
{
    char                        hex[25];
    u_char                      maxlen[NGX_INT_T_LEN], tsbuf[NGX_INT64_LEN];
    size_t                      argvlen[14];
    const char                 *argv[14];
    ngx_http_feed_redis_args_t  args;

    bson_oid_to_string(id, hex);

    /*
     * Cached timelines may still hold a deleted post until fanout removes
     * it: the cache marks it ahead of the delete's entry, on the same
     * connection, so that reads skip it before anyone hears of the delete.
     */

    if (kind[0] == 'd') {
        ngx_http_feed_timeline_cache_delete(fmcf, hex);
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XADD");
    ngx_http_feed_redis_args_key(&args, fmcf->stream.data, fmcf->stream.len);
    ngx_http_feed_redis_args_lit(&args, "MAXLEN");
    ngx_http_feed_redis_args_lit(&args, "~");
    ngx_http_feed_redis_args_add(&args, maxlen,
                                 ngx_sprintf(maxlen, "%ui",
                                             fmcf->stream_maxlen)
                                 - maxlen);
    ngx_http_feed_redis_args_lit(&args, "*");
    ngx_http_feed_redis_args_lit(&args, "type");
    ngx_http_feed_redis_args_add(&args, kind, ngx_strlen(kind));
    ngx_http_feed_redis_args_lit(&args, "id");
    ngx_http_feed_redis_args_add(&args, hex, 24);
    ngx_http_feed_redis_args_lit(&args, "author");
    ngx_http_feed_redis_args_add(&args, author->data, author->len);

    if (ts) {
        ngx_http_feed_redis_args_lit(&args, "ts");
        ngx_http_feed_redis_args_add(&args, tsbuf,
                                     ngx_sprintf(tsbuf, "%L", ts) - tsbuf);
    }

    return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                      &args);
}


/* the entry is in the stream: the post no longer awaits it */

void
ngx_http_feed_outbox_sent(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id, const char *kind)
{
    ngx_http_feed_mongo_task_t    *t;
    ngx_http_feed_outbox_clear_t  *c;

    t = ngx_http_feed_mongo_task_bg(fmcf->mongo_client,
                                    ngx_http_feed_outbox_clear_run, NULL);
    if (t == NULL) {
        return;
    }

    c = ngx_palloc(t->pool, sizeof(ngx_http_feed_outbox_clear_t));
    if (c == NULL) {
        ngx_destroy_pool(t->pool);
        return;
    }

    bson_oid_copy(id, &c->id);
    c->kind = kind;
    t->data = c;

    /* if this fails, the sweeper enqueues the entry once more: harmless */

    (void) ngx_http_feed_mongo_post_bg(t);
}


static void
ngx_http_feed_outbox_clear_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_outbox_clear_t  *c = t->data;

    bson_t                selector, update, pull;
    mongoc_collection_t  *posts;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", &c->id);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$pull", &pull);
    BSON_APPEND_UTF8(&pull, "q", c->kind);
    bson_append_document_end(&update, &pull);

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    t->rc = mongoc_collection_update_one(posts, &selector, &update, NULL,
                                         NULL, &t->error)
            ? NGX_OK : NGX_ERROR;

    mongoc_collection_destroy(posts);
    bson_destroy(&update);
    bson_destroy(&selector);
}


/* the sweeper runs in the first worker only */

ngx_int_t
ngx_http_feed_outbox_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_sweeper_t  *s = &ngx_http_feed_sweeper;

    if (ngx_worker != 0 || fmcf->mongo_client == NULL
        || fmcf->redis_client == NULL)
    {
        return NGX_OK;
    }

    s->fmcf = fmcf;
    s->dummy.fd = (ngx_socket_t) -1;

    s->timer.handler = ngx_http_feed_sweep;
    s->timer.data = &s->dummy;
    s->timer.log = cycle->log;
    s->timer.cancelable = 1;

    s->task = ngx_http_feed_mongo_task(cycle->pool, fmcf->mongo_client,
                                       ngx_http_feed_sweep_run,
                                       ngx_http_feed_sweep_done, s);
    if (s->task == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_redis_on_ready(fmcf->redis_client,
                                     ngx_http_feed_sweep_ready, s)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_add_timer(&s->timer, NGX_HTTP_FEED_SWEEP_EVERY);

    return NGX_OK;
}


void
ngx_http_feed_outbox_exit(void)
{
    if (ngx_http_feed_sweeper.timer.timer_set) {
        ngx_del_timer(&ngx_http_feed_sweeper.timer);
    }
}


static void
ngx_http_feed_sweep_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_sweeper_t  *s = data;

    /* Redis is back: what waited for it need not wait for the timer */

    if (s->timer.timer_set) {
        ngx_del_timer(&s->timer);
    }

    ngx_http_feed_sweep(&s->timer);
}


static void
ngx_http_feed_sweep(ngx_event_t *ev)
{
    ngx_http_feed_sweeper_t  *s = &ngx_http_feed_sweeper;

    if (ngx_exiting || s->busy) {
        return;
    }

    if (ngx_http_feed_redis_state(s->fmcf->redis_client)
        != NGX_HTTP_FEED_REDIS_UP)
    {
        ngx_http_feed_sweep_rearm(s);
        return;
    }

    s->now = ngx_http_feed_now_ms();
    s->nitems = 0;

    if (ngx_http_feed_mongo_post(s->task) != NGX_OK) {
        ngx_http_feed_sweep_rearm(s);
        return;
    }

    s->busy = 1;
}


static void
ngx_http_feed_sweep_rearm(ngx_http_feed_sweeper_t *s)
{
    s->busy = 0;

    if (!ngx_exiting && !s->timer.timer_set) {
        ngx_add_timer(&s->timer, NGX_HTTP_FEED_SWEEP_EVERY);
    }
}


/* posts whose entries are overdue, oldest first, each claimed for us */

static void
ngx_http_feed_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_sweeper_t  *s = t->data;

    bson_t                filter, in, kinds, lt, opts, sort;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *posts;

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "q", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &kinds);
    BSON_APPEND_UTF8(&kinds, "0", "post");
    BSON_APPEND_UTF8(&kinds, "1", "delete");
    bson_append_array_end(&in, &kinds);
    bson_append_document_end(&filter, &in);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "qt", &lt);
    BSON_APPEND_INT64(&lt, "$lt", s->now);
    bson_append_document_end(&filter, &lt);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", NGX_HTTP_FEED_SWEEP_BATCH);

    posts = mongoc_client_get_collection(client, t->database,
                                         NGX_HTTP_FEED_POSTS);

    cursor = mongoc_collection_find_with_opts(posts, &filter, &opts, NULL);

    t->rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_sweep_claim(posts, s, doc, &t->error) != NGX_OK) {
            t->rc = NGX_ERROR;
            break;
        }
    }

    if (mongoc_cursor_error(cursor, &t->error)) {
        t->rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(posts);
    bson_destroy(&opts);
    bson_destroy(&filter);
}


static ngx_int_t
ngx_http_feed_sweep_claim(mongoc_collection_t *posts,
    ngx_http_feed_sweeper_t *s, const bson_t *doc, bson_error_t *error)
{
    bson_t                        selector, update, set, reply;
    ngx_uint_t                    k;
    bson_iter_t                   it, q, kind;
    ngx_http_feed_user_t          author;
    ngx_http_feed_outbox_item_t  *item;

    static const char            *kinds[] = { "post", "delete" };

    if (ngx_http_feed_bson_user(doc, "author", &author) != NGX_OK
        || !bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_OID(&it))
    {
        return NGX_OK;
    }

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", bson_iter_oid(&it));
    BSON_APPEND_INT64(&selector, "qt", ngx_http_feed_bson_int(doc, "qt"));

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "qt", s->now + NGX_HTTP_FEED_SWEEP_LEASE);
    bson_append_document_end(&update, &set);

    if (!mongoc_collection_update_one(posts, &selector, &update, NULL,
                                      &reply, error))
    {
        bson_destroy(&update);
        bson_destroy(&selector);
        return NGX_ERROR;
    }

    bson_destroy(&update);
    bson_destroy(&selector);

    if (ngx_http_feed_bson_int(&reply, "modifiedCount") != 1) {
        /* somebody else claimed it */
        bson_destroy(&reply);
        return NGX_OK;
    }

    bson_destroy(&reply);

    /* the post entry goes first, then the delete, as they happened */

    for (k = 0; k < 2; k++) {
        if (!bson_iter_init_find(&q, doc, "q") || !BSON_ITER_HOLDS_ARRAY(&q)
            || !bson_iter_recurse(&q, &kind))
        {
            break;
        }

        while (bson_iter_next(&kind)) {
            if (!BSON_ITER_HOLDS_UTF8(&kind)
                || ngx_strcmp(bson_iter_utf8(&kind, NULL), kinds[k]) != 0)
            {
                continue;
            }

            item = &s->items[s->nitems++];
            item->kind = kinds[k];
            bson_oid_copy(bson_iter_oid(&it), &item->id);
            item->author = author;
            item->ts = (k == 0) ? ngx_http_feed_bson_int(doc, "ts") : 0;
            break;
        }
    }

    return NGX_OK;
}


static void
ngx_http_feed_sweep_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_sweeper_t  *s = t->data;

    ngx_uint_t                    i;
    ngx_http_feed_outbox_item_t  *item;

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, s->timer.log, 0,
                      "outbox sweep failed: %s", t->error.message);
    }

    if (s->nitems) {
        ngx_log_error(NGX_LOG_NOTICE, s->timer.log, 0,
                      "outbox: enqueueing %ui overdue entries", s->nitems);
    }

    s->waiting = 0;

    for (i = 0; i < s->nitems; i++) {
        item = &s->items[i];

        if (ngx_http_feed_outbox_send(NULL, s->fmcf, item->kind, &item->id,
                                      &item->author, item->ts,
                                      ngx_http_feed_sweep_sent, item)
            == NGX_OK)
        {
            s->waiting++;
        }
    }

    /* what could not be sent stays claimed until its lease runs out */

    if (s->waiting == 0) {
        ngx_http_feed_sweep_rearm(s);
    }
}


static void
ngx_http_feed_sweep_sent(void *data, redisReply *reply)
{
    ngx_http_feed_outbox_item_t  *item = data;

    ngx_http_feed_sweeper_t  *s = &ngx_http_feed_sweeper;

    if (reply && reply->type == REDIS_REPLY_STRING) {
        ngx_http_feed_outbox_sent(s->fmcf, &item->id, item->kind);
    }

    if (--s->waiting == 0) {
        ngx_http_feed_sweep_rearm(s);
    }
}
