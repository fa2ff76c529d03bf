
/*
 * ngx_feed_module: the live mark of a node ("feed:live<copy>").
 *
 * While a worker streams timelines it keeps the mark of each node set
 * (scripts/live_mark.lua), renewed by its watch of the node
 * (ngx_http_feed_timeline_watch.c) every NGX_HTTP_FEED_LIVE_RENEW ms for
 * NGX_HTTP_FEED_LIVE_TTL ms.  While the mark is set, each delivery into
 * the node's timelines is published on "feed:tlc<copy>" with the users it
 * reached (timeline_deliver.lua), and the watches hear it: a stream is
 * sent a post its timeline got without its reader reading the timeline.
 * Without streams, no mark, and a delivery costs what it did.
 *
 * The mark's value is the era it was set in.  A reader's read sent after
 * the worker set the mark's era (on the same connection to the node, so
 * after it in Redis too) misses no delivery told since: the read saw
 * those before, the channel tells those after.  A mark that lapsed (the
 * worker could not renew it, Redis evicted it or was flushed) comes back
 * with another era: deliveries went untold meanwhile, and every reader
 * reads again.
 */


#include "ngx_http_feed_timeline_live.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"


/*
 * ms the mark lives, and between renewals: a lapse (an eviction, a DEL)
 * is seen within a second, as the readers' other checks are
 */
#define NGX_HTTP_FEED_LIVE_TTL    30000
#define NGX_HTTP_FEED_LIVE_RENEW  1000

/* "<pid>-<msec>-<random>" */
#define NGX_HTTP_FEED_LIVE_ERA_LEN  (3 * NGX_INT64_LEN)


struct ngx_http_feed_live_s {
    u_char                        key[NGX_HTTP_FEED_LIVE_KEY_LEN];
    size_t                        key_len;
    ngx_log_t                    *log;

    /* the era last heard, and the stamp of the renewal that set it */
    u_char                        era[NGX_HTTP_FEED_LIVE_ERA_LEN];
    size_t                        era_len;
    uint64_t                      since;

    ngx_msec_t                    renewed;    /* when last sent */
    uint64_t                      stamp;      /* of the one under way */
    unsigned                      sending:1;
    unsigned                      gone:1;     /* freed at its reply */
};


static void ngx_http_feed_timeline_live_renewed(void *data,
    redisReply *reply);


static ngx_str_t  ngx_http_feed_live_key = ngx_string(NGX_HTTP_FEED_KEY_LIVE);
static ngx_str_t  ngx_http_feed_live_channel =
    ngx_string(NGX_HTTP_FEED_KEY_LIVE_CHANNEL);

/* whether the worker streams timelines now */
static ngx_uint_t  ngx_http_feed_live_streaming;


ngx_http_feed_live_t *
ngx_http_feed_timeline_live_create(ngx_str_t *copy, ngx_log_t *log)
{
    ngx_http_feed_live_t  *l;

    if (copy->len > NGX_HTTP_FEED_PULL_COPY_LEN) {
        return NULL;
    }

    l = ngx_calloc(sizeof(ngx_http_feed_live_t), log);
    if (l == NULL) {
        return NULL;
    }

    l->key_len = ngx_sprintf(l->key, NGX_HTTP_FEED_KEY_LIVE "%V", copy)
                 - l->key;
    l->log = log;

    return l;
}


/* a mark renewed right now is freed at its reply */

void
ngx_http_feed_timeline_live_destroy(ngx_http_feed_live_t *l)
{
    if (l == NULL) {
        return;
    }

    if (l->sending) {
        l->gone = 1;
        return;
    }

    ngx_free(l);
}


/* the worker streams timelines, or stopped: its watches keep the marks */

void
ngx_http_feed_timeline_live_streaming(ngx_uint_t on)
{
    ngx_http_feed_live_streaming = on;
}


/*
 * The worker stopped streaming: the era is forgotten, as the mark may
 * lapse now without a reader missing anything; the next is a first one
 */

void
ngx_http_feed_timeline_live_forget(ngx_http_feed_live_t *l)
{
    l->era_len = 0;
    l->since = 0;
}


ngx_uint_t
ngx_http_feed_timeline_live_on(void)
{
    return ngx_http_feed_live_streaming;
}


/*
 * At each heartbeat of the node's watch: the mark is renewed when due,
 * or now (the worker just began to stream, before its first read)
 */

void
ngx_http_feed_timeline_live_beat(ngx_http_feed_live_t *l,
    ngx_http_feed_main_conf_t *fmcf, ngx_uint_t now)
{
    u_char                      era[NGX_HTTP_FEED_LIVE_ERA_LEN],
                                ms[NGX_INT_T_LEN];
    size_t                      argvlen[NGX_HTTP_FEED_SCRIPT_LIVE_MARK_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_LIVE_MARK_ARGC];
    ngx_http_feed_redis_call_t  call;

    if (!ngx_http_feed_live_streaming || l->sending
        || (!now && l->era_len
            && ngx_current_msec - l->renewed < NGX_HTTP_FEED_LIVE_RENEW))
    {
        return;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_live_mark,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_LIVE_MARK_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_LIVE_MARK_NARGS);

    ngx_http_feed_redis_call_key(&call, NGX_HTTP_FEED_SCRIPT_LIVE_MARK_KEY_LIVE,
                                 l->key, l->key_len);
    ngx_http_feed_redis_call_arg(&call, NGX_HTTP_FEED_SCRIPT_LIVE_MARK_ARG_ERA,
        era, ngx_sprintf(era, "%P-%M-%ui", ngx_pid, ngx_current_msec,
                         (ngx_uint_t) ngx_random()) - era);
    ngx_http_feed_redis_call_arg(&call, NGX_HTTP_FEED_SCRIPT_LIVE_MARK_ARG_MS,
        ms, ngx_sprintf(ms, "%ui", (ngx_uint_t) NGX_HTTP_FEED_LIVE_TTL) - ms);

    /* the reads sent after this are after it in Redis too */

    l->stamp = ngx_http_feed_track_stamp();

    if (ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call,
                                 ngx_http_feed_timeline_live_renewed, l)
        != NGX_OK)
    {
        return;
    }

    l->renewed = ngx_current_msec;
    l->sending = 1;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, l->log, 0,
                   "feed live: renewing \"%*s\"", l->key_len, l->key);
}


static void
ngx_http_feed_timeline_live_renewed(void *data, redisReply *reply)
{
    ngx_http_feed_live_t  *l = data;

    l->sending = 0;

    if (l->gone) {
        ngx_free(l);
        return;
    }

    if (reply == NULL || reply->type != REDIS_REPLY_STRING
        || reply->len == 0 || (size_t) reply->len > NGX_HTTP_FEED_LIVE_ERA_LEN)
    {
        /* renewed again at the next heartbeat; a lapse shows then */

        ngx_log_error(NGX_LOG_WARN, l->log, 0,
                      "feed live mark \"%*s\" not renewed: %s", l->key_len,
                      l->key, (reply && reply->type == REDIS_REPLY_ERROR)
                              ? reply->str : "no reply");
        l->renewed = 0;
        return;
    }

    if (l->era_len == (size_t) reply->len
        && ngx_memcmp(l->era, reply->str, l->era_len) == 0)
    {
        return;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, l->log, 0,
                   "feed live: \"%*s\" era %s", l->key_len, l->key,
                   reply->str);

    if (l->era_len) {
        ngx_log_error(NGX_LOG_NOTICE, l->log, 0,
                      "feed live mark \"%*s\" lapsed, the streams read again",
                      l->key_len, l->key);

        ngx_http_feed_track_streams("the live mark lapsed");
    }

    ngx_memcpy(l->era, reply->str, reply->len);
    l->era_len = reply->len;
    l->since = l->stamp;
}


/*
 * Whether a read of this stamp (on the node's connection) misses no
 * delivery told since: it was sent after the mark's era was set
 */

ngx_uint_t
ngx_http_feed_timeline_live_vouch(ngx_http_feed_live_t *l, uint64_t stamp)
{
    return l != NULL && l->era_len && stamp > l->since;
}


/* where deliveries into a copy's timelines are told (buf: KEY_LEN) */

size_t
ngx_http_feed_timeline_live_channel(ngx_str_t *copy, u_char *buf)
{
    return ngx_sprintf(buf, NGX_HTTP_FEED_KEY_LIVE_CHANNEL "%V", copy) - buf;
}


/*
 * A delivery's arguments i and i + 1: the mark and the channel of the
 * node of the call's key (buf: NGX_HTTP_FEED_LIVE_ARGS_LEN)
 */

void
ngx_http_feed_timeline_live_args(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, u_char *buf,
    ngx_uint_t key)
{
    size_t  len;

    len = ngx_http_feed_redis_tag_copy(fmcf->redis_client,
              (u_char *) call->argv[3 + key], call->argvlen[3 + key],
              &ngx_http_feed_live_key, buf);

    ngx_http_feed_redis_call_arg(call, i, buf, len);

    buf += len;

    len = ngx_http_feed_redis_tag_copy(fmcf->redis_client,
              (u_char *) call->argv[3 + key], call->argvlen[3 + key],
              &ngx_http_feed_live_channel, buf);

    ngx_http_feed_redis_call_arg(call, i + 1, buf, len);
}
