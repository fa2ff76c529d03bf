
/*
 * ngx_feed_module: the seen store, the posts each reader saw.
 *
 * One Bloom filter per generation and reader, made of plain bit strings
 * by the scripts (scripts/lib/seen.lua; Debian's Redis has no Bloom
 * module): "feed:sn:{<user>}" the state (current generation, how many
 * ids it took, each generation's size and hash scheme),
 * "feed:snb<gen>:{<user>}" the bits.  A generation takes
 * feed_seen_capacity ids, then the next one starts and the one before it
 * is dropped: at most two live.  A post is seen while the generation
 * that took it lives (no false negative), and a post never sent is taken
 * for seen with at most feed_seen_error (a false positive).  All keys
 * are in the user's hash tag, so that one script reaches them on a Redis
 * Cluster.
 */


#include "ngx_http_feed_seen_store.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"


static ngx_int_t ngx_http_feed_seen_call(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_script_t *script,
    ngx_http_feed_user_t *user, u_char *ids, ngx_uint_t n, ngx_str_t *args,
    ngx_http_feed_redis_pt handler, void *data);


/*
 * The ids (n of 24 hex digits, one after the other) added to the user's
 * filters in one script call: all or none.  NGX_DECLINED: Redis is
 * unavailable.
 */

ngx_int_t
ngx_http_feed_seen_add(ngx_http_request_t *r, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, u_char *ids, ngx_uint_t n,
    ngx_http_feed_redis_pt handler, void *data)
{
    u_char      *p;
    ngx_str_t    args[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_NARGS];
    ngx_uint_t   i, value[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_NARGS];

    value[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_ARG_CAPACITY] = fmcf->seen_capacity;
    value[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_ARG_M] = fmcf->seen_bits;
    value[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_ARG_K] = fmcf->seen_hashes;

    /* a reader who stops sending ids frees them, as one who stops reading */
    value[NGX_HTTP_FEED_SCRIPT_SEEN_ADD_ARG_TTL] = (ngx_uint_t) fmcf->cache_ttl;

    p = ngx_pnalloc(r->pool, NGX_HTTP_FEED_SCRIPT_SEEN_ADD_NARGS
                             * NGX_INT_T_LEN);
    if (p == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < NGX_HTTP_FEED_SCRIPT_SEEN_ADD_NARGS; i++) {
        args[i].data = p;
        p = ngx_sprintf(p, "%ui", value[i]);
        args[i].len = p - args[i].data;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed seen of \"%s\": adding %ui ids", user->data, n);

    return ngx_http_feed_seen_call(r, fmcf, &ngx_http_feed_script_seen_add,
                                   user, ids, n, args, handler, data);
}


/* NGX_OK when the add's script answered, whatever it held before */

ngx_int_t
ngx_http_feed_seen_added(redisReply *reply)
{
    return (reply != NULL && reply->type == REDIS_REPLY_ARRAY
            && reply->elements == 2)
           ? NGX_OK : NGX_DECLINED;
}


/* which of the ids the user saw, in one script call */

ngx_int_t
ngx_http_feed_seen_check(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    u_char *ids, ngx_uint_t n, ngx_http_feed_redis_pt handler, void *data)
{
    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed seen of \"%s\": checking %ui ids", user->data, n);

    return ngx_http_feed_seen_call(r, fmcf, &ngx_http_feed_script_seen_check,
                                   user, ids, n, NULL, handler, data);
}


/*
 * The check's answer, one character per id: flags[i] 1 when the user saw
 * the i-th; NGX_DECLINED when it is not that
 */

ngx_int_t
ngx_http_feed_seen_flags(redisReply *reply, ngx_uint_t n, u_char *flags)
{
    ngx_uint_t  i;

    if (reply == NULL || reply->type != REDIS_REPLY_STRING
        || (ngx_uint_t) reply->len != n)
    {
        return NGX_DECLINED;
    }

    for (i = 0; i < n; i++) {
        flags[i] = (reply->str[i] == '1');
    }

    return NGX_OK;
}


/*
 * A script of the store: the user's "feed:sn:{<user>}", the script's
 * own arguments (args, nargs of them), then the ids.
 */

static ngx_int_t
ngx_http_feed_seen_call(ngx_http_request_t *r, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_script_t *script, ngx_http_feed_user_t *user,
    u_char *ids, ngx_uint_t n, ngx_str_t *args,
    ngx_http_feed_redis_pt handler, void *data)
{
    u_char                      *key, *p;
    size_t                      *argvlen;
    ngx_uint_t                   i, argc;
    const char                 **argv;
    ngx_http_feed_redis_call_t   call;

    if (fmcf->redis_client == NULL) {
        return NGX_DECLINED;
    }

    argc = NGX_HTTP_FEED_REDIS_CALL_ARGC(1, script->nargs + n);

    argv = ngx_palloc(r->pool, argc * (sizeof(char *) + sizeof(size_t)));
    key = ngx_pnalloc(r->pool, sizeof(NGX_HTTP_FEED_KEY_SEEN)
                               + NGX_HTTP_FEED_USER_MAX);
    if (argv == NULL || key == NULL) {
        return NGX_ERROR;
    }

    argvlen = (size_t *) (argv + argc);

    ngx_http_feed_redis_call_init(&call, script, argv, argvlen, 1,
                                  script->nargs + n);

    p = ngx_cpymem(key, NGX_HTTP_FEED_KEY_SEEN,
                   sizeof(NGX_HTTP_FEED_KEY_SEEN) - 1);
    p = ngx_cpymem(p, user->data, user->len);
    *p++ = '}';

    ngx_http_feed_redis_call_key(&call, 0, key, p - key);

    for (i = 0; i < script->nargs; i++) {
        ngx_http_feed_redis_call_arg(&call, i, args[i].data, args[i].len);
    }

    for (i = 0; i < n; i++) {
        ngx_http_feed_redis_call_arg(&call, script->nargs + i, ids + 24 * i,
                                     24);
    }

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &call, handler,
                                    data);
}
