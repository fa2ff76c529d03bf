
/*
 * ngx_feed_module: MongoDB through a per-worker mongoc_client_pool_t,
 * used only from nginx thread pool tasks, never on the event loop.
 */


#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_json.h"


/* how many feed_mongo_timeout a task may wait for a thread */
#define NGX_HTTP_FEED_MONGO_QUEUED_MAX  10


struct ngx_http_feed_mongo_s {
    mongoc_client_pool_t         *pool;
    ngx_http_feed_mongo_conf_t   *conf;
    ngx_log_t                    *log;

    /* timer events need a connection-like object for debug logging */
    ngx_connection_t              dummy;
};


static void ngx_http_feed_mongo_uri_cleanup(void *data);
static void ngx_http_feed_mongo_set_timeout(mongoc_uri_t *uri,
    const char *option, ngx_msec_t timeout);
static void ngx_http_feed_mongo_thread(void *data, ngx_log_t *log);
static void ngx_http_feed_mongo_event(ngx_event_t *ev);
static void ngx_http_feed_mongo_watchdog(ngx_event_t *ev);
static void ngx_http_feed_mongo_wake(ngx_http_request_t *r);
static void ngx_http_feed_mongo_bg_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_mongo_answered(ngx_http_feed_mongo_task_t *t);


/*
 * Called at configuration time once the http block is parsed: the URI
 * itself was validated by the directive, here it gets the timeouts that
 * keep a dead MongoDB from holding a thread (and so a reload) for long.
 */

ngx_int_t
ngx_http_feed_mongo_init_conf(ngx_conf_t *cf, ngx_http_feed_mongo_conf_t *conf)
{
    const char  *db;

    ngx_http_feed_mongo_set_timeout(conf->uri, MONGOC_URI_CONNECTTIMEOUTMS,
                                    conf->timeout);
    ngx_http_feed_mongo_set_timeout(conf->uri, MONGOC_URI_SOCKETTIMEOUTMS,
                                    conf->timeout);
    ngx_http_feed_mongo_set_timeout(conf->uri,
                                    MONGOC_URI_SERVERSELECTIONTIMEOUTMS,
                                    conf->timeout);

    if (conf->database.data == NULL) {
        db = mongoc_uri_get_database(conf->uri);

        if (db == NULL) {
            db = "feed";
        }

        conf->database.len = ngx_strlen(db);
        conf->database.data = ngx_pnalloc(cf->pool, conf->database.len + 1);
        if (conf->database.data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(conf->database.data, db, conf->database.len + 1);
    }

    conf->thread_pool = ngx_thread_pool_add(cf, &conf->thread_pool_name);
    if (conf->thread_pool == NULL) {
        return NGX_ERROR;
    }

    return NGX_OK;
}


/* the "feed_mongo_uri" directive */

char *
ngx_http_feed_mongo_uri(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_str_t                   *value;
    bson_error_t                 error;
    mongoc_uri_t                *uri;
    ngx_pool_cleanup_t          *cln;
    ngx_http_feed_mongo_conf_t  *mcf;

    mcf = (ngx_http_feed_mongo_conf_t *) ((u_char *) conf + cmd->offset);

    if (mcf->uri) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* safe before any other driver call, and only once per process */
    mongoc_init();

    uri = mongoc_uri_new_with_error((char *) value[1].data, &error);
    if (uri == NULL) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid MongoDB URI \"%V\" in \"%V\": %s",
                           &value[1], &cmd->name, error.message);
        return NGX_CONF_ERROR;
    }

    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        mongoc_uri_destroy(uri);
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_feed_mongo_uri_cleanup;
    cln->data = uri;

    mcf->uri = uri;
    mcf->uri_text = value[1];

    return NGX_CONF_OK;
}


static void
ngx_http_feed_mongo_uri_cleanup(void *data)
{
    mongoc_uri_destroy(data);
}


static void
ngx_http_feed_mongo_set_timeout(mongoc_uri_t *uri, const char *option,
    ngx_msec_t timeout)
{
    /* what the URI says wins: it is the driver's own configuration */

    if (mongoc_uri_has_option(uri, option)) {
        return;
    }

    (void) mongoc_uri_set_option_as_int32(uri, option, (int32_t) timeout);
}


ngx_http_feed_mongo_t *
ngx_http_feed_mongo_create(ngx_cycle_t *cycle,
    ngx_http_feed_mongo_conf_t *conf)
{
    bson_error_t            error;
    ngx_http_feed_mongo_t  *m;

    m = ngx_calloc(sizeof(ngx_http_feed_mongo_t), cycle->log);
    if (m == NULL) {
        return NULL;
    }

    m->conf = conf;
    m->log = cycle->log;
    m->dummy.fd = (ngx_socket_t) -1;

    m->pool = mongoc_client_pool_new_with_error(conf->uri, &error);
    if (m->pool == NULL) {
        ngx_log_error(NGX_LOG_EMERG, cycle->log, 0,
                      "mongodb client pool for \"%V\" failed: %s",
                      &conf->uri_text, error.message);
        ngx_free(m);
        return NULL;
    }

    (void) mongoc_client_pool_set_error_api(m->pool,
                                            MONGOC_ERROR_API_VERSION_2);
    (void) mongoc_client_pool_set_appname(m->pool, "ngx_feed_module");

    return m;
}


void
ngx_http_feed_mongo_destroy(ngx_http_feed_mongo_t *m)
{
    if (m == NULL) {
        return;
    }

    /* the thread pools have been joined already: no client is in use */

    mongoc_client_pool_destroy(m->pool);
    ngx_free(m);
}


ngx_http_feed_mongo_task_t *
ngx_http_feed_mongo_task(ngx_pool_t *pool, ngx_http_feed_mongo_t *m,
    ngx_http_feed_mongo_run_pt run, ngx_http_feed_mongo_done_pt done,
    void *data)
{
    ngx_thread_task_t           *task;
    ngx_http_feed_mongo_task_t  *t;

    task = ngx_thread_task_alloc(pool, sizeof(ngx_http_feed_mongo_task_t));
    if (task == NULL) {
        return NULL;
    }

    t = task->ctx;

    t->run = run;
    t->done = done;
    t->data = data;
    t->mongo = m;
    t->database = m ? (const char *) m->conf->database.data : NULL;
    t->thread_task = task;
    t->rc = NGX_ERROR;

    task->handler = ngx_http_feed_mongo_thread;
    task->event.handler = ngx_http_feed_mongo_event;
    task->event.data = t;

    if (m) {
        t->watchdog.handler = ngx_http_feed_mongo_watchdog;
        t->watchdog.data = &m->dummy;
        t->watchdog.log = m->log;
    }

    return t;
}


/* a task of the worker itself, not tied to a request */

ngx_int_t
ngx_http_feed_mongo_post(ngx_http_feed_mongo_task_t *t)
{
    if (t->mongo == NULL) {
        return NGX_DECLINED;
    }

    t->posted = ngx_http_feed_now_ms();
    t->deadline = t->posted
                  + NGX_HTTP_FEED_MONGO_QUEUED_MAX * t->mongo->conf->timeout;

    if (ngx_thread_task_post(t->mongo->conf->thread_pool, t->thread_task)
        != NGX_OK)
    {
        ngx_log_debug0(NGX_LOG_DEBUG_CORE, t->mongo->log, 0,
                       "feed mongodb task not posted: the queue is full");
        return NGX_ERROR;
    }

    /* a request's task is traced in its log, the worker's in the cycle's */

    ngx_log_debug2((t->request ? NGX_LOG_DEBUG_HTTP : NGX_LOG_DEBUG_CORE),
                   t->request ? t->request->connection->log : t->mongo->log,
                   0, "feed mongodb task #%ui posted, %s",
                   t->thread_task->id,
                   t->request ? "for a request" : "the worker's");

    ngx_http_feed_stat(mongo_tasks, 1);

    /*
     * nginx's graceful shutdown waits for timers only: without one, a
     * worker would exit under a request whose task is still running.
     */

    ngx_add_timer(&t->watchdog, 2 * t->mongo->conf->timeout);

    return NGX_OK;
}


/*
 * A task of the worker with a pool of its own, destroyed after done():
 * for work that outlives the request that started it.  The caller fills
 * t->data (from t->pool) before ngx_http_feed_mongo_post().
 */

ngx_http_feed_mongo_task_t *
ngx_http_feed_mongo_task_bg(ngx_http_feed_mongo_t *m,
    ngx_http_feed_mongo_run_pt run, ngx_http_feed_mongo_done_pt done)
{
    ngx_pool_t                  *pool;
    ngx_http_feed_mongo_task_t  *t;

    pool = ngx_create_pool(1024, m->log);
    if (pool == NULL) {
        return NULL;
    }

    t = ngx_http_feed_mongo_task(pool, m, run, ngx_http_feed_mongo_bg_done,
                                 NULL);
    if (t == NULL) {
        ngx_destroy_pool(pool);
        return NULL;
    }

    t->pool = pool;
    t->bg_done = done;

    return t;
}


/* posts a task made by ngx_http_feed_mongo_task_bg(), or frees it */

ngx_int_t
ngx_http_feed_mongo_post_bg(ngx_http_feed_mongo_task_t *t)
{
    if (ngx_http_feed_mongo_post(t) == NGX_OK) {
        return NGX_OK;
    }

    ngx_destroy_pool(t->pool);

    return NGX_ERROR;
}


static void
ngx_http_feed_mongo_bg_done(ngx_http_feed_mongo_task_t *t)
{
    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, t->mongo->log, 0,
                      "mongodb background task failed: %s",
                      t->error.message);
    }

    if (t->bg_done) {
        t->bg_done(t);
    }

    ngx_destroy_pool(t->pool);
}


/*
 * A task for a request: the request stays blocked (it can be neither
 * freed nor finalized) until the task has come back, since the task's
 * memory lives in the request pool.
 */

ngx_int_t
ngx_http_feed_mongo_post_r(ngx_http_request_t *r,
    ngx_http_feed_mongo_task_t *t)
{
    ngx_int_t  rc;

    t->request = r;

    rc = ngx_http_feed_mongo_post(t);
    if (rc != NGX_OK) {
        return rc;
    }

    r->main->blocked++;
    r->aio = 1;
    r->write_event_handler = ngx_http_feed_mongo_wake;

    return NGX_OK;
}


/*
 * The request's work in a thread, answered when it is done: with the
 * error when it failed, else with answer().  run() may leave a
 * bson_malloc()ed answer in *result (or NULL), freed here after it.
 * NGX_DONE, or what to answer now: the task could not be posted.
 */

ngx_int_t
ngx_http_feed_mongo_request(ngx_http_request_t *r,
    ngx_http_feed_mongo_run_pt run, ngx_http_feed_mongo_answer_pt answer,
    void *data, char **result)
{
    ngx_http_feed_mongo_task_t  *t;
    ngx_http_feed_main_conf_t   *fmcf;

    fmcf = ngx_http_get_module_main_conf(r, ngx_http_feed_module);

    t = ngx_http_feed_mongo_task(r->pool, fmcf->mongo_client, run,
                                 ngx_http_feed_mongo_answered, data);
    if (t == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    t->answer = answer;
    t->result = result;

    if (ngx_http_feed_mongo_post_r(r, t) != NGX_OK) {
        return ngx_http_feed_db_busy(r);
    }

    return NGX_DONE;
}


static void
ngx_http_feed_mongo_answered(ngx_http_feed_mongo_task_t *t)
{
    ngx_int_t            rc;
    ngx_http_request_t  *r;

    r = t->request;

    if (t->rc != NGX_OK) {
        rc = ngx_http_feed_db_failed(r, &t->error);

    } else {
        rc = t->answer(r, t->data);
    }

    if (t->result) {
        bson_free(*t->result);
        *t->result = NULL;
    }

    if (rc != NGX_DONE) {
        ngx_http_finalize_request(r, rc);
    }
}


/* 200 with a thread's JSON answer, copied into the request pool */

ngx_int_t
ngx_http_feed_mongo_send(ngx_http_request_t *r, char *json, size_t len,
    ngx_uint_t nl)
{
    u_char  *p;

    p = ngx_pnalloc(r->pool, len + nl);
    if (p == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    ngx_memcpy(p, json, len);

    if (nl) {
        p[len] = '\n';
    }

    return ngx_http_feed_send_body(r, NGX_HTTP_OK, p, len + nl);
}


ngx_uint_t
ngx_http_feed_mongo_error_is_transient(const bson_error_t *err)
{
    switch (err->domain) {

    case MONGOC_ERROR_STREAM:
    case MONGOC_ERROR_SERVER_SELECTION:
        return 1;

    default:
        return 0;
    }
}


static void
ngx_http_feed_mongo_thread(void *data, ngx_log_t *log)
{
    ngx_http_feed_mongo_task_t  *t = data;

    struct timeval    tv;
    mongoc_client_t  *client;

    /*
     * A task that waited in the queue many times feed_mongo_timeout is not
     * run: its client has given up, and a MongoDB that fell behind must not
     * be asked for work nobody waits for any more.
     */

    ngx_gettimeofday(&tv);

    /* given to the histogram by the event loop: threads add to no counter */
    t->waited = (int64_t) tv.tv_sec * 1000 + tv.tv_usec / 1000 - t->posted;

    if (t->posted + t->waited > t->deadline) {
        bson_set_error(&t->error, MONGOC_ERROR_STREAM,
                       MONGOC_ERROR_STREAM_SOCKET,
                       "waited too long for a thread");
        t->rc = NGX_ERROR;
        return;
    }

    /* the pool is larger than any thread pool: this never waits long */

    client = mongoc_client_pool_pop(t->mongo->pool);
    if (client == NULL) {
        bson_set_error(&t->error, MONGOC_ERROR_CLIENT,
                       MONGOC_ERROR_CLIENT_NOT_READY,
                       "no mongodb client available");
        t->rc = NGX_ERROR;
        return;
    }

    t->run(t, client);

    mongoc_client_pool_push(t->mongo->pool, client);
}


static void
ngx_http_feed_mongo_event(ngx_event_t *ev)
{
    ngx_http_feed_mongo_task_t  *t = ev->data;

    ngx_connection_t    *c;
    ngx_http_request_t  *r;

    if (t->watchdog.timer_set) {
        ngx_del_timer(&t->watchdog);
    }

    if (t->rc != NGX_OK) {
        ngx_http_feed_stat(mongo_errors, 1);
    }

    ngx_http_feed_observe(mongo_wait, (ngx_msec_int_t) t->waited);

    r = t->request;

    if (r == NULL) {
        ngx_log_debug2(NGX_LOG_DEBUG_CORE, t->mongo->log, 0,
                       "feed mongodb task #%ui done: %i",
                       t->thread_task->id, t->rc);
        t->done(t);
        return;
    }

    c = r->connection;

    ngx_http_set_log_request(c->log, r);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, c->log, 0,
                   "feed mongodb task #%ui done: %i", t->thread_task->id,
                   t->rc);

    r->main->blocked--;
    r->aio = 0;

    if (r->write_event_handler == ngx_http_feed_mongo_wake) {
        r->write_event_handler = ngx_http_request_empty_handler;
        t->done(t);

    } else {
        /* the request was terminated meanwhile: let nginx finish it */

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, c->log, 0,
                       "mongodb task of a terminated request done: %i",
                       t->rc);

        if (t->result) {
            bson_free(*t->result);
            *t->result = NULL;
        }

        r->write_event_handler(r);
    }

    ngx_http_run_posted_requests(c);
}


static void
ngx_http_feed_mongo_watchdog(ngx_event_t *ev)
{
    ngx_http_feed_mongo_task_t  *t;

    t = ngx_queue_data(ev, ngx_http_feed_mongo_task_t, watchdog);

    /*
     * A task cannot be cancelled; the driver's own timeouts end it.  This
     * one waits in the thread pool queue or is unusually slow: say so,
     * and keep waiting.
     */

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ev->log, 0,
                   "feed mongodb task #%ui: watchdog", t->thread_task->id);

    ngx_log_error(NGX_LOG_WARN, t->mongo->log, 0,
                  "mongodb task still running after %M ms",
                  2 * t->mongo->conf->timeout);

    ngx_add_timer(&t->watchdog, t->mongo->conf->timeout);
}


static void
ngx_http_feed_mongo_wake(ngx_http_request_t *r)
{
    /* nothing to do until the task comes back */
}


/*
 * The one document matching filter (thread side): NGX_OK with a copy in
 * *doc, to be bson_destroy()ed, NGX_DECLINED when there is none.
 */

ngx_int_t
ngx_http_feed_mongo_find_one(mongoc_collection_t *coll, const bson_t *filter,
    const bson_t *projection, bson_t *doc, bson_error_t *error)
{
    bson_t            opts;
    ngx_int_t         rc;
    const bson_t     *found;
    mongoc_cursor_t  *cursor;

    bson_init(&opts);
    BSON_APPEND_INT64(&opts, "limit", 1);
    BSON_APPEND_BOOL(&opts, "singleBatch", true);

    if (projection) {
        BSON_APPEND_DOCUMENT(&opts, "projection", projection);
    }

    cursor = mongoc_collection_find_with_opts(coll, filter, &opts, NULL);

    rc = NGX_DECLINED;

    if (mongoc_cursor_next(cursor, &found)) {
        bson_copy_to(found, doc);
        rc = NGX_OK;
    }

    if (mongoc_cursor_error(cursor, error)) {
        if (rc == NGX_OK) {
            bson_destroy(doc);
        }

        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);

    return rc;
}


/* numbers come back as int32, int64 or double depending on the writer */

int64_t
ngx_http_feed_bson_int(const bson_t *doc, const char *key)
{
    bson_iter_t  it;

    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_NUMBER(&it)) {
        return bson_iter_as_int64(&it);
    }

    return 0;
}


/*
 * A user id read from MongoDB, which other applications may write too:
 * only an id the API itself accepts is taken (NGX_DECLINED otherwise), so
 * that every buffer sized for user ids holds whatever a document says.
 */

ngx_int_t
ngx_http_feed_bson_user(const bson_t *doc, const char *key,
    ngx_http_feed_user_t *user)
{
    uint32_t     len;
    const char  *s;
    bson_iter_t  it;

    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_UTF8(&it)) {
        return NGX_DECLINED;
    }

    s = bson_iter_utf8(&it, &len);

    if (!ngx_http_feed_user_valid((u_char *) s, len)) {
        return NGX_DECLINED;
    }

    ngx_memcpy(user->data, s, len);
    user->data[len] = '\0';
    user->len = len;

    return NGX_OK;
}


/*
 * Keyset pages, newest first by (time, key), a total order: the filter's
 * condition for what comes after the last (time, key) of a page, and the
 * options that read a page in that order from an index ending with
 * {time: -1, key: -1}, projecting key and time only.
 */

void
ngx_http_feed_mongo_after(bson_t *filter, const char *time, int64_t t,
    const char *key, const char *k)
{
    bson_t  any, a, b, lt, lt2;

    BSON_APPEND_ARRAY_BEGIN(filter, "$or", &any);

    BSON_APPEND_DOCUMENT_BEGIN(&any, "0", &a);
    BSON_APPEND_DOCUMENT_BEGIN(&a, time, &lt);
    BSON_APPEND_DATE_TIME(&lt, "$lt", t);
    bson_append_document_end(&a, &lt);
    bson_append_document_end(&any, &a);

    BSON_APPEND_DOCUMENT_BEGIN(&any, "1", &b);
    BSON_APPEND_DATE_TIME(&b, time, t);
    BSON_APPEND_DOCUMENT_BEGIN(&b, key, &lt2);
    BSON_APPEND_UTF8(&lt2, "$lt", k);
    bson_append_document_end(&b, &lt2);
    bson_append_document_end(&any, &b);

    bson_append_array_end(filter, &any);
}


void
ngx_http_feed_mongo_newest(bson_t *opts, const char *time, const char *key,
    ngx_uint_t batch)
{
    bson_t  sort, proj;

    BSON_APPEND_DOCUMENT_BEGIN(opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, time, -1);
    BSON_APPEND_INT32(&sort, key, -1);
    bson_append_document_end(opts, &sort);

    BSON_APPEND_DOCUMENT_BEGIN(opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, key, 1);
    BSON_APPEND_INT32(&proj, time, 1);
    BSON_APPEND_INT32(&proj, "_id", 0);
    bson_append_document_end(opts, &proj);

    BSON_APPEND_INT32(opts, "batchSize", (int32_t) batch);
}


/*
 * Each document found, as its user (key) and its time: documents whose
 * user id is not one of ours, written by others, are skipped and counted.
 */

ngx_int_t
ngx_http_feed_mongo_each_user(mongoc_collection_t *coll,
    const bson_t *filter, const bson_t *opts, const char *key,
    const char *time, ngx_http_feed_mongo_user_pt each, void *data,
    ngx_uint_t *skipped, bson_error_t *error)
{
    int64_t                t;
    ngx_int_t              rc;
    bson_iter_t            it;
    const bson_t          *doc;
    mongoc_cursor_t       *cursor;
    ngx_http_feed_user_t   user;

    cursor = mongoc_collection_find_with_opts(coll, filter, opts, NULL);

    rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_bson_user(doc, key, &user) != NGX_OK) {
            (*skipped)++;
            continue;
        }

        t = bson_iter_init_find(&it, doc, time)
            && BSON_ITER_HOLDS_DATE_TIME(&it)
            ? bson_iter_date_time(&it) : 0;

        rc = each(data, &user, t);
        if (rc != NGX_OK) {
            break;
        }
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);

    return rc;
}


/*
 * A document made by an upsert of its $setOnInsert fields where selector
 * (a unique key) finds none: only the upsert that inserts owns it
 * (NGX_OK); one that finds it there lost a race (NGX_AGAIN), as does one
 * of two at the same time that meets the unique index.
 */

ngx_int_t
ngx_http_feed_mongo_insert_new(mongoc_collection_t *coll,
    const bson_t *selector, const bson_t *fields, bson_error_t *error)
{
    bool     ok;
    bson_t   update, opts, reply;
    int64_t  upserted;

    bson_init(&update);
    BSON_APPEND_DOCUMENT(&update, "$setOnInsert", fields);

    bson_init(&opts);
    BSON_APPEND_BOOL(&opts, "upsert", true);

    ok = mongoc_collection_update_one(coll, selector, &update, &opts, &reply,
                                      error);

    upserted = ok ? ngx_http_feed_bson_int(&reply, "upsertedCount") : 0;

    bson_destroy(&reply);
    bson_destroy(&opts);
    bson_destroy(&update);

    if (!ok) {
        return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_AGAIN
                                                         : NGX_ERROR;
    }

    return upserted ? NGX_OK : NGX_AGAIN;
}


/* the statements of a bulk whose upsert made a document: the reply says */

void
ngx_http_feed_mongo_upserted(const bson_t *reply, u_char *made, size_t n)
{
    int64_t      i;
    bson_iter_t  it, u, f;

    if (!bson_iter_init_find(&it, reply, "upserted")
        || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &u))
    {
        return;
    }

    while (bson_iter_next(&u)) {
        if (BSON_ITER_HOLDS_DOCUMENT(&u) && bson_iter_recurse(&u, &f)
            && bson_iter_find(&f, "index")
            && (i = bson_iter_as_int64(&f)) >= 0 && (size_t) i < n)
        {
            made[i] = 1;
        }
    }
}
