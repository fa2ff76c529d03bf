
/*
 * ngx_feed_module: a replication barrier.  Redis replicates to its
 * replicas asynchronously: a write a primary acknowledged and had not sent
 * on is lost when a replica is promoted (Sentinel).  A caller that must
 * not forget a write before a replica has it (the outbox clearing a post's
 * queue entry, the effects journal a write's cache side effects) waits
 * here: on a connection of its own, the worker sends
 * INCR feed:barrier after the writes were answered, then WAIT 1 <ms> and
 * ROLE: when a replica has the INCR, it has every write before it.  One
 * round at a time, for every waiter that came before it; waiters that come
 * meanwhile wait for the next.  A primary without any replica connected
 * has nothing to wait for: the writes are as safe as they can be.
 */


#include "ngx_http_feed_redis_connection.h"
#include "ngx_http_feed_keys.h"


typedef struct ngx_http_feed_barrier_waiter_s  ngx_http_feed_barrier_waiter_t;

struct ngx_http_feed_barrier_waiter_s {
    ngx_http_feed_barrier_waiter_t   *next;
    ngx_http_feed_redis_barrier_pt    handler;
    void                             *data;

    /* a request's: its end takes the handler away (wait_r()) */
    ngx_pool_cleanup_t               *cleanup;
};


struct ngx_http_feed_redis_barrier_s {
    ngx_http_feed_redis_t            *rd;
    ngx_log_t                        *log;

    /* the round in flight, and those for the next one */
    ngx_http_feed_barrier_waiter_t   *round;
    ngx_http_feed_barrier_waiter_t   *next;
    ngx_http_feed_barrier_waiter_t   *free;
    ngx_uint_t                        tried;
    ngx_uint_t                        sent;
    ngx_uint_t                        replies;
    ngx_int_t                         acked;
    ngx_int_t                         replicas;

    /* the worker's exit: a request's handler is not called any more */
    ngx_uint_t                        exiting;

    u_char                            wait_ms[NGX_INT_T_LEN];
    size_t                            wait_len;
};


static void ngx_http_feed_barrier_round(ngx_http_feed_redis_barrier_t *b);
static void ngx_http_feed_barrier_send(ngx_http_feed_redis_barrier_t *b,
    ngx_http_feed_redis_args_t *args);
static void ngx_http_feed_barrier_replied(void *data, redisReply *reply);
static void ngx_http_feed_barrier_end(ngx_http_feed_redis_barrier_t *b,
    ngx_uint_t replicated);
static void ngx_http_feed_barrier_cleanup(void *data);
static ngx_http_feed_barrier_waiter_t *ngx_http_feed_barrier_add(
    ngx_http_feed_redis_barrier_t *b, ngx_http_feed_redis_barrier_pt handler,
    void *data);


ngx_http_feed_redis_barrier_t *
ngx_http_feed_redis_barrier_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_barrier_t  *b;

    b = ngx_calloc(sizeof(ngx_http_feed_redis_barrier_t), cycle->log);
    if (b == NULL) {
        return NULL;
    }

    b->log = cycle->log;

    /* half the command's timeout: WAIT answers before the timer fires */

    b->wait_len = ngx_sprintf(b->wait_ms, "%M",
                              ngx_max(conf->timeout / 2, 1))
                  - b->wait_ms;

    b->rd = ngx_http_feed_redis_create(cycle, conf);
    if (b->rd == NULL) {
        ngx_free(b);
        return NULL;
    }

    ngx_http_feed_redis_start(b->rd);

    return b;
}


/* at the worker's exit: who still waits hears the writes were not kept */

void
ngx_http_feed_redis_barrier_destroy(ngx_http_feed_redis_barrier_t *b)
{
    ngx_http_feed_barrier_waiter_t  *w;

    if (b == NULL) {
        return;
    }

    b->next = NULL;
    b->exiting = 1;
    ngx_http_feed_barrier_end(b, 0);

    ngx_http_feed_redis_destroy(b->rd);

    while (b->free) {
        w = b->free;
        b->free = w->next;
        ngx_free(w);
    }

    ngx_free(b);
}


/*
 * handler(data, replicated) once a replica has every write answered
 * before this call, or once that could not be known (replicated 0).
 * NGX_ERROR: out of memory, the handler is not called.
 */

ngx_int_t
ngx_http_feed_redis_barrier_wait(ngx_http_feed_redis_barrier_t *b,
    ngx_http_feed_redis_barrier_pt handler, void *data)
{
    if (ngx_http_feed_barrier_add(b, handler, data) == NULL) {
        return NGX_ERROR;
    }

    if (b->round == NULL) {
        ngx_http_feed_barrier_round(b);
    }

    return NGX_OK;
}


/* the same for a request: its handler is not called once it is over */

ngx_int_t
ngx_http_feed_redis_barrier_wait_r(ngx_http_request_t *r,
    ngx_http_feed_redis_barrier_t *b, ngx_http_feed_redis_barrier_pt handler,
    void *data)
{
    ngx_pool_cleanup_t              *cln;
    ngx_http_feed_barrier_waiter_t  *w;

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    w = ngx_http_feed_barrier_add(b, handler, data);
    if (w == NULL) {
        return NGX_ERROR;
    }

    w->cleanup = cln;
    cln->handler = ngx_http_feed_barrier_cleanup;
    cln->data = w;

    if (b->round == NULL) {
        ngx_http_feed_barrier_round(b);
    }

    return NGX_OK;
}


/* a waiter for the next round */

static ngx_http_feed_barrier_waiter_t *
ngx_http_feed_barrier_add(ngx_http_feed_redis_barrier_t *b,
    ngx_http_feed_redis_barrier_pt handler, void *data)
{
    ngx_http_feed_barrier_waiter_t  *w;

    w = b->free;

    if (w) {
        b->free = w->next;

    } else {
        w = ngx_alloc(sizeof(ngx_http_feed_barrier_waiter_t), b->log);
        if (w == NULL) {
            return NULL;
        }
    }

    w->handler = handler;
    w->data = data;
    w->cleanup = NULL;
    w->next = b->next;
    b->next = w;

    return w;
}


static void
ngx_http_feed_barrier_cleanup(void *data)
{
    ngx_http_feed_barrier_waiter_t  *w = data;

    w->handler = NULL;
    w->cleanup = NULL;
}


static void
ngx_http_feed_barrier_round(ngx_http_feed_redis_barrier_t *b)
{
    const char                  *argv[3];
    size_t                       argvlen[3];
    ngx_http_feed_redis_args_t   args;

    b->round = b->next;
    b->next = NULL;
    b->tried = 0;
    b->sent = 0;
    b->replies = 0;
    b->acked = -1;
    b->replicas = -1;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "INCR");
    ngx_http_feed_redis_args_key(&args, NGX_HTTP_FEED_KEY_BARRIER,
                                 sizeof(NGX_HTTP_FEED_KEY_BARRIER) - 1);
    ngx_http_feed_barrier_send(b, &args);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "WAIT");
    ngx_http_feed_redis_args_lit(&args, "1");
    ngx_http_feed_redis_args_add(&args, b->wait_ms, b->wait_len);
    ngx_http_feed_barrier_send(b, &args);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "ROLE");
    ngx_http_feed_barrier_send(b, &args);

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, b->log, 0,
                   "feed redis barrier: a round, %ui commands sent", b->sent);

    /* not connected: the writes cannot be known to be on a replica */

    if (b->sent == 0) {
        ngx_http_feed_barrier_end(b, 0);
    }
}


/* the three go together or not at all: one missing, the rest is moot */

static void
ngx_http_feed_barrier_send(ngx_http_feed_redis_barrier_t *b,
    ngx_http_feed_redis_args_t *args)
{
    if (b->sent == b->tried++
        && ngx_http_feed_redis_send(b->rd, ngx_http_feed_barrier_replied, b,
                                    args)
           != NULL)
    {
        b->sent++;
    }
}


/* INCR's reply, WAIT's (how many replicas have it), ROLE's (how many) */

static void
ngx_http_feed_barrier_replied(void *data, redisReply *reply)
{
    ngx_http_feed_redis_barrier_t  *b = data;

    ngx_uint_t  n;

    n = b->replies++;

    if (reply && n == 1 && b->sent == 3 && reply->type == REDIS_REPLY_INTEGER) {
        b->acked = (ngx_int_t) reply->integer;

    } else if (reply && n == 2 && reply->type == REDIS_REPLY_ARRAY
               && reply->elements >= 3
               && reply->element[2]->type == REDIS_REPLY_ARRAY)
    {
        b->replicas = (ngx_int_t) reply->element[2]->elements;
    }

    if (b->replies < b->sent) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, b->log, 0,
                   "feed redis barrier: %i replicas acked, %i connected",
                   b->acked, b->replicas);

    /* a partial round knows nothing: acked and replicas stay -1 */

    ngx_http_feed_barrier_end(b, b->acked > 0 || b->replicas == 0);
}


static void
ngx_http_feed_barrier_end(ngx_http_feed_redis_barrier_t *b,
    ngx_uint_t replicated)
{
    ngx_http_feed_barrier_waiter_t  *w, *round;

    round = b->round;
    b->round = NULL;

    if (!replicated && round) {
        ngx_log_error(NGX_LOG_INFO, b->log, 0,
                      "redis writes not known to be on a replica, kept to "
                      "be written again");
    }

    while (round) {
        w = round;
        round = w->next;

        if (w->cleanup) {
            w->cleanup->handler = NULL;
            w->cleanup = NULL;

            if (b->exiting) {
                w->handler = NULL;
            }
        }

        if (w->handler) {
            w->handler(w->data, replicated);
        }

        w->next = b->free;
        b->free = w;
    }

    if (b->next) {
        ngx_http_feed_barrier_round(b);
    }
}
