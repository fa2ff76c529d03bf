
/*
 * ngx_feed_module: a hiredis async context per worker, driven by the nginx
 * event loop: the connection's life cycle.  It is made (the socket put on
 * nginx's events), logged in (AUTH, SELECT, the scripts, INFO for the
 * server's run id, all queued ahead of any other command), counted by
 * state in the node's gauges, dropped when it cannot be trusted any more
 * (a login refused, a command timed out, the scripts forgotten), and made
 * again after a backoff that doubles up to 2 s.  A cluster's router has
 * no connection: it hands each question to its cluster
 * (ngx_http_feed_redis_cluster.c), whose nodes are connections like a
 * single Redis's.
 *
 * The rest of a connection is in files of their own, sharing its struct
 * (ngx_http_feed_redis_connection.h): the event glue
 * (ngx_http_feed_redis_event.c), commands with their timeouts and held
 * replies (ngx_http_feed_redis_command.c), and a cluster node's commands
 * redirected or tried again (ngx_http_feed_redis_redirect.c).
 */


#include "ngx_http_feed_redis_connection.h"



ngx_uint_t  ngx_http_feed_redis_connects;
ngx_uint_t  ngx_http_feed_redis_resends;

static ngx_http_feed_redis_t *ngx_http_feed_redis_alloc(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf);
static ngx_http_feed_redis_t *ngx_http_feed_redis_create_named(
    ngx_cycle_t *cycle, ngx_http_feed_redis_conf_t *conf,
    ngx_http_feed_redis_t *rd);
static ngx_http_feed_redis_t *ngx_http_feed_redis_create_router(
    ngx_cycle_t *cycle, ngx_http_feed_redis_conf_t *conf);
static void ngx_http_feed_redis_node_exit(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_redis_move(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_state_e state);
static void ngx_http_feed_redis_connect(ngx_http_feed_redis_t *rd);
static void ngx_http_feed_redis_schedule(ngx_http_feed_redis_t *rd);
static ngx_uint_t ngx_http_feed_redis_log_level(ngx_http_feed_redis_t *rd);
static void ngx_http_feed_redis_reconnect_handler(ngx_event_t *ev);
static void ngx_http_feed_redis_connect_timeout(ngx_event_t *ev);
static void ngx_http_feed_redis_on_connect(const redisAsyncContext *ac,
    int status);
static void ngx_http_feed_redis_on_disconnect(const redisAsyncContext *ac,
    int status);
static void ngx_http_feed_redis_login(ngx_http_feed_redis_t *rd);
static void ngx_http_feed_redis_auth_reply(void *data, redisReply *reply);
static void ngx_http_feed_redis_select_reply(void *data, redisReply *reply);
static void ngx_http_feed_redis_role_reply(void *data, redisReply *reply);
static void ngx_http_feed_redis_script_reply(void *data, redisReply *reply);
static void ngx_http_feed_redis_login_reply(ngx_http_feed_redis_t *rd,
    redisReply *reply, const char *step);
static void ngx_http_feed_redis_info_reply(void *data, redisReply *reply);
static void ngx_http_feed_redis_ready(ngx_http_feed_redis_t *rd);


ngx_http_feed_redis_t *
ngx_http_feed_redis_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_t  *rd;

    if (conf->cluster) {
        return ngx_http_feed_redis_create_router(cycle, conf);
    }

    rd = ngx_http_feed_redis_alloc(cycle, conf);

    if (rd == NULL) {
        return NULL;
    }

    if (conf->resolver) {
        return ngx_http_feed_redis_create_named(cycle, conf, rd);
    }

    if (conf->sentinel.len == 0) {
        return rd;
    }

    /* the worker's sentinels, made with its first connection */

    if (conf->sentinels == NULL) {
        conf->sentinels = ngx_http_feed_redis_sentinel_create(cycle, conf);
    }

    if (conf->sentinels == NULL
        || ngx_http_feed_redis_sentinel_follow(conf->sentinels, rd)
           != NGX_OK)
    {
        ngx_free(rd);
        return NULL;
    }

    return rd;
}


/* a host name resolved again at run time: the worker's view of it */

static ngx_http_feed_redis_t *
ngx_http_feed_redis_create_named(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf, ngx_http_feed_redis_t *rd)
{
    if (conf->named == NULL) {
        conf->named = ngx_http_feed_redis_name_create(cycle, conf);
    }

    if (conf->named == NULL
        || ngx_http_feed_redis_name_follow(conf->named, rd) != NGX_OK)
    {
        ngx_free(rd);
        return NULL;
    }

    return rd;
}


static ngx_http_feed_redis_t *
ngx_http_feed_redis_create_router(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_http_feed_redis_alloc(cycle, conf);
    if (rd == NULL) {
        return NULL;
    }

    rd->cluster = ngx_http_feed_redis_cluster_create(cycle, rd, conf);
    if (rd->cluster == NULL) {
        ngx_free(rd);
        return NULL;
    }

    return rd;
}


/* a cluster's node, made by ngx_http_feed_redis_cluster.c */

ngx_http_feed_redis_t *
ngx_http_feed_redis_create_node(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf, ngx_http_feed_redis_t *router)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_http_feed_redis_alloc(cycle, conf);
    if (rd == NULL) {
        return NULL;
    }

    rd->router = router;

    /* every node hears of a shutdown; the router's user once */
    rd->on_exit = ngx_http_feed_redis_node_exit;
    rd->on_exit_data = router;

    return rd;
}


static ngx_http_feed_redis_t *
ngx_http_feed_redis_alloc(ngx_cycle_t *cycle,
    ngx_http_feed_redis_conf_t *conf)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_calloc(sizeof(ngx_http_feed_redis_t), cycle->log);
    if (rd == NULL) {
        return NULL;
    }

    rd->conf = conf;
    rd->log = cycle->log;
    rd->host = conf->host;
    rd->port = conf->port;
    rd->addr_text = &conf->addr_text;
    rd->state = NGX_HTTP_FEED_REDIS_DOWN;
    rd->backoff = NGX_HTTP_FEED_REDIS_BACKOFF_MIN;

    rd->dummy.fd = (ngx_socket_t) -1;

    rd->connect_timer.handler = ngx_http_feed_redis_connect_timeout;
    rd->connect_timer.data = &rd->dummy;
    rd->connect_timer.log = cycle->log;

    /* a reconnect attempt must not hold up a graceful shutdown */
    rd->reconnect.handler = ngx_http_feed_redis_reconnect_handler;
    rd->reconnect.data = &rd->dummy;
    rd->reconnect.log = cycle->log;
    rd->reconnect.cancelable = 1;

    ngx_queue_init(&rd->pending);
    ngx_queue_init(&rd->free);

    ngx_http_feed_redis_scripts_init();

    return rd;
}


/* after the ready hooks of every store and feature are registered */

void
ngx_http_feed_redis_start(ngx_http_feed_redis_t *rd)
{
    if (rd->cluster) {
        ngx_http_feed_redis_cluster_start(rd->cluster);
        return;
    }

    ngx_http_feed_redis_connect(rd);
}


static void
ngx_http_feed_redis_node_exit(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_redis_t  *router = data;

    if (router->on_exit && !router->exit_told) {
        router->exit_told = 1;
        router->on_exit(router, router->on_exit_data);
    }
}


void
ngx_http_feed_redis_destroy(ngx_http_feed_redis_t *rd)
{
    ngx_queue_t                *q;
    redisAsyncContext          *ac;
    ngx_http_feed_redis_cmd_t  *cmd;

    if (rd == NULL) {
        return;
    }

    if (rd->cluster) {
        ngx_http_feed_redis_cluster_destroy(rd->cluster);
        ngx_free(rd);
        return;
    }

    if (rd->conf->sentinels) {
        ngx_http_feed_redis_sentinel_unfollow(rd);
    }

    if (rd->conf->named) {
        ngx_http_feed_redis_name_unfollow(rd);
    }

    /* gone from the worker's gauges: exiting is no connection's state there */

    if (rd->counted) {
        ngx_http_feed_gauge(redis_connections[rd->state], -1);
        rd->counted = 0;
    }

    rd->state = NGX_HTTP_FEED_REDIS_EXITING;
    rd->on_message = NULL;

    if (rd->connect_timer.timer_set) {
        ngx_del_timer(&rd->connect_timer);
    }

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    /*
     * Nobody is left to hear about the commands still in flight; those
     * waiting to be sent again are on no connection: freed here, their
     * pause with them.
     */

    q = ngx_queue_head(&rd->pending);

    while (q != ngx_queue_sentinel(&rd->pending)) {
        cmd = ngx_queue_data(q, ngx_http_feed_redis_cmd_t, queue);
        q = ngx_queue_next(q);

        ngx_http_feed_redis_cancel(cmd);

        if (cmd->retry.timer_set) {
            ngx_del_timer(&cmd->retry);
            ngx_queue_remove(&cmd->queue);
            rd->npending--;
            ngx_http_feed_redis_cmd_put(cmd);
        }
    }

    if (rd->ac) {
        ac = rd->ac;
        rd->ac = NULL;
        redisAsyncFree(ac);
    }

    while (!ngx_queue_empty(&rd->free)) {
        q = ngx_queue_head(&rd->free);
        ngx_queue_remove(q);
        ngx_free(ngx_queue_data(q, ngx_http_feed_redis_cmd_t, queue));
    }

    ngx_free(rd);
}


/*
 * The one place a connection changes state after its start: the worker
 * counts its connections by state in its slot of the node's gauges, so a
 * move takes one from the old state and adds one to the new.
 */

static void
ngx_http_feed_redis_move(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_state_e state)
{
    if (rd->counted) {
        ngx_http_feed_gauge(redis_connections[rd->state], -1);
    }

    ngx_http_feed_gauge(redis_connections[state], 1);

    rd->counted = 1;
    rd->state = state;
}


ngx_http_feed_redis_state_e
ngx_http_feed_redis_state(ngx_http_feed_redis_t *rd)
{
    if (rd && rd->cluster) {
        return ngx_http_feed_redis_cluster_state(rd->cluster);
    }

    return rd ? rd->state : NGX_HTTP_FEED_REDIS_DOWN;
}


ngx_uint_t
ngx_http_feed_redis_pending(ngx_http_feed_redis_t *rd)
{
    if (rd && rd->cluster) {
        return ngx_http_feed_redis_cluster_pending(rd->cluster);
    }

    return rd ? rd->npending : 0;
}


const char *
ngx_http_feed_redis_run_id(ngx_http_feed_redis_t *rd)
{
    if (rd && rd->cluster) {
        return ngx_http_feed_redis_cluster_run_id(rd->cluster);
    }

    return (rd && rd->run_id[0]) ? rd->run_id : NULL;
}


/* a cluster's masters, and how many are up; 0 for a single Redis */

ngx_uint_t
ngx_http_feed_redis_masters(ngx_http_feed_redis_t *rd, ngx_uint_t *up)
{
    *up = 0;

    if (rd == NULL || rd->cluster == NULL) {
        return 0;
    }

    return ngx_http_feed_redis_cluster_masters(rd->cluster, up);
}


/* the nodes a cluster's router knows now; 0 for a single Redis */

ngx_uint_t
ngx_http_feed_redis_nodes(ngx_http_feed_redis_t *rd)
{
    if (rd == NULL || rd->cluster == NULL) {
        return 0;
    }

    return ngx_http_feed_redis_cluster_nodes(rd->cluster);
}


/*
 * A cluster's node number n (1...) if it is a master: its address, and its
 * copies' suffix "{<tag>}" in buf (NGX_HTTP_FEED_REDIS_TAG_COPY_MAX bytes)
 */

ngx_http_feed_redis_conf_t *
ngx_http_feed_redis_master(ngx_http_feed_redis_t *rd, ngx_uint_t n,
    u_char *buf, size_t *len)
{
    if (rd == NULL || rd->cluster == NULL) {
        return NULL;
    }

    return ngx_http_feed_redis_cluster_master(rd->cluster, n, buf, len);
}


/* a Redis Cluster, not a single Redis */

ngx_uint_t
ngx_http_feed_redis_clustered(ngx_http_feed_redis_t *rd)
{
    return rd != NULL && rd->cluster != NULL;
}


/*
 * The node a key's commands go to, as a number: keys of one number are
 * on one node, and a script may reach all of them.  0 for a single Redis
 * (and for a slot whose master is not known).
 */

ngx_uint_t
ngx_http_feed_redis_node_of(ngx_http_feed_redis_t *rd, const u_char *key,
    size_t len)
{
    if (rd == NULL || rd->cluster == NULL) {
        return 0;
    }

    return ngx_http_feed_redis_cluster_owner(rd->cluster, key, len);
}


/*
 * The name, in buf, of base's copy on key's node: base itself for a
 * single Redis.  0 when key's node is not known (the command would fail
 * anyway).
 */

size_t
ngx_http_feed_redis_tag_copy(ngx_http_feed_redis_t *rd, const u_char *key,
    size_t len, ngx_str_t *base, u_char *buf)
{
    if (rd == NULL || rd->cluster == NULL) {
        ngx_memcpy(buf, base->data, base->len);
        return base->len;
    }

    return ngx_http_feed_redis_cluster_tag_copy(rd->cluster, key, len, base,
                                                buf);
}


/* each copy of base, one on each master; none for a single Redis */

void
ngx_http_feed_redis_tag_copies(ngx_http_feed_redis_t *rd, ngx_str_t *base,
    ngx_http_feed_redis_tag_copy_pt handler, void *data)
{
    if (rd == NULL || rd->cluster == NULL) {
        return;
    }

    ngx_http_feed_redis_cluster_tag_copies(rd->cluster, base, handler, data);
}


/*
 * The mark of the copies on key's node (NGX_HTTP_FEED_REDIS_MARK_LEN bytes
 * in buf): "" for a single Redis, which has none.
 */

size_t
ngx_http_feed_redis_tag_copy_mark(ngx_http_feed_redis_t *rd, const u_char *key,
    size_t len, u_char *buf)
{
    if (rd == NULL || rd->cluster == NULL) {
        return 0;
    }

    return ngx_http_feed_redis_cluster_mark(rd->cluster, key, len, buf);
}


const char *
ngx_http_feed_redis_last_error(ngx_http_feed_redis_t *rd)
{
    return (rd && rd->error[0]) ? rd->error : NULL;
}


static void
ngx_http_feed_redis_connect(ngx_http_feed_redis_t *rd)
{
    ngx_int_t                    rc;
    redisAsyncContext           *ac;
    ngx_http_feed_redis_conf_t  *conf;

    conf = rd->conf;

    if (rd->pick) {
        rd->picking = 1;
        rc = rd->pick(rd);
        rd->picking = 0;

        if (rc != NGX_OK) {
            /* its answer (a sentinel's, the resolver's) retargets it */
            ngx_cpystrn((u_char *) rd->error,
                        (u_char *) "address not known yet",
                        sizeof(rd->error));
            ngx_http_feed_redis_schedule(rd);
            return;
        }
    }

    if (conf->unix_path) {
        ac = redisAsyncConnectUnix(conf->unix_path);

    } else {
        ac = redisAsyncConnect(rd->host, rd->port);
    }

    if (ac == NULL) {
        ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                      "redis connect to %V failed: out of memory",
                      rd->addr_text);
        ngx_http_feed_redis_schedule(rd);
        return;
    }

    if (ac->err) {
        ngx_log_error(ngx_http_feed_redis_log_level(rd), rd->log, 0,
                      "redis connect to %V failed: %s",
                      rd->addr_text, ac->errstr);
        ngx_cpystrn((u_char *) rd->error, (u_char *) ac->errstr,
                    sizeof(rd->error));
        redisAsyncFree(ac);
        ngx_http_feed_redis_schedule(rd);
        return;
    }

    if (ngx_http_feed_redis_event_attach(rd, ac) != NGX_OK) {
        redisAsyncFree(ac);
        ngx_http_feed_redis_schedule(rd);
        return;
    }

    /* handlers may hold a reply rather than copy it: see hold_reply() */

    if (ac->c.reader && ac->c.reader->fn) {
        rd->fns = *ac->c.reader->fn;
        rd->fns.freeObject = ngx_http_feed_redis_free_reply;
        ac->c.reader->fn = &rd->fns;
    }

    ac->data = rd;

    /* rd tells the worker's connections apart in the debug log */

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p connecting to %V", rd, rd->addr_text);

    rd->ac = ac;
    ngx_http_feed_redis_move(rd, NGX_HTTP_FEED_REDIS_CONNECTING);

    /* the connect callback hook adds the write event that reports it */
    redisAsyncSetConnectCallback(ac, ngx_http_feed_redis_on_connect);
    redisAsyncSetDisconnectCallback(ac, ngx_http_feed_redis_on_disconnect);

    ngx_add_timer(&rd->connect_timer, conf->connect_timeout);

    ngx_http_feed_redis_login(rd);
}


/*
 * AUTH and SELECT are queued right behind the connect, ahead of any
 * other command, so nothing ever runs unauthenticated or in another db.
 */

static void
ngx_http_feed_redis_login(ngx_http_feed_redis_t *rd)
{
    u_char                      *p;
    const char                  *argv[2];
    size_t                       argvlen[2];
    u_char                       db[NGX_INT_T_LEN];
    ngx_http_feed_redis_args_t   args;
    ngx_http_feed_redis_conf_t  *conf;

    conf = rd->conf;

    if (conf->password.len) {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "AUTH");
        ngx_http_feed_redis_args_add(&args, conf->password.data,
                                     conf->password.len);

        (void) ngx_http_feed_redis_send(rd, ngx_http_feed_redis_auth_reply,
                                        rd, &args);
    }

    if (conf->sentinels) {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "ROLE");

        (void) ngx_http_feed_redis_send(rd, ngx_http_feed_redis_role_reply,
                                        rd, &args);
    }

    if (conf->db > 0) {
        p = ngx_sprintf(db, "%i", conf->db);

        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "SELECT");
        ngx_http_feed_redis_args_add(&args, db, p - db);

        (void) ngx_http_feed_redis_send(rd, ngx_http_feed_redis_select_reply,
                                        rd, &args);
    }

    if (!conf->plain) {
        ngx_http_feed_redis_scripts_load(rd, ngx_http_feed_redis_script_reply,
                                         rd);
    }

    /*
     * Its answer proves the connection healthy and resets the backoff, and
     * its run_id arrives before the reply to any command sent after it.
     */

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "INFO");
    ngx_http_feed_redis_args_lit(&args, "server");

    rd->run_id[0] = '\0';

    (void) ngx_http_feed_redis_send(rd, ngx_http_feed_redis_info_reply, rd,
                                    &args);
}


static void
ngx_http_feed_redis_info_reply(void *data, redisReply *reply)
{
    ngx_http_feed_redis_t  *rd = data;

    u_char  *p, *last;

    if (reply == NULL || reply->type != REDIS_REPLY_STRING) {
        return;
    }

    p = ngx_strnstr((u_char *) reply->str, "run_id:", reply->len);
    if (p == NULL) {
        return;
    }

    p += sizeof("run_id:") - 1;
    last = p;

    while (last < (u_char *) reply->str + reply->len
           && last - p < (ssize_t) sizeof(rd->run_id) - 1
           && *last != '\r' && *last != '\n')
    {
        last++;
    }

    ngx_memcpy(rd->run_id, p, last - p);
    rd->run_id[last - p] = '\0';

    ngx_http_feed_redis_ready(rd);
}


/* the connection is logged in and its server known: tell who asked */

static void
ngx_http_feed_redis_ready(ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p ready, run_id %s, %ui hooks", rd,
                   rd->run_id, rd->nready);

    ngx_http_feed_redis_connects++;

    for (i = 0; i < rd->nready; i++) {
        rd->ready[i].handler(rd, rd->ready[i].data);
    }

    if (rd->router) {
        ngx_http_feed_redis_cluster_node_ready(rd->router->cluster, rd);
    }
}


/* the cluster is mapped, or a master is back: the router's users hear */

void
ngx_http_feed_redis_router_ready(ngx_http_feed_redis_t *router)
{
    router->error[0] = '\0';
    ngx_http_feed_redis_ready(router);
}


/*
 * On a cluster, the handler hears of the suffix of the copies ("{<tag>}",
 * ngx_http_feed_redis_tag_copies()) of each tag that is no master's any
 * more in this worker's map: it writes them no more.  Never for a single
 * Redis.
 */

void
ngx_http_feed_redis_on_retire(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_tag_copy_pt handler, void *data)
{
    rd->on_retire = handler;
    rd->on_retire_data = data;
}


void
ngx_http_feed_redis_router_retired(ngx_http_feed_redis_t *router,
    u_char *copy, size_t len)
{
    if (router->on_retire) {
        router->on_retire(router->on_retire_data, copy, len);
    }
}


/*
 * A node answered what says the cluster's map may be old: it is asked
 * again at once.  Nothing for a single Redis.
 */

void
ngx_http_feed_redis_stale(ngx_http_feed_redis_t *rd, const char *why)
{
    if (rd && rd->cluster) {
        ngx_http_feed_redis_cluster_stale(rd->cluster, why);
    }
}


void
ngx_http_feed_redis_on_exit(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data)
{
    rd->on_exit = handler;
    rd->on_exit_data = data;
}


ngx_int_t
ngx_http_feed_redis_on_ready(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_ready_pt handler, void *data)
{
    if (rd->nready == NGX_HTTP_FEED_REDIS_READY_MAX) {
        return NGX_ERROR;
    }

    rd->ready[rd->nready].handler = handler;
    rd->ready[rd->nready].data = data;
    rd->nready++;

    return NGX_OK;
}


static void
ngx_http_feed_redis_auth_reply(void *data, redisReply *reply)
{
    ngx_http_feed_redis_login_reply(data, reply, "authenticated");
}


static void
ngx_http_feed_redis_select_reply(void *data, redisReply *reply)
{
    ngx_http_feed_redis_login_reply(data, reply, "database selected");
}


/* a sentinel's primary must be one still: else the sentinels are asked */

static void
ngx_http_feed_redis_role_reply(void *data, redisReply *reply)
{
    ngx_http_feed_redis_t  *rd = data;

    if (reply != NULL) {
        ngx_http_feed_redis_sentinel_role(rd, reply);
    }
}


static void
ngx_http_feed_redis_script_reply(void *data, redisReply *reply)
{
    ngx_http_feed_redis_login_reply(data, reply, "script loaded");
}


/* step: what a good answer means, for the debug log */

static void
ngx_http_feed_redis_login_reply(ngx_http_feed_redis_t *rd,
    redisReply *reply, const char *step)
{
    if (reply == NULL) {
        return;
    }

    if (reply->type != REDIS_REPLY_ERROR) {
        ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "feed redis %p %s: %*s", rd, step,
                       (size_t) reply->len, reply->str);
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0, "redis login to %V failed: %*s",
                  rd->addr_text, (size_t) reply->len, reply->str);

    ngx_http_feed_redis_drop(rd, "login failed");
}


static void
ngx_http_feed_redis_on_connect(const redisAsyncContext *ac, int status)
{
    ngx_http_feed_redis_t  *rd = ac->data;

    if (rd->ac != ac) {
        return;
    }

    if (rd->connect_timer.timer_set) {
        ngx_del_timer(&rd->connect_timer);
    }

    if (status != REDIS_OK) {
        /* hiredis frees the context right after we return */
        ngx_log_error(ngx_http_feed_redis_log_level(rd), rd->log, 0,
                      "redis connect to %V failed: %s",
                      rd->addr_text, ac->errstr);
        ngx_cpystrn((u_char *) rd->error, (u_char *) ac->errstr,
                    sizeof(rd->error));
        rd->ac = NULL;
        ngx_http_feed_redis_move(rd, NGX_HTTP_FEED_REDIS_DOWN);
        ngx_http_feed_redis_schedule(rd);
        return;
    }

    if (rd->connected_once) {
        ngx_http_feed_stat(redis_reconnects, 1);
        ngx_log_error(NGX_LOG_NOTICE, rd->log, 0,
                      "redis reconnected to %V", rd->addr_text);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p connected to %V", rd,
                   rd->addr_text);

    /* the backoff is reset by the first good reply, not by a connect */

    rd->connected_once = 1;
    ngx_http_feed_redis_move(rd, NGX_HTTP_FEED_REDIS_UP);
    rd->error[0] = '\0';
}


static void
ngx_http_feed_redis_on_disconnect(const redisAsyncContext *ac, int status)
{
    ngx_http_feed_redis_t  *rd = ac->data;

    /* a disconnect we asked for was handled by ngx_http_feed_redis_drop() */

    if (rd->ac != ac) {
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0, "redis connection to %V lost: %s",
                  rd->addr_text,
                  ac->errstr[0] ? ac->errstr : "closed");

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p connection lost, %ui commands pending",
                   rd, rd->npending);

    ngx_cpystrn((u_char *) rd->error,
                (u_char *) (ac->errstr[0] ? ac->errstr : "connection closed"),
                sizeof(rd->error));

    rd->ac = NULL;
    ngx_http_feed_redis_move(rd, NGX_HTTP_FEED_REDIS_DOWN);
    ngx_http_feed_redis_schedule(rd);
}


void
ngx_http_feed_redis_drop(ngx_http_feed_redis_t *rd, const char *why)
{
    redisAsyncContext  *ac;

    ac = rd->ac;

    if (ac == NULL) {
        return;
    }

    if (rd->connect_timer.timer_set) {
        ngx_del_timer(&rd->connect_timer);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p connection dropped: %s, %ui pending",
                   rd, why, rd->npending);

    ngx_cpystrn((u_char *) rd->error, (u_char *) why, sizeof(rd->error));

    rd->ac = NULL;
    ngx_http_feed_redis_move(rd, NGX_HTTP_FEED_REDIS_DOWN);

    /* fails every pending command with a NULL reply, then closes */
    redisAsyncFree(ac);

    ngx_http_feed_redis_schedule(rd);
}


/* a Redis that stays down is reported once, then quietly retried */

static ngx_uint_t
ngx_http_feed_redis_log_level(ngx_http_feed_redis_t *rd)
{
    if (rd->failing) {
        return NGX_LOG_INFO;
    }

    rd->failing = 1;

    return NGX_LOG_ERR;
}


static void
ngx_http_feed_redis_schedule(ngx_http_feed_redis_t *rd)
{
    if (rd->router) {
        ngx_cpystrn((u_char *) rd->router->error, (u_char *) rd->error,
                    sizeof(rd->error));

        if (ngx_http_feed_redis_cluster_node_down(rd->router->cluster, rd)
            == NGX_DECLINED)
        {
            return;
        }
    }

    if (rd->state == NGX_HTTP_FEED_REDIS_EXITING || ngx_exiting
        || ngx_terminate || rd->reconnect.timer_set)
    {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p reconnect in %M ms", rd, rd->backoff);

    ngx_add_timer(&rd->reconnect, rd->backoff);

    rd->backoff = ngx_min(rd->backoff * 2, NGX_HTTP_FEED_REDIS_BACKOFF_MAX);
}


static void
ngx_http_feed_redis_reconnect_handler(ngx_event_t *ev)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_queue_data(ev, ngx_http_feed_redis_t, reconnect);

    if (rd->ac || rd->state == NGX_HTTP_FEED_REDIS_EXITING || ngx_exiting) {
        return;
    }

    ngx_http_feed_redis_connect(rd);
}


static void
ngx_http_feed_redis_connect_timeout(ngx_event_t *ev)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_queue_data(ev, ngx_http_feed_redis_t, connect_timer);

    ngx_log_error(ngx_http_feed_redis_log_level(rd), rd->log, NGX_ETIMEDOUT,
                  "redis connect to %V timed out", rd->addr_text);

    ngx_http_feed_redis_drop(rd, "connect timed out");
}


/*
 * The address changed (a sentinel told of a new primary): the connection,
 * if any, is closed and made again soon, to the address pick() gives
 */

void
ngx_http_feed_redis_retarget(ngx_http_feed_redis_t *rd, const char *why)
{
    if (rd->state == NGX_HTTP_FEED_REDIS_EXITING || ngx_exiting) {
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p retargeted: %s", rd, why);

    ngx_http_feed_redis_drop(rd, why);

    /* a new address: a replica there is warned of again */
    rd->not_primary = 0;
    rd->backoff = NGX_HTTP_FEED_REDIS_BACKOFF_MIN;

    if (rd->reconnect.timer_set) {
        ngx_del_timer(&rd->reconnect);
    }

    ngx_add_timer(&rd->reconnect, 1);
}


/* rd connects where pick() says, one of those f moves together */

ngx_int_t
ngx_http_feed_redis_follow(ngx_http_feed_redis_followers_t *f,
    ngx_http_feed_redis_t *rd, ngx_int_t (*pick)(ngx_http_feed_redis_t *rd),
    void *data)
{
    if (f->n == NGX_HTTP_FEED_REDIS_FOLLOWERS) {
        ngx_log_error(NGX_LOG_ALERT, rd->log, 0,
                      "too many redis connections of one address");
        return NGX_ERROR;
    }

    f->rd[f->n++] = rd;

    rd->pick = pick;
    rd->pick_data = data;

    return NGX_OK;
}


/* rd gone from f: how many are left */

ngx_uint_t
ngx_http_feed_redis_unfollow(ngx_http_feed_redis_followers_t *f,
    ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    for (i = 0; i < f->n; i++) {
        if (f->rd[i] == rd) {
            f->rd[i] = f->rd[--f->n];
            break;
        }
    }

    rd->pick = NULL;
    rd->pick_data = NULL;

    return f->n;
}


/* the connection is closed and made again (after the backoff) */

void
ngx_http_feed_redis_reconnect(ngx_http_feed_redis_t *rd, const char *why)
{
    /* a connection of one node: a cluster's router has many */

    if (rd->cluster) {
        return;
    }

    ngx_http_feed_redis_drop(rd, why);
}
