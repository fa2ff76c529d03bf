
/*
 * ngx_feed_module: follow counts cached in Redis in front of MongoDB.
 *
 * A hash per user, "feed:cnt:<user>" {following, followers, gen, rid}.  A
 * write bumps "gen" and drops the counts after MongoDB has the new ones; a
 * reader that missed fills the cache back only if "gen" is still what it
 * saw before reading MongoDB, so an old count read before a write can never
 * be put back after it.
 *
 * "rid" is the run_id of the redis-server that cached the counts: after a
 * restart (from a snapshot older than the last writes, or a failover) the
 * counts of an earlier incarnation are not trusted.  A write that could not
 * reach a running Redis is remembered by the worker and its invalidation
 * replayed as soon as Redis is back; the TTL bounds what is left only if
 * more than NGX_HTTP_FEED_COUNTS_DEFER such writes pile up meanwhile.
 */


#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_timeline.h"


#define NGX_HTTP_FEED_COUNTS_PREFIX  "feed:cnt:"
#define NGX_HTTP_FEED_COUNTS_TTL     "600"
#define NGX_HTTP_FEED_COUNTS_DEFER   1024


typedef enum {
    NGX_HTTP_FEED_COUNTS_FREE = 0,
    NGX_HTTP_FEED_COUNTS_WAITING,
    NGX_HTTP_FEED_COUNTS_SENT
} ngx_http_feed_counts_state_e;


typedef struct {
    ngx_http_feed_user_t          user;
    ngx_http_feed_counts_state_e  state;
    ngx_uint_t                    what;
    ngx_uint_t                    inflight;
    ngx_uint_t                    failed;
} ngx_http_feed_counts_deferred_t;


static const char  ngx_http_feed_counts_warm_lua[] =
    "local g = redis.call('hget', KEYS[1], 'gen') or '' "
    "if g ~= ARGV[3] then return 0 end "
    "if redis.call('hget', KEYS[1], 'rid') ~= ARGV[5] then "
    "  redis.call('hdel', KEYS[1], 'following', 'followers') "
    "end "
    "redis.call('hset', KEYS[1], ARGV[1], ARGV[2], 'rid', ARGV[5]) "
    "redis.call('expire', KEYS[1], ARGV[4]) "
    "return 1";

static const char  ngx_http_feed_counts_invalidate_lua[] =
    "redis.call('hincrby', KEYS[1], 'gen', 1) "
    "redis.call('hdel', KEYS[1], 'following', 'followers') "
    "redis.call('expire', KEYS[1], ARGV[1]) "
    "return 1";


static size_t ngx_http_feed_counts_key(char *buf,
    ngx_http_feed_user_t *user);
static ngx_int_t ngx_http_feed_counts_send_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);
static void ngx_http_feed_counts_replay(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_counts_replayed(void *data, redisReply *reply);


static ngx_http_feed_counts_deferred_t
    ngx_http_feed_counts_deferred[NGX_HTTP_FEED_COUNTS_DEFER];
static ngx_uint_t                  ngx_http_feed_counts_dropped;
static ngx_http_feed_main_conf_t  *ngx_http_feed_counts_fmcf;


ngx_int_t
ngx_http_feed_counts_init(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_counts_fmcf = fmcf;

    return ngx_http_feed_redis_on_ready(fmcf->redis_client,
                                        ngx_http_feed_counts_replay, NULL);
}


ngx_int_t
ngx_http_feed_counts_lookup(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    ngx_http_feed_user_t *user, const char *field,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         key[sizeof(NGX_HTTP_FEED_COUNTS_PREFIX)
                     + NGX_HTTP_FEED_USER_MAX];
    size_t       argvlen[5];
    const char  *argv[5];

    if (ngx_http_feed_redis_run_id(rd) == NULL) {
        return NGX_DECLINED;
    }

    argv[0] = "HMGET";
    argvlen[0] = 5;
    argv[1] = key;
    argvlen[1] = ngx_http_feed_counts_key(key, user);
    argv[2] = field;
    argvlen[2] = ngx_strlen(field);
    argv[3] = "gen";
    argvlen[3] = 3;
    argv[4] = "rid";
    argvlen[4] = 3;

    return ngx_http_feed_redis_send_r(r, rd, handler, data, 5, argv,
                                      argvlen);
}


/* NGX_OK with the cached count, NGX_DECLINED on a miss */

ngx_int_t
ngx_http_feed_counts_parse(ngx_http_feed_redis_t *rd, redisReply *reply,
    int64_t *count, ngx_http_feed_counts_gen_t *gen)
{
    ngx_int_t    n;
    const char  *run_id;
    redisReply  *c, *g, *rid;

    gen->len = 0;
    gen->data[0] = '\0';

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3)
    {
        return NGX_DECLINED;
    }

    c = reply->element[0];
    g = reply->element[1];
    rid = reply->element[2];

    if (g->type == REDIS_REPLY_STRING && g->len < sizeof(gen->data)) {
        ngx_memcpy(gen->data, g->str, g->len);
        gen->data[g->len] = '\0';
        gen->len = g->len;
    }

    run_id = ngx_http_feed_redis_run_id(rd);

    if (c->type != REDIS_REPLY_STRING || rid->type != REDIS_REPLY_STRING
        || run_id == NULL || rid->len != ngx_strlen(run_id)
        || ngx_strncmp(rid->str, run_id, rid->len) != 0)
    {
        return NGX_DECLINED;
    }

    n = ngx_atoi((u_char *) c->str, c->len);
    if (n == NGX_ERROR) {
        return NGX_DECLINED;
    }

    *count = n;

    return NGX_OK;
}


/* fire and forget: a reader does not wait for the cache to be filled */

void
ngx_http_feed_counts_warm(ngx_http_feed_redis_t *rd,
    ngx_http_feed_user_t *user, const char *field, int64_t count,
    ngx_http_feed_counts_gen_t *gen)
{
    char         key[sizeof(NGX_HTTP_FEED_COUNTS_PREFIX)
                     + NGX_HTTP_FEED_USER_MAX];
    u_char       value[NGX_INT64_LEN];
    size_t       argvlen[9];
    const char  *argv[9];
    const char  *run_id;

    run_id = ngx_http_feed_redis_run_id(rd);
    if (run_id == NULL) {
        return;
    }

    argv[0] = "EVAL";
    argvlen[0] = 4;
    argv[1] = ngx_http_feed_counts_warm_lua;
    argvlen[1] = sizeof(ngx_http_feed_counts_warm_lua) - 1;
    argv[2] = "1";
    argvlen[2] = 1;
    argv[3] = key;
    argvlen[3] = ngx_http_feed_counts_key(key, user);
    argv[4] = field;
    argvlen[4] = ngx_strlen(field);
    argv[5] = (const char *) value;
    argvlen[5] = ngx_sprintf(value, "%L", count) - value;
    argv[6] = gen->data;
    argvlen[6] = gen->len;
    argv[7] = NGX_HTTP_FEED_COUNTS_TTL;
    argvlen[7] = sizeof(NGX_HTTP_FEED_COUNTS_TTL) - 1;
    argv[8] = run_id;
    argvlen[8] = ngx_strlen(run_id);

    (void) ngx_http_feed_redis_send(rd, NULL, NULL, 9, argv, argvlen);
}


ngx_int_t
ngx_http_feed_counts_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_counts_send_invalidate(r, rd, user, handler, data);

    if (rc == NGX_DECLINED) {
        ngx_http_feed_counts_defer(user, NGX_HTTP_FEED_DEFER_COUNTS);
    }

    return rc;
}


/*
 * Remembers a user whose cached counts (or timeline) could not be
 * dropped; both are idempotent, so they are simply sent again.
 */

void
ngx_http_feed_counts_defer(ngx_http_feed_user_t *user, ngx_uint_t what)
{
    ngx_uint_t                        i;
    ngx_http_feed_counts_deferred_t  *d, *free;

    free = NULL;

    for (i = 0; i < NGX_HTTP_FEED_COUNTS_DEFER; i++) {
        d = &ngx_http_feed_counts_deferred[i];

        if (d->state == NGX_HTTP_FEED_COUNTS_FREE) {
            if (free == NULL) {
                free = d;
            }

            continue;
        }

        if (d->user.len == user->len
            && ngx_strcmp(d->user.data, user->data) == 0)
        {
            d->what |= what;
            d->state = NGX_HTTP_FEED_COUNTS_WAITING;
            return;
        }
    }

    if (free == NULL) {
        if (ngx_http_feed_counts_dropped++ == 0) {
            ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                          "too many count invalidations waiting for redis, "
                          "cached counts may be stale for up to %ss",
                          NGX_HTTP_FEED_COUNTS_TTL);
        }

        return;
    }

    free->user = *user;
    free->what = what;
    free->state = NGX_HTTP_FEED_COUNTS_WAITING;
}


static void
ngx_http_feed_counts_replay(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_uint_t                        i;
    ngx_http_feed_counts_deferred_t  *d;

    ngx_http_feed_counts_dropped = 0;

    for (i = 0; i < NGX_HTTP_FEED_COUNTS_DEFER; i++) {
        d = &ngx_http_feed_counts_deferred[i];

        if (d->state != NGX_HTTP_FEED_COUNTS_WAITING) {
            continue;
        }

        d->inflight = 0;
        d->failed = 0;

        if ((d->what & NGX_HTTP_FEED_DEFER_COUNTS)
            && ngx_http_feed_counts_send_invalidate(NULL, rd, &d->user,
                                                ngx_http_feed_counts_replayed,
                                                d)
               == NGX_OK)
        {
            d->inflight++;
        }

        if ((d->what & NGX_HTTP_FEED_DEFER_TIMELINE)
            && ngx_http_feed_timeline_cache_drop(NULL,
                                                 ngx_http_feed_counts_fmcf,
                                                 &d->user,
                                                 ngx_http_feed_counts_replayed,
                                                 d)
               == NGX_OK)
        {
            d->inflight++;
        }

        if (d->inflight) {
            d->state = NGX_HTTP_FEED_COUNTS_SENT;
        }
    }
}


static void
ngx_http_feed_counts_replayed(void *data, redisReply *reply)
{
    ngx_http_feed_counts_deferred_t  *d = data;

    /* a write deferred again meanwhile stays waiting */

    if (d->state != NGX_HTTP_FEED_COUNTS_SENT) {
        return;
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        d->failed = 1;
    }

    if (--d->inflight) {
        return;
    }

    if (d->failed) {
        d->state = NGX_HTTP_FEED_COUNTS_WAITING;
        return;
    }

    d->state = NGX_HTTP_FEED_COUNTS_FREE;
    d->what = 0;
}


static ngx_int_t
ngx_http_feed_counts_send_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         key[sizeof(NGX_HTTP_FEED_COUNTS_PREFIX)
                     + NGX_HTTP_FEED_USER_MAX];
    size_t       argvlen[5];
    const char  *argv[5];

    argv[0] = "EVAL";
    argvlen[0] = 4;
    argv[1] = ngx_http_feed_counts_invalidate_lua;
    argvlen[1] = sizeof(ngx_http_feed_counts_invalidate_lua) - 1;
    argv[2] = "1";
    argvlen[2] = 1;
    argv[3] = key;
    argvlen[3] = ngx_http_feed_counts_key(key, user);
    argv[4] = NGX_HTTP_FEED_COUNTS_TTL;
    argvlen[4] = sizeof(NGX_HTTP_FEED_COUNTS_TTL) - 1;

    if (r) {
        return ngx_http_feed_redis_send_r(r, rd, handler, data, 5, argv,
                                          argvlen);
    }

    return ngx_http_feed_redis_send(rd, handler, data, 5, argv, argvlen)
           ? NGX_OK : NGX_DECLINED;
}


static size_t
ngx_http_feed_counts_key(char *buf, ngx_http_feed_user_t *user)
{
    u_char  *p;

    p = ngx_cpymem(buf, NGX_HTTP_FEED_COUNTS_PREFIX,
                   sizeof(NGX_HTTP_FEED_COUNTS_PREFIX) - 1);
    p = ngx_cpymem(p, user->data, user->len);

    return p - (u_char *) buf;
}
