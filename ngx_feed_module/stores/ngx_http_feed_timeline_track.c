
/*
 * ngx_feed_module: what the worker heard change in Redis, for the copies
 * of first pages it answers without asking Redis anything
 * (ngx_http_feed_timeline_local.c).
 *
 * A read that makes Redis track the keys it reads (CLIENT TRACKING, see
 * the watch) takes a stamp of the worker's clock as it is sent.  Each
 * invalidation of a user's keys heard on a watch takes a later stamp, and
 * so does each change of everything at once: a delete, a flush, a
 * connection made again or a command sent elsewhere (the keys it tracked
 * are then not tracked any more).  A copy read with stamp s is current
 * while neither took a stamp after s.
 *
 * Users share NGX_HTTP_FEED_TRACK_SLOTS slots by a hash of their name: a
 * change of one of them makes the others' copies ask Redis once, never
 * answer stale.  Stamps only grow, and a worker makes fewer than 2^64.
 */


#include "ngx_http_feed_timeline_cache.h"


#define NGX_HTTP_FEED_TRACK_SLOTS  65536


typedef struct {
    uint64_t                     *slots;
    uint64_t                      now;      /* the last stamp taken */
    uint64_t                      all;      /* the last change of all */
    ngx_uint_t                    lost;     /* tracking lost, how often */

    /* the Redis layer's counters when last looked at */
    ngx_uint_t                    connects;
    ngx_uint_t                    resends;
} ngx_http_feed_track_t;


static void ngx_http_feed_track_sync(void);


static ngx_http_feed_track_t  ngx_http_feed_track;


ngx_int_t
ngx_http_feed_track_init(ngx_cycle_t *cycle)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    t->slots = ngx_calloc(NGX_HTTP_FEED_TRACK_SLOTS * sizeof(uint64_t),
                          cycle->log);
    if (t->slots == NULL) {
        return NGX_ERROR;
    }

    t->now = 1;
    t->all = 1;
    t->connects = ngx_http_feed_redis_connects;
    t->resends = ngx_http_feed_redis_resends;

    return NGX_OK;
}


void
ngx_http_feed_track_exit(void)
{
    ngx_free(ngx_http_feed_track.slots);
    ngx_http_feed_track.slots = NULL;
}


/* the stamp of a read sent now; 0: nothing is tracked in this worker */

uint64_t
ngx_http_feed_track_stamp(void)
{
    if (ngx_http_feed_track.slots == NULL) {
        return 0;
    }

    ngx_http_feed_track_sync();

    return ++ngx_http_feed_track.now;
}


/* a key of this user changed ("feed:<kind>:{<user>}" names its user) */

void
ngx_http_feed_track_changed(u_char *user, size_t len)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    if (t->slots == NULL) {
        return;
    }

    t->slots[ngx_crc32_short(user, len) & (NGX_HTTP_FEED_TRACK_SLOTS - 1)] =
        ++t->now;

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed track: \"%*s\" changed", len, user);
}


/* anything may have changed: no copy read before is current */

void
ngx_http_feed_track_all(const char *why)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    if (t->slots == NULL) {
        return;
    }

    t->all = ++t->now;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed track: everything changed, %s", why);
}


/* whether a copy of this user's page read with this stamp is current */

ngx_uint_t
ngx_http_feed_track_current(ngx_http_feed_user_t *user, uint64_t stamp)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    if (t->slots == NULL || stamp == 0) {
        return 0;
    }

    ngx_http_feed_track_sync();

    return stamp > t->all
           && stamp > t->slots[ngx_crc32_short((u_char *) user->data,
                                               user->len)
                               & (NGX_HTTP_FEED_TRACK_SLOTS - 1)];
}


/*
 * How often tracking was lost: a watch that turned it on before the last
 * loss turns it on again
 */

ngx_uint_t
ngx_http_feed_track_lost(void)
{
    ngx_http_feed_track_sync();

    return ngx_http_feed_track.lost;
}


/*
 * A connection made again has no tracking, and a command sent again
 * elsewhere (a redirect, a retry) may have run where nothing is tracked:
 * every copy asks again, and every watch turns tracking on again.
 */

static void
ngx_http_feed_track_sync(void)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    if (t->connects == ngx_http_feed_redis_connects
        && t->resends == ngx_http_feed_redis_resends)
    {
        return;
    }

    t->connects = ngx_http_feed_redis_connects;
    t->resends = ngx_http_feed_redis_resends;
    t->lost++;

    ngx_http_feed_track_all("a connection made or a command sent again");
}
