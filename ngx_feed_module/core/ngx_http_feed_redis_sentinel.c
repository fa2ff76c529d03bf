
/*
 * ngx_feed_module: Redis Sentinel.  A worker asks a sentinel for the
 * primary of "feed_redis sentinel=<name>" (SENTINEL
 * get-master-addr-by-name), hears each failover on a second connection
 * subscribed to +switch-master, and moves every connection made from the
 * conf (its followers) to the new primary.  A follower that finds a
 * replica where it expected the primary (ROLE at login, READONLY to a
 * write) has the sentinels asked again.  With every sentinel down, the
 * followers keep the last primary known, and the sentinels are tried in
 * turn until one answers.
 */


#include "ngx_http_feed_redis_connection.h"


/* while no primary is known, or after a READONLY: asked again this often */
#define NGX_HTTP_FEED_SENTINEL_AGAIN      1000

#define NGX_HTTP_FEED_SENTINEL_ASK        0
#define NGX_HTTP_FEED_SENTINEL_HEAR       1


typedef struct {
    ngx_http_feed_redis_sentinel_t  *sentinel;
    ngx_http_feed_redis_t           *rd;

    /* the sentinel it uses; it moves on after one that never answered */
    ngx_uint_t                       at;
    unsigned                         tried:1;
    unsigned                         answered:1;
} ngx_http_feed_sentinel_conn_t;


struct ngx_http_feed_redis_sentinel_s {
    ngx_http_feed_redis_conf_t      *conf;
    ngx_log_t                       *log;

    /* the sentinels' addresses, and their connections' conf */
    ngx_http_feed_redis_conf_t      *addrs;
    ngx_uint_t                       naddrs;
    ngx_http_feed_redis_conf_t       sconf;

    ngx_http_feed_sentinel_conn_t    conns[2];
    unsigned                         asking:1;
    unsigned                         again:1;

    ngx_event_t                      timer;
    ngx_connection_t                 dummy;

    /* the primary, as last told */
    char                             host[NGX_SOCKADDR_STRLEN];
    int                              port;
    u_char                           addr[NGX_SOCKADDR_STRLEN
                                          + NGX_INT_T_LEN];
    ngx_str_t                        addr_text;
    ngx_uint_t                       known;
    ngx_uint_t                       moves;

    ngx_http_feed_redis_followers_t  followers;
};


static ngx_int_t ngx_http_feed_sentinel_conn(ngx_cycle_t *cycle,
    ngx_http_feed_redis_sentinel_t *s, ngx_uint_t k,
    ngx_http_feed_redis_ready_pt ready);
static void ngx_http_feed_sentinel_destroy(ngx_http_feed_redis_sentinel_t *s);
static ngx_int_t ngx_http_feed_sentinel_pick(ngx_http_feed_redis_t *rd);
static ngx_int_t ngx_http_feed_sentinel_pick_primary(
    ngx_http_feed_redis_t *rd);
static void ngx_http_feed_sentinel_ask_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_sentinel_hear_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_sentinel_ask(ngx_http_feed_redis_sentinel_t *s);
static void ngx_http_feed_sentinel_asked(void *data, redisReply *reply);
static void ngx_http_feed_sentinel_heard(void *data, redisReply *reply);
static void ngx_http_feed_sentinel_told(ngx_http_feed_redis_sentinel_t *s,
    u_char *host, size_t hlen, u_char *port, size_t plen, const char *how);
static void ngx_http_feed_sentinel_timer(ngx_event_t *ev);
static void ngx_http_feed_sentinel_later(ngx_http_feed_redis_sentinel_t *s);


/*
 * The worker's sentinels, made with the first connection of the conf:
 * one connection asks, the other hears failovers.
 */

ngx_http_feed_redis_sentinel_t *
ngx_http_feed_redis_sentinel_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_sentinel_t  *s;

    s = ngx_calloc(sizeof(ngx_http_feed_redis_sentinel_t), cycle->log);
    if (s == NULL) {
        return NULL;
    }

    s->conf = conf;
    s->log = cycle->log;
    s->addrs = conf->seeds->elts;
    s->naddrs = conf->seeds->nelts;
    s->addr_text = conf->addr_text;

    /* a sentinel takes its own password, and has no database or scripts */

    s->sconf = *conf;
    s->sconf.password = conf->sentinel_password;
    s->sconf.db = 0;
    ngx_str_null(&s->sconf.sentinel);
    s->sconf.sentinels = NULL;
    s->sconf.plain = 1;

    s->dummy.fd = (ngx_socket_t) -1;
    s->timer.handler = ngx_http_feed_sentinel_timer;
    s->timer.data = &s->dummy;
    s->timer.log = cycle->log;
    s->timer.cancelable = 1;

    if (ngx_http_feed_sentinel_conn(cycle, s, NGX_HTTP_FEED_SENTINEL_ASK,
                                    ngx_http_feed_sentinel_ask_ready)
        != NGX_OK
        || ngx_http_feed_sentinel_conn(cycle, s, NGX_HTTP_FEED_SENTINEL_HEAR,
                                       ngx_http_feed_sentinel_hear_ready)
           != NGX_OK)
    {
        ngx_http_feed_sentinel_destroy(s);
        return NULL;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, cycle->log, 0,
                   "feed redis sentinels of \"%V\": %ui", &conf->sentinel,
                   s->naddrs);

    /* the second one starts with the next sentinel: two views, not one */

    s->conns[NGX_HTTP_FEED_SENTINEL_HEAR].at = 1 % s->naddrs;

    ngx_http_feed_redis_start(s->conns[NGX_HTTP_FEED_SENTINEL_ASK].rd);
    ngx_http_feed_redis_start(s->conns[NGX_HTTP_FEED_SENTINEL_HEAR].rd);

    return s;
}


static ngx_int_t
ngx_http_feed_sentinel_conn(ngx_cycle_t *cycle,
    ngx_http_feed_redis_sentinel_t *s, ngx_uint_t k,
    ngx_http_feed_redis_ready_pt ready)
{
    ngx_http_feed_redis_t          *rd;
    ngx_http_feed_sentinel_conn_t  *c;

    c = &s->conns[k];
    c->sentinel = s;

    rd = ngx_http_feed_redis_create(cycle, &s->sconf);
    if (rd == NULL) {
        return NGX_ERROR;
    }

    c->rd = rd;
    rd->pick = ngx_http_feed_sentinel_pick;
    rd->pick_data = c;

    return ngx_http_feed_redis_on_ready(rd, ready, c);
}


static void
ngx_http_feed_sentinel_destroy(ngx_http_feed_redis_sentinel_t *s)
{
    ngx_uint_t  k;

    if (s->timer.timer_set) {
        ngx_del_timer(&s->timer);
    }

    for (k = 0; k < 2; k++) {
        if (s->conns[k].rd) {
            ngx_http_feed_redis_destroy(s->conns[k].rd);
            s->conns[k].rd = NULL;
        }
    }

    ngx_free(s);
}


/* a connection to the primary: it connects where the sentinels said */

ngx_int_t
ngx_http_feed_redis_sentinel_follow(ngx_http_feed_redis_sentinel_t *s,
    ngx_http_feed_redis_t *rd)
{
    return ngx_http_feed_redis_follow(&s->followers, rd,
                                      ngx_http_feed_sentinel_pick_primary, s);
}


/* the last follower gone (the worker's exit): the sentinels' go too */

void
ngx_http_feed_redis_sentinel_unfollow(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_sentinel_t  *s;

    s = rd->pick_data;

    if (s == NULL || rd->pick != ngx_http_feed_sentinel_pick_primary) {
        return;
    }

    if (ngx_http_feed_redis_unfollow(&s->followers, rd) == 0) {
        s->conf->sentinels = NULL;
        ngx_http_feed_sentinel_destroy(s);
    }
}


/*
 * A sentinel connection's address: the same sentinel again after it
 * answered, else the next one
 */

static ngx_int_t
ngx_http_feed_sentinel_pick(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_conf_t      *a;
    ngx_http_feed_sentinel_conn_t   *c;
    ngx_http_feed_redis_sentinel_t  *s;

    c = rd->pick_data;
    s = c->sentinel;

    if (c->tried && !c->answered) {
        c->at = (c->at + 1) % s->naddrs;
    }

    c->tried = 1;
    c->answered = 0;

    a = &s->addrs[c->at];

    rd->host = a->host;
    rd->port = a->port;
    rd->addr_text = &a->addr_text;

    return NGX_OK;
}


/* the primary as last told; none yet: the sentinels are asked */

static ngx_int_t
ngx_http_feed_sentinel_pick_primary(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_sentinel_t  *s = rd->pick_data;

    if (!s->known) {
        ngx_http_feed_sentinel_ask(s);
        return NGX_DECLINED;
    }

    rd->host = s->host;
    rd->port = s->port;
    rd->addr_text = &s->addr_text;

    return NGX_OK;
}


static void
ngx_http_feed_sentinel_ask_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_sentinel_conn_t  *c = data;

    c->answered = 1;
    c->sentinel->asking = 0;

    ngx_http_feed_sentinel_ask(c->sentinel);
}


/* subscribed, then asked: a failover may have passed while it was down */

static void
ngx_http_feed_sentinel_hear_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_sentinel_conn_t  *c = data;

    const char                  *argv[2];
    size_t                       argvlen[2];
    ngx_http_feed_redis_args_t   args;

    c->answered = 1;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "SUBSCRIBE");
    ngx_http_feed_redis_args_lit(&args, "+switch-master");

    if (ngx_http_feed_redis_subscribe(rd, ngx_http_feed_sentinel_heard,
                                      c->sentinel, &args)
        != NGX_OK)
    {
        ngx_http_feed_redis_drop(rd, "subscribe failed");
        return;
    }

    ngx_http_feed_sentinel_ask(c->sentinel);
}


static void
ngx_http_feed_sentinel_ask(ngx_http_feed_redis_sentinel_t *s)
{
    const char                  *argv[3];
    size_t                       argvlen[3];
    ngx_http_feed_redis_args_t   args;

    if (s->asking) {
        s->again = 1;
        return;
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "SENTINEL");
    ngx_http_feed_redis_args_lit(&args, "get-master-addr-by-name");
    ngx_http_feed_redis_args_add(&args, s->conf->sentinel.data,
                                 s->conf->sentinel.len);

    /* not connected: it asks once it is, the timer asks again anyway */

    if (ngx_http_feed_redis_send(s->conns[NGX_HTTP_FEED_SENTINEL_ASK].rd,
                                 ngx_http_feed_sentinel_asked, s, &args)
        == NULL)
    {
        ngx_http_feed_sentinel_later(s);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_EVENT, s->log, 0,
                   "feed redis sentinel asked for \"%V\"",
                   &s->conf->sentinel);

    s->asking = 1;
    s->again = 0;
}


/* ["<ip>", "<port>"], or nil: the sentinel does not know the name */

static void
ngx_http_feed_sentinel_asked(void *data, redisReply *reply)
{
    ngx_http_feed_redis_sentinel_t  *s = data;

    ngx_http_feed_redis_t          *rd;
    ngx_http_feed_sentinel_conn_t  *c;

    s->asking = 0;
    c = &s->conns[NGX_HTTP_FEED_SENTINEL_ASK];
    rd = c->rd;

    if (reply == NULL) {
        ngx_http_feed_sentinel_later(s);
        return;
    }

    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
        && reply->element[0]->type == REDIS_REPLY_STRING
        && reply->element[1]->type == REDIS_REPLY_STRING)
    {
        ngx_http_feed_sentinel_told(s, (u_char *) reply->element[0]->str,
                                    reply->element[0]->len,
                                    (u_char *) reply->element[1]->str,
                                    reply->element[1]->len, "asked");

        if (s->again) {
            ngx_http_feed_sentinel_ask(s);
        }

        return;
    }

    ngx_log_error(NGX_LOG_ERR, s->log, 0,
                  "redis sentinel %V does not know the primary \"%V\": %*s",
                  rd->addr_text, &s->conf->sentinel,
                  reply->type == REDIS_REPLY_ERROR ? (int) reply->len : 3,
                  reply->type == REDIS_REPLY_ERROR ? reply->str : "nil");

    /* the next sentinel may */

    c->answered = 0;
    ngx_http_feed_redis_drop(rd, "sentinel does not know the primary");
    ngx_http_feed_sentinel_later(s);
}


/* "message", "+switch-master", "<name> <old ip> <old port> <ip> <port>" */

static void
ngx_http_feed_sentinel_heard(void *data, redisReply *reply)
{
    ngx_http_feed_redis_sentinel_t  *s = data;

    u_char      *p, *last, *w[5];
    size_t       wlen[5];
    ngx_uint_t   n;
    redisReply  *m;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements != 3
        || reply->element[2]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    m = reply->element[2];
    p = (u_char *) m->str;
    last = p + m->len;

    for (n = 0; n < 5 && p < last; n++) {
        w[n] = p;

        while (p < last && *p != ' ') {
            p++;
        }

        wlen[n] = p - w[n];

        while (p < last && *p == ' ') {
            p++;
        }
    }

    if (n != 5 || p != last || wlen[0] != s->conf->sentinel.len
        || ngx_strncmp(w[0], s->conf->sentinel.data, wlen[0]) != 0)
    {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, s->log, 0,
                       "feed redis sentinel heard of another: %*s",
                       m->len, m->str);
        return;
    }

    ngx_http_feed_sentinel_told(s, w[3], wlen[3], w[4], wlen[4],
                                "switch-master");
}


/*
 * The primary is host:port: when it changed, every follower connects
 * there now
 */

static void
ngx_http_feed_sentinel_told(ngx_http_feed_redis_sentinel_t *s,
    u_char *host, size_t hlen, u_char *port, size_t plen, const char *how)
{
    u_char      old[NGX_SOCKADDR_STRLEN + NGX_INT_T_LEN];
    size_t      olen;
    ngx_int_t   n;
    ngx_uint_t  i;

    n = ngx_atoi(port, plen);

    if (hlen == 0 || hlen >= sizeof(s->host) || n <= 0 || n > 65535) {
        ngx_log_error(NGX_LOG_ERR, s->log, 0,
                      "redis sentinel told an invalid primary \"%*s:%*s\"",
                      hlen, host, plen, port);
        return;
    }

    if (s->known && s->port == n && ngx_strlen(s->host) == hlen
        && ngx_strncmp(s->host, host, hlen) == 0)
    {
        return;
    }

    olen = ngx_cpymem(old, s->addr_text.data, s->addr_text.len) - old;

    ngx_memcpy(s->host, host, hlen);
    s->host[hlen] = '\0';
    s->port = (int) n;

    s->addr_text.data = s->addr;
    s->addr_text.len = ngx_sprintf(s->addr, "%*s:%i", hlen, host, n)
                       - s->addr;

    if (s->known) {
        s->moves++;
        ngx_http_feed_stat(redis_primary_moves, 1);

        ngx_log_error(NGX_LOG_NOTICE, s->log, 0,
                      "redis primary \"%V\" moved from %*s to %V (%s)",
                      &s->conf->sentinel, olen, old, &s->addr_text, how);

    } else {
        ngx_log_error(NGX_LOG_NOTICE, s->log, 0,
                      "redis primary \"%V\" is %V (%s)",
                      &s->conf->sentinel, &s->addr_text, how);
    }

    s->known = 1;

    for (i = 0; i < s->followers.n; i++) {
        ngx_http_feed_redis_retarget(s->followers.rd[i], "primary moved");
    }
}


/* a follower's ROLE at login: a replica has the sentinels asked again */

void
ngx_http_feed_redis_sentinel_role(ngx_http_feed_redis_t *rd,
    redisReply *reply)
{
    ngx_uint_t                       level;
    ngx_http_feed_redis_sentinel_t  *s;

    s = rd->conf->sentinels;

    if (s == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements == 0
        || reply->element[0]->type != REDIS_REPLY_STRING)
    {
        return;
    }

    if (reply->element[0]->len == 6
        && ngx_strncmp(reply->element[0]->str, "master", 6) == 0)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "feed redis %V is the primary", rd->addr_text);
        rd->not_primary = 0;
        return;
    }

    /* said once, then quietly retried, as a Redis that stays down is */

    level = rd->not_primary ? NGX_LOG_INFO : NGX_LOG_WARN;

    ngx_log_error(level, rd->log, 0,
                  "redis %V is a %*s, not the primary of \"%V\"",
                  rd->addr_text, (int) reply->element[0]->len,
                  reply->element[0]->str, &s->conf->sentinel);

    ngx_http_feed_sentinel_ask(s);
    ngx_http_feed_sentinel_later(s);

    /*
     * The ROLE reply, a good one, reset the backoff: a node the sentinels
     * keep naming though it is a replica was logged into again every
     * 50 ms (three connections a worker).  Twice as long each time, up to
     * the backoff's most, until the sentinels name another.
     */

    rd->not_primary++;
    rd->backoff = ngx_min(NGX_HTTP_FEED_REDIS_BACKOFF_MIN
                          << ngx_min(rd->not_primary, 8),
                          NGX_HTTP_FEED_REDIS_BACKOFF_MAX);

    ngx_http_feed_redis_drop(rd, "not the primary");
}


/* a write answered READONLY: the primary is a replica now */

void
ngx_http_feed_redis_sentinel_readonly(ngx_http_feed_redis_t *rd)
{
    ngx_http_feed_redis_sentinel_t  *s = rd->conf->sentinels;

    ngx_log_error(NGX_LOG_WARN, rd->log, 0,
                  "redis %V answered READONLY, asking the sentinels of "
                  "\"%V\"", rd->addr_text, &s->conf->sentinel);

    ngx_http_feed_sentinel_ask(s);
    ngx_http_feed_sentinel_later(s);

    ngx_http_feed_redis_drop(rd, "READONLY");
}


/* asked again in a second: no primary known, or one that is not */

static void
ngx_http_feed_sentinel_later(ngx_http_feed_redis_sentinel_t *s)
{
    if (!s->timer.timer_set && !ngx_exiting) {
        ngx_add_timer(&s->timer, NGX_HTTP_FEED_SENTINEL_AGAIN);
    }
}


static void
ngx_http_feed_sentinel_timer(ngx_event_t *ev)
{
    ngx_http_feed_redis_sentinel_t  *s;

    s = ngx_queue_data(ev, ngx_http_feed_redis_sentinel_t, timer);

    ngx_http_feed_sentinel_ask(s);
}


/* for /status and /metrics: the primary, and how often it moved */

ngx_str_t *
ngx_http_feed_redis_sentinel_primary(ngx_http_feed_redis_t *rd,
    ngx_uint_t *moves)
{
    ngx_http_feed_redis_sentinel_t  *s;

    s = (rd && !rd->cluster) ? rd->conf->sentinels : NULL;

    if (s == NULL) {
        return NULL;
    }

    *moves = s->moves;

    return s->known ? &s->addr_text : NULL;
}
