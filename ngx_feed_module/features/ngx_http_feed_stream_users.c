
/*
 * ngx_feed_module: the worker's readers of streamed timelines.
 *
 * A user with streams in the worker has one reader, whatever the number
 * of their streams.  It keeps the ids of the newest entries of the user's
 * timeline as it last knew them (NGX_HTTP_FEED_STREAM_WINDOW).  A post the
 * fanout delivered to the user is told to it, with the post, while the
 * worker streams (ngx_http_feed_stream_told.c): it is sent without a
 * read.  The reader reads its window (ngx_http_feed_timeline_cache_fresh)
 * when only a read can tell what changed:
 *
 *   - Redis said a key of the user changed: the read has Redis track the
 *     keys that move when the list changes other than by a delivery (its
 *     version, the follows', the filters, the pull authors: CLIENT
 *     TRACKING, by the watch of the user's node), and the watch tells
 *     (ngx_http_feed_timeline_track.c's hooks);
 *   - a pull author the user follows posted, or deleted (the watch's
 *     channel);
 *   - the worker cannot vouch for the last read any more (a connection
 *     made again, tracking off or refused, a stalled watch, the node's
 *     live mark not set before the read or lapsed since): it reads each
 *     second meanwhile;
 *   - a delivery was told and the user has filters, or the reader could
 *     not keep it;
 *   - a minute passed (feed_cache_ttl / 4 when shorter): a read keeps the
 *     list alive, as the fanout delivers only to lists that are.
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


#include "ngx_http_feed_stream_users.h"


/* ms between the checks of every reader */
#define NGX_HTTP_FEED_STREAM_TICK     1000


/*
 * ms a reader waits after a change before it reads, or sends what it was
 * told: the fanout delivers the batches of a post, and posts fanned out
 * at once, concurrently, not in order, and what lands meanwhile is read
 * or sent (in order) at once.  20 ms sent posts made one after another
 * out of order under load (ASan's t/stream.t)
 */
#define NGX_HTTP_FEED_STREAM_SETTLE   50

/*
 * readers that read or send at once, at most, before the worker's other
 * events (the fanout's replies among them) are handled: a post to 10,000
 * streaming followers is sent to them in slices, and delivered meanwhile
 */
#define NGX_HTTP_FEED_STREAM_SLICE    256

/* the users' table at first: it doubles as they come */
#define NGX_HTTP_FEED_STREAM_USERS_HASH  256


static ngx_http_feed_stream_user_t *ngx_http_feed_stream_user_get(
    ngx_http_feed_user_t *user);
static void ngx_http_feed_stream_user_release(
    ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_users_settled(ngx_event_t *ev);
static void ngx_http_feed_stream_users_timer(ngx_event_t *ev);
static ngx_uint_t ngx_http_feed_stream_user_due(
    ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_hook_changed(u_char *user, size_t len);
static void ngx_http_feed_stream_hook_all(const char *why);
static void ngx_http_feed_stream_hook_deleted(u_char *id);
static void ngx_http_feed_stream_hook_author(u_char *author, size_t len);


ngx_http_feed_stream_users_t  *ngx_http_feed_stream_users;

/* a reader lives as long as its streams: packed with the others' */
ngx_http_feed_slots_t  ngx_http_feed_stream_user_slots =
    ngx_http_feed_slots(sizeof(ngx_http_feed_stream_user_t));

static ngx_http_feed_track_hooks_t  ngx_http_feed_stream_hooks = {
    ngx_http_feed_stream_hook_changed,
    ngx_http_feed_stream_hook_all,
    ngx_http_feed_stream_hook_deleted,
    ngx_http_feed_stream_hook_author,
    ngx_http_feed_stream_told
};


ngx_int_t
ngx_http_feed_stream_users_init(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_stream_users_t  *us;

    if (fmcf->redis_client == NULL) {
        return NGX_OK;
    }

    us = ngx_pcalloc(ngx_cycle->pool, sizeof(ngx_http_feed_stream_users_t));
    if (us == NULL) {
        return NGX_ERROR;
    }

    us->fmcf = fmcf;

    if (ngx_http_feed_str_hash_init(&us->by_name,
                                    NGX_HTTP_FEED_STREAM_USERS_HASH,
                                    ngx_cycle->log)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

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

    if (us->settle.posted) {
        ngx_delete_posted_event(&us->settle);
    }

    /* the streams ended before: what is left waits for a reply */

    while (!ngx_queue_empty(&us->all)) {
        q = ngx_queue_head(&us->all);
        su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

        ngx_queue_remove(q);

        ngx_http_feed_stream_user_free(su);
    }

    ngx_http_feed_str_hash_free(&us->by_name);

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
    ngx_http_feed_stream_user_t  *su;

    su = ngx_http_feed_stream_user_get(&s->user);
    if (su == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_insert_tail(&su->streams, &s->queue);
    s->su = su;
    s->joined = 1;

    ngx_http_feed_stream_user_want(su);

    return NGX_OK;
}


/* a stream left; its reader goes with the last, at once or at its reply */

void
ngx_http_feed_stream_leave(ngx_http_feed_stream_t *s)
{
    if (!s->joined) {
        return;
    }

    s->joined = 0;
    ngx_queue_remove(&s->queue);

    if (s->backlog) {
        ((ngx_http_feed_stream_backlog_t *) s->backlog)->stream = NULL;
        s->backlog = NULL;
    }

    ngx_http_feed_stream_user_release(s->su);
}


/*
 * A long poll waits for the user's reader to read an entry newer than
 * its since_id: at the reader's next read, and at each one after a change
 */

ngx_int_t
ngx_http_feed_stream_wait(ngx_http_feed_stream_waiter_t *w,
    ngx_http_feed_user_t *user)
{
    ngx_http_feed_stream_user_t  *su;

    su = ngx_http_feed_stream_user_get(user);
    if (su == NULL) {
        return NGX_ERROR;
    }

    ngx_queue_insert_tail(&su->waiters, &w->queue);
    w->su = su;
    ngx_http_feed_stream_users->waiters++;
    ngx_http_feed_gauge(waits, 1);

    ngx_http_feed_stream_user_want(su);

    return NGX_OK;
}


void
ngx_http_feed_stream_unwait(ngx_http_feed_stream_waiter_t *w)
{
    ngx_http_feed_stream_user_t  *su = w->su;

    if (su == NULL) {
        return;
    }

    w->su = NULL;
    ngx_queue_remove(&w->queue);
    ngx_http_feed_stream_users->waiters--;
    ngx_http_feed_gauge(waits, -1);

    ngx_http_feed_stream_user_release(su);
}


/*
 * The reader read: waiters for entries older than newest (NULL: all of
 * them, the list cannot be read) are woken, out of its waiters first, as
 * a waiter woken may wait again at once
 */

void
ngx_http_feed_stream_user_wake(ngx_http_feed_stream_user_t *su,
    u_char *newest)
{
    ngx_queue_t                     woken, *q, *next;
    ngx_http_feed_stream_waiter_t  *w;

    ngx_queue_init(&woken);

    for (q = ngx_queue_head(&su->waiters);
         q != ngx_queue_sentinel(&su->waiters);
         q = next)
    {
        next = ngx_queue_next(q);
        w = ngx_queue_data(q, ngx_http_feed_stream_waiter_t, queue);

        if (newest && ngx_memcmp(newest, w->since, 24) <= 0) {
            continue;
        }

        ngx_queue_remove(q);
        ngx_queue_insert_tail(&woken, q);
    }

    while (!ngx_queue_empty(&woken)) {
        q = ngx_queue_head(&woken);
        ngx_queue_remove(q);

        w = ngx_queue_data(q, ngx_http_feed_stream_waiter_t, queue);
        w->su = NULL;
        ngx_http_feed_stream_users->waiters--;
        ngx_http_feed_gauge(waits, -1);

        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "feed stream: a wait for \"%s\" is over",
                       su->user.data);

        w->handler(w->data);
    }

    ngx_http_feed_stream_user_release(su);
}


/* the user's reader, made when it is the first stream or wait of theirs */

static ngx_http_feed_stream_user_t *
ngx_http_feed_stream_user_get(ngx_http_feed_user_t *user)
{
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (us == NULL) {
        return NULL;
    }

    if (!us->tick.timer_set) {
        ngx_add_timer(&us->tick, NGX_HTTP_FEED_STREAM_TICK);
    }

    su = ngx_http_feed_stream_user_find(user);
    if (su) {
        return su;
    }

    su = ngx_http_feed_slots_alloc(&ngx_http_feed_stream_user_slots,
                                   ngx_cycle->log);
    if (su == NULL) {
        return NULL;
    }

    su->user = *user;
    su->hn.str.data = (u_char *) su->user.data;
    su->hn.str.len = user->len;
    su->hn.hash = ngx_crc32_short(su->hn.str.data, user->len);

    ngx_queue_init(&su->streams);
    ngx_queue_init(&su->waiters);
    ngx_queue_init(&su->wanted);
    ngx_http_feed_str_hash_insert(&us->by_name, &su->hn, ngx_cycle->log);
    ngx_queue_insert_tail(&us->all, &su->all);

    /*
     * the first reader: the nodes' live marks are set now, before its
     * read, so that every delivery after that read is told
     */

    if (us->users++ == 0) {
        ngx_http_feed_timeline_watch_streaming(1);
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: reader of \"%s\" made", su->user.data);

    return su;
}


/*
 * The reader goes with its last stream or wait: at once, or at the reply
 * of its read under way
 */

static void
ngx_http_feed_stream_user_release(ngx_http_feed_stream_user_t *su)
{
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (!ngx_queue_empty(&su->streams) || !ngx_queue_empty(&su->waiters)
        || us == NULL || su->gone)
    {
        return;
    }

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: reader of \"%s\" gone", su->user.data);

    ngx_http_feed_str_hash_delete(&us->by_name, &su->hn);
    ngx_queue_remove(&su->all);

    if (--us->users == 0) {
        ngx_http_feed_timeline_watch_streaming(0);
    }

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


ngx_http_feed_stream_user_t *
ngx_http_feed_stream_user_find(ngx_http_feed_user_t *user)
{
    ngx_http_feed_str_hash_node_t  *hn;

    hn = ngx_http_feed_str_hash_find(&ngx_http_feed_stream_users->by_name,
                                     (u_char *) user->data, user->len,
                                     ngx_crc32_short((u_char *) user->data,
                                                     user->len));

    return hn ? (ngx_http_feed_stream_user_t *)
                    ((u_char *) hn - offsetof(ngx_http_feed_stream_user_t, hn))
              : NULL;
}


/* to be read NGX_HTTP_FEED_STREAM_SETTLE ms from now, or after its read */

void
ngx_http_feed_stream_user_want(ngx_http_feed_stream_user_t *su)
{
    su->stale = 1;

    if (su->reading) {
        su->again = 1;
        return;
    }

    ngx_http_feed_stream_user_settle(su);
}


/*
 * To send what it was told NGX_HTTP_FEED_STREAM_SETTLE ms from now (the
 * batches of a post, and of posts fanned out at once, come in any order),
 * or to read then when something else changed; after its read under way
 */

void
ngx_http_feed_stream_user_settle(ngx_http_feed_stream_user_t *su)
{
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    if (su->reading || su->queued) {
        return;
    }

    su->wanted_at = ngx_current_msec;
    su->queued = 1;
    ngx_queue_insert_tail(&us->wanted, &su->wanted);

    if (!us->settle.timer_set) {
        ngx_add_timer(&us->settle, NGX_HTTP_FEED_STREAM_SETTLE);
    }
}


/*
 * The readers whose wait is over read, or send what they were told, in
 * the order they were wanted, a slice at a time
 */

static void
ngx_http_feed_stream_users_settled(ngx_event_t *ev)
{
    ngx_uint_t                     n;
    ngx_msec_int_t                 left;
    ngx_queue_t                   *q;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    for (n = 0; !ngx_queue_empty(&us->wanted); n++) {

        if (n == NGX_HTTP_FEED_STREAM_SLICE) {
            ngx_log_debug0(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                           "feed stream: the next slice of readers");

            ngx_post_event(&us->settle, &ngx_posted_next_events);
            return;
        }

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

        if (su->stale || !su->ready) {
            ngx_http_feed_stream_user_read(su);

        } else {
            ngx_http_feed_stream_user_send_told(su);
        }
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
    ngx_queue_t                   *q, *next;
    ngx_http_feed_stream_user_t   *su;
    ngx_http_feed_stream_users_t  *us = ngx_http_feed_stream_users;

    ngx_http_feed_stream_tick();

    if (ngx_exiting) {

        /* long polls are answered now, with what there is */

        for (q = ngx_queue_head(&us->all);
             q != ngx_queue_sentinel(&us->all);
             q = next)
        {
            next = ngx_queue_next(q);
            su = ngx_queue_data(q, ngx_http_feed_stream_user_t, all);

            if (!ngx_queue_empty(&su->waiters)) {
                ngx_http_feed_stream_user_wake(su, NULL);
            }
        }

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

    if (ngx_http_feed_stream_count() || us->waiters) {
        ngx_add_timer(&us->tick, NGX_HTTP_FEED_STREAM_TICK);
    }
}


/* whether the reader must read now, not waiting to hear of a change */

static ngx_uint_t
ngx_http_feed_stream_user_due(ngx_http_feed_stream_user_t *su)
{
    ngx_str_t                  lists;
    ngx_http_feed_main_conf_t  *fmcf = ngx_http_feed_stream_users->fmcf;

    if (su->broken) {
        return ngx_current_msec - su->failed_at >= su->backoff;
    }

    if (su->failed) {
        return ngx_current_msec - su->failed_at
               >= NGX_HTTP_FEED_STREAM_RETRY;
    }

    if (!su->ready
        || ngx_current_msec - su->kept_alive
           >= ngx_http_feed_stream_keep_alive(fmcf)
        || !ngx_http_feed_timeline_watch_live(&su->user, &su->mark))
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

ngx_msec_t
ngx_http_feed_stream_keep_alive(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_msec_t  ttl;

    ttl = (ngx_msec_t) fmcf->cache_ttl * 1000 / 4;

    return ngx_min(ttl, 60000);
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
