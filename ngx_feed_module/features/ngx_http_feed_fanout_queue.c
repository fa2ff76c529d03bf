
/*
 * ngx_feed_module: the fanout queue as Redis sees it, for feed_status and
 * feed_metrics: the entries the whole consumer group read but did not
 * acknowledge yet, and the age of the oldest, over every partition.
 *
 * Only Redis knows them (XPENDING), for all the nodes' consumers at once:
 * they are asked at each request, not counted by the workers.
 */


#include "ngx_http_feed_fanout.h"


static void ngx_http_feed_fanout_queue_reply(void *data, redisReply *reply);
static ngx_int_t ngx_http_feed_fanout_queue_id_ms(redisReply *id);


/*
 * Sends XPENDING to every partition: q->done(q->data) is called once for
 * each command sent.  Returns how many were sent, or NGX_ERROR.
 */

ngx_int_t
ngx_http_feed_fanout_queue_ask(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_fanout_queue_t *q)
{
    ngx_int_t                   rc;
    ngx_uint_t                  i;
    const char                 *argv[3];
    size_t                      argvlen[3];
    ngx_http_feed_redis_args_t  args;

    for (i = 0; fmcf->redis_client && fmcf->fanout
                && i < fmcf->stream_partitions; i++)
    {
        ngx_http_feed_redis_args_init(&args, argv, argvlen);
        ngx_http_feed_redis_args_lit(&args, "XPENDING");
        ngx_http_feed_redis_args_key(&args, fmcf->streams[i].data,
                                     fmcf->streams[i].len);
        ngx_http_feed_redis_args_add(&args, fmcf->fanout_group.data,
                                     fmcf->fanout_group.len);

        rc = ngx_http_feed_redis_send_r(r, fmcf->redis_client,
                                        ngx_http_feed_fanout_queue_reply,
                                        q, &args);
        if (rc == NGX_ERROR) {
            return NGX_ERROR;
        }

        q->partitions += (rc == NGX_OK);
    }

    return q->partitions;
}


/* a stream entry id starts with the ms it was added at: "<ms>-<seq>" */

static ngx_int_t
ngx_http_feed_fanout_queue_id_ms(redisReply *id)
{
    u_char  *p, *last, *dash;

    p = (u_char *) id->str;
    last = p + id->len;
    dash = ngx_strlchr(p, last, '-');

    return ngx_atoi(p, (dash ? dash : last) - p);
}


/* XPENDING summary: [count, oldest id, newest id, consumers] */

static void
ngx_http_feed_fanout_queue_reply(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_queue_t  *q = data;

    ngx_int_t  ms;

    /* known once every partition answered; the lag of the oldest entry */

    if (reply && reply->type == REDIS_REPLY_ARRAY && reply->elements >= 2
        && reply->element[0]->type == REDIS_REPLY_INTEGER)
    {
        q->answered++;
        q->pending += reply->element[0]->integer;

        if (reply->element[1]->type == REDIS_REPLY_STRING) {
            ms = ngx_http_feed_fanout_queue_id_ms(reply->element[1]);

            if (ms != NGX_ERROR) {
                q->lag = ngx_max(q->lag, ngx_http_feed_now_ms() - ms);
            }
        }

        q->known = (q->answered == q->partitions);
    }

    q->done(q->data);
}
