
/*
 * ngx_feed_module: fanout on write, inside the nginx workers.
 *
 * Every worker is a consumer ("<host>:<pid>") of one consumer group of the
 * posts stream, reading with XREADGROUP ... BLOCK on a Redis connection of
 * its own, so that the hot path never waits behind it.  For each entry:
 *
 *   post    the post from MongoDB (absent or deleted: acknowledged and
 *           logged, not retried), then the author's followers a page at a
 *           time, delivered into the timelines that exist (plus the
 *           author's own) by one script call per batch: one round trip
 *           for hundreds of followers, the next page read meanwhile;
 *   delete  the same pages, the post taken out of those timelines.
 *
 * XACK only once every delivery succeeded.  An entry that failed stays
 * pending, as do those of a worker that died: XAUTOCLAIM hands entries idle
 * for feed_fanout_claim_idle to a live consumer, which completes them.
 * Deliveries are idempotent, so a redelivered entry leaves one copy.
 */


#include "ngx_http_feed_fanout_entry.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_post.h"
#include "ngx_http_feed_pull.h"


#define NGX_HTTP_FEED_FANOUT_RETRY   500

/* ms before a consumer reads its own failed entries again, at first */
#define NGX_HTTP_FEED_FANOUT_OWN_RETRY  1000
#define NGX_HTTP_FEED_FANOUT_WINDOW  4

/* nodes told apart when batches are ordered by node (a cluster's 64) */
#define NGX_HTTP_FEED_FANOUT_NODES   65


static ngx_int_t ngx_http_feed_fanout_init_one(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_fanout_t *fo,
    ngx_str_t *stream);
static void ngx_http_feed_fanout_ready(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_fanout_grouped(void *data, redisReply *reply);
static void ngx_http_feed_fanout_again(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_client_id(void *data, redisReply *reply);
static void ngx_http_feed_fanout_stop(ngx_http_feed_redis_t *rd,
    void *data);
static void ngx_http_feed_fanout_tick(ngx_event_t *ev);
static void ngx_http_feed_fanout_next(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_read(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_read_args(ngx_http_feed_fanout_t *fo,
    ngx_http_feed_redis_args_t *args, u_char *count, u_char *block,
    const char *id);
static void ngx_http_feed_fanout_read_own(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_retry_own(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_claim(ngx_http_feed_fanout_t *fo);
static void ngx_http_feed_fanout_got(void *data, redisReply *reply);
static ngx_uint_t ngx_http_feed_fanout_start_all(ngx_http_feed_fanout_t *fo,
    redisReply *entries);
static ngx_int_t ngx_http_feed_fanout_start(ngx_http_feed_fanout_t *fo,
    redisReply *e);
static ngx_int_t ngx_http_feed_fanout_parse(ngx_http_feed_fanout_entry_t *fe,
    redisReply *fields);
static void ngx_http_feed_fanout_fetch(ngx_http_feed_fanout_entry_t *fe);
static void ngx_http_feed_fanout_fetched(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_fanout_deliver(ngx_http_feed_fanout_entry_t *fe);
static ngx_int_t ngx_http_feed_fanout_by_node(
    ngx_http_feed_fanout_entry_t *fe);
static int ngx_libc_cdecl ngx_http_feed_fanout_node_cmp(const void *one,
    const void *two);
static ngx_uint_t ngx_http_feed_fanout_batch(ngx_http_feed_fanout_entry_t *fe);
static void ngx_http_feed_fanout_send(ngx_http_feed_fanout_entry_t *fe);
static void ngx_http_feed_fanout_delivered(void *data, redisReply *reply);
static void ngx_http_feed_fanout_ack(ngx_http_feed_fanout_entry_t *fe);
static void ngx_http_feed_fanout_acked(void *data, redisReply *reply);
static void ngx_http_feed_fanout_free(ngx_http_feed_fanout_entry_t *fe);
static void ngx_http_feed_fanout_post_cache(ngx_http_feed_fanout_entry_t *fe);


/* the worker's consumers, one a partition; the one of the last post */
static ngx_http_feed_fanout_t  *ngx_http_feed_fanouts;
static ngx_uint_t               ngx_http_feed_nfanouts;
static ngx_http_feed_fanout_t  *ngx_http_feed_fanout_last;

#if (NGX_DEBUG)

/* what is done with a post (ngx_http_feed_pull_action_e), for the log */
static char  *ngx_http_feed_fanout_actions[] = {
    "pushed", "pushed and listed", "pushed, listed, turning its author",
    "listed only (a pull author)"
};

#endif


/*
 * A consumer of each partition of the queue, each on a Redis client of its
 * own: a BLOCKed read holds up nobody else, not even another partition's
 * (on a cluster, two partitions' streams may be on one master).
 */

ngx_int_t
ngx_http_feed_fanout_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_uint_t               i;
    ngx_http_feed_fanout_t  *fo;

    if (!fmcf->fanout || fmcf->redis_client == NULL
        || fmcf->mongo_client == NULL)
    {
        return NGX_OK;
    }

    fo = ngx_pcalloc(cycle->pool,
                     fmcf->stream_partitions * sizeof(ngx_http_feed_fanout_t));
    if (fo == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < fmcf->stream_partitions; i++) {
        if (ngx_http_feed_fanout_init_one(cycle, fmcf, &fo[i],
                                          &fmcf->streams[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    ngx_http_feed_fanouts = fo;
    ngx_http_feed_nfanouts = fmcf->stream_partitions;

    for (i = 0; i < ngx_http_feed_nfanouts; i++) {
        ngx_http_feed_redis_start(fo[i].rd);
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_fanout_init_one(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_fanout_t *fo,
    ngx_str_t *stream)
{
    u_char  *p;

    fo->fmcf = fmcf;
    fo->stream = stream;
    fo->log = cycle->log;

    p = ngx_snprintf((u_char *) fo->consumer, sizeof(fo->consumer) - 1,
                     "%V:%P", &cycle->hostname, ngx_pid);
    fo->consumer_len = p - (u_char *) fo->consumer;

    fo->dummy.fd = (ngx_socket_t) -1;
    fo->dummy.data = fo;
    fo->timer.handler = ngx_http_feed_fanout_tick;
    ngx_http_feed_fanout_lease_init(fo);
    fo->timer.data = &fo->dummy;
    fo->timer.log = cycle->log;
    fo->timer.cancelable = 1;

    fo->rd = ngx_http_feed_redis_create(cycle, &fmcf->redis);
    if (fo->rd == NULL) {
        return NGX_ERROR;
    }

    fo->consumers = ngx_http_feed_fanout_consumers_create(cycle, fo->rd, fmcf,
                        stream, fo->consumer, fo->consumer_len);
    if (fo->consumers == NULL) {
        return NGX_ERROR;
    }

    if (ngx_http_feed_redis_on_ready(fo->rd, ngx_http_feed_fanout_ready, fo)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    ngx_http_feed_redis_on_exit(fo->rd, ngx_http_feed_fanout_stop, fo);

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, cycle->log, 0,
                   "feed fanout consumer \"%s\" of %V", fo->consumer, stream);

    return NGX_OK;
}


void
ngx_http_feed_fanout_exit(void)
{
    ngx_uint_t               i;
    ngx_http_feed_fanout_t  *fo;

    for (i = 0; i < ngx_http_feed_nfanouts; i++) {
        fo = &ngx_http_feed_fanouts[i];

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, fo->log, 0,
                       "feed fanout exit, %V: %ui entries in flight",
                       fo->stream, fo->active);

        if (fo->timer.timer_set) {
            ngx_del_timer(&fo->timer);
        }

        ngx_http_feed_fanout_lease_stop(fo);

        /* entries read but not acknowledged are claimed by the others */

        ngx_http_feed_redis_destroy(fo->rd);
    }

    ngx_http_feed_fanouts = NULL;
    ngx_http_feed_nfanouts = 0;
    ngx_http_feed_fanout_last = NULL;
}


/* the group exists from the first connection on, reading from the start */

static void
ngx_http_feed_fanout_ready(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_fanout_t  *fo = data;

    ngx_http_feed_main_conf_t  *fmcf;
    const char                 *argv[6];
    size_t                      argvlen[6];
    ngx_http_feed_redis_args_t  args;

    fmcf = fo->fmcf;

    /*
     * On a cluster, the client is ready again whenever one of its masters
     * comes back.  While our read (or claim) is in flight, the connection
     * to the stream's master is as it was: the group and our client id
     * are known, and anything sent there would wait behind the read, past
     * its timeout.  A read lost with its connection has been answered
     * (NULL), and then all is done again.
     */

    if (fo->reading) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, fo->log, 0,
                       "feed fanout of %V: ready again, reading", fo->stream);
        return;
    }

    /* the id by which a shutdown can end our blocked read at once */

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "ID");
    ngx_http_feed_redis_args_route(&args, fo->stream->data,
                                   fo->stream->len);

    (void) ngx_http_feed_redis_send(rd, ngx_http_feed_fanout_client_id, fo,
                                    &args);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XGROUP");
    ngx_http_feed_redis_args_lit(&args, "CREATE");
    ngx_http_feed_redis_args_key(&args, fo->stream->data, fo->stream->len);
    ngx_http_feed_redis_args_add(&args, fmcf->fanout_group.data,
                                 fmcf->fanout_group.len);
    ngx_http_feed_redis_args_lit(&args, "0");
    ngx_http_feed_redis_args_lit(&args, "MKSTREAM");

    /*
     * Not sent (on a cluster, the stream's master is down or unmapped):
     * asked again on the timer, as after an error reply; the ready hook
     * may not come again for this master
     */

    if (ngx_http_feed_redis_send(rd, ngx_http_feed_fanout_grouped, fo, &args)
        == NULL)
    {
        ngx_http_feed_fanout_again(fo);
    }
}


/* the group asked again, or the next read sent, after a pause */

static void
ngx_http_feed_fanout_again(ngx_http_feed_fanout_t *fo)
{
    if (!fo->timer.timer_set && !ngx_exiting) {
        ngx_add_timer(&fo->timer, NGX_HTTP_FEED_FANOUT_RETRY);
    }
}


static void
ngx_http_feed_fanout_grouped(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_t  *fo = data;

    if (reply == NULL) {
        /* lost with its connection: asked again, whatever comes back */
        ngx_http_feed_fanout_again(fo);
        return;
    }

    if (reply->type == REDIS_REPLY_ERROR
        && ngx_strncmp(reply->str, "BUSYGROUP", 9) != 0)
    {
        /*
         * OOM, BUSY, LOADING, CLUSTERDOWN on a connection that stays up:
         * no ready hook comes, so the group is asked again on a timer
         */
        ngx_log_error(NGX_LOG_ERR, fo->log, 0,
                      "fanout group create failed: %s", reply->str);
        ngx_cpystrn((u_char *) fo->error, (u_char *) reply->str,
                    sizeof(fo->error));

        ngx_http_feed_fanout_again(fo);

        return;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout group ready, consumer \"%s\"%s", fo->consumer,
                   fo->reading ? ", a read in flight" : "");

    /* a read or claim sent meanwhile goes on (ngx_http_feed_fanout_ready) */

    fo->ready = 1;
    fo->error[0] = '\0';

    ngx_http_feed_fanout_next(fo);
}


static void
ngx_http_feed_fanout_client_id(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_t  *fo = data;

    if (reply && reply->type == REDIS_REPLY_INTEGER) {
        fo->client_id = reply->integer;
    }
}


/*
 * A graceful shutdown began: no more reading.  A read blocked in Redis is
 * ended from the other connection, so that no entry goes to a worker on
 * its way out; the entries it holds are finished.
 */

static void
ngx_http_feed_fanout_stop(ngx_http_feed_redis_t *rd, void *data)
{
    ngx_http_feed_fanout_t  *fo = data;

    u_char                      id[NGX_INT64_LEN];
    size_t                      argvlen[3];
    const char                 *argv[3];
    ngx_http_feed_redis_args_t  args;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout stopped, %s, %ui entries in flight",
                   fo->reading ? "read to unblock" : "not reading",
                   fo->active);

    if (fo->timer.timer_set) {
        ngx_del_timer(&fo->timer);
    }

    if (!fo->reading || fo->client_id == 0) {
        return;
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "UNBLOCK");
    ngx_http_feed_redis_args_add(&args, id,
                                 ngx_sprintf(id, "%L", fo->client_id) - id);
    ngx_http_feed_redis_args_route(&args, fo->stream->data,
                                   fo->stream->len);

    (void) ngx_http_feed_redis_send(fo->fmcf->redis_client, NULL, NULL,
                                    &args);
}


/*
 * A read or a claim to send again, or the group to ask again after an
 * error reply (ngx_http_feed_fanout_grouped); when the connection is down
 * meanwhile, the ready hook does it on its return
 */

static void
ngx_http_feed_fanout_tick(ngx_event_t *ev)
{
    ngx_connection_t  *c = ev->data;

    ngx_http_feed_fanout_t  *fo = c->data;

    if (!fo->ready) {
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, fo->log, 0,
                       "feed fanout of %V: the group asked again",
                       fo->stream);

        ngx_http_feed_fanout_ready(fo->rd, fo);
        return;
    }

    ngx_http_feed_fanout_next(fo);
}


/* claim what others left behind when it is time, else read new entries */

static void
ngx_http_feed_fanout_next(ngx_http_feed_fanout_t *fo)
{
    if (ngx_exiting || !fo->ready || fo->reading || fo->active) {
        return;
    }

    if (fo->retry_own
        && (ngx_msec_int_t) (ngx_current_msec - fo->retry_at) >= 0)
    {
        fo->retry_own = 0;
        ngx_http_feed_fanout_read_own(fo);
        return;
    }

    if (ngx_current_msec - fo->last_claim
        >= fo->fmcf->fanout_claim_idle / 2)
    {
        ngx_http_feed_fanout_claim(fo);
        return;
    }

    ngx_http_feed_fanout_read(fo);
}


/*
 * XREADGROUP of the consumer's partition from id: ">" new entries,
 * blocking (count and block hold the numbers), "0" its own pending ones
 */

static void
ngx_http_feed_fanout_read_args(ngx_http_feed_fanout_t *fo,
    ngx_http_feed_redis_args_t *args, u_char *count, u_char *block,
    const char *id)
{
    ngx_http_feed_main_conf_t  *fmcf = fo->fmcf;

    ngx_http_feed_redis_args_lit(args, "XREADGROUP");
    ngx_http_feed_redis_args_lit(args, "GROUP");
    ngx_http_feed_redis_args_add(args, fmcf->fanout_group.data,
                                 fmcf->fanout_group.len);
    ngx_http_feed_redis_args_add(args, fo->consumer, fo->consumer_len);
    ngx_http_feed_redis_args_lit(args, "COUNT");
    ngx_http_feed_redis_args_add(args, count,
                                 ngx_sprintf(count, "%ui", fmcf->fanout_batch)
                                 - count);

    if (block) {
        ngx_http_feed_redis_args_lit(args, "BLOCK");
        ngx_http_feed_redis_args_add(args, block,
                                     ngx_sprintf(block, "%M",
                                                 fmcf->fanout_block)
                                     - block);
    }

    ngx_http_feed_redis_args_lit(args, "STREAMS");
    ngx_http_feed_redis_args_key(args, fo->stream->data, fo->stream->len);
    ngx_http_feed_redis_args_add(args, (u_char *) id, ngx_strlen(id));
}


static void
ngx_http_feed_fanout_read(ngx_http_feed_fanout_t *fo)
{
    u_char                      count[NGX_INT_T_LEN], block[NGX_INT_T_LEN];
    size_t                      argvlen[11];
    const char                 *argv[11];
    ngx_http_feed_redis_args_t  args;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fo->fmcf;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_fanout_read_args(fo, &args, count, block, ">");

    if (ngx_http_feed_redis_send_timeout(fo->rd,
                                         fmcf->fanout_block
                                         + fmcf->redis.timeout,
                                         ngx_http_feed_fanout_got, fo, &args)
        == NULL)
    {
        ngx_add_timer(&fo->timer, NGX_HTTP_FEED_FANOUT_RETRY);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout read sent, blocking %M ms", fmcf->fanout_block);

    fo->reading = 1;
}


/*
 * The consumer's own pending entries, from the first (ID 0): those that
 * failed, once nothing is in flight; at once, without blocking
 */

static void
ngx_http_feed_fanout_read_own(ngx_http_feed_fanout_t *fo)
{
    u_char                      count[NGX_INT_T_LEN];
    size_t                      argvlen[9];
    const char                 *argv[9];
    ngx_http_feed_redis_args_t  args;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_fanout_read_args(fo, &args, count, NULL, "0");

    if (ngx_http_feed_redis_send(fo->rd, ngx_http_feed_fanout_got, fo, &args)
        == NULL)
    {
        fo->retry_own = 1;
        ngx_add_timer(&fo->timer, NGX_HTTP_FEED_FANOUT_RETRY);
        return;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout: its own pending entries read again");

    fo->reading = 1;
    fo->reading_own = 1;
}


static void
ngx_http_feed_fanout_claim(ngx_http_feed_fanout_t *fo)
{
    u_char                      idle[NGX_INT_T_LEN], count[NGX_INT_T_LEN];
    size_t                      argvlen[8];
    const char                 *argv[8];
    ngx_http_feed_redis_args_t  args;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fo->fmcf;
    fo->last_claim = ngx_current_msec;

    ngx_http_feed_fanout_consumers_clean(fo->consumers);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XAUTOCLAIM");
    ngx_http_feed_redis_args_key(&args, fo->stream->data, fo->stream->len);
    ngx_http_feed_redis_args_add(&args, fmcf->fanout_group.data,
                                 fmcf->fanout_group.len);
    ngx_http_feed_redis_args_add(&args, fo->consumer, fo->consumer_len);
    ngx_http_feed_redis_args_add(&args, idle,
                                 ngx_sprintf(idle, "%M",
                                             fmcf->fanout_claim_idle)
                                 - idle);
    ngx_http_feed_redis_args_lit(&args, "0-0");
    ngx_http_feed_redis_args_lit(&args, "COUNT");
    ngx_http_feed_redis_args_add(&args, count,
                                 ngx_sprintf(count, "%ui", fmcf->fanout_batch)
                                 - count);

    if (ngx_http_feed_redis_send(fo->rd, ngx_http_feed_fanout_got, fo, &args)
        == NULL)
    {
        ngx_add_timer(&fo->timer, NGX_HTTP_FEED_FANOUT_RETRY);
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout claim sent, idle %M ms",
                   fmcf->fanout_claim_idle);

    fo->reading = 1;
}


/*
 * XREADGROUP: nil, or [[stream, [entry, ...]]];
 * XAUTOCLAIM: [next, [entry, ...], [deleted id, ...]].
 */

static void
ngx_http_feed_fanout_got(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_t  *fo = data;

    ngx_uint_t   n, own;
    redisReply  *entries;

    fo->reading = 0;

    own = fo->reading_own;
    fo->reading_own = 0;

    if (reply == NULL) {
        /*
         * The connection is gone: the ready hook starts over, and the
         * timer too, in case no hook comes (a cluster's new master whose
         * connection was up already)
         */
        ngx_log_debug0(NGX_LOG_DEBUG_CORE, fo->log, 0,
                       "feed fanout read lost with the connection");
        fo->ready = 0;
        ngx_http_feed_fanout_again(fo);
        return;
    }

    entries = NULL;

    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 1
        && reply->element[0]->type == REDIS_REPLY_ARRAY
        && reply->element[0]->elements == 2)
    {
        entries = reply->element[0]->element[1];

    } else if (reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2
               && reply->element[0]->type == REDIS_REPLY_STRING)
    {
        entries = reply->element[1];
        ngx_http_feed_stat(fanout_claims,
                           (entries->type == REDIS_REPLY_ARRAY)
                           ? entries->elements : 0);

    } else if (reply->type == REDIS_REPLY_ERROR) {
        ngx_log_error(NGX_LOG_ERR, fo->log, 0, "fanout read failed: %s",
                      reply->str);
        ngx_cpystrn((u_char *) fo->error, (u_char *) reply->str,
                    sizeof(fo->error));

        if (ngx_strncmp(reply->str, "NOGROUP", 7) == 0) {
            /* the stream was deleted: make the group again */
            fo->ready = 0;
            ngx_http_feed_fanout_ready(fo->rd, fo);
            return;
        }

        ngx_add_timer(&fo->timer, NGX_HTTP_FEED_FANOUT_RETRY);
        return;
    }

    if (own && entries && entries->type == REDIS_REPLY_ARRAY) {
        ngx_http_feed_stat(fanout_retried, entries->elements);
    }

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout got %uz entries",
                   (entries && entries->type == REDIS_REPLY_ARRAY)
                   ? entries->elements : 0);

    n = 0;

    if (entries && entries->type == REDIS_REPLY_ARRAY) {
        n = ngx_http_feed_fanout_start_all(fo, entries);
    }

    if (n == 0) {
        if (own) {
            /* none of its own left: the next failure waits a second */
            fo->retry_backoff = 0;
        }

        ngx_http_feed_fanout_next(fo);
    }
}


static ngx_uint_t
ngx_http_feed_fanout_start_all(ngx_http_feed_fanout_t *fo,
    redisReply *entries)
{
    size_t      i;
    ngx_uint_t  n;

    n = 0;

    for (i = 0; i < entries->elements; i++) {
        if (ngx_http_feed_fanout_start(fo, entries->element[i]) == NGX_OK) {
            n++;
        }
    }

    return n;
}


/* one stream entry: [id, [field, value, ...]] */

static ngx_int_t
ngx_http_feed_fanout_start(ngx_http_feed_fanout_t *fo, redisReply *e)
{
    ngx_pool_t                    *pool;
    ngx_http_feed_fanout_entry_t  *fe;

    if (e->type != REDIS_REPLY_ARRAY || e->elements != 2
        || e->element[0]->type != REDIS_REPLY_STRING
        || e->element[0]->len >= sizeof(fe->sid))
    {
        return NGX_DECLINED;
    }

    pool = ngx_create_pool(4096, fo->log);
    if (pool == NULL) {
        return NGX_DECLINED;
    }

    fe = ngx_pcalloc(pool, sizeof(ngx_http_feed_fanout_entry_t));
    if (fe == NULL) {
        ngx_destroy_pool(pool);
        return NGX_DECLINED;
    }

    fe->pool = pool;
    fe->fo = fo;
    ngx_memcpy(fe->sid, e->element[0]->str, e->element[0]->len);

    fo->active++;
    ngx_http_feed_fanout_lease_hold(fe);
    ngx_http_feed_stat(fanout_consumed, 1);

    if (ngx_http_feed_fanout_parse(fe, e->element[1]) != NGX_OK) {
        /* a poison entry: it will never make sense, drop it */
        ngx_log_error(NGX_LOG_WARN, fo->log, 0,
                      "fanout: malformed stream entry %s acknowledged",
                      fe->sid);
        ngx_http_feed_stat(fanout_skipped, 1);
        ngx_http_feed_fanout_ack(fe);
        return NGX_OK;
    }

    fe->task = ngx_http_feed_mongo_task(pool, fo->fmcf->mongo_client,
                                        ngx_http_feed_fanout_page_run,
                                        ngx_http_feed_fanout_fetched,
                                        &fe->page);
    if (fe->task == NULL) {
        ngx_http_feed_fanout_fail(fe, "out of memory");
        return NGX_OK;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout entry %s started: %s %s by \"%s\"",
                   fe->sid, (fe->kind == 'p') ? "post" : "delete",
                   fe->page.post_id, fe->page.author.data);

    fe->page.want_post = (fe->kind == 'p');
    ngx_http_feed_model_conf(fo->fmcf, &fe->page.model);
    fe->page.removing = (fe->kind == 'd');
    fe->page.limit = fo->fmcf->fanout_page;
    fe->page.pull_threshold = fo->fmcf->pull_threshold;

    /* a live turn reads a page of followers well within a claim's idle */
    fe->page.pull_stale = 4 * fo->fmcf->fanout_claim_idle;

    if (fe->kind == 'd') {
        ngx_http_feed_fanout_unlist(fe);
    }

    ngx_http_feed_fanout_fetch(fe);
    ngx_http_feed_fanout_settle(fe);

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_fanout_parse(ngx_http_feed_fanout_entry_t *fe,
    redisReply *fields)
{
    size_t       i;
    ngx_str_t    id;
    bson_oid_t   oid;
    redisReply  *k, *v;

    if (fields == NULL || fields->type != REDIS_REPLY_ARRAY) {
        return NGX_ERROR;
    }

    for (i = 0; i + 1 < fields->elements; i += 2) {
        k = fields->element[i];
        v = fields->element[i + 1];

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            return NGX_ERROR;
        }

        if (k->len == 4 && ngx_strncmp(k->str, "type", 4) == 0) {
            if (v->len == 4 && ngx_strncmp(v->str, "post", 4) == 0) {
                fe->kind = 'p';

            } else if (v->len == 6 && ngx_strncmp(v->str, "delete", 6) == 0) {
                fe->kind = 'd';
            }

        } else if (k->len == 2 && ngx_strncmp(k->str, "id", 2) == 0) {
            id.data = (u_char *) v->str;
            id.len = v->len;

            if (ngx_http_feed_post_id(&id, &oid) != NGX_OK) {
                return NGX_ERROR;
            }

            ngx_memcpy(fe->page.post_id, v->str, 24);

        } else if (k->len == 6 && ngx_strncmp(k->str, "author", 6) == 0) {
            if (!ngx_http_feed_user_valid((u_char *) v->str, v->len)) {
                return NGX_ERROR;
            }

            ngx_memcpy(fe->page.author.data, v->str, v->len);
            fe->page.author.len = v->len;
        }
    }

    if (fe->kind == 0 || fe->page.post_id[0] == '\0'
        || fe->page.author.len == 0)
    {
        return NGX_ERROR;
    }

    if (fe->kind == 'd') {
        fe->entry.data = (u_char *) fe->page.post_id;
        fe->entry.len = 24;
    }

    return NGX_OK;
}


/*
 * The next page.  A task that cannot be posted (the thread pool's queue is
 * full) fails the entry, which is let go only once the batches of the page
 * before are answered: their callbacks hold it.
 */

static void
ngx_http_feed_fanout_fetch(ngx_http_feed_fanout_entry_t *fe)
{
    fe->pages++;

    if (ngx_http_feed_mongo_post(fe->task) != NGX_OK) {
        ngx_http_feed_fanout_failing(fe, "thread pool queue overflow");
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s: page %ui fetching, %ui batches out",
                   fe->sid, fe->pages, fe->waiting);

    fe->fetching = 1;
}


static void
ngx_http_feed_fanout_fetched(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_fanout_entry_t  *fe;

    /* the task's data is the entry's page */
    fe = ngx_queue_data(t->data, ngx_http_feed_fanout_entry_t, page);

    fe->fetching = 0;

    if (fe->page.skipped) {
        ngx_log_error(NGX_LOG_WARN, fe->fo->log, 0,
                      "fanout: followers of \"%s\": %ui documents with "
                      "invalid user ids skipped", fe->page.author.data,
                      fe->page.skipped);
        fe->page.skipped = 0;
    }

    if (t->rc != NGX_OK) {
        bson_free(fe->page.json);
        fe->page.json = NULL;
        bson_free(fe->page.users);
        fe->page.users = NULL;
        ngx_http_feed_fanout_failing(fe, t->error.message);
        ngx_http_feed_fanout_settle(fe);
        return;
    }

    ngx_log_debug4(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s: page %ui fetched, %ui followers%s",
                   fe->sid, fe->pages, fe->page.nusers,
                   (fe->page.nusers < fe->page.limit) ? ", the last" : "");

    if (fe->page.want_post) {
        fe->page.want_post = 0;

        if (!fe->page.found) {
            /* deleted before it could be fanned out, or never stored */
            ngx_log_error(NGX_LOG_INFO, fe->fo->log, 0,
                          "fanout: post %s is gone, entry %s acknowledged",
                          fe->page.post_id, fe->sid);
            ngx_http_feed_stat(fanout_skipped, 1);
            bson_free(fe->page.users);
            fe->page.users = NULL;
            ngx_http_feed_fanout_ack(fe);
            return;
        }

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                       "feed fanout entry %s: %s", fe->sid,
                       ngx_http_feed_fanout_actions[fe->page.pull]);

        if (fe->page.to_push) {
            ngx_http_feed_stat(pull_to_push, 1);
        }

        ngx_http_feed_fanout_post_cache(fe);

        if (fe->page.pull != NGX_HTTP_FEED_PULL_PUSH && !fe->failed) {
            ngx_http_feed_fanout_list(fe);
        }
    }

    fe->fetched = 1;
    fe->last = (fe->page.nusers < fe->page.limit
                || fe->page.pull == NGX_HTTP_FEED_PULL_LIST);

    ngx_http_feed_fanout_settle(fe);
}


/*
 * What timelines get: the id, followed by the JSON in embed mode; in link
 * mode the JSON goes to the post cache first, on the same connection, so
 * it is there before any timeline points to it.
 */

static void
ngx_http_feed_fanout_post_cache(ngx_http_feed_fanout_entry_t *fe)
{
    u_char                     *p;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fe->fo->fmcf;

    if (fmcf->cache_embed || fe->page.pull != NGX_HTTP_FEED_PULL_PUSH) {
        /* pull authors' lists hold the JSON whatever the mode */

        p = ngx_pnalloc(fe->pool, 24 + fe->page.json_len);
        if (p == NULL) {
            fe->failed = 1;
            return;
        }

        fe->pull_entry.data = p;
        p = ngx_cpymem(p, fe->page.post_id, 24);
        p = ngx_cpymem(p, fe->page.json, fe->page.json_len);
        fe->pull_entry.len = p - fe->pull_entry.data;
    }

    if (fmcf->cache_embed) {
        fe->entry = fe->pull_entry;

    } else {
        fe->entry.data = (u_char *) fe->page.post_id;
        fe->entry.len = 24;

        /* told with each batch while streams are live */

        fe->json.data = ngx_pnalloc(fe->pool, fe->page.json_len);
        if (fe->json.data == NULL) {
            fe->failed = 1;
            return;
        }

        fe->json.len = fe->page.json_len;
        ngx_memcpy(fe->json.data, fe->page.json, fe->page.json_len);

        if (ngx_http_feed_timeline_cache_post(fmcf, fe->page.post_id,
                                              fe->page.json,
                                              fe->page.json_len,
                                              ngx_http_feed_fanout_delivered,
                                              fe)
            == NGX_OK)
        {
            ngx_log_debug1(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                           "feed fanout entry %s: post sent to the cache",
                           fe->sid);

            fe->waiting++;

        } else {
            fe->failed = 1;
        }
    }

    bson_free(fe->page.json);
    fe->page.json = NULL;
}


/*
 * A page is in: deliver it, and read the next one meanwhile.  Called
 * whenever a fetch or a batch is answered; the entry is let go (failed or
 * acknowledged) only here, and only once nothing of it is in flight.
 */

void
ngx_http_feed_fanout_settle(ngx_http_feed_fanout_entry_t *fe)
{
    if (fe->fetching || fe->waiting) {
        return;
    }

    if (!fe->failed && fe->fetched) {
        ngx_http_feed_fanout_deliver(fe);

        if (!fe->failed && !fe->last) {
            fe->page.has_cursor = 1;
            ngx_http_feed_fanout_fetch(fe);
        }

        if (fe->waiting || fe->fetching) {
            return;
        }
    }

    if (fe->failed) {
        ngx_http_feed_fanout_fail(fe, fe->fo->error);
        return;
    }

    if (!fe->last) {
        return;
    }

    if (fe->page.pull == NGX_HTTP_FEED_PULL_TURN && !fe->turned) {
        ngx_http_feed_fanout_turn(fe);
        return;
    }

    ngx_http_feed_fanout_ack(fe);
}


static void
ngx_http_feed_fanout_deliver(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_uint_t             n;
    ngx_http_feed_user_t  *users;

    fe->fetched = 0;

    /* the author's own timeline, with the first page */

    n = fe->page.nusers + !fe->own;
    users = ngx_palloc(fe->pool, (n + 1) * sizeof(ngx_http_feed_user_t));

    if (users == NULL) {
        fe->failed = 1;
        bson_free(fe->page.users);
        fe->page.users = NULL;
        return;
    }

    if (fe->page.nusers) {
        ngx_memcpy(users, fe->page.users,
                   fe->page.nusers * sizeof(ngx_http_feed_user_t));
    }

    if (!fe->own) {
        users[fe->page.nusers] = fe->page.author;
        fe->own = 1;
    }

    bson_free(fe->page.users);
    fe->page.users = NULL;

    /* the page before is delivered: its copy goes (pages may be large) */

    if (fe->users) {
        (void) ngx_pfree(fe->pool, fe->users);
    }

    fe->users = users;
    fe->nusers = n;
    fe->next = 0;

    if (ngx_http_feed_fanout_by_node(fe) != NGX_OK) {
        fe->failed = 1;
        return;
    }

    if (fe->first_sent == 0) {
        fe->first_sent = ngx_current_msec;
    }

    ngx_http_feed_fanout_send(fe);
}


/* a user and the turn of their batch: see ngx_http_feed_fanout_by_node() */
typedef struct {
    ngx_uint_t                    order;
    ngx_http_feed_user_t          user;
} ngx_http_feed_fanout_node_t;


/*
 * On a Redis Cluster a batch is made of users of one node, whose script
 * reaches only its own keys: the users are ordered by node, and the
 * batches of the nodes take turns (the first of each node, then the
 * second...), so that the batches in flight keep every node working.
 * Nothing to do for a single Redis.
 */

static ngx_int_t
ngx_http_feed_fanout_by_node(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_uint_t                    i, node, batch, up,
                                  count[NGX_HTTP_FEED_FANOUT_NODES];
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_fanout_node_t  *sorted;

    fmcf = fe->fo->fmcf;

    if (fe->nusers < 2
        || ngx_http_feed_redis_masters(fmcf->redis_client, &up) == 0)
    {
        return NGX_OK;
    }

    sorted = ngx_alloc(fe->nusers * sizeof(ngx_http_feed_fanout_node_t),
                       fe->fo->log);
    if (sorted == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(count, sizeof(count));
    batch = fmcf->fanout_deliver_batch;

    for (i = 0; i < fe->nusers; i++) {
        node = ngx_http_feed_timeline_cache_node(fmcf, &fe->users[i])
               % NGX_HTTP_FEED_FANOUT_NODES;

        sorted[i].order = (count[node]++ / batch) * NGX_HTTP_FEED_FANOUT_NODES
                          + node;
        sorted[i].user = fe->users[i];
    }

    ngx_qsort(sorted, fe->nusers, sizeof(ngx_http_feed_fanout_node_t),
              ngx_http_feed_fanout_node_cmp);

    for (i = 0; i < fe->nusers; i++) {
        fe->users[i] = sorted[i].user;
    }

    ngx_free(sorted);

    return NGX_OK;
}


static int ngx_libc_cdecl
ngx_http_feed_fanout_node_cmp(const void *one, const void *two)
{
    const ngx_http_feed_fanout_node_t  *a = one, *b = two;

    return (a->order > b->order) - (a->order < b->order);
}


/*
 * The next batch: up to feed_fanout_deliver_batch users, of one node as
 * the map is now (a map that changed since they were ordered makes more,
 * smaller batches, never one across nodes).
 */

static ngx_uint_t
ngx_http_feed_fanout_batch(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_uint_t                  n, max, node;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fe->fo->fmcf;
    max = ngx_min(fmcf->fanout_deliver_batch, fe->nusers - fe->next);

    node = ngx_http_feed_timeline_cache_node(fmcf, &fe->users[fe->next]);

    if (node == 0) {
        return max;
    }

    for (n = 1; n < max; n++) {
        if (ngx_http_feed_timeline_cache_node(fmcf,
                                              &fe->users[fe->next + n])
            != node)
        {
            break;
        }
    }

    return n;
}


/*
 * A few batches in flight at a time, the next one sent as each reply
 * comes: Redis works on one while nginx builds the next, and reads on the
 * same connection wait behind a few batches, not behind the whole page.
 */

static void
ngx_http_feed_fanout_send(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_int_t                   rc;
    ngx_uint_t                  n;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fe->fo->fmcf;

    while (!fe->failed && fe->next < fe->nusers
           && fe->waiting < NGX_HTTP_FEED_FANOUT_WINDOW)
    {
        n = ngx_http_feed_fanout_batch(fe);

        if (fe->kind == 'p') {
            rc = ngx_http_feed_timeline_cache_deliver(fmcf, fe->pool,
                     fe->users + fe->next, n, &fe->entry, &fe->json,
                     (fe->page.pull == NGX_HTTP_FEED_PULL_TURN)
                     ? &fe->page.author : NULL,
                     ngx_http_feed_fanout_delivered, fe);

        } else {
            rc = ngx_http_feed_timeline_cache_remove(fmcf, fe->pool,
                     fe->users + fe->next, n, fe->page.post_id,
                     ngx_http_feed_fanout_delivered, fe);
        }

        if (rc != NGX_OK) {
            ngx_http_feed_fanout_failing(fe, "redis unavailable");
            fe->next = fe->nusers;
            return;
        }

        fe->next += n;
        fe->waiting++;

        ngx_log_debug4(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                       "feed fanout entry %s: batch of %ui sent, %ui of %ui",
                       fe->sid, n, fe->next, fe->nusers);
    }
}


static void
ngx_http_feed_fanout_delivered(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_entry_t  *fe = data;

    if (reply == NULL || reply->type == REDIS_REPLY_ERROR) {
        ngx_http_feed_timeline_cache_error(reply);
        ngx_http_feed_fanout_failing(fe, reply ? reply->str
                                               : "redis unavailable");

        /* the entry stays pending: no more batches of it */
        fe->next = fe->nusers;

    } else if (reply->type == REDIS_REPLY_INTEGER && fe->kind == 'p') {
        ngx_http_feed_stat(fanout_deliveries, reply->integer);
        fe->deliveries += reply->integer;
    }

    ngx_time_update();
    fe->last_reply = ngx_current_msec;

    fe->waiting--;

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s: delivered, %ui timelines so far, "
                   "%ui out", fe->sid, fe->deliveries, fe->waiting);

    if (fe->next < fe->nusers) {
        ngx_http_feed_fanout_send(fe);
    }

    ngx_http_feed_fanout_settle(fe);
}


static void
ngx_http_feed_fanout_ack(ngx_http_feed_fanout_entry_t *fe)
{
    size_t                      argvlen[4];
    const char                 *argv[4];
    ngx_http_feed_redis_args_t  args;
    ngx_http_feed_main_conf_t  *fmcf;

    fmcf = fe->fo->fmcf;

    if (fe->kind == 'p' && fe->deliveries) {
        fe->fo->last_deliveries = fe->deliveries;
        fe->fo->last_ms = fe->last_reply - fe->first_sent;
        ngx_http_feed_fanout_last = fe->fo;
    }

    if (fe->kind == 'd' && fe->last) {
        /* out of every timeline: reads need not skip it much longer */
        ngx_http_feed_timeline_cache_removed(fmcf, fe->page.post_id);
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XACK");
    ngx_http_feed_redis_args_key(&args, fe->fo->stream->data,
                                 fe->fo->stream->len);
    ngx_http_feed_redis_args_add(&args, fmcf->fanout_group.data,
                                 fmcf->fanout_group.len);
    ngx_http_feed_redis_args_add(&args, fe->sid, ngx_strlen(fe->sid));

    if (ngx_http_feed_redis_send(fe->fo->rd, ngx_http_feed_fanout_acked, fe,
                                 &args)
        == NULL)
    {
        /* delivered but not acknowledged: delivered again later, once */
        ngx_log_debug1(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                       "feed fanout entry %s: ack not sent", fe->sid);
        ngx_http_feed_fanout_free(fe);
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s: ack sent after %ui pages, "
                   "%ui timelines", fe->sid, fe->pages, fe->deliveries);
}


static void
ngx_http_feed_fanout_acked(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_entry_t  *fe = data;

    if (reply && reply->type == REDIS_REPLY_INTEGER) {
        ngx_http_feed_stat(fanout_acked, 1);
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s: %s", fe->sid,
                   (reply && reply->type == REDIS_REPLY_INTEGER)
                   ? "acked" : "ack failed, claimed again later");

    ngx_http_feed_fanout_free(fe);
}


/*
 * The entry cannot be completed now: it is let go, unacknowledged, once
 * nothing of it is in flight (ngx_http_feed_fanout_settle()).
 */

void
ngx_http_feed_fanout_failing(ngx_http_feed_fanout_entry_t *fe,
    const char *why)
{
    ngx_log_debug2(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                   "feed fanout entry %s failing: %s", fe->sid, why);

    ngx_cpystrn((u_char *) fe->fo->error, (u_char *) why,
                sizeof(fe->fo->error));
    fe->failed = 1;
}


/* not acknowledged: the entry stays pending and is claimed again */

void
ngx_http_feed_fanout_fail(ngx_http_feed_fanout_entry_t *fe, const char *why)
{
    ngx_log_error(NGX_LOG_WARN, fe->fo->log, 0,
                  "fanout of entry %s failed at page %ui after %ui "
                  "deliveries, will retry: %s", fe->sid, fe->pages,
                  fe->deliveries, why);

    ngx_http_feed_stat(fanout_failures, 1);

    ngx_http_feed_fanout_retry_own(fe->fo);
    ngx_http_feed_fanout_free(fe);
}


/* the consumer reads its own failed entries again, soon */

static void
ngx_http_feed_fanout_retry_own(ngx_http_feed_fanout_t *fo)
{
    if (fo->retry_own) {
        return;
    }

    fo->retry_backoff = fo->retry_backoff
                        ? ngx_min(2 * fo->retry_backoff,
                                  fo->fmcf->fanout_claim_idle / 2)
                        : NGX_HTTP_FEED_FANOUT_OWN_RETRY;
    fo->retry_own = 1;
    fo->retry_at = ngx_current_msec + fo->retry_backoff;

    if (!fo->timer.timer_set) {
        ngx_add_timer(&fo->timer, fo->retry_backoff);
    }
}


static void
ngx_http_feed_fanout_free(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_http_feed_fanout_t  *fo = fe->fo;

    bson_free(fe->page.json);
    bson_free(fe->page.users);

    if (fe->page.model_entry) {
        bson_destroy(fe->page.model_entry);
    }

    ngx_http_feed_fanout_lease_release(fe);
    ngx_destroy_pool(fe->pool);

    if (--fo->active == 0) {
        ngx_http_feed_fanout_next(fo);
    }
}


ngx_int_t
ngx_http_feed_fanout_status(bson_t *doc)
{
    bson_t                   sub;
    ngx_uint_t               i, active, ready;
    const char              *error;
    ngx_http_feed_stats_t   *st = &ngx_http_feed_stats;
    ngx_http_feed_fanout_t  *fo, *last;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "fanout", &sub)) {
        return NGX_ERROR;
    }

    fo = ngx_http_feed_fanouts;
    last = ngx_http_feed_fanout_last;

    BSON_APPEND_BOOL(&sub, "enabled", fo != NULL);

    if (fo) {
        active = 0;
        ready = 1;
        error = NULL;

        for (i = 0; i < ngx_http_feed_nfanouts; i++) {
            active += fo[i].active;
            ready = ready && fo[i].ready;

            if (fo[i].error[0]) {
                error = fo[i].error;
            }
        }

        BSON_APPEND_UTF8(&sub, "consumer", fo->consumer);
        BSON_APPEND_INT64(&sub, "partitions", (int64_t) ngx_http_feed_nfanouts);
        BSON_APPEND_BOOL(&sub, "reading", ready);
        BSON_APPEND_INT64(&sub, "consumed", (int64_t) st->fanout_consumed);
        BSON_APPEND_INT64(&sub, "deliveries", (int64_t) st->fanout_deliveries);
        BSON_APPEND_INT64(&sub, "acked", (int64_t) st->fanout_acked);
        BSON_APPEND_INT64(&sub, "claims", (int64_t) st->fanout_claims);
        BSON_APPEND_INT64(&sub, "retried", (int64_t) st->fanout_retried);
        BSON_APPEND_INT64(&sub, "failures", (int64_t) st->fanout_failures);
        BSON_APPEND_INT64(&sub, "skipped", (int64_t) st->fanout_skipped);
        BSON_APPEND_INT64(&sub, "in_flight", (int64_t) active);
        BSON_APPEND_INT64(&sub, "last_post_deliveries",
                          (int64_t) (last ? last->last_deliveries : 0));
        BSON_APPEND_INT64(&sub, "last_post_ms",
                          (int64_t) (last ? last->last_ms : 0));

        if (error) {
            BSON_APPEND_UTF8(&sub, "last_error", error);

        } else {
            BSON_APPEND_NULL(&sub, "last_error");
        }
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}
