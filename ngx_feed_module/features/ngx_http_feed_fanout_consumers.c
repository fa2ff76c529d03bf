
/*
 * ngx_feed_module: the consumers of the fanout group that are gone.
 *
 * Each worker reads the stream as a consumer of its own, "<host>:<pid>",
 * and Redis keeps a consumer until it is deleted: every reload and every
 * restart would leave some behind, forever listed by XINFO and XPENDING.
 * Along with its claims, each worker deletes, once nothing is pending for
 * them (what a dead worker held is claimed first):
 *
 *   - the consumers of its own host whose process is gone;
 *   - any consumer idle for an hour (a host that went away).  Redis 7.0
 *     counts idleness from the last entry a consumer got, so a live but
 *     quiet one may go too: that is harmless, its next read brings it
 *     back.
 *
 * The choice is made from XINFO; the delete is a script that checks again
 * that nothing is pending, in the same step.
 */


#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_scripts.h"


#define NGX_HTTP_FEED_CONSUMER_IDLE  (3600 * 1000)
#define NGX_HTTP_FEED_CONSUMERS_MAX  64


struct ngx_http_feed_fanout_consumers_s {
    ngx_http_feed_redis_t        *rd;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_str_t                    *stream;
    ngx_str_t                     self;
    ngx_str_t                     host;
    ngx_log_t                    *log;
};


static void ngx_http_feed_fanout_consumers_info(void *data, redisReply *reply);
static ngx_uint_t ngx_http_feed_fanout_consumers_gone(
    ngx_http_feed_fanout_consumers_t *cs, redisReply *c);
static void ngx_http_feed_fanout_consumers_done(void *data, redisReply *reply);


/* the consumers of one partition's stream */

ngx_http_feed_fanout_consumers_t *
ngx_http_feed_fanout_consumers_create(ngx_cycle_t *cycle,
    ngx_http_feed_redis_t *rd, ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *stream, const char *self, size_t len)
{
    ngx_http_feed_fanout_consumers_t  *cs;

    cs = ngx_pcalloc(cycle->pool, sizeof(ngx_http_feed_fanout_consumers_t));
    if (cs == NULL) {
        return NULL;
    }

    cs->rd = rd;
    cs->stream = stream;
    cs->fmcf = fmcf;
    cs->self.data = (u_char *) self;
    cs->self.len = len;
    cs->host = cycle->hostname;
    cs->log = cycle->log;

    return cs;
}


/* on the fanout's own connection, ahead of its claim */

void
ngx_http_feed_fanout_consumers_clean(ngx_http_feed_fanout_consumers_t *cs)
{
    size_t                       argvlen[4];
    const char                  *argv[4];
    ngx_http_feed_redis_args_t   args;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XINFO");
    ngx_http_feed_redis_args_lit(&args, "CONSUMERS");
    ngx_http_feed_redis_args_key(&args, cs->stream->data, cs->stream->len);
    ngx_http_feed_redis_args_add(&args, cs->fmcf->fanout_group.data,
                                 cs->fmcf->fanout_group.len);

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, cs->log, 0,
                   "feed fanout consumers of %V: clean started", cs->stream);

    (void) ngx_http_feed_redis_send(cs->rd,
                                    ngx_http_feed_fanout_consumers_info, cs,
                                    &args);
}


static void
ngx_http_feed_fanout_consumers_info(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_consumers_t  *cs = data;

    size_t                      argvlen[NGX_HTTP_FEED_REDIS_CALL_ARGC(
                                   NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NKEYS,
                                   NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NARGS
                                   + NGX_HTTP_FEED_CONSUMERS_MAX)];
    ngx_uint_t                  i;
    const char                 *argv[NGX_HTTP_FEED_REDIS_CALL_ARGC(
                                   NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NKEYS,
                                   NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NARGS
                                   + NGX_HTTP_FEED_CONSUMERS_MAX)];
    redisReply                 *name;
    ngx_http_feed_redis_call_t  call;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        return;
    }

    ngx_http_feed_redis_call_init(&call,
                                  &ngx_http_feed_script_fanout_consumers,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NARGS);

    ngx_http_feed_redis_call_key(&call,
        NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_KEY_STREAM,
        cs->stream->data, cs->stream->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_ARG_GROUP,
        cs->fmcf->fanout_group.data, cs->fmcf->fanout_group.len);

    /* then the names of those gone, each the second field of its entry */

    for (i = 0;
         i < reply->elements
         && call.nargs < NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NARGS
                         + NGX_HTTP_FEED_CONSUMERS_MAX;
         i++)
    {
        if (ngx_http_feed_fanout_consumers_gone(cs, reply->element[i])) {
            name = reply->element[i]->element[1];

            ngx_log_debug2(NGX_LOG_DEBUG_CORE, cs->log, 0,
                           "feed fanout consumer \"%*s\" gone, deleting",
                           name->len, name->str);

            ngx_http_feed_redis_call_arg(&call, call.nargs, name->str,
                                         name->len);
            call.nargs++;
        }
    }

    if (call.nargs == NGX_HTTP_FEED_SCRIPT_FANOUT_CONSUMERS_NARGS) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, cs->log, 0,
                       "feed fanout consumers: none of %uz gone",
                       reply->elements);
        return;
    }

    (void) ngx_http_feed_redis_call(NULL, cs->rd, &call,
                                    ngx_http_feed_fanout_consumers_done, cs);
}


/*
 * XINFO CONSUMERS gives, for each: name, pending, idle (and more in later
 * versions), as field, value pairs.
 */

static ngx_uint_t
ngx_http_feed_fanout_consumers_gone(ngx_http_feed_fanout_consumers_t *cs,
    redisReply *c)
{
    u_char      *colon;
    ngx_int_t    pid;
    ngx_str_t    name;
    ngx_uint_t   i;
    long long    pending, idle;
    redisReply  *k, *v;

    if (c->type != REDIS_REPLY_ARRAY || c->elements < 6
        || c->element[0]->type != REDIS_REPLY_STRING
        || ngx_strcmp(c->element[0]->str, "name") != 0
        || c->element[1]->type != REDIS_REPLY_STRING)
    {
        return 0;
    }

    name.data = (u_char *) c->element[1]->str;
    name.len = c->element[1]->len;

    pending = -1;
    idle = -1;

    for (i = 2; i + 1 < c->elements; i += 2) {
        k = c->element[i];
        v = c->element[i + 1];

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_INTEGER) {
            continue;
        }

        if (ngx_strcmp(k->str, "pending") == 0) {
            pending = v->integer;

        } else if (ngx_strcmp(k->str, "idle") == 0) {
            idle = v->integer;
        }
    }

    if (pending != 0
        || (name.len == cs->self.len
            && ngx_strncmp(name.data, cs->self.data, name.len) == 0))
    {
        return 0;
    }

    if (idle >= NGX_HTTP_FEED_CONSUMER_IDLE) {
        return 1;
    }

    /* one of this host's: is its process still there? */

    if (name.len <= cs->host.len + 1
        || ngx_strncmp(name.data, cs->host.data, cs->host.len) != 0
        || name.data[cs->host.len] != ':')
    {
        return 0;
    }

    colon = name.data + cs->host.len;
    pid = ngx_atoi(colon + 1, name.data + name.len - (colon + 1));

    return pid > 0 && kill((ngx_pid_t) pid, 0) == -1 && ngx_errno == NGX_ESRCH;
}


static void
ngx_http_feed_fanout_consumers_done(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_consumers_t  *cs = data;

    if (reply == NULL) {
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_WARN, cs->log, 0,
                      "fanout: removing consumers failed: %s", reply->str);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, cs->log, 0,
                   "feed fanout consumers: %L deleted",
                   (reply->type == REDIS_REPLY_INTEGER)
                   ? (int64_t) reply->integer : (int64_t) 0);

    if (reply->type == REDIS_REPLY_INTEGER && reply->integer > 0) {
        ngx_log_error(NGX_LOG_INFO, cs->log, 0,
                      "fanout: %L consumers that were gone removed",
                      reply->integer);
    }
}
