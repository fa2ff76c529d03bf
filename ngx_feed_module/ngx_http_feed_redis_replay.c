
/*
 * ngx_feed_module: idempotent writes replayed when Redis is back.
 *
 * A store whose write could not reach a running Redis (dropping a user's
 * cached counts or timeline) has it remembered here, by user and kind,
 * and sent again as soon as the connection is ready; being idempotent,
 * a write sent twice does no harm.  Each kind is a store's send function.
 * Only so many users wait: past that, the store's TTLs bound what stays
 * stale, and its message says so once.
 */


#include "ngx_http_feed_redis.h"


#define NGX_HTTP_FEED_REPLAY_MAX    1024
#define NGX_HTTP_FEED_REPLAY_KINDS  4


typedef enum {
    NGX_HTTP_FEED_REPLAY_FREE = 0,
    NGX_HTTP_FEED_REPLAY_WAITING,
    NGX_HTTP_FEED_REPLAY_SENT
} ngx_http_feed_replay_state_e;


typedef struct {
    ngx_http_feed_redis_replay_pt  send;
    const char                    *full;
    ngx_uint_t                     dropped;
} ngx_http_feed_replay_kind_t;


typedef struct {
    ngx_http_feed_user_t           user;
    ngx_http_feed_replay_state_e   state;
    ngx_uint_t                     kinds;     /* a bit per kind */
    ngx_uint_t                     inflight;
    ngx_uint_t                     failed;
} ngx_http_feed_replay_t;


static void ngx_http_feed_redis_replay_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_redis_replay_sent(void *data, redisReply *reply);


static ngx_http_feed_replay_t
    ngx_http_feed_replays[NGX_HTTP_FEED_REPLAY_MAX];
static ngx_http_feed_replay_kind_t
    ngx_http_feed_replay_kinds[NGX_HTTP_FEED_REPLAY_KINDS];
static ngx_uint_t  ngx_http_feed_replay_nkinds;


/*
 * A kind of write, replayed on rd's connection; full: the message logged
 * when the list is full.  Returns the kind's number.
 */

ngx_int_t
ngx_http_feed_redis_replay_add(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_replay_pt send, const char *full)
{
    ngx_http_feed_replay_kind_t  *k;

    if (ngx_http_feed_replay_nkinds == NGX_HTTP_FEED_REPLAY_KINDS) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_replay_nkinds == 0
        && ngx_http_feed_redis_on_ready(rd, ngx_http_feed_redis_replay_ready,
                                        NULL)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    k = &ngx_http_feed_replay_kinds[ngx_http_feed_replay_nkinds];
    k->send = send;
    k->full = full;
    k->dropped = 0;

    return ngx_http_feed_replay_nkinds++;
}


/* a write for a request: one that cannot be sent now is replayed later */

ngx_int_t
ngx_http_feed_redis_replay_send(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_int_t kind, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_replay_kinds[kind].send(r, rd, user, handler, data);

    if (rc == NGX_DECLINED) {
        ngx_http_feed_redis_replay(kind, user);
    }

    return rc;
}


/* a write sent whose answer was an error (or none): sent again later */

void
ngx_http_feed_redis_replay(ngx_int_t kind, ngx_http_feed_user_t *user)
{
    ngx_uint_t                    i;
    ngx_http_feed_replay_t       *d, *free;
    ngx_http_feed_replay_kind_t  *k;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed redis replay: write %i of \"%s\" remembered",
                   kind, user->data);

    free = NULL;

    for (i = 0; i < NGX_HTTP_FEED_REPLAY_MAX; i++) {
        d = &ngx_http_feed_replays[i];

        if (d->state == NGX_HTTP_FEED_REPLAY_FREE) {
            if (free == NULL) {
                free = d;
            }

            continue;
        }

        if (d->user.len == user->len
            && ngx_strcmp(d->user.data, user->data) == 0)
        {
            d->kinds |= 1 << kind;
            d->state = NGX_HTTP_FEED_REPLAY_WAITING;
            return;
        }
    }

    if (free == NULL) {
        k = &ngx_http_feed_replay_kinds[kind];

        if (k->dropped++ == 0) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0, "%s", k->full);
        }

        return;
    }

    free->user = *user;
    free->kinds = 1 << kind;
    free->state = NGX_HTTP_FEED_REPLAY_WAITING;
}


static void
ngx_http_feed_redis_replay_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_uint_t                    i, n;
    ngx_http_feed_replay_t       *d;
    ngx_http_feed_replay_kind_t  *k;

    for (n = 0; n < ngx_http_feed_replay_nkinds; n++) {
        ngx_http_feed_replay_kinds[n].dropped = 0;
    }

    for (i = 0; i < NGX_HTTP_FEED_REPLAY_MAX; i++) {
        d = &ngx_http_feed_replays[i];

        if (d->state != NGX_HTTP_FEED_REPLAY_WAITING) {
            continue;
        }

        d->inflight = 0;
        d->failed = 0;

        for (n = 0; n < ngx_http_feed_replay_nkinds; n++) {
            k = &ngx_http_feed_replay_kinds[n];

            if ((d->kinds & (1 << n))
                && k->send(NULL, rd, &d->user,
                           ngx_http_feed_redis_replay_sent, d)
                   == NGX_OK)
            {
                d->inflight++;
            }
        }

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "feed redis replay of \"%s\": %ui writes sent",
                       d->user.data, d->inflight);

        if (d->inflight) {
            d->state = NGX_HTTP_FEED_REPLAY_SENT;
        }
    }
}


static void
ngx_http_feed_redis_replay_sent(void *data, redisReply *reply)
{
    ngx_http_feed_replay_t  *d = data;

    /* a write remembered again meanwhile stays waiting */

    if (d->state != NGX_HTTP_FEED_REPLAY_SENT) {
        return;
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        d->failed = 1;
    }

    if (--d->inflight) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed redis replay of \"%s\": %s", d->user.data,
                   d->failed ? "failed, kept for the next time" : "replayed");

    if (d->failed) {
        d->state = NGX_HTTP_FEED_REPLAY_WAITING;
        return;
    }

    d->state = NGX_HTTP_FEED_REPLAY_FREE;
    d->kinds = 0;
}
