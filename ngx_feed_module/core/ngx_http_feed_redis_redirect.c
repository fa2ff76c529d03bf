
/*
 * ngx_feed_module: a cluster node's commands sent again.  Such a command
 * is kept formatted until its answer: a MOVED or an ASK sends the same
 * bytes to the node it names (the slot map is the cluster's,
 * ngx_http_feed_redis_cluster.c), and a TRYAGAIN or a CLUSTERDOWN sends
 * them again after a pause on an nginx timer.  A command waiting for its
 * pause is on no connection: it stays pending on the node that answered
 * it, whose destroy() frees it with its timers.
 */


#include "ngx_http_feed_redis_connection.h"


#define NGX_HTTP_FEED_REDIS_REDIRECTS    5


/*
 * A cluster's node answers TRYAGAIN to a command of several keys of a slot
 * being moved whose keys are on both nodes: it goes through as soon as
 * the move ends, so a few tries close together.  CLUSTERDOWN: a slot has
 * no master, or the node sees the cluster failing; the map is asked again
 * and the tries are further apart, a master may come back.  Both are
 * answered before the command runs: a write is sent again as safely as a
 * read.  The pause before try n (0, 1...) is delay + n * step, up to max.
 */
typedef struct {
    ngx_str_t                     error;
    const char                   *name;         /* feed_metrics' label */
    ngx_uint_t                    tries;
    ngx_msec_t                    delay;
    ngx_msec_t                    step;
    ngx_msec_t                    max;
    unsigned                      map:1;        /* the map asked again */
} ngx_http_feed_redis_retry_t;


/* indexed by ngx_http_feed_redis_retry_e */
static ngx_http_feed_redis_retry_t  ngx_http_feed_redis_retries[] = {
    { ngx_string("TRYAGAIN"), "tryagain", 5, 20, 10, 50, 0 },
    { ngx_string("CLUSTERDOWN"), "clusterdown", 3, 100, 50, 200, 1 }
};


/* what a node answers a script that touched a key of another node's */
#define NGX_HTTP_FEED_REDIS_NON_LOCAL                                        \
    "ERR Script attempted to access a non local key"


static ngx_int_t ngx_http_feed_redis_resend(ngx_http_feed_redis_cmd_t *cmd,
    ngx_http_feed_redis_t *to, ngx_uint_t ask);
static ngx_int_t ngx_http_feed_redis_retry_later(
    ngx_http_feed_redis_cmd_t *cmd);


/*
 * A cluster node's command is formatted once and kept: a MOVED or an ASK
 * sends the same bytes to another node.
 */

ngx_int_t
ngx_http_feed_redis_format(ngx_http_feed_redis_t *rd,
    ngx_http_feed_redis_cmd_t *cmd, ngx_http_feed_redis_args_t *args)
{
    int  len;

    len = redisFormatCommandArgv(&cmd->formatted, (int) args->argc,
                                 args->argv, args->argvlen);
    if (len < 0) {
        cmd->formatted = NULL;
        return REDIS_ERR;
    }

    cmd->formatted_len = len;
    cmd->slot = ngx_http_feed_redis_cluster_slot(args);

    return redisAsyncFormattedCommand(rd->ac, ngx_http_feed_redis_reply, cmd,
                                      cmd->formatted, len);
}


/*
 * NGX_OK: the reply was a redirection and the command went where it
 * points (behind ASKING for an ASK); its handler waits for that answer.
 */

ngx_int_t
ngx_http_feed_redis_redirected(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply)
{
    ngx_http_feed_redis_t           *rd, *to;
    ngx_http_feed_redis_redirect_t   rr;

    rd = cmd->rd;

    /*
     * A command nobody waits for (a write sent and forgotten, or one whose
     * request went away) is redirected all the same: it is still to be
     * done.
     */

    if (reply == NULL || reply->type != REDIS_REPLY_ERROR
        || cmd->redirects == NGX_HTTP_FEED_REDIS_REDIRECTS)
    {
        return NGX_DECLINED;
    }

    if (ngx_http_feed_redis_redirect_parse(reply->str, reply->len, &rr)
        != NGX_OK)
    {
        /* a script's key of a slot gone from this node: the map is old */

        if (reply->len > sizeof(NGX_HTTP_FEED_REDIS_NON_LOCAL) - 1
            && ngx_strncmp(reply->str, NGX_HTTP_FEED_REDIS_NON_LOCAL,
                           sizeof(NGX_HTTP_FEED_REDIS_NON_LOCAL) - 1)
               == 0)
        {
            ngx_http_feed_redis_cluster_stale(rd->router->cluster,
                                              "a key not local");
        }

        return NGX_DECLINED;
    }

    to = ngx_http_feed_redis_cluster_redirect(rd->router->cluster, rd, &rr);

    if (ngx_http_feed_redis_resend(cmd, to, rr.ask) != NGX_OK) {
        return NGX_DECLINED;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p: command %s to %p, slot %ui", rd,
                   rr.ask ? "asked" : "moved", to, rr.slot);

    cmd->redirects++;
    ngx_http_feed_redis_resends++;

    if (rr.ask) {
        ngx_http_feed_stat(redis_asked, 1);

    } else {
        ngx_http_feed_stat(redis_moved, 1);
    }

    return NGX_OK;
}


/*
 * The kept command sent on another node's connection (behind ASKING for
 * an ASK), pending there from now on
 */

static ngx_int_t
ngx_http_feed_redis_resend(ngx_http_feed_redis_cmd_t *cmd,
    ngx_http_feed_redis_t *to, ngx_uint_t ask)
{
    ngx_http_feed_redis_t  *rd;

    if (to == NULL || to->ac == NULL) {
        return NGX_DECLINED;
    }

    if (ask && redisAsyncCommand(to->ac, NULL, NULL, "ASKING") != REDIS_OK) {
        return NGX_DECLINED;
    }

    if (redisAsyncFormattedCommand(to->ac, ngx_http_feed_redis_reply, cmd,
                                   cmd->formatted, cmd->formatted_len)
        != REDIS_OK)
    {
        return NGX_DECLINED;
    }

    rd = cmd->rd;

    ngx_queue_remove(&cmd->queue);
    rd->npending--;

    /*
     * Its timer logs with the node it waits on: at exit the nodes are
     * freed one by one, and the one it came from may be gone first.
     */

    cmd->rd = to;
    cmd->timer.data = &to->dummy;

    ngx_queue_insert_tail(&to->pending, &cmd->queue);
    to->npending++;

    ngx_http_feed_stat(redis_commands, 1);

    return NGX_OK;
}


/*
 * NGX_OK: the reply was a TRYAGAIN or a CLUSTERDOWN, and the command waits
 * to be sent again.  Like a redirection, whether anyone waits for it or
 * not.
 */

ngx_int_t
ngx_http_feed_redis_retried(ngx_http_feed_redis_cmd_t *cmd,
    redisReply *reply)
{
    ngx_uint_t                    i;
    ngx_http_feed_redis_retry_t  *rt;

    if (reply == NULL || reply->type != REDIS_REPLY_ERROR) {
        return NGX_DECLINED;
    }

    for (i = 0; i < NGX_HTTP_FEED_REDIS_RETRIES; i++) {
        rt = &ngx_http_feed_redis_retries[i];

        if (reply->len < rt->error.len
            || ngx_strncmp(reply->str, rt->error.data, rt->error.len) != 0)
        {
            continue;
        }

        ngx_log_debug3(NGX_LOG_DEBUG_EVENT, cmd->rd->log, 0,
                       "feed redis %p: command %s answered %V", cmd->rd,
                       cmd->name, &rt->error);

        if (rt->map) {
            ngx_http_feed_redis_cluster_stale(cmd->rd->router->cluster,
                                              "cluster down");
        }

        cmd->reason = i;

        if (ngx_http_feed_redis_retry_later(cmd) != NGX_OK) {
            return NGX_DECLINED;
        }

        ngx_http_feed_stat(redis_retried[i], 1);

        return NGX_OK;
    }

    return NGX_DECLINED;
}


/*
 * The pause before the next try, if there is one: not for a BLOCK read
 * (its wait would outlast its timer), nor for a command without keys (no
 * slot to find the master of), nor once the worker is exiting (a graceful
 * shutdown waits for no pause).  The pause ends before the command's
 * timer, counted from its first sending, with a quarter of
 * feed_redis_timeout left for the answer: a retry never makes a command
 * time out and drop its connection.
 */

static ngx_int_t
ngx_http_feed_redis_retry_later(ngx_http_feed_redis_cmd_t *cmd)
{
    ngx_msec_t                    delay;
    ngx_msec_int_t                left;
    ngx_http_feed_redis_retry_t  *rt;

    rt = &ngx_http_feed_redis_retries[cmd->reason];

    if (cmd->blocking || cmd->slot == NGX_HTTP_FEED_REDIS_SLOTS
        || cmd->tries >= rt->tries || !cmd->timer.timer_set
        || ngx_exiting || ngx_terminate)
    {
        return NGX_DECLINED;
    }

    delay = ngx_min(rt->delay + cmd->tries * rt->step, rt->max);
    left = (ngx_msec_int_t) (cmd->timer.timer.key - ngx_current_msec);

    if (left <= (ngx_msec_int_t) (delay + cmd->rd->conf->timeout / 4)) {
        ngx_log_debug2(NGX_LOG_DEBUG_EVENT, cmd->rd->log, 0,
                       "feed redis %p: no time left to retry, %i ms",
                       cmd->rd, (ngx_int_t) left);
        return NGX_DECLINED;
    }

    cmd->tries++;
    ngx_http_feed_redis_resends++;

    /* on the node where it waits: destroy() deletes it with the command */
    cmd->retry.data = &cmd->rd->dummy;
    ngx_add_timer(&cmd->retry, delay);

    ngx_log_debug4(NGX_LOG_DEBUG_EVENT, cmd->rd->log, 0,
                   "feed redis %p: command %s sent again in %M ms, try %ui",
                   cmd->rd, cmd->name, delay, cmd->tries);

    return NGX_OK;
}


/*
 * The pause is over: the command goes to its slot's master as the map has
 * it now (a TRYAGAIN's node was the importing one, reached by an ASK; the
 * source asks again, or says MOVED once the move ended).  No master up
 * for the slot: the next try, or the end, with no reply.
 */

void
ngx_http_feed_redis_retry_handler(ngx_event_t *ev)
{
    ngx_http_feed_redis_t      *rd, *to;
    ngx_http_feed_redis_cmd_t  *cmd;

    cmd = ngx_queue_data(ev, ngx_http_feed_redis_cmd_t, retry);
    rd = cmd->rd;

    to = ngx_http_feed_redis_cluster_slot_master(rd->router->cluster,
                                                 cmd->slot);

    if (ngx_http_feed_redis_resend(cmd, to, 0) == NGX_OK) {
        ngx_log_debug4(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                       "feed redis %p: command %s sent again to %p, "
                       "try %ui", rd, cmd->name, to, cmd->tries);

        /* each try may be redirected as the first was */
        cmd->redirects = 0;
        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, rd->log, 0,
                   "feed redis %p: no master up for slot %ui", rd,
                   cmd->slot);

    if (ngx_http_feed_redis_retry_later(cmd) == NGX_OK) {
        return;
    }

    ngx_http_feed_stat(redis_errors, 1);
    ngx_http_feed_redis_cmd_done(cmd, NULL);
}


/* feed_metrics' label of a reason for a retry */

const char *
ngx_http_feed_redis_retry_name(ngx_uint_t reason)
{
    return ngx_http_feed_redis_retries[reason].name;
}
