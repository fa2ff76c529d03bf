
/*
 * ngx_feed_module: the hold of a worker on the entries it fans out.
 *
 * Every worker claims (XAUTOCLAIM) the entries idle longer than
 * feed_fanout_claim_idle: that is how those of a worker that died are
 * finished.  Redis counts an entry idle from when it was last read or
 * claimed, whatever its worker does with it since, so an entry whose
 * fanout takes longer (an author of many followers, a slow MongoDB) would
 * be taken by another worker and fanned out again, and again by a third:
 * more load exactly when MongoDB is slow.  While entries are in flight,
 * their worker claims them for itself again (XCLAIM ... JUSTID: no
 * delivery counted), every third of feed_fanout_claim_idle, which sets
 * their idle time back to zero.  A worker that dies renews nothing, and
 * its entries are claimed as before.
 */


#include "ngx_http_feed_fanout_entry.h"


/* the ids renewed by one command */
#define NGX_HTTP_FEED_LEASE_IDS  64

/* how often the hold is renewed: a third of feed_fanout_claim_idle */
#define ngx_http_feed_fanout_lease_period(fo)                                \
    ngx_max((fo)->fmcf->fanout_claim_idle / 3, 1)


static void ngx_http_feed_fanout_lease_renew(ngx_event_t *ev);
static void ngx_http_feed_fanout_lease_send(ngx_http_feed_fanout_t *fo,
    ngx_queue_t **q);


void
ngx_http_feed_fanout_lease_init(ngx_http_feed_fanout_t *fo)
{
    ngx_queue_init(&fo->flight);

    fo->lease.handler = ngx_http_feed_fanout_lease_renew;
    fo->lease.data = &fo->dummy;
    fo->lease.log = fo->log;
    fo->lease.cancelable = 1;
}


/* an entry read or claimed: held, and renewed while in flight */

void
ngx_http_feed_fanout_lease_hold(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_http_feed_fanout_t  *fo = fe->fo;

    ngx_queue_insert_tail(&fo->flight, &fe->queue);

    if (!fo->lease.timer_set) {
        ngx_add_timer(&fo->lease, ngx_http_feed_fanout_lease_period(fo));
    }
}


/* acknowledged or failed: no more of it */

void
ngx_http_feed_fanout_lease_release(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_http_feed_fanout_t  *fo = fe->fo;

    ngx_queue_remove(&fe->queue);

    if (ngx_queue_empty(&fo->flight) && fo->lease.timer_set) {
        ngx_del_timer(&fo->lease);
    }
}


void
ngx_http_feed_fanout_lease_stop(ngx_http_feed_fanout_t *fo)
{
    if (fo->lease.timer_set) {
        ngx_del_timer(&fo->lease);
    }
}


static void
ngx_http_feed_fanout_lease_renew(ngx_event_t *ev)
{
    ngx_connection_t  *c = ev->data;

    ngx_queue_t             *q;
    ngx_http_feed_fanout_t  *fo;

    fo = c->data;

    if (ngx_queue_empty(&fo->flight)) {
        return;
    }

    q = ngx_queue_head(&fo->flight);

    while (q != ngx_queue_sentinel(&fo->flight)) {
        ngx_http_feed_fanout_lease_send(fo, &q);
    }

    ngx_add_timer(&fo->lease, ngx_http_feed_fanout_lease_period(fo));
}


/*
 * XCLAIM stream group consumer 0 id ... JUSTID, of up to
 * NGX_HTTP_FEED_LEASE_IDS entries from *q on; sent and forgotten: a
 * renewal lost (a connection gone) leaves the entry to be claimed, as
 * before, and the entry's fanout is idempotent
 */

static void
ngx_http_feed_fanout_lease_send(ngx_http_feed_fanout_t *fo, ngx_queue_t **q)
{
    size_t                         argvlen[NGX_HTTP_FEED_LEASE_IDS + 7];
    ngx_uint_t                     n;
    const char                    *argv[NGX_HTTP_FEED_LEASE_IDS + 7];
    ngx_http_feed_redis_args_t     args;
    ngx_http_feed_fanout_entry_t  *fe;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "XCLAIM");
    ngx_http_feed_redis_args_key(&args, fo->stream->data, fo->stream->len);
    ngx_http_feed_redis_args_add(&args, fo->fmcf->fanout_group.data,
                                 fo->fmcf->fanout_group.len);
    ngx_http_feed_redis_args_add(&args, fo->consumer, fo->consumer_len);
    ngx_http_feed_redis_args_lit(&args, "0");

    for (n = 0;
         n < NGX_HTTP_FEED_LEASE_IDS && *q != ngx_queue_sentinel(&fo->flight);
         n++, *q = ngx_queue_next(*q))
    {
        fe = ngx_queue_data(*q, ngx_http_feed_fanout_entry_t, queue);
        ngx_http_feed_redis_args_add(&args, fe->sid, ngx_strlen(fe->sid));
    }

    ngx_http_feed_redis_args_lit(&args, "JUSTID");

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, fo->log, 0,
                   "feed fanout of %V: hold of %ui entries renewed",
                   fo->stream, n);

    (void) ngx_http_feed_redis_send(fo->rd, NULL, NULL, &args);
}
