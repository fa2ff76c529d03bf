
/*
 * ngx_feed_module: the sweeper of cache side effects left over.
 *
 * The first worker of every nginx node runs it.  Each round, a thread
 * counts the entries of the journal (for feed_status and feed_metrics)
 * and, when Redis can be written to, claims the entries whose time has
 * come (a new token, and the next try put off: 100 ms, doubled, at most a
 * second), does their MongoDB part; back on the event loop their Redis
 * part is sent, and an entry whose every reply is a success is cleared.
 * Whatever left an entry (a request that failed, a worker that died, a
 * node reloaded or stopped), any node's sweeper completes it, about a
 * second after Redis takes writes again at most.
 */


#include "ngx_http_feed_effects.h"


#define NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH  100

/* a round every half second; soon again after one that found work */
#define NGX_HTTP_FEED_EFFECTS_SWEEP_EVERY  500
#define NGX_HTTP_FEED_EFFECTS_SWEEP_AGAIN  100


typedef struct {
    ngx_http_feed_effect_due_t    due;
    ngx_uint_t                    failed;
} ngx_http_feed_effects_item_t;


typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_mongo_task_t   *task;
    ngx_event_t                   timer;
    ngx_connection_t              dummy;
    ngx_uint_t                    busy;

    /* the round's: Redis can be written to, the time, the journal */
    ngx_uint_t                    claim;
    int64_t                       now;
    int64_t                       count;
    int64_t                       oldest;

    ngx_uint_t                    waiting;
    ngx_uint_t                    nitems;
    ngx_http_feed_effects_item_t  items[NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH];
} ngx_http_feed_effects_sweeper_t;


/* the entries a round applied, cleared in a task of their own */
typedef struct {
    ngx_uint_t                    n;
    ngx_http_feed_user_t          users[NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH];
    bson_oid_t                    tokens[NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH];
} ngx_http_feed_effects_swept_t;


static void ngx_http_feed_effects_sweep_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_effects_sweep(ngx_event_t *ev);
static void ngx_http_feed_effects_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_effects_sweep_claimed(void *data,
    ngx_http_feed_effect_due_t *due);
static void ngx_http_feed_effects_sweep_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_effects_sweep_sent(void *data, redisReply *reply);
static void ngx_http_feed_effects_sweep_kept(void *data,
    ngx_uint_t replicated);
static void ngx_http_feed_effects_sweep_end(
    ngx_http_feed_effects_sweeper_t *s);
static void ngx_http_feed_effects_sweep_clear(
    ngx_http_feed_effects_sweeper_t *s);
static void ngx_http_feed_effects_sweep_clear_run(
    ngx_http_feed_mongo_task_t *t, mongoc_client_t *client);
static void ngx_http_feed_effects_sweep_rearm(
    ngx_http_feed_effects_sweeper_t *s, ngx_msec_t after);


static ngx_http_feed_effects_sweeper_t  ngx_http_feed_effects_sweeper;


ngx_int_t
ngx_http_feed_effects_sweep_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_effects_sweeper_t  *s = &ngx_http_feed_effects_sweeper;

    if (ngx_worker != 0 || fmcf->mongo_client == NULL) {
        return NGX_OK;
    }

    s->fmcf = fmcf;
    s->dummy.fd = (ngx_socket_t) -1;

    s->timer.handler = ngx_http_feed_effects_sweep;
    s->timer.data = &s->dummy;
    s->timer.log = cycle->log;
    s->timer.cancelable = 1;

    s->task = ngx_http_feed_mongo_task(cycle->pool, fmcf->mongo_client,
                                       ngx_http_feed_effects_sweep_run,
                                       ngx_http_feed_effects_sweep_done, s);
    if (s->task == NULL) {
        return NGX_ERROR;
    }

    if (fmcf->redis_client
        && ngx_http_feed_redis_on_ready(fmcf->redis_client,
                                        ngx_http_feed_effects_sweep_ready, s)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_add_timer(&s->timer, NGX_HTTP_FEED_EFFECTS_SWEEP_AGAIN);

    return NGX_OK;
}


void
ngx_http_feed_effects_sweep_exit(void)
{
    if (ngx_http_feed_effects_sweeper.timer.timer_set) {
        ngx_del_timer(&ngx_http_feed_effects_sweeper.timer);
    }
}


/* this worker's request left effects over: the next round comes soon */

void
ngx_http_feed_effects_sweep_soon(void)
{
    ngx_http_feed_effects_sweeper_t  *s = &ngx_http_feed_effects_sweeper;

    if (s->fmcf == NULL || s->busy || ngx_exiting) {
        return;
    }

    ngx_add_timer(&s->timer, NGX_HTTP_FEED_EFFECTS_SWEEP_AGAIN);
}


/* Redis is back: what waited for it need not wait for the timer */

static void
ngx_http_feed_effects_sweep_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_effects_sweeper_t  *s = data;

    if (s->busy || ngx_exiting) {
        return;
    }

    if (s->timer.timer_set) {
        ngx_del_timer(&s->timer);
    }

    ngx_http_feed_effects_sweep(&s->timer);
}


static void
ngx_http_feed_effects_sweep(ngx_event_t *ev)
{
    ngx_http_feed_effects_sweeper_t  *s = &ngx_http_feed_effects_sweeper;

    if (ngx_exiting || s->busy) {
        return;
    }

    s->claim = !s->fmcf->redis_enabled
               || ngx_http_feed_redis_state(s->fmcf->redis_client)
                  == NGX_HTTP_FEED_REDIS_UP;
    s->now = ngx_http_feed_now_ms();
    s->nitems = 0;

    if (ngx_http_feed_mongo_post(s->task) != NGX_OK) {
        ngx_http_feed_effects_sweep_rearm(s,
                                          NGX_HTTP_FEED_EFFECTS_SWEEP_EVERY);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ev->log, 0,
                   "feed effects sweep run%s",
                   s->claim ? "" : ", redis is not up: counting only");

    s->busy = 1;
}


/* the journal counted, then the entries due claimed, their MongoDB part */

static void
ngx_http_feed_effects_sweep_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_effects_sweeper_t  *s = t->data;

    ngx_uint_t                     i;
    ngx_http_feed_effects_item_t  *item;

    t->rc = ngx_http_feed_effects_pending(client, t->database, &s->count,
                                          &s->oldest, &t->error);

    if (t->rc != NGX_OK || !s->claim || s->count == 0) {
        return;
    }

    t->rc = ngx_http_feed_effects_claim_due(client, t->database, s->now,
                                            NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH,
                                            ngx_http_feed_effects_sweep_claimed,
                                            s, &t->error);

    for (i = 0; i < s->nitems; i++) {
        item = &s->items[i];

        if (ngx_http_feed_effects_model(client, t->database,
                                        s->fmcf->timeline_store,
                                        &item->due.user, item->due.effects,
                                        &t->error)
            != NGX_OK)
        {
            item->failed = 1;
        }
    }
}


static void
ngx_http_feed_effects_sweep_claimed(void *data,
    ngx_http_feed_effect_due_t *due)
{
    ngx_http_feed_effects_sweeper_t  *s = data;

    ngx_http_feed_effects_item_t  *item;

    if (s->nitems == NGX_HTTP_FEED_EFFECTS_SWEEP_BATCH) {
        return;
    }

    item = &s->items[s->nitems++];
    item->due = *due;
    item->failed = 0;
}


/* back on the event loop: the journal's figures, then the Redis part */

static void
ngx_http_feed_effects_sweep_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_effects_sweeper_t  *s = t->data;

    ngx_int_t                      rc;
    ngx_uint_t                     i, effects;
    ngx_http_feed_effects_item_t  *item;

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, s->timer.log, 0,
                      "effects sweep failed: %s", t->error.message);

    } else if (ngx_http_feed_node_stats) {
        ngx_http_feed_node_stats->effects_pending = (ngx_atomic_t) s->count;
        ngx_http_feed_node_stats->effects_oldest = (ngx_atomic_t) s->oldest;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, s->timer.log, 0,
                   "feed effects sweep done: %i, %L pending, %ui claimed",
                   t->rc, s->count, s->nitems);

    if (s->nitems) {
        ngx_log_error(NGX_LOG_NOTICE, s->timer.log, 0,
                      "effects: applying %ui left over", s->nitems);
    }

    s->waiting = 0;

    for (i = 0; i < s->nitems; i++) {
        item = &s->items[i];
        effects = item->due.effects;

        if (!s->fmcf->redis_enabled) {
            effects &= NGX_HTTP_FEED_EFFECT_MODEL;
        }

        if (item->failed || !(effects & ~NGX_HTTP_FEED_EFFECT_MODEL)) {
            continue;
        }

        rc = ngx_http_feed_effects_send(NULL, s->fmcf, &item->due.user,
                                        effects, NULL,
                                        ngx_http_feed_effects_sweep_sent,
                                        item);

        if (rc == NGX_ERROR || (rc >> 8)) {
            item->failed = 1;
        }

        if (rc != NGX_ERROR) {
            s->waiting += rc & 0xff;
        }
    }

    if (s->waiting == 0) {
        ngx_http_feed_effects_sweep_end(s);
    }
}


static void
ngx_http_feed_effects_sweep_sent(void *data, redisReply *reply)
{
    ngx_http_feed_effects_item_t  *item = data;

    ngx_http_feed_effects_sweeper_t  *s = &ngx_http_feed_effects_sweeper;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        item->failed = 1;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, s->timer.log, 0,
                   "feed effects sweep: \"%s\" %s, %ui to go",
                   item->due.user.data,
                   item->failed ? "failed, tried again later" : "applied",
                   s->waiting - 1);

    if (--s->waiting == 0) {
        ngx_http_feed_effects_sweep_end(s);
    }
}


/*
 * With sentinels, the entries go once a replica has what was applied: a
 * primary lost before takes it along (ngx_http_feed_effects.c)
 */

static void
ngx_http_feed_effects_sweep_end(ngx_http_feed_effects_sweeper_t *s)
{
    if (s->nitems && s->fmcf->redis_barrier
        && ngx_http_feed_redis_barrier_wait(s->fmcf->redis_barrier,
                                            ngx_http_feed_effects_sweep_kept,
                                            s)
           == NGX_OK)
    {
        return;
    }

    ngx_http_feed_effects_sweep_kept(s, 1);
}


/* not known on a replica: the entries stay, applied again at their time */

static void
ngx_http_feed_effects_sweep_kept(void *data, ngx_uint_t replicated)
{
    ngx_http_feed_effects_sweeper_t  *s = data;

    if (replicated) {
        ngx_http_feed_effects_sweep_clear(s);
    }

    ngx_http_feed_effects_sweep_rearm(s, s->nitems
                                         ? NGX_HTTP_FEED_EFFECTS_SWEEP_AGAIN
                                         : NGX_HTTP_FEED_EFFECTS_SWEEP_EVERY);
}


/* the entries applied go, if no write recorded more meanwhile (tokens) */

static void
ngx_http_feed_effects_sweep_clear(ngx_http_feed_effects_sweeper_t *s)
{
    ngx_uint_t                      i, failed;
    ngx_http_feed_mongo_task_t     *t;
    ngx_http_feed_effects_swept_t  *sw;

    if (s->nitems == 0) {
        return;
    }

    t = ngx_http_feed_mongo_task_bg(s->fmcf->mongo_client,
                                    ngx_http_feed_effects_sweep_clear_run,
                                    NULL);
    if (t == NULL) {
        return;
    }

    sw = ngx_palloc(t->pool, sizeof(ngx_http_feed_effects_swept_t));
    if (sw == NULL) {
        ngx_destroy_pool(t->pool);
        return;
    }

    sw->n = 0;
    failed = 0;

    for (i = 0; i < s->nitems; i++) {
        if (s->items[i].failed) {
            failed++;
            continue;
        }

        sw->users[sw->n] = s->items[i].due.user;
        bson_oid_copy(&s->items[i].due.token, &sw->tokens[sw->n++]);
    }

    ngx_http_feed_stat(effects_swept, sw->n);
    ngx_http_feed_stat(effects_failed, failed);

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, s->timer.log, 0,
                   "feed effects sweep: %ui applied, %ui failed", sw->n,
                   failed);

    t->data = sw;

    if (sw->n == 0) {
        ngx_destroy_pool(t->pool);
        return;
    }

    (void) ngx_http_feed_mongo_post_bg(t);
}


static void
ngx_http_feed_effects_sweep_clear_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_effects_swept_t  *sw = t->data;

    t->rc = ngx_http_feed_effects_clear(client, t->database, sw->users, sw->n,
                                        sw->tokens, &t->error);
}


static void
ngx_http_feed_effects_sweep_rearm(ngx_http_feed_effects_sweeper_t *s,
    ngx_msec_t after)
{
    s->busy = 0;

    if (!ngx_exiting) {
        ngx_add_timer(&s->timer, after);
    }
}
