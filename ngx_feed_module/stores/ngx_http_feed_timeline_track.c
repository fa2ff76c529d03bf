
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
 *
 * A post deleted may be in any copy: the last NGX_HTTP_FEED_TRACK_DELETES
 * ids deleted are kept with their stamps, and a copy is searched for
 * those deleted after it was last searched; one that has a deleted post,
 * or that was last searched before the oldest kept, asks Redis.
 */


#include "ngx_http_feed_timeline_cache.h"


#define NGX_HTTP_FEED_TRACK_SLOTS    65536
#define NGX_HTTP_FEED_TRACK_DELETES  256


typedef struct {
    u_char                        id[25];   /* NUL-terminated */
    uint64_t                      stamp;
} ngx_http_feed_track_delete_t;


typedef struct {
    uint64_t                     *slots;
    uint64_t                      now;      /* the last stamp taken */
    uint64_t                      all;      /* the last change of all */
    ngx_uint_t                    lost;     /* tracking lost, how often */

    /* the last posts deleted, a ring: next is where the next one goes */
    ngx_http_feed_track_delete_t  deletes[NGX_HTTP_FEED_TRACK_DELETES];
    ngx_uint_t                    next;
    ngx_uint_t                    ndeletes;

    /* the Redis layer's counters when last looked at */
    ngx_uint_t                    connects;
    ngx_uint_t                    resends;
} ngx_http_feed_track_t;


static void ngx_http_feed_track_sync(void);


static ngx_http_feed_track_t         ngx_http_feed_track;

/* who else hears what changed: the live streams' readers */
static ngx_http_feed_track_hooks_t  *ngx_http_feed_track_hooks;


void
ngx_http_feed_track_hook(ngx_http_feed_track_hooks_t *hooks)
{
    ngx_http_feed_track_hooks = hooks;
}


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
ngx_http_feed_track_changed(u_char *user, size_t len, ngx_str_t *key)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    /*
     * Kept pages, the rebuild lock and the read marker change no entry:
     * a read that keeps a page would otherwise make every reader of the
     * user's streams read again.  Nor does the list itself tell the
     * readers anything: a delivery into it is told to them with the post
     * (ngx_http_feed_timeline_live.c), any other change moves a key they
     * track (its version, the follows' version, the filters); tracked
     * for a copy of a page, it would make them read at each delivery.
     */

    if (ngx_http_feed_track_hooks
        && !ngx_http_feed_timeline_cache_quiet(key))
    {
        ngx_http_feed_track_hooks->changed(user, len);
    }

    if (t->slots == NULL) {
        return;
    }

    t->slots[ngx_crc32_short(user, len) & (NGX_HTTP_FEED_TRACK_SLOTS - 1)] =
        ++t->now;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed track: \"%V\" changed", key);
}


/* anything may have changed: no copy read before is current */

void
ngx_http_feed_track_all(const char *why)
{
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    if (ngx_http_feed_track_hooks) {
        ngx_http_feed_track_hooks->all(why);
    }

    if (t->slots == NULL) {
        return;
    }

    t->all = ++t->now;

    ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed track: everything changed, %s", why);
}


/* a delivery told ("<user> <user> ...\n<id><JSON>"): for the streams */

void
ngx_http_feed_track_told(u_char *msg, size_t len)
{
    if (ngx_http_feed_track_hooks) {
        ngx_http_feed_track_hooks->told(msg, len);
    }
}


/* deliveries may have gone untold: every stream's reader reads again */

void
ngx_http_feed_track_streams(const char *why)
{
    if (ngx_http_feed_track_hooks) {
        ngx_http_feed_track_hooks->all(why);
    }
}


/* a pull author's list changed: only the streams' readers care here */

void
ngx_http_feed_track_author(u_char *author, size_t len)
{
    if (ngx_http_feed_track_hooks) {
        ngx_http_feed_track_hooks->author(author, len);
    }
}


/* whether a post was deleted lately (the last ones kept, see above) */

ngx_uint_t
ngx_http_feed_track_is_deleted(u_char *id)
{
    ngx_uint_t              i;
    ngx_http_feed_track_t  *t = &ngx_http_feed_track;

    for (i = 0; i < t->ndeletes; i++) {
        if (ngx_memcmp(t->deletes[i].id, id, 24) == 0) {
            return 1;
        }
    }

    return 0;
}


/* a post deleted (its id, 24 hex digits): copies that have it ask Redis */

void
ngx_http_feed_track_deleted(u_char *id)
{
    ngx_http_feed_track_t         *t = &ngx_http_feed_track;
    ngx_http_feed_track_delete_t  *d;

    if (ngx_http_feed_track_hooks) {
        ngx_http_feed_track_hooks->deleted(id);
    }

    if (t->slots == NULL) {
        return;
    }

    d = &t->deletes[t->next];
    ngx_memcpy(d->id, id, 24);
    d->id[24] = '\0';
    d->stamp = ++t->now;

    t->next = (t->next + 1) % NGX_HTTP_FEED_TRACK_DELETES;

    if (t->ndeletes < NGX_HTTP_FEED_TRACK_DELETES) {
        t->ndeletes++;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed track: post %*s deleted", (size_t) 24, id);
}


/*
 * Whether a copy (its bytes) searched for deleted posts up to stamp
 * has none of those deleted since: NGX_OK, and *checked the stamp it is
 * now searched up to; NGX_DECLINED: it has one, or more were deleted
 * since than the worker keeps.  page NULL: any post deleted since is one
 * (an unread count may have counted it).
 */

ngx_int_t
ngx_http_feed_track_deletes(ngx_str_t *page, uint64_t stamp,
    uint64_t *checked)
{
    ngx_uint_t                     i, n;
    ngx_http_feed_track_t         *t = &ngx_http_feed_track;
    ngx_http_feed_track_delete_t  *d;

    *checked = stamp;

    if (t->slots == NULL || t->ndeletes == 0) {
        return NGX_OK;
    }

    n = t->ndeletes;
    i = (t->next + NGX_HTTP_FEED_TRACK_DELETES - 1)
        % NGX_HTTP_FEED_TRACK_DELETES;

    if (t->deletes[i].stamp <= stamp) {
        return NGX_OK;
    }

    *checked = t->deletes[i].stamp;

    /* newest first, back to the first one after stamp */

    while (n--) {
        d = &t->deletes[i];

        if (d->stamp <= stamp) {
            return NGX_OK;
        }

        if (page == NULL
            || ngx_strnstr(page->data, (char *) d->id, page->len) != NULL)
        {
            return NGX_DECLINED;
        }

        i = (i + NGX_HTTP_FEED_TRACK_DELETES - 1)
            % NGX_HTTP_FEED_TRACK_DELETES;
    }

    /* the ring is full and all of it is newer: older ones are forgotten */

    return t->ndeletes < NGX_HTTP_FEED_TRACK_DELETES ? NGX_OK : NGX_DECLINED;
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
