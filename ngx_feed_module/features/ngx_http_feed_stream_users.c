
/*
 * ngx_feed_module: the worker's readers of streamed timelines.
 *
 * A user with streams in the worker has one reader, whatever the number
 * of their streams.  It keeps the ids of the newest entries of the user's
 * timeline as it last read them (NGX_HTTP_FEED_STREAM_WINDOW), and reads
 * them again (ngx_http_feed_timeline_cache_fresh) when something may have
 * changed:
 *
 *   - Redis said a key of the user changed: the read is tracked (CLIENT
 *     TRACKING, by the watch of the user's node), and the watch tells
 *     (ngx_http_feed_timeline_track.c's hooks);
 *   - a pull author the user follows posted, or deleted (the watch's
 *     channel);
 *   - the worker cannot vouch for the last read any more (a connection
 *     made again, tracking off or refused, a stalled watch): it reads each
 *     second meanwhile;
 *   - a minute passed (feed_cache_ttl / 4 when shorter): an untracked read
 *     keeps the list alive, as the fanout delivers only to lists that are.
 *
 * What the new read has and the last did not is sent to every stream as
 * an update, oldest first; what the last had and the new one has not, as
 * a delete.  A post deleted is looked for at once, in every reader.
 *
 * A stream that resumes (Last-Event-ID, since_id) has the entries newer
 * than its point read first (one page of up to 100, as a since_id read),
 * in the same round trip as the window that follows, so that nothing
 * lands between the two unseen.
 *
 * Each round trip has a pool of its own, gone when its replies are sent:
 * a stream lives for hours, and its request's pool must not grow with
 * what it is sent.
 */


#include "ngx_http_feed_stream.h"
#include "ngx_http_feed_timeline_watch.h"


/* ms between the checks of every reader */
#define NGX_HTTP_FEED_STREAM_TICK     1000

/* ms before a reader whose read failed, or found no list, reads again */
#define NGX_HTTP_FEED_STREAM_RETRY    1000

/*
 * ms a reader waits after a change before it reads: the fanout delivers a
 * batch of posts concurrently, not in order, and the posts that land
 * meanwhile are read (and sent, in order) at once
 */
#define NGX_HTTP_FEED_STREAM_SETTLE   50


/* a since_id read of a stream that resumes, in its reader's round trip */
typedef struct {
    ngx_http_feed_stream_user_t  *su;
    ngx_http_feed_stream_t       *stream;     /* NULL when it went away */
    ngx_http_feed_cached_t        cached;
    unsigned                      failed:1;
} ngx_http_feed_stream_backlog_t;


struct ngx_http_feed_stream_user_s {
    ngx_str_node_t                sn;         /* by the user's name */
    ngx_http_feed_user_t          user;
    ngx_queue_t                   streams;
    ngx_queue_t                   all;        /* the worker's readers */
    ngx_queue_t                   wanted;     /* to be read */

    /* the last read: its ids newest first, and the oldest when full */
    u_char                        ids[NGX_HTTP_FEED_STREAM_WINDOW * 24];
    ngx_uint_t                    nids;
    u_char                        floor[24];

    /* the pull authors it was merged from, "author version\n" each */
    u_char                       *lists;
    size_t                        lists_len;

    ngx_http_feed_watch_mark_t    mark;       /* of the last read */
    ngx_http_feed_watch_mark_t    next;       /* of the read under way */
    ngx_msec_t                    kept_alive;
    ngx_msec_t                    failed_at;
    ngx_msec_t                    wanted_at;

    /* the round trip under way: its pool, replies awaited, the window */
    ngx_pool_t                   *pool;
    ngx_uint_t                    pending;
    ngx_http_feed_cached_t        page;

    unsigned                      full:1;     /* more entries than ids */
    unsigned                      ready:1;    /* read once */
    unsigned                      reading:1;
    unsigned                      again:1;
    unsigned                      queued:1;
    unsigned                      failed:1;
    unsigned                      broken:1;   /* its list is missing */
    unsigned                      window_ok:1;
    unsigned                      gone:1;     /* no stream left */
};


typedef struct {
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   all;
    ngx_queue_t                   wanted;
    ngx_event_t                   settle;
    ngx_event_t                   tick;
    ngx_connection_t              dummy;
    ngx_uint_t                    users;
    ngx_uint_t                    reads;
} ngx_http_feed_stream_users_t;


static ngx_http_feed_stream_user_t *ngx_http_feed_stream_user_find(
    ngx_http_feed_user_t *user);
static void ngx_http_feed_stream_user_want(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_users_settled(ngx_event_t *ev);
static void ngx_http_feed_stream_users_timer(ngx_event_t *ev);
static void ngx_http_feed_stream_user_read(ngx_http_feed_stream_user_t *su);
static ngx_int_t ngx_http_feed_stream_user_backlog(
    ngx_http_feed_stream_user_t *su, ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_user_backlog_done(void *data,
    redisReply *reply);
static void ngx_http_feed_stream_user_window_done(void *data,
    redisReply *reply);
static void ngx_http_feed_stream_user_replied(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_user_resets(
    ngx_http_feed_stream_user_t *su, const char *reason);
static void ngx_http_feed_stream_user_diff(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_user_resume(ngx_http_feed_stream_user_t *su,
    ngx_http_feed_stream_t *s);
static void ngx_http_feed_stream_user_keep(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_user_done(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_user_free(ngx_http_feed_stream_user_t *su);
static ngx_uint_t ngx_http_feed_stream_user_due(
    ngx_http_feed_stream_user_t *su);
static ngx_msec_t ngx_http_feed_stream_keep_alive(
    ngx_http_feed_main_conf_t *fmcf);
static ngx_uint_t ngx_http_feed_stream_has(u_char *ids, ngx_uint_t n,
    u_char *id);
static void ngx_http_feed_stream_hook_changed(u_char *user, size_t len);
static void ngx_http_feed_stream_hook_all(const char *why);
static void ngx_http_feed_stream_hook_deleted(u_char *id);
static void ngx_http_feed_stream_hook_author(u_char *author, size_t len);


static ngx_http_feed_stream_users_t  *ngx_http_feed_stream_users;

static ngx_http_feed_track_hooks_t  ngx_http_feed_stream_hooks = {
    ngx_http_feed_stream_hook_changed,
    ngx_http_feed_stream_hook_all,
    ngx_http_feed_stream_hook_deleted,
    ngx_http_feed_stream_hook_author
};


ngx_int_t
ngx_http_feed_stream_users_init(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_stream_users_t  *us;

    if (!fmcf->live || fmcf->redis_client == NULL) {
        return NGX_OK;
    }

    us = ngx_pcalloc(ngx_cycle->pool, sizeof(ngx_http_feed_stream_users_t));
    if (us == NULL) {
        return NGX_ERROR;
    }

    us->fmcf = fmcf;

    ngx_rbtree_init(&us->rbtree, &us->sentinel, ngx_str_rbtree_insert_value);
    ngx_queue_init(&us->all);
    ngx_queue_init(&us->wanted);

    us->dummy.fd = (ngx_socket_t) -1;

    us->settle.handler = ngx_http_feed_stream_users_settled;
    us->settle.data = &us->dummy;
    us->settle.log = ngx_cycle->log;
    us->settle.cancelable = 1;

    us->tick.handler = ngx_http_feed_stream_users_timer;
    us->tick.data = &us->dummy;
    us->tick.log = ngx_cycle->log;

    ngx_http_feed_stream_users = us;
    ngx_http_feed_track_hook(&ngx_http_feed_stream_hooks);

    return NGX_OK;
}


void
ngx_http_feed_stream_users_exit(void)
{
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (us == NULL) {
        return;
    }

    ngx_http_feed_track_hook(NULL);

    if (us->tick.timer_set) {
        ngx_del_timer(&us->tick);
    }

    if (us->settle.timer_set) {
        ngx_del_timer(&us->settle);
    }

    /* the streams ended before: what is left waits for a reply */

    while (!ngx_queue_empty(&us->all)) {
        q = ngx_queue_head(&us->all);
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

        ngx_queue_remove(q);

        if (su->pool) {
            ngx_destroy_pool(su->pool);
        }

        ngx_free(su->lists);
        ngx_free(su);
    }

    ngx_http_feed_stream_users = NULL;
}


/*
 * A stream of a user joins the user's reader, made for it when it is the
 * first: it goes live at the reader's next read, which sends it its
 * backlog first when it resumes.
 */

ngx_int_t
ngx_http_feed_stream_join(ngx_http_feed_stream_t *s)
{
    size_t                         len;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (us == NULL) {
        return NGX_DECLINED;
    }

    su = ngx_http_feed_stream_user_find(&s->user);

    if (su == NULL) {
        su = ngx_calloc(sizeof(ngx_http_feed_stream_user_t), ngx_cycle->log);
        if (su == NULL) {
            return NGX_ERROR;
        }

        len = s->user.len;

        su->user = s->user;
        su->sn.str.data = (u_char *) su->user.data;
        su->sn.str.len = len;
        su->sn.node.key = ngx_crc32_short(su->sn.str.data, len);

        ngx_queue_init(&su->streams);
        ngx_queue_init(&su->wanted);
        ngx_rbtree_insert(&us->rbtree, &su->sn.node);
        ngx_queue_insert_tail(&us->all, &su->all);

        us->users++;

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "feed stream: reader of \"%s\" made", su->user.data);
    }

    ngx_queue_insert_tail(&su->streams, &s->queue);
    s->su = su;
    s->joined = 1;

    if (!us->tick.timer_set) {
        ngx_add_timer(&us->tick, NGX_HTTP_FEED_STREAM_TICK);
    }

    ngx_http_feed_stream_user_want(su);

    return NGX_OK;
}


/* a stream left; its reader goes with the last, at once or at its reply */

void
ngx_http_feed_stream_leave(ngx_http_feed_stream_t *s)
{
    ngx_http_feed_stream_user_t   *su = s->su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (!s->joined) {
        return;
    }

    s->joined = 0;
    ngx_queue_remove(&s->queue);

    if (s->backlog) {
        ((ngx_http_feed_stream_backlog_t *) s->backlog)->stream = NULL;
        s->backlog = NULL;
    }

    if (!ngx_queue_empty(&su->streams) || us == NULL) {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: reader of \"%s\" gone", su->user.data);

    ngx_rbtree_delete(&us->rbtree, &su->sn.node);
    ngx_queue_remove(&su->all);
    us->users--;

    if (su->queued) {
        ngx_queue_remove(&su->wanted);
        su->queued = 0;
    }

    if (su->reading) {
        su->gone = 1;
        return;
    }

    ngx_http_feed_stream_user_free(su);
}


static ngx_http_feed_stream_user_t *
ngx_http_feed_stream_user_find(ngx_http_feed_user_t *user)
{
    ngx_str_t                      name;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    name.data = (u_char *) user->data;
    name.len = user->len;

    return (ngx_http_feed_stream_user_t *)
               ngx_str_rbtree_lookup(&us->rbtree, &name,
                                     ngx_crc32_short(name.data, name.len));
}


/* to be read NGX_HTTP_FEED_STREAM_SETTLE ms from now, or after its read */

static void
ngx_http_feed_stream_user_want(ngx_http_feed_stream_user_t *su)
{
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (su->reading) {
        su->again = 1;
        return;
    }

    if (su->queued) {
        return;
    }

    su->wanted_at = ngx_current_msec;
    su->queued = 1;
    ngx_queue_insert_tail(&us->wanted, &su->wanted);

    if (!us->settle.timer_set) {
        ngx_add_timer(&us->settle, NGX_HTTP_FEED_STREAM_SETTLE);
    }
}


/* the readers whose wait is over read, in the order they were wanted */

static void
ngx_http_feed_stream_users_settled(ngx_event_t *ev)
{
    ngx_msec_int_t                 left;
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    while (!ngx_queue_empty(&us->wanted)) {
        q = ngx_queue_head(&us->wanted);
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, wanted);

        left = (ngx_msec_int_t) (su->wanted_at + NGX_HTTP_FEED_STREAM_SETTLE
                                 - ngx_current_msec);

        if (left > 0) {
            ngx_add_timer(&us->settle, (ngx_msec_t) left);
            return;
        }

        ngx_queue_remove(q);
        su->queued = 0;

        ngx_http_feed_stream_user_read(su);
    }
}


/*
 * Each second: readers the worker cannot vouch for are read, and the
 * streams get their heartbeats (ngx_http_feed_stream.c).  The timer runs
 * while a stream does, and holds a worker that is shutting down until it
 * has ended them.
 */

static void
ngx_http_feed_stream_users_timer(ngx_event_t *ev)
{
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    ngx_http_feed_stream_tick();

    if (ngx_exiting) {
        return;
    }

    for (q = ngx_queue_head(&us->all);
         q != ngx_queue_sentinel(&us->all);
         q = ngx_queue_next(q))
    {
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

        if (!su->reading && !su->queued && ngx_http_feed_stream_user_due(su))
        {
            ngx_http_feed_stream_user_want(su);
        }
    }

    if (ngx_http_feed_stream_count()) {
        ngx_add_timer(&us->tick, NGX_HTTP_FEED_STREAM_TICK);
    }
}


/* whether the reader must read now, not waiting to hear of a change */

static ngx_uint_t
ngx_http_feed_stream_user_due(ngx_http_feed_stream_user_t *su)
{
    ngx_str_t                  lists;
    ngx_http_feed_main_conf_t  *fmcf = ngx_http_feed_stream_users->fmcf;

    if (su->failed || su->broken) {
        return ngx_current_msec - su->failed_at
               >= NGX_HTTP_FEED_STREAM_RETRY;
    }

    if (!su->ready
        || ngx_current_msec - su->kept_alive
           >= ngx_http_feed_stream_keep_alive(fmcf)
        || !ngx_http_feed_timeline_watch_tracks(&su->user, &su->mark))
    {
        return 1;
    }

    if (su->lists_len == 0) {
        return 0;
    }

    lists.data = su->lists;
    lists.len = su->lists_len;

    return !ngx_http_feed_timeline_watch_vouch(&su->user, &lists);
}


/* ms an untracked read keeps the list alive for, as a local hit's */

static ngx_msec_t
ngx_http_feed_stream_keep_alive(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_msec_t  ttl;

    ttl = (ngx_msec_t) fmcf->cache_ttl * 1000 / 4;

    return ngx_min(ttl, 60000);
}


/*
 * The round trip: a since_id read per stream that resumes, then the
 * window, tracked when the watch of the user's node can (and the list was
 * kept alive lately), all pipelined on the user's node's connection.
 */

static void
ngx_http_feed_stream_user_read(ngx_http_feed_stream_user_t *su)
{
    ngx_int_t                   rc;
    ngx_uint_t                  tracked;
    ngx_queue_t                *q;
    ngx_http_feed_page_t        page;
    ngx_http_feed_stream_t     *s;
    ngx_http_feed_main_conf_t  *fmcf = ngx_http_feed_stream_users->fmcf;

    if (su->reading) {
        su->again = 1;
        return;
    }

    su->pool = ngx_create_pool(NGX_DEFAULT_POOL_SIZE, ngx_cycle->log);
    if (su->pool == NULL) {
        su->failed = 1;
        su->failed_at = ngx_current_msec;
        return;
    }

    su->reading = 1;
    su->again = 0;
    su->failed = 0;
    su->window_ok = 0;
    su->pending = 0;

    ngx_http_feed_stream_users->reads++;

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);

        if (!s->live && s->since[0] && s->backlog == NULL) {
            if (ngx_http_feed_stream_user_backlog(su, s) != NGX_OK) {
                su->failed = 1;
            }
        }
    }

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = su->user;
    page.limit = NGX_HTTP_FEED_STREAM_WINDOW;

    ngx_http_feed_timeline_watch_mark(&su->user, &su->next);

    tracked = 0;

    if (fmcf->cache_tracking
        && ngx_current_msec - su->kept_alive
           < ngx_http_feed_stream_keep_alive(fmcf))
    {
        tracked = ngx_http_feed_timeline_watch_track(&su->user, &su->next);
    }

    if (!tracked) {
        su->next.stamp = 0;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: reading \"%s\", tracked %ui",
                   su->user.data, tracked);

    rc = ngx_http_feed_timeline_cache_fresh(fmcf, &page, tracked,
             ngx_http_feed_stream_user_window_done, su);

    if (rc == NGX_OK) {
        su->pending++;

        if (!tracked) {
            su->kept_alive = ngx_current_msec;
        }

    } else {
        su->failed = 1;
    }

    if (su->pending == 0) {
        ngx_http_feed_stream_user_done(su);
    }
}


static ngx_int_t
ngx_http_feed_stream_user_backlog(ngx_http_feed_stream_user_t *su,
    ngx_http_feed_stream_t *s)
{
    ngx_int_t                        rc;
    ngx_http_feed_page_t             page;
    ngx_http_feed_stream_backlog_t  *b;

    b = ngx_pcalloc(su->pool, sizeof(ngx_http_feed_stream_backlog_t));
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->su = su;
    b->stream = s;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = su->user;
    page.limit = NGX_HTTP_FEED_STREAM_BACKLOG;
    page.has_since = 1;
    ngx_memcpy(page.since_id, s->since, 25);

    rc = ngx_http_feed_timeline_cache_fresh(ngx_http_feed_stream_users->fmcf,
             &page, 0, ngx_http_feed_stream_user_backlog_done, b);
    if (rc != NGX_OK) {
        return NGX_ERROR;
    }

    s->backlog = (void *) b;
    su->pending++;

    return NGX_OK;
}


static void
ngx_http_feed_stream_user_backlog_done(void *data, redisReply *reply)
{
    ngx_http_feed_stream_backlog_t  *b = data;

    ngx_http_feed_stream_user_t  *su = b->su;

    if (ngx_http_feed_timeline_cache_parse(su->pool, reply, &b->cached)
        != NGX_OK)
    {
        b->failed = 1;
    }

    su->pending--;
    ngx_http_feed_stream_user_replied(su);
}


static void
ngx_http_feed_stream_user_window_done(void *data, redisReply *reply)
{
    ngx_http_feed_stream_user_t  *su = data;

    if (ngx_http_feed_timeline_cache_parse(su->pool, reply, &su->page)
        == NGX_OK)
    {
        su->window_ok = 1;
    }

    su->pending--;
    ngx_http_feed_stream_user_replied(su);
}


/* a reply of the round trip: the last one sends what changed */

static void
ngx_http_feed_stream_user_replied(ngx_http_feed_stream_user_t *su)
{
    ngx_http_feed_cached_t  *p = &su->page;

    if (su->pending) {
        return;
    }

    if (su->gone) {
        ngx_http_feed_stream_user_free(su);
        return;
    }

    if (su->failed || !su->window_ok || p->counted
        || p->nitems * 24 != p->ids.len)
    {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "feed stream: read of \"%s\" failed", su->user.data);
        su->failed = 1;
        ngx_http_feed_stream_user_done(su);
        return;
    }

    if (!p->found || p->npull) {

        /*
         * No list (expired, evicted, flushed), or pull authors' lists
         * missing: a read of the timeline makes them again.  The streams
         * are told to read it, once; the reader asks again each second.
         */

        if (!su->broken) {
            ngx_http_feed_stream_user_resets(su, "gone");
        }

        su->broken = 1;
        su->failed_at = ngx_current_msec;
        ngx_http_feed_stream_user_done(su);
        return;
    }

    su->broken = 0;

    ngx_http_feed_stream_user_diff(su);
    ngx_http_feed_stream_user_keep(su);
    ngx_http_feed_stream_user_done(su);
}


/* every stream of the reader is told to read its timeline again */

static void
ngx_http_feed_stream_user_resets(ngx_http_feed_stream_user_t *su,
    const char *reason)
{
    ngx_queue_t             *q, *next;
    ngx_http_feed_stream_t  *s;

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);

        s->live = 1;
        ngx_http_feed_stream_reset(s, reason);
    }
}


/*
 * What changed since the last read, sent to the live streams: a delete
 * per entry gone (a reset past NGX_HTTP_FEED_STREAM_GONE_MAX), then an
 * update per entry come, oldest first.  An entry older than the last
 * read's oldest, when that read was full, came into view only because
 * others went; a post deleted lately is not one come, whatever a read
 * sent before its delete says.  Streams not live yet get their backlog
 * instead.  The first read of a reader only learns where the timeline is.
 */

static void
ngx_http_feed_stream_user_diff(ngx_http_feed_stream_user_t *su)
{
    u_char                  *ids, *id, *floor,
                            *gone[NGX_HTTP_FEED_STREAM_WINDOW];
    ngx_uint_t               i, j, n, ngone, ncome,
                             come[NGX_HTTP_FEED_STREAM_WINDOW];
    ngx_queue_t             *q, *next;
    ngx_http_feed_stream_t  *s;
    ngx_http_feed_cached_t  *p = &su->page;

    ids = p->ids.data;
    n = ngx_min(p->nitems, NGX_HTTP_FEED_STREAM_WINDOW);
    floor = n ? ids + (n - 1) * 24 : NULL;

    ncome = 0;
    ngone = 0;

    for (i = 0; su->ready && i < n; i++) {
        id = ids + i * 24;

        if (ngx_http_feed_stream_has(su->ids, su->nids, id)
            || (su->full && ngx_memcmp(id, su->floor, 24) <= 0)
            || ngx_http_feed_track_is_deleted(id))
        {
            continue;
        }

        come[ncome++] = i;
    }

    for (i = 0; su->ready && i < su->nids; i++) {
        id = su->ids + i * 24;

        if (ngx_http_feed_stream_has(ids, n, id)
            || (p->more && ngx_memcmp(id, floor, 24) <= 0))
        {
            continue;
        }

        gone[ngone++] = id;
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: \"%s\" read, %ui come, %ui gone",
                   su->user.data, ncome, ngone);

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);

        if (!s->live) {
            ngx_http_feed_stream_user_resume(su, s);
            continue;
        }

        if (ngone > NGX_HTTP_FEED_STREAM_GONE_MAX) {
            ngx_http_feed_stream_reset(s, "changed");

        } else {
            for (j = 0; j < ngone && !s->ended; j++) {
                ngx_http_feed_stream_delete(s, gone[j]);
            }
        }

        for (j = ncome; j > 0 && !s->ended; j--) {
            ngx_http_feed_stream_update(s, ids + come[j - 1] * 24,
                                        &p->items[come[j - 1]]);
        }
    }
}


/* an entry of a backlog: its id and JSON */
typedef struct {
    u_char                       *id;
    ngx_str_t                    *json;
} ngx_http_feed_stream_entry_t;


static ngx_int_t
ngx_http_feed_stream_entry_cmp(const void *one, const void *two)
{
    const ngx_http_feed_stream_entry_t  *a = one, *b = two;

    return ngx_memcmp(a->id, b->id, 24);
}


/*
 * A stream goes live: when it resumes, it is first sent the entries newer
 * than its point, from its since_id read and from the window read after
 * it (what landed in between), oldest first, each once.  A point older
 * than the list holds, or with more entries since than a page, makes it
 * read its timeline again instead.
 */

static void
ngx_http_feed_stream_user_resume(ngx_http_feed_stream_user_t *su,
    ngx_http_feed_stream_t *s)
{
    u_char                          *id;
    ngx_uint_t                       i, n;
    ngx_http_feed_cached_t          *c, *p = &su->page;
    ngx_http_feed_stream_entry_t     entries[NGX_HTTP_FEED_STREAM_BACKLOG
                                             + NGX_HTTP_FEED_STREAM_WINDOW];
    ngx_http_feed_stream_backlog_t  *b;

    b = s->backlog;
    s->backlog = NULL;
    s->live = 1;

    if (!s->since[0]) {
        return;
    }

    c = b ? &b->cached : NULL;

    if (c == NULL || b->failed || !c->found || c->deep || c->more
        || c->npull || c->counted || c->nitems * 24 != c->ids.len
        || c->nitems > NGX_HTTP_FEED_STREAM_BACKLOG)
    {
        ngx_http_feed_stream_reset(s, "gap");
        return;
    }

    n = 0;

    for (i = 0; i < c->nitems; i++) {
        entries[n].id = c->ids.data + i * 24;
        entries[n].json = &c->items[i];
        n++;
    }

    for (i = 0; i < p->nitems && i < NGX_HTTP_FEED_STREAM_WINDOW; i++) {
        id = p->ids.data + i * 24;

        if (ngx_memcmp(id, s->since, 24) <= 0) {
            break;
        }

        if (!ngx_http_feed_stream_has(c->ids.data, c->nitems, id)) {
            entries[n].id = id;
            entries[n].json = &p->items[i];
            n++;
        }
    }

    ngx_sort(entries, n, sizeof(ngx_http_feed_stream_entry_t),
             ngx_http_feed_stream_entry_cmp);

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: \"%s\" resumes with %ui entries",
                   su->user.data, n);

    for (i = 0; i < n && !s->ended; i++) {
        ngx_http_feed_stream_update(s, entries[i].id, entries[i].json);
    }
}


/* the read is the reader's last: its ids, and how the worker vouches */

static void
ngx_http_feed_stream_user_keep(ngx_http_feed_stream_user_t *su)
{
    u_char                  *lists;
    ngx_uint_t               n;
    ngx_http_feed_cached_t  *p = &su->page;

    n = ngx_min(p->nitems, NGX_HTTP_FEED_STREAM_WINDOW);

    ngx_memcpy(su->ids, p->ids.data, n * 24);
    su->nids = n;
    su->full = p->more && n > 0;

    if (n) {
        ngx_memcpy(su->floor, su->ids + (n - 1) * 24, 24);
    }

    su->ready = 1;
    su->mark = su->next;

    if (p->lists.len == su->lists_len
        && (p->lists.len == 0
            || ngx_memcmp(p->lists.data, su->lists, p->lists.len) == 0))
    {
        return;
    }

    lists = NULL;

    if (p->lists.len) {
        lists = ngx_alloc(p->lists.len, ngx_cycle->log);
        if (lists == NULL) {
            /* vouched for by nothing: read again at the next check */
            su->mark.stamp = 0;
            return;
        }

        ngx_memcpy(lists, p->lists.data, p->lists.len);
    }

    ngx_free(su->lists);
    su->lists = lists;
    su->lists_len = p->lists.len;
}


/* the round trip is over: its pool goes, and a change meanwhile reads */

static void
ngx_http_feed_stream_user_done(ngx_http_feed_stream_user_t *su)
{
    ngx_queue_t             *q;
    ngx_http_feed_stream_t  *s;

    if (su->pool) {
        ngx_destroy_pool(su->pool);
        su->pool = NULL;
    }

    ngx_memzero(&su->page, sizeof(ngx_http_feed_cached_t));

    su->reading = 0;

    if (su->gone) {
        ngx_http_feed_stream_user_free(su);
        return;
    }

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = ngx_queue_next(q))
    {
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);
        s->backlog = NULL;
    }

    if (su->failed) {
        su->failed_at = ngx_current_msec;
        return;
    }

    if (su->again) {
        ngx_http_feed_stream_user_want(su);
    }
}


static void
ngx_http_feed_stream_user_free(ngx_http_feed_stream_user_t *su)
{
    if (su->pool) {
        ngx_destroy_pool(su->pool);
    }

    ngx_free(su->lists);
    ngx_free(su);
}


/* whether id is one of n ids (24 hex digits each, one after another) */

static ngx_uint_t
ngx_http_feed_stream_has(u_char *ids, ngx_uint_t n, u_char *id)
{
    ngx_uint_t  i;

    for (i = 0; i < n; i++) {
        if (ngx_memcmp(ids + i * 24, id, 24) == 0) {
            return 1;
        }
    }

    return 0;
}


/* an entry of a user's may have changed: their reader reads */

static void
ngx_http_feed_stream_hook_changed(u_char *user, size_t len)
{
    ngx_http_feed_user_t          u;
    ngx_http_feed_stream_user_t  *su;

    if (len > NGX_HTTP_FEED_USER_MAX) {
        return;
    }

    ngx_memcpy(u.data, user, len);
    u.data[len] = '\0';
    u.len = len;

    su = ngx_http_feed_stream_user_find(&u);

    if (su) {
        ngx_http_feed_stream_user_want(su);
    }
}


/* anything may have changed (a flush, a connection made again) */

static void
ngx_http_feed_stream_hook_all(const char *why)
{
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: every reader reads, %s", why);

    for (q = ngx_queue_head(&us->all);
         q != ngx_queue_sentinel(&us->all);
         q = ngx_queue_next(q))
    {
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);
        ngx_http_feed_stream_user_want(su);
    }
}


/*
 * A post deleted: the streams of readers that have it among their last
 * read's entries are told at once, and it is no longer one of those; so
 * are streams sent entries older than those, from the oldest they were
 * sent on (the post may be one of them).
 */

static void
ngx_http_feed_stream_hook_deleted(u_char *id)
{
    ngx_uint_t                     i, found;
    ngx_queue_t                   *q, *sq, *next;
    ngx_http_feed_stream_t        *s;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    for (q = ngx_queue_head(&us->all);
         q != ngx_queue_sentinel(&us->all);
         q = ngx_queue_next(q))
    {
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

        found = 0;

        for (i = 0; i < su->nids; i++) {
            if (ngx_memcmp(su->ids + i * 24, id, 24) == 0) {
                ngx_memmove(su->ids + i * 24, su->ids + (i + 1) * 24,
                            (su->nids - i - 1) * 24);
                su->nids--;
                found = 1;
                break;
            }
        }

        for (sq = ngx_queue_head(&su->streams);
             sq != ngx_queue_sentinel(&su->streams);
             sq = next)
        {
            next = ngx_queue_next(sq);
            s = ngx_queue_data(sq, ngx_http_feed_stream_t, queue);

            if (!s->live) {
                continue;
            }

            if (found
                || (s->oldest[0] && su->full
                    && ngx_memcmp(id, s->oldest, 24) >= 0
                    && ngx_memcmp(id, su->floor, 24) < 0))
            {
                ngx_http_feed_stream_delete(s, id);
            }
        }
    }
}


/* a pull author's list changed: readers merged from it read again */

static void
ngx_http_feed_stream_hook_author(u_char *author, size_t len)
{
    u_char                        *p, *last;
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    for (q = ngx_queue_head(&us->all);
         q != ngx_queue_sentinel(&us->all);
         q = ngx_queue_next(q))
    {
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

        p = su->lists;
        last = p + su->lists_len;

        /* "author version\n" each */

        while (p && p < last) {
            if ((size_t) (last - p) > len && p[len] == ' '
                && ngx_memcmp(p, author, len) == 0)
            {
                ngx_http_feed_stream_user_want(su);
                break;
            }

            p = ngx_strlchr(p, last, '\n');

            if (p) {
                p++;
            }
        }
    }
}


/* the worker's streams, readers, and the reads they made (feed_status) */

ngx_int_t
ngx_http_feed_stream_status(bson_t *doc)
{
    bson_t                         sub;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "streams", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&sub, "streams", (int64_t) ngx_http_feed_stream_count());
    BSON_APPEND_INT64(&sub, "readers", (int64_t) (us ? us->users : 0));
    BSON_APPEND_INT64(&sub, "reads", (int64_t) (us ? us->reads : 0));

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}
