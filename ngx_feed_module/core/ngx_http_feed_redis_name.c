
/*
 * ngx_feed_module: a Redis host name resolved again at run time, through
 * nginx's own asynchronous resolver (the http block's "resolver"): before
 * each connect of a connection made from the conf (its followers), and
 * when the answer's TTL (or the resolver's valid=) runs out.  A changed
 * address moves every follower there at once: a managed Redis whose
 * primary endpoint is a DNS name moved on failover is followed without a
 * reload.  The resolver failing, the last address known is used.
 */


#include "ngx_http_feed_redis_connection.h"


/* an answer without a TTL is asked again this often, in seconds */
#define NGX_HTTP_FEED_NAME_VALID      5


struct ngx_http_feed_redis_name_s {
    ngx_http_feed_redis_conf_t   *conf;
    ngx_log_t                    *log;

    ngx_resolver_ctx_t           *ctx;
    ngx_event_t                   timer;
    ngx_connection_t              dummy;

    /* the address last resolved (or read with the conf) */
    char                          host[NGX_SOCKADDR_STRLEN];
    u_char                        addr[NGX_SOCKADDR_STRLEN + NGX_INT_T_LEN];
    ngx_str_t                     addr_text;
    ngx_uint_t                    known;
    ngx_uint_t                    moves;

    ngx_http_feed_redis_followers_t  followers;
};


static void ngx_http_feed_name_set(ngx_http_feed_redis_name_t *n,
    u_char *host, size_t len);
static ngx_int_t ngx_http_feed_name_pick(ngx_http_feed_redis_t *rd);
static void ngx_http_feed_name_resolve(ngx_http_feed_redis_name_t *n);
static void ngx_http_feed_name_resolved(ngx_resolver_ctx_t *ctx);
static void ngx_http_feed_name_answered(ngx_http_feed_redis_name_t *n,
    ngx_uint_t changed);
static void ngx_http_feed_name_expire(ngx_event_t *ev);
static void ngx_http_feed_name_destroy(ngx_http_feed_redis_name_t *n);


ngx_http_feed_redis_name_t *
ngx_http_feed_redis_name_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_name_t  *n;

    n = ngx_calloc(sizeof(ngx_http_feed_redis_name_t), cycle->log);
    if (n == NULL) {
        return NULL;
    }

    n->conf = conf;
    n->log = cycle->log;
    n->addr_text = conf->addr_text;

    n->dummy.fd = (ngx_socket_t) -1;
    n->timer.handler = ngx_http_feed_name_expire;
    n->timer.data = &n->dummy;
    n->timer.log = cycle->log;
    n->timer.cancelable = 1;

    /* what the name was when the conf was read, until it is asked again */

    if (conf->host) {
        ngx_http_feed_name_set(n, (u_char *) conf->host,
                               ngx_strlen(conf->host));
    }

    return n;
}


static void
ngx_http_feed_name_set(ngx_http_feed_redis_name_t *n, u_char *host,
    size_t len)
{
    len = ngx_min(len, sizeof(n->host) - 1);

    ngx_memcpy(n->host, host, len);
    n->host[len] = '\0';

    n->addr_text.data = n->addr;
    n->addr_text.len = ngx_sprintf(n->addr, "%*s:%i", len, host,
                                   (ngx_int_t) n->conf->port)
                       - n->addr;
    n->known = 1;
}


ngx_int_t
ngx_http_feed_redis_name_follow(ngx_http_feed_redis_name_t *n,
    ngx_http_feed_redis_t *rd)
{
    return ngx_http_feed_redis_follow(&n->followers, rd,
                                      ngx_http_feed_name_pick, n);
}


void
ngx_http_feed_redis_name_unfollow(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_name_t  *n;

    n = rd->pick_data;

    if (n == NULL || rd->pick != ngx_http_feed_name_pick) {
        return;
    }

    if (ngx_http_feed_redis_unfollow(&n->followers, rd) == 0) {
        n->conf->named = NULL;
        ngx_http_feed_name_destroy(n);
    }
}


static void
ngx_http_feed_name_destroy(ngx_http_feed_redis_name_t *n)
{
    if (n->ctx) {
        ngx_resolve_name_done(n->ctx);
        n->ctx = NULL;
    }

    if (n->timer.timer_set) {
        ngx_del_timer(&n->timer);
    }

    ngx_free(n);
}


/*
 * Before a connect: the name is resolved first (an answer still valid
 * comes from the resolver's cache, at once); the connect waits for it
 */

static ngx_int_t
ngx_http_feed_name_pick(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_name_t  *n = rd->pick_data;

    if (!rd->resolved) {
        rd->resolving = 1;
        ngx_http_feed_name_resolve(n);

        if (!rd->resolved) {
            return NGX_DECLINED;
        }
    }

    rd->resolved = 0;

    if (!n->known) {
        return NGX_DECLINED;
    }

    rd->host = n->host;
    rd->port = n->conf->port;
    rd->addr_text = &n->addr_text;

    return NGX_OK;
}


static void
ngx_http_feed_name_resolve(ngx_http_feed_redis_name_t *n)
{
    ngx_resolver_ctx_t  *ctx, temp;

    if (n->ctx || ngx_exiting) {
        return;
    }

    temp.name = n->conf->name;

    ctx = ngx_resolve_start(n->conf->resolver, &temp);

    if (ctx == NULL || ctx == NGX_NO_RESOLVER) {
        ngx_log_error(NGX_LOG_ERR, n->log, 0,
                      "redis name \"%V\" could not be resolved: no resolver",
                      &n->conf->name);
        ngx_http_feed_name_answered(n, 0);
        return;
    }

    ctx->name = n->conf->name;
    ctx->handler = ngx_http_feed_name_resolved;
    ctx->data = n;
    ctx->timeout = n->conf->resolver_timeout;

    n->ctx = ctx;

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, n->log, 0,
                   "feed redis resolving \"%V\"", &n->conf->name);

    /* a cached answer calls the handler before this returns */

    if (ngx_resolve_name(ctx) != NGX_OK) {
        n->ctx = NULL;
        ngx_http_feed_name_answered(n, 0);
    }
}


static void
ngx_http_feed_name_resolved(ngx_resolver_ctx_t *ctx)
{
    ngx_http_feed_redis_name_t  *n = ctx->data;

    u_char      text[NGX_SOCKADDR_STRLEN];
    size_t      len;
    time_t      valid;
    ngx_uint_t  changed;

    changed = 0;
    n->ctx = NULL;

    if (ctx->state || ctx->naddrs == 0) {
        ngx_log_error(NGX_LOG_ERR, n->log, 0,
                      "redis name \"%V\" could not be resolved (%i: %s)%s",
                      &ctx->name, ctx->state,
                      ngx_resolver_strerror(ctx->state),
                      n->known ? ", the last address is kept" : "");

        valid = ngx_time() + NGX_HTTP_FEED_NAME_VALID;

    } else {
        len = ngx_sock_ntop(ctx->addrs[0].sockaddr, ctx->addrs[0].socklen,
                            text, NGX_SOCKADDR_STRLEN, 0);

        changed = !n->known || ngx_strlen(n->host) != len
                  || ngx_strncmp(n->host, text, len) != 0;

        if (changed && n->known) {
            n->moves++;
            ngx_http_feed_stat(redis_name_moves, 1);

            ngx_log_error(NGX_LOG_NOTICE, n->log, 0,
                          "redis name \"%V\" moved from %V to %*s",
                          &ctx->name, &n->addr_text, len, text);
        }

        if (changed) {
            ngx_http_feed_name_set(n, text, len);
        }

        valid = ctx->valid ? ctx->valid
                           : ngx_time() + NGX_HTTP_FEED_NAME_VALID;
    }

    ngx_resolve_name_done(ctx);

    /* asked again when the answer expires, a second from now at least */

    if (n->timer.timer_set) {
        ngx_del_timer(&n->timer);
    }

    if (!ngx_exiting) {
        ngx_add_timer(&n->timer,
                      (ngx_msec_t) ngx_max(valid - ngx_time(), 1) * 1000);
    }

    ngx_http_feed_name_answered(n, changed);
}


/*
 * The connections that waited connect now; a changed address takes the
 * connected ones there too
 */

static void
ngx_http_feed_name_answered(ngx_http_feed_redis_name_t *n,
    ngx_uint_t changed)
{
    ngx_uint_t              i;
    ngx_http_feed_redis_t  *rd;

    for (i = 0; i < n->followers.n; i++) {
        rd = n->followers.rd[i];

        if (rd->resolving) {
            rd->resolving = 0;
            rd->resolved = 1;

            /* not from within its own pick(): it connects then */

            if (rd->ac == NULL && !rd->picking) {
                ngx_http_feed_redis_retarget(rd, "name resolved");
            }

        } else if (changed && rd->ac) {
            ngx_http_feed_redis_retarget(rd, "name moved");
        }
    }
}


static void
ngx_http_feed_name_expire(ngx_event_t *ev)
{
    ngx_http_feed_redis_name_t  *n;

    n = ngx_queue_data(ev, ngx_http_feed_redis_name_t, timer);

    ngx_http_feed_name_resolve(n);
}


/* for /status: the address the name resolved to, and how often it moved */

ngx_str_t *
ngx_http_feed_redis_name_address(ngx_http_feed_redis_t *rd,
    ngx_uint_t *moves)
{
    ngx_http_feed_redis_name_t  *n;

    n = (rd && !rd->cluster) ? rd->conf->named : NULL;

    if (n == NULL) {
        return NULL;
    }

    *moves = n->moves;

    return n->known ? &n->addr_text : NULL;
}
