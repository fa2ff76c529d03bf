
/*
 * ngx_feed_module: a connection's commands.  hiredis 0.14 has no timeout
 * for an async command: each has an nginx timer, and its handler hears
 * once, of its reply or of its end (NULL: Redis down, the command timed
 * out, the connection lost).  A command sent for a request runs that
 * request's posted requests after its handler, as nginx does after the
 * request's own events.
 *
 * Ownership rules:
 *  - hiredis owns the command callbacks: they cannot be cancelled, so a
 *    command lives in worker memory, not in a request pool, and a request
 *    that goes away only clears the command's handler (a tombstone).
 *  - RESP replies come in order: a command that times out means nobody
 *    behind it will be answered in time either, so the connection is
 *    dropped, every pending command fails at once, and we reconnect.
 *  - hiredis owns a reply and frees it when the handler returns, unless
 *    the handler held it: then the pool it is held by frees it.
 */


#include "ngx_http_feed_redis_connection.h"


static void ngx_http_feed_redis_cmd_cleanup(void *data);
static void ngx_http_feed_redis_cmd_timeout(ngx_event_t *ev);
static ngx_connection_t *ngx_http_feed_redis_cmd_connection(
    ngx_http_feed_redis_cmd_t *cmd);
static ngx_http_feed_redis_cmd_t *ngx_http_feed_redis_cmd_get(
    ngx_http_feed_redis_t *rd);
static void ngx_http_feed_redis_message(redisAsyncContext *ac, void *reply,
    void *privdata);
static void ngx_http_feed_redis_held_cleanup(void *data);


ngx_http_feed_redis_cmd_t *
ngx_http_feed_redis_send(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args)
{
    return ngx_http_feed_redis_send_timeout(rd, 0, handler, data, args);
}


/*
 * The same with a timeout of its own (a BLOCK command waits longer than
 * feed_redis_timeout); such a wait must not hold up a graceful shutdown.
 */

ngx_http_feed_redis_cmd_t *
ngx_http_feed_redis_send_timeout(ngx_http_feed_redis_t *rd,
    ngx_msec_t timeout, ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args)
{
    ngx_int_t                   rc;
    ngx_http_feed_redis_cmd_t  *cmd;

    if (rd && rd->cluster) {
        rd = ngx_http_feed_redis_cluster_route(rd->cluster, args);
    }

    if (rd == NULL || rd->ac == NULL) {
        return NULL;
    }

    cmd = ngx_http_feed_redis_cmd_get(rd);
    if (cmd == NULL) {
        return NULL;
    }

    cmd->handler = handler;
    cmd->data = data;
    cmd->request = NULL;

    if (args->argc) {
        ngx_cpystrn(cmd->name, (u_char *) args->argv[0],
                    ngx_min(args->argvlen[0] + 1, sizeof(cmd->name)));
    }

    if (rd->router) {
        rc = ngx_http_feed_redis_format(rd, cmd, args);

    } else {
        rc = redisAsyncCommandArgv(rd->ac, ngx_http_feed_redis_reply, cmd,
                                   (int) args->argc, args->argv,
                                   args->argvlen);
    }

    if (rc != REDIS_OK) {
        ngx_http_feed_stat(redis_errors, 1);
        ngx_http_feed_redis_cmd_put(cmd);
        return NULL;
    }

    ngx_queue_insert_tail(&rd->pending, &cmd->queue);
    rd->npending++;

    if (timeout) {
        cmd->blocking = 1;
        cmd->timer.cancelable = 1;
        ngx_add_timer(&cmd->timer, timeout);

    } else {
        ngx_add_timer(&cmd->timer, rd->conf->timeout);
    }

    ngx_http_feed_stat(redis_commands, 1);

    return cmd;
}


/*
 * The same, for a request: if the request goes away first, its pool
 * cleanup turns the command into a tombstone.  NGX_DECLINED means Redis
 * is unavailable right now and the caller should do without it.  r: NULL
 * for the worker's own commands (no request to outlive).
 */

ngx_int_t
ngx_http_feed_redis_send_r(ngx_http_request_t *r, ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args)
{
    ngx_pool_cleanup_t         *cln;
    ngx_http_feed_redis_cmd_t  *cmd;

    if (r == NULL) {
        return ngx_http_feed_redis_send(rd, handler, data, args)
               ? NGX_OK : NGX_DECLINED;
    }

    cln = ngx_pool_cleanup_add(r->pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cmd = ngx_http_feed_redis_send(rd, handler, data, args);
    if (cmd == NULL) {
        return NGX_DECLINED;
    }

    cmd->cleanup = cln;
    cmd->request = r;
    cln->handler = ngx_http_feed_redis_cmd_cleanup;
    cln->data = cmd;

    return NGX_OK;
}


void
ngx_http_feed_redis_cancel(ngx_http_feed_redis_cmd_t *cmd)
{
    cmd->handler = NULL;

    if (cmd->cleanup) {
        cmd->cleanup->handler = NULL;
        cmd->cleanup = NULL;
    }
}


static void
ngx_http_feed_redis_cmd_cleanup(void *data)
{
    ngx_http_feed_redis_cmd_t  *cmd = data;

    cmd->cleanup = NULL;
    cmd->handler = NULL;
}


void
ngx_http_feed_redis_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    redisReply                 *reply = r;
    ngx_http_feed_redis_cmd_t  *cmd = privdata;

    ngx_http_feed_redis_t      *rd;

    if (cmd->formatted
        && (ngx_http_feed_redis_redirected(cmd, reply) == NGX_OK
            || ngx_http_feed_redis_retried(cmd, reply) == NGX_OK))
    {
        return;
    }

    rd = cmd->rd;

    if (reply && reply->type == REDIS_REPLY_ERROR
        && ngx_strncmp(reply->str, "NOSCRIPT", 8) == 0 && ac == rd->ac)
    {
        /*
         * The server forgot our scripts: a new connection loads them.
         * Freeing the context waits for this callback to return.
         */
        ngx_http_feed_redis_drop(rd, "scripts flushed");
    }

    if (reply && reply->type == REDIS_REPLY_ERROR && rd->conf->sentinels
        && ngx_strncmp(reply->str, "READONLY", 8) == 0 && ac == rd->ac)
    {
        /* the primary was made a replica: the sentinels know which is */
        ngx_http_feed_redis_sentinel_readonly(rd);
    }

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_http_feed_stat(redis_errors, 1);

    } else if (ac == rd->ac) {
        rd->backoff = NGX_HTTP_FEED_REDIS_BACKOFF_MIN;
        rd->failing = 0;
    }

    ngx_http_feed_redis_cmd_done(cmd, reply);
}


/* the command's end: its handler hears the reply, NULL when none */

void
ngx_http_feed_redis_cmd_done(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply)
{
    void                       *data;
    ngx_connection_t           *c;
    ngx_http_feed_redis_pt      handler;

    handler = cmd->handler;
    data = cmd->data;
    c = ngx_http_feed_redis_cmd_connection(cmd);

    ngx_http_feed_redis_cancel(cmd);

    ngx_queue_remove(&cmd->queue);
    cmd->rd->npending--;

    ngx_http_feed_redis_cmd_put(cmd);

    if (handler) {
        handler(data, reply);
    }

    if (c) {
        ngx_http_run_posted_requests(c);
    }
}


static void
ngx_http_feed_redis_cmd_timeout(ngx_event_t *ev)
{
    ngx_http_feed_redis_t      *rd;
    ngx_http_feed_redis_cmd_t  *cmd;

    void                       *data;
    ngx_connection_t           *c;
    ngx_http_feed_redis_pt      handler;

    cmd = ngx_queue_data(ev, ngx_http_feed_redis_cmd_t, timer);
    rd = cmd->rd;

    handler = cmd->handler;
    data = cmd->data;
    c = ngx_http_feed_redis_cmd_connection(cmd);

    ngx_http_feed_redis_cancel(cmd);

    ngx_http_feed_stat(redis_timeouts, 1);

    ngx_log_debug3(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p command timed out, %s, %ui pending", rd,
                   cmd->request ? "for a request" : "the worker's",
                   rd->npending);

    ngx_log_error(NGX_LOG_ERR, rd->log, NGX_ETIMEDOUT,
                  "redis command %s to %V timed out", cmd->name,
                  rd->addr_text);

    ngx_http_feed_redis_drop(rd, "command timed out");

    if (handler) {
        handler(data, NULL);
    }

    if (c) {
        ngx_http_run_posted_requests(c);
    }
}


/*
 * A reply comes through Redis's connection, not the request's: whatever
 * the handler posts on the request's connection (a subrequest, a
 * finalized request) is run once it returns, as nginx does after a
 * request's own events.  None when the request went away: its cleanup
 * took the handler.
 */

static ngx_connection_t *
ngx_http_feed_redis_cmd_connection(ngx_http_feed_redis_cmd_t *cmd)
{
    if (cmd->handler == NULL || cmd->request == NULL) {
        return NULL;
    }

    return cmd->request->connection;
}


static ngx_http_feed_redis_cmd_t *
ngx_http_feed_redis_cmd_get(ngx_http_feed_redis_t *rd)
{
    ngx_queue_t                *q;
    ngx_http_feed_redis_cmd_t  *cmd;

    if (!ngx_queue_empty(&rd->free)) {
        q = ngx_queue_head(&rd->free);
        ngx_queue_remove(q);
        rd->nfree--;
        cmd = ngx_queue_data(q, ngx_http_feed_redis_cmd_t, queue);

    } else {
        cmd = ngx_alloc(sizeof(ngx_http_feed_redis_cmd_t), rd->log);
        if (cmd == NULL) {
            return NULL;
        }
    }

    ngx_memzero(cmd, sizeof(ngx_http_feed_redis_cmd_t));

    cmd->rd = rd;
    cmd->timer.handler = ngx_http_feed_redis_cmd_timeout;
    cmd->timer.data = &rd->dummy;
    cmd->timer.log = rd->log;

    /* a pause before a retry holds up no graceful shutdown */
    cmd->retry.handler = ngx_http_feed_redis_retry_handler;
    cmd->retry.log = rd->log;
    cmd->retry.cancelable = 1;
    cmd->slot = NGX_HTTP_FEED_REDIS_SLOTS;

    return cmd;
}


void
ngx_http_feed_redis_cmd_put(ngx_http_feed_redis_cmd_t *cmd)
{
    if (cmd->timer.timer_set) {
        ngx_del_timer(&cmd->timer);
    }

    if (cmd->retry.timer_set) {
        ngx_del_timer(&cmd->retry);
    }

    if (cmd->formatted) {
        redisFreeCommand(cmd->formatted);
        cmd->formatted = NULL;
    }

    /*
     * A few are kept for the next commands, not all of a burst: 10,000
     * streams' readers reading at once would leave 10,000 held for the
     * worker's life, each pinning a page among what the burst freed
     */

    if (cmd->rd->nfree >= NGX_HTTP_FEED_REDIS_FREE) {
        ngx_free(cmd);
        return;
    }

    ngx_queue_insert_head(&cmd->rd->free, &cmd->queue);
    cmd->rd->nfree++;
}


/*
 * How long the connection may still be held by a BLOCK command (a fanout
 * read) before it answers anything sent now; 0 when none is in flight.
 */

ngx_msec_t
ngx_http_feed_redis_blocked(ngx_http_feed_redis_t *rd)
{
    ngx_msec_t                  left, most;
    ngx_queue_t                *q;
    ngx_http_feed_redis_cmd_t  *cmd;

    most = 0;

    for (q = ngx_queue_head(&rd->pending);
         q != ngx_queue_sentinel(&rd->pending);
         q = ngx_queue_next(q))
    {
        cmd = ngx_queue_data(q, ngx_http_feed_redis_cmd_t, queue);

        if (!cmd->blocking || !cmd->timer.timer_set) {
            continue;
        }

        left = (ngx_msec_int_t) (cmd->timer.timer.key - ngx_current_msec) > 0
               ? cmd->timer.timer.key - ngx_current_msec : 1;

        most = ngx_max(most, left);
    }

    return most;
}


/*
 * SUBSCRIBE on a connection of its own, once it is ready: handler gets
 * each message and each channel's confirmation (arrays, as Redis sends
 * them), then NULL when the connection goes; the subscription is asked
 * again on the next connection.  No other command may follow on that
 * connection: hiredis would give it the next message as its reply.  A
 * connection of one node (on a cluster, a connection to a node's address):
 * a router cannot subscribe.
 */

ngx_int_t
ngx_http_feed_redis_subscribe(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_pt handler, void *data,
    ngx_http_feed_redis_args_t *args)
{
    if (rd == NULL || rd->cluster || rd->ac == NULL) {
        return NGX_DECLINED;
    }

    rd->on_message = handler;
    rd->on_message_data = data;

    if (redisAsyncCommandArgv(rd->ac, ngx_http_feed_redis_message, rd,
                              (int) args->argc, args->argv, args->argvlen)
        != REDIS_OK)
    {
        ngx_http_feed_stat(redis_errors, 1);
        return NGX_ERROR;
    }

    ngx_http_feed_stat(redis_commands, 1);

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p subscribes to %ui channels", rd,
                   args->argc - 1);

    return NGX_OK;
}


static void
ngx_http_feed_redis_message(redisAsyncContext *ac, void *reply,
    void *privdata)
{
    ngx_http_feed_redis_t  *rd = privdata;

    /* after destroy() began, nobody is left to hear it */

    if (rd->on_message) {
        rd->on_message(rd->on_message_data, reply);
    }
}


/*
 * A handler may hold the reply it was given instead of copying it: the
 * reply is then freed with the pool, not by hiredis when the handler
 * returns.  Only the reply being handled can be held.
 */

static void  *ngx_http_feed_redis_held;


ngx_int_t
ngx_http_feed_redis_hold_reply(ngx_pool_t *pool, redisReply *reply)
{
    ngx_pool_cleanup_t  *cln;

    cln = ngx_pool_cleanup_add(pool, 0);
    if (cln == NULL) {
        return NGX_ERROR;
    }

    cln->handler = ngx_http_feed_redis_held_cleanup;
    cln->data = reply;

    ngx_http_feed_redis_held = reply;

    return NGX_OK;
}


static void
ngx_http_feed_redis_held_cleanup(void *data)
{
    freeReplyObject(data);
}


void
ngx_http_feed_redis_free_reply(void *reply)
{
    if (reply == ngx_http_feed_redis_held) {
        ngx_http_feed_redis_held = NULL;
        return;
    }

    freeReplyObject(reply);
}
