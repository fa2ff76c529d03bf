
/*
 * ngx_feed_module: the fanout queue (a Redis Stream) and its outbox.
 *
 * A post is stored with the queue entries it still awaits ("q") before its
 * 201; the request then appends the entry (XADD) and, once Redis has it,
 * drops it from "q".  A delete also marks the post in feed:deleting first,
 * and drops it from "q" only once Redis took both.  If Redis is down or
 * refuses them, or the worker dies in between, the entry stays in "q": the
 * first worker's sweeper takes over posts whose "qt" has passed (claiming
 * them by moving "qt", so two nginx nodes do not both take one) and sends
 * their writes again, until Redis takes them.  A request whose writes
 * Redis refused moves "qt" to now, so that the sweeper does not wait for
 * the grace of a request in flight.  Every accepted post thus reaches the
 * stream at least once; in the normal path exactly once.
 */


#include "ngx_http_feed_outbox.h"
#include "ngx_http_feed_timeline_cache.h"


/*
 * A round every half second; an entry claimed is taken again a second
 * later if its writes failed: a second or so after Redis takes writes
 * again, what it refused is there
 */
#define NGX_HTTP_FEED_SWEEP_EVERY  500
#define NGX_HTTP_FEED_SWEEP_LEASE  1000
#define NGX_HTTP_FEED_SWEEP_BATCH  100


typedef struct {
    const char                   *kind;
    bson_oid_t                    id;
    ngx_http_feed_user_t          author;
    int64_t                       ts;
    ngx_http_feed_outbox_join_t   join;
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
} ngx_http_feed_outbox_sweeper_t;


typedef struct {
    bson_oid_t                    id;
    const char                   *kind;     /* NULL: due now */
    int64_t                       now;
} ngx_http_feed_outbox_clear_t;


/* an entry in the stream, until a replica has it */
typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    bson_oid_t                    id;
    const char                   *kind;
} ngx_http_feed_outbox_durable_t;


static void ngx_http_feed_outbox_joined(void *data, redisReply *reply);
static void ngx_http_feed_outbox_replicated(void *data,
    ngx_uint_t replicated);
static void ngx_http_feed_outbox_clear(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id, const char *kind);
static void ngx_http_feed_outbox_clear_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_outbox_sweep(ngx_event_t *ev);
static void ngx_http_feed_outbox_sweep_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_outbox_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_outbox_sweep_claimed(void *data,
    ngx_http_feed_posts_due_t *due);
static void ngx_http_feed_outbox_sweep_item(ngx_http_feed_outbox_sweeper_t *s,
    ngx_http_feed_posts_due_t *due, const char *kind, int64_t ts);
static void ngx_http_feed_outbox_sweep_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_outbox_sweep_sent(void *data, ngx_uint_t sent);
static void ngx_http_feed_outbox_sweep_rearm(ngx_http_feed_outbox_sweeper_t *s);


static ngx_http_feed_outbox_sweeper_t  ngx_http_feed_outbox_sweeper;


/*
 * XADD stream MAXLEN ~ N * type T id I author A [ts S], the author's; a
 * delete's mark goes first.  NGX_OK: join's handler follows the replies;
 * NGX_DECLINED: nothing could be sent, the outbox keeps the entry.
 */

ngx_int_t
ngx_http_feed_outbox_send(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *kind, const bson_oid_t *id,
    ngx_http_feed_user_t *author, int64_t ts,
    ngx_http_feed_outbox_join_t *join)
{
    char                        hex[25];
    u_char                      maxlen[NGX_INT_T_LEN], tsbuf[NGX_INT64_LEN];
    size_t                      argvlen[14];
    ngx_int_t                   rc;
    ngx_str_t                  *stream;
    ngx_uint_t                  sent;
    const char                 *argv[14];
    ngx_http_feed_redis_args_t  args;

    bson_oid_to_string(id, hex);
    stream = ngx_http_feed_stream_of(fmcf, author);

    join->waiting = 0;
    join->failed = 0;

    /*
     * Cached timelines may still hold a deleted post until fanout removes
     * it: the cache marks it ahead of the delete's entry, on the same
     * connection, so that reads skip it before anyone hears of the delete.
     */

    if (kind[0] == 'd') {
        rc = ngx_http_feed_timeline_cache_delete(r, fmcf, hex,
                                                 ngx_http_feed_outbox_joined,
                                                 join, &sent);
        join->waiting += sent;

        if (rc != NGX_OK) {
            join->failed = 1;
        }
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XADD");
    ngx_http_feed_redis_args_key(&args, stream->data, stream->len);
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

    rc = ngx_http_feed_redis_send_r(r, fmcf->redis_client,
                                    ngx_http_feed_outbox_joined, join, &args);
    if (rc == NGX_OK) {
        join->waiting++;

    } else {
        join->failed = 1;
    }

    /* for a request, or for the sweeper */

    ngx_log_debug3((r ? NGX_LOG_DEBUG_HTTP : NGX_LOG_DEBUG_CORE),
                   r ? r->connection->log : ngx_cycle->log, 0,
                   "feed outbox: %s entry of post %s %s", kind, hex,
                   join->waiting ? "sent" : "kept for the sweeper");

    return join->waiting ? NGX_OK : NGX_DECLINED;
}


/* a reply: the XADD's is the entry's id, the others' numbers */

static void
ngx_http_feed_outbox_joined(void *data, redisReply *reply)
{
    ngx_http_feed_outbox_join_t  *join = data;

    if (reply == NULL
        || (reply->type != REDIS_REPLY_STRING
            && reply->type != REDIS_REPLY_INTEGER))
    {
        join->failed = 1;
    }

    if (--join->waiting) {
        return;
    }

    join->handler(join->data, !join->failed);
}


/*
 * The entry is in the stream: the post no longer awaits it.  With
 * sentinels, once a replica has it too: a primary lost before would take
 * the entry with it, and the sweeper must enqueue it again.
 */

void
ngx_http_feed_outbox_sent(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id, const char *kind)
{
    ngx_http_feed_outbox_durable_t  *d;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed outbox: %s entry in the stream, dequeueing", kind);

    if (fmcf->redis_barrier == NULL) {

        /* if this fails, the sweeper enqueues the entry again: harmless */

        ngx_http_feed_outbox_clear(fmcf, id, kind);
        return;
    }

    /* out of memory: kept for the sweeper, as a write that failed */

    d = ngx_alloc(sizeof(ngx_http_feed_outbox_durable_t), ngx_cycle->log);
    if (d == NULL) {
        return;
    }

    d->fmcf = fmcf;
    d->kind = kind;
    bson_oid_copy(id, &d->id);

    if (ngx_http_feed_redis_barrier_wait(fmcf->redis_barrier,
                                         ngx_http_feed_outbox_replicated, d)
        != NGX_OK)
    {
        ngx_free(d);
    }
}


static void
ngx_http_feed_outbox_replicated(void *data, ngx_uint_t replicated)
{
    ngx_http_feed_outbox_durable_t  *d = data;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed outbox: %s entry %s", d->kind,
                   replicated ? "on a replica, dequeueing"
                              : "not known on a replica, kept");

    if (replicated && !ngx_exiting) {
        ngx_http_feed_outbox_clear(d->fmcf, &d->id, d->kind);
    }

    ngx_free(d);
}


/* Redis refused the entry's writes: the sweeper takes them now */

void
ngx_http_feed_outbox_soon(ngx_http_feed_main_conf_t *fmcf,
    const bson_oid_t *id)
{
    ngx_log_debug0(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed outbox: entry refused, due now");

    /* if this fails, the sweeper takes it when its grace ends */

    ngx_http_feed_outbox_clear(fmcf, id, NULL);
}


static void
ngx_http_feed_outbox_clear(ngx_http_feed_main_conf_t *fmcf,
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
    c->now = ngx_http_feed_now_ms();
    t->data = c;

    (void) ngx_http_feed_mongo_post_bg(t);
}


static void
ngx_http_feed_outbox_clear_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_outbox_clear_t  *c = t->data;

    if (c->kind == NULL) {
        t->rc = ngx_http_feed_posts_due_now(client, t->database, &c->id,
                                            c->now, &t->error);
        return;
    }

    t->rc = ngx_http_feed_posts_dequeue(client, t->database, &c->id, c->kind,
                                        &t->error);
}


/* the sweeper runs in the first worker only */

ngx_int_t
ngx_http_feed_outbox_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_outbox_sweeper_t  *s = &ngx_http_feed_outbox_sweeper;

    if (ngx_worker != 0 || fmcf->mongo_client == NULL
        || fmcf->redis_client == NULL)
    {
        return NGX_OK;
    }

    s->fmcf = fmcf;
    s->dummy.fd = (ngx_socket_t) -1;

    s->timer.handler = ngx_http_feed_outbox_sweep;
    s->timer.data = &s->dummy;
    s->timer.log = cycle->log;
    s->timer.cancelable = 1;

    s->task = ngx_http_feed_mongo_task(cycle->pool, fmcf->mongo_client,
                                       ngx_http_feed_outbox_sweep_run,
                                       ngx_http_feed_outbox_sweep_done, s);
    if (s->task == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_redis_on_ready(fmcf->redis_client,
                                     ngx_http_feed_outbox_sweep_ready, s)
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
    if (ngx_http_feed_outbox_sweeper.timer.timer_set) {
        ngx_del_timer(&ngx_http_feed_outbox_sweeper.timer);
    }
}


static void
ngx_http_feed_outbox_sweep_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_outbox_sweeper_t  *s = data;

    /* Redis is back: what waited for it need not wait for the timer */

    if (s->timer.timer_set) {
        ngx_del_timer(&s->timer);
    }

    ngx_http_feed_outbox_sweep(&s->timer);
}


static void
ngx_http_feed_outbox_sweep(ngx_event_t *ev)
{
    ngx_http_feed_outbox_sweeper_t  *s = &ngx_http_feed_outbox_sweeper;

    if (ngx_exiting || s->busy) {
        return;
    }

    if (ngx_http_feed_redis_state(s->fmcf->redis_client)
        != NGX_HTTP_FEED_REDIS_UP)
    {
        ngx_log_debug0(NGX_LOG_DEBUG_CORE, ev->log, 0,
                       "feed outbox sweep: redis is not up, later");
        ngx_http_feed_outbox_sweep_rearm(s);
        return;
    }

    s->now = ngx_http_feed_now_ms();
    s->nitems = 0;

    if (ngx_http_feed_mongo_post(s->task) != NGX_OK) {
        ngx_http_feed_outbox_sweep_rearm(s);
        return;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_CORE, ev->log, 0, "feed outbox sweep run");

    s->busy = 1;
}


static void
ngx_http_feed_outbox_sweep_rearm(ngx_http_feed_outbox_sweeper_t *s)
{
    s->busy = 0;

    if (!ngx_exiting && !s->timer.timer_set) {
        ngx_add_timer(&s->timer, NGX_HTTP_FEED_SWEEP_EVERY);
    }
}


/* posts whose entries are overdue, oldest first, each claimed for us */

static void
ngx_http_feed_outbox_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_outbox_sweeper_t  *s = t->data;

    t->rc = ngx_http_feed_posts_claim_due(client, t->database, s->now,
                                          NGX_HTTP_FEED_SWEEP_LEASE,
                                          NGX_HTTP_FEED_SWEEP_BATCH,
                                          ngx_http_feed_outbox_sweep_claimed, s,
                                          &t->error);
}


/* the post entry goes first, then the delete, as they happened */

static void
ngx_http_feed_outbox_sweep_claimed(void *data, ngx_http_feed_posts_due_t *due)
{
    ngx_http_feed_outbox_sweeper_t  *s = data;

    if (due->awaits_post) {
        ngx_http_feed_outbox_sweep_item(s, due, "post", due->ts);
    }

    if (due->awaits_delete) {
        ngx_http_feed_outbox_sweep_item(s, due, "delete", 0);
    }
}


static void
ngx_http_feed_outbox_sweep_item(ngx_http_feed_outbox_sweeper_t *s,
    ngx_http_feed_posts_due_t *due, const char *kind, int64_t ts)
{
    ngx_http_feed_outbox_item_t  *item;

    item = &s->items[s->nitems++];
    item->kind = kind;
    item->id = due->id;
    item->author = due->author;
    item->ts = ts;
}


static void
ngx_http_feed_outbox_sweep_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_outbox_sweeper_t  *s = t->data;

    ngx_uint_t                    i;
    ngx_http_feed_outbox_item_t  *item;

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, s->timer.log, 0,
                      "outbox sweep failed: %s", t->error.message);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, s->timer.log, 0,
                   "feed outbox sweep done: %i, %ui entries claimed",
                   t->rc, s->nitems);

    if (s->nitems) {
        ngx_log_error(NGX_LOG_NOTICE, s->timer.log, 0,
                      "outbox: enqueueing %ui overdue entries", s->nitems);
    }

    s->waiting = 0;

    for (i = 0; i < s->nitems; i++) {
        item = &s->items[i];
        item->join.handler = ngx_http_feed_outbox_sweep_sent;
        item->join.data = item;

        if (ngx_http_feed_outbox_send(NULL, s->fmcf, item->kind, &item->id,
                                      &item->author, item->ts, &item->join)
            == NGX_OK)
        {
            s->waiting++;
        }
    }

    /* what could not be sent stays claimed until its lease runs out */

    if (s->waiting == 0) {
        ngx_http_feed_outbox_sweep_rearm(s);
    }
}


static void
ngx_http_feed_outbox_sweep_sent(void *data, ngx_uint_t sent)
{
    ngx_http_feed_outbox_item_t  *item = data;

    ngx_http_feed_outbox_sweeper_t  *s = &ngx_http_feed_outbox_sweeper;

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, s->timer.log, 0,
                   "feed outbox sweep: %s entry %s, %ui to go", item->kind,
                   sent ? "in the stream" : "kept until its lease ends",
                   s->waiting - 1);

    if (sent) {
        ngx_http_feed_outbox_sent(s->fmcf, &item->id, item->kind);
    }

    if (--s->waiting == 0) {
        ngx_http_feed_outbox_sweep_rearm(s);
    }
}
