
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
 * counts of an earlier incarnation are not trusted.  An invalidation that
 * Redis could not take is applied again from the journal of cache side
 * effects (ngx_http_feed_effects.c).
 */


#include "ngx_http_feed_counts.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"


#define NGX_HTTP_FEED_COUNTS_TTL     "600"


static size_t ngx_http_feed_counts_key(char *buf,
    ngx_http_feed_user_t *user);
static ngx_int_t ngx_http_feed_counts_send_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);


ngx_int_t
ngx_http_feed_counts_lookup(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    ngx_http_feed_user_t *user, const char *field,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        key[sizeof(NGX_HTTP_FEED_KEY_FOLLOW_COUNTS)
                                    + NGX_HTTP_FEED_USER_MAX];
    size_t                      argvlen[5];
    const char                 *argv[5];
    ngx_http_feed_redis_args_t  args;

    if (ngx_http_feed_redis_run_id(rd) == NULL) {
        return NGX_DECLINED;
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "HMGET");
    ngx_http_feed_redis_args_key(&args, key,
                                 ngx_http_feed_counts_key(key, user));
    ngx_http_feed_redis_args_add(&args, field, ngx_strlen(field));
    ngx_http_feed_redis_args_lit(&args, "gen");
    ngx_http_feed_redis_args_lit(&args, "rid");

    return ngx_http_feed_redis_send_r(r, rd, handler, data, &args);
}


/* NGX_OK with the cached count, NGX_DECLINED on a miss */

ngx_int_t
ngx_http_feed_counts_parse(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    redisReply *reply, int64_t *count, ngx_http_feed_counts_gen_t *gen)
{
    ngx_int_t    n;
    const char  *run_id;
    redisReply  *c, *g, *rid;

    gen->len = 0;
    gen->data[0] = '\0';

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3)
    {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed counts miss: no answer");
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
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed counts miss, gen \"%s\"", gen->data);
        return NGX_DECLINED;
    }

    n = ngx_atoi((u_char *) c->str, c->len);
    if (n == NGX_ERROR) {
        ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed counts miss: not a count");
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed counts hit: %i, gen \"%s\"", n, gen->data);

    *count = n;

    return NGX_OK;
}


/* fire and forget: a reader does not wait for the cache to be filled */

void
ngx_http_feed_counts_warm(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    ngx_http_feed_user_t *user, const char *field, int64_t count,
    ngx_http_feed_counts_gen_t *gen)
{
    char                        key[sizeof(NGX_HTTP_FEED_KEY_FOLLOW_COUNTS)
                                    + NGX_HTTP_FEED_USER_MAX];
    u_char                      value[NGX_INT64_LEN];
    size_t                      argvlen[NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARGC];
    const char                 *run_id;
    ngx_http_feed_redis_call_t  call;

    run_id = ngx_http_feed_redis_run_id(rd);
    if (run_id == NULL) {
        return;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed counts of \"%s\": warming %s %L, gen \"%s\"",
                   user->data, field, count, gen->data);

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_counts_warm,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_NARGS);

    ngx_http_feed_redis_call_key(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_KEY_COUNTS,
        key, ngx_http_feed_counts_key(key, user));

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARG_FIELD, field, ngx_strlen(field));
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARG_VALUE,
        value, ngx_sprintf(value, "%L", count) - value);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARG_GEN, gen->data, gen->len);
    ngx_http_feed_redis_call_lit(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARG_TTL, NGX_HTTP_FEED_COUNTS_TTL);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_WARM_ARG_RUN_ID,
        run_id, ngx_strlen(run_id));

    (void) ngx_http_feed_redis_call(NULL, rd, &call, NULL, NULL);
}


/*
 * The user's counts changed in MongoDB: the cached ones go, and the
 * generation moves so that no reader fills them back from before.
 * NGX_DECLINED when Redis is not connected; r may be NULL (a sweeper).
 */

ngx_int_t
ngx_http_feed_counts_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    ngx_log_debug1(NGX_LOG_DEBUG_HTTP,
                   r ? r->connection->log : ngx_cycle->log, 0,
                   "feed counts of \"%s\": invalidating", user->data);

    return ngx_http_feed_counts_send_invalidate(r, rd, user, handler, data);
}


static ngx_int_t
ngx_http_feed_counts_send_invalidate(ngx_http_request_t *r,
    ngx_http_feed_redis_t *rd, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        key[sizeof(NGX_HTTP_FEED_KEY_FOLLOW_COUNTS)
                                    + NGX_HTTP_FEED_USER_MAX];
    size_t                      argvlen[
                                   NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_ARGC];
    const char                 *argv[
                                   NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_http_feed_redis_call_init(&call,
                                  &ngx_http_feed_script_counts_invalidate,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_NARGS);

    ngx_http_feed_redis_call_key(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_KEY_COUNTS,
        key, ngx_http_feed_counts_key(key, user));

    ngx_http_feed_redis_call_lit(&call,
        NGX_HTTP_FEED_SCRIPT_COUNTS_INVALIDATE_ARG_TTL,
        NGX_HTTP_FEED_COUNTS_TTL);

    return ngx_http_feed_redis_call(r, rd, &call, handler, data);
}


static size_t
ngx_http_feed_counts_key(char *buf, ngx_http_feed_user_t *user)
{
    u_char  *p;

    p = ngx_cpymem(buf, NGX_HTTP_FEED_KEY_FOLLOW_COUNTS,
                   sizeof(NGX_HTTP_FEED_KEY_FOLLOW_COUNTS) - 1);
    p = ngx_cpymem(p, user->data, user->len);

    return p - (u_char *) buf;
}
