
/*
 * ngx_feed_module: a reader's round trip (ngx_http_feed_stream_users.c
 * says when): the since_id reads of the streams that resume, then the
 * window, pipelined on the connection to the user's node, in a pool of
 * the round trip's own.  Its replies tell each stream what came and what
 * went.
 */


#include "ngx_http_feed_stream_users.h"


/*
 * A round trip's pool: the replies stay hiredis's, it holds their index
 * (a reader reads at once with thousands of others when a post reaches
 * their users)
 */
#define NGX_HTTP_FEED_STREAM_POOL  2048

/*
 * ms the clocks of two nodes may differ by (NTP keeps a LAN's within a
 * few): a change that close before a resume point counts as after it
 */
#define NGX_HTTP_FEED_STREAM_SKEW  100


/* an entry of a backlog: its id and JSON */
typedef struct {
    u_char                       *id;
    ngx_str_t                    *json;
} ngx_http_feed_stream_entry_t;


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
static ngx_int_t ngx_http_feed_stream_entry_cmp(const void *one,
    const void *two);
static void ngx_http_feed_stream_user_resume(ngx_http_feed_stream_user_t *su,
    ngx_http_feed_stream_t *s);
static ngx_uint_t ngx_http_feed_stream_changed(ngx_str_t *version,
    char *since);
static void ngx_http_feed_stream_user_keep(ngx_http_feed_stream_user_t *su);
static void ngx_http_feed_stream_user_done(ngx_http_feed_stream_user_t *su);


/*
 * The round trip: a since_id read per stream that resumes, then the
 * window, tracked when the watch of the user's node can (and the list was
 * kept alive lately), all pipelined on the user's node's connection.
 */

void
ngx_http_feed_stream_user_read(ngx_http_feed_stream_user_t *su)
{
    ngx_int_t                   rc;
    ngx_str_t                   known;
    ngx_uint_t                  tracked, keep;
    ngx_queue_t                *q;
    ngx_http_feed_page_t        page;
    ngx_http_feed_stream_t     *s;
    ngx_http_feed_main_conf_t  *fmcf = ngx_http_feed_stream_users->fmcf;

    if (su->reading) {
        su->again = 1;
        return;
    }

    su->pool = ngx_create_pool(NGX_HTTP_FEED_STREAM_POOL, ngx_cycle->log);

    su->page = su->pool ? ngx_pcalloc(su->pool,
                                      sizeof(ngx_http_feed_cached_t))
                        : NULL;

    if (su->page == NULL) {
        if (su->pool) {
            ngx_destroy_pool(su->pool);
            su->pool = NULL;
        }

        su->failed = 1;
        su->failed_at = ngx_current_msec;
        return;
    }

    su->reading = 1;
    su->failed = 0;
    su->window_ok = 0;
    su->pending = 0;

    /*
     * what it was told is in the list before this read: the read has it;
     * what it is told while the read is out is sent after it
     */

    su->stale = 0;
    ngx_http_feed_stream_user_drop_told(su);

    ngx_http_feed_stream_users->reads++;
    ngx_http_feed_stat(stream_reads, 1);

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

    tracked = fmcf->cache_tracking
              && ngx_http_feed_timeline_watch_track(&su->user, &su->next);

    /*
     * the list is kept alive now and then, as the fanout delivers only to
     * lists that are; its EXPIRE changes no key the reader tracks
     */

    keep = !tracked
           || ngx_current_msec - su->kept_alive
              >= ngx_http_feed_stream_keep_alive(fmcf);

    if (!tracked) {
        su->next.stamp = 0;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: reading \"%s\", tracked %ui",
                   su->user.data, tracked);

    /*
     * the JSON of the entries it has is not read again: a change costs
     * Redis the posts it brings, not the window's
     */

    known.data = su->ids;
    known.len = (su->ready && !su->broken) ? su->nids * 24 : 0;

    rc = ngx_http_feed_timeline_cache_fresh(fmcf, &page, tracked, keep,
             &known, ngx_http_feed_stream_user_window_done, su);

    if (rc == NGX_OK) {
        su->pending++;

        if (keep) {
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
             &page, 0, 1, NULL, ngx_http_feed_stream_user_backlog_done, b);
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

    if (ngx_http_feed_timeline_cache_parse(su->pool, reply, su->page)
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
    ngx_http_feed_cached_t  *p = su->page;

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
         * are told to read it; the reader asks again after a second, then
         * twice as long each time up to half a minute (a client that
         * never reads must not cost a read a second), the list's rebuild
         * waking it at once.  Told again at each of those reads while the
         * list is missing: a client whose read could not make it (MongoDB
         * down, a failover under way) reads again, where its stream would
         * have stayed silent until another read made the list.
         */

        if (!su->broken) {
            su->backoff = 0;
        }

        ngx_http_feed_stream_user_resets(su, "gone");

        su->broken = 1;
        su->failed_at = ngx_current_msec;

        /*
         * only a read Redis tracked hears the list made again: an
         * untracked one (the watch of a node just promoted, tracking
         * off) asks again each second
         */

        su->backoff = (su->backoff && su->next.stamp)
                      ? ngx_min(2 * su->backoff, NGX_HTTP_FEED_STREAM_BACKOFF)
                      : NGX_HTTP_FEED_STREAM_RETRY;

        /* long polls read the timeline themselves, and rebuild it */
        ngx_http_feed_stream_user_wake(su, NULL);

        ngx_http_feed_stream_user_done(su);
        return;
    }

    su->broken = 0;

    /* a user with filters is read at each delivery told: they apply */
    su->filtered = (p->filters.n > 0);

    ngx_http_feed_stream_user_diff(su);
    ngx_http_feed_stream_user_keep(su);

    if (p->nitems) {
        ngx_http_feed_stream_user_wake(su, p->ids.data);
    }

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
    ngx_uint_t               i, j, n, ngone, ncome, gap,
                             come[NGX_HTTP_FEED_STREAM_WINDOW];
    ngx_queue_t             *q, *next;
    ngx_http_feed_stream_t  *s;
    ngx_http_feed_cached_t  *p = su->page;

    ids = p->ids.data;
    n = ngx_min(p->nitems, NGX_HTTP_FEED_STREAM_WINDOW);
    floor = n ? ids + (n - 1) * 24 : NULL;

    ncome = 0;
    ngone = 0;

    for (i = 0; su->ready && i < n; i++) {
        id = ids + i * 24;

        if (ngx_http_feed_stream_has(su->ids, su->nids, id)
            || (su->full && ngx_memcmp(id, su->floor, 24) <= 0)
            || ngx_http_feed_track_is_deleted(id)
            || p->items[i].len == 0)
        {
            /* (no JSON: one it had, deleted while the read was out) */
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

    /*
     * Every entry of the window came since the last read, and the list
     * goes on below it: more may have come than the window shows (a
     * burst past what a reader is told, NGX_HTTP_FEED_STREAM_TOLD), and
     * those would be lost without a word; the streams catch up instead
     */

    gap = su->ready && n && ncome == n && p->more && su->nids
          && ngx_memcmp(su->ids, floor, 24) < 0;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: \"%s\" read, %ui come, %ui gone, gap %ui",
                   su->user.data, ncome, ngone, gap);

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);

        if (!s->live) {
            if (s->since[0] && s->backlog == NULL) {
                /* joined during this read: its backlog at the next */
                su->again = 1;
                continue;
            }

            ngx_http_feed_stream_user_resume(su, s);
            ngx_http_feed_stream_opened(s);
            continue;
        }

        if (gap) {
            if (s->since[0] == '\0') {
                ngx_http_feed_stream_reset(s, "gap");
                continue;
            }

            /*
             * it catches up as a stream that resumes at what it was sent
             * last: a since_id read at the next round, then live again
             */

            ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                           "feed stream: \"%s\" catches up", su->user.data);

            s->live = 0;
            su->again = 1;
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
    ngx_uint_t                       i, n, reconnect;
    ngx_http_feed_cached_t          *c, *p = su->page;
    ngx_http_feed_stream_entry_t     entries[NGX_HTTP_FEED_STREAM_BACKLOG
                                             + NGX_HTTP_FEED_STREAM_WINDOW];
    ngx_http_feed_stream_backlog_t  *b;

    b = s->backlog;
    s->backlog = NULL;
    s->live = 1;

    /* a stream catching up later was here all along (the gap of a diff) */

    reconnect = s->reconnect;
    s->reconnect = 0;

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

    if (reconnect
        && (ngx_http_feed_stream_changed(&c->version, s->since)
            || (p->version.len
                && ngx_http_feed_stream_changed(&p->version, s->since))))
    {
        ngx_http_feed_stream_reset(s, "changed");
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

        /* (one the reader had, its JSON not read: in the backlog too) */

        if (p->items[i].len
            && !ngx_http_feed_stream_has(c->ids.data, c->nitems, id))
        {
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


/*
 * A client back with its Last-Event-ID (an EventSource reconnecting): the
 * list changed otherwise than by a newer post (a delete, a hidden post, a
 * filter, a rebuild) after the post of its point was made, or maybe did
 * (within a clock's skew of it), and whether the client was there to be
 * sent the change cannot be told: it reads again.  A change before the
 * post was made came before the client had it.  A post delivered after a
 * newer one keeps the time of the change before it (scripts/lib/
 * changed.lua): newer than the point, it is sent with the backlog.  (A
 * since_id is what a read gave the client, as of that read: it resumes
 * as a since_id read does, or a client that muted someone after its
 * newest post would be told to read again at every stream it opens.)
 * The post's time is its id's: seconds, then milliseconds in the next 10
 * bits of the module's ids (ngx_http_feed_post_oid); an id made elsewhere
 * has other bits there, taken for milliseconds only below 1000.
 */

static ngx_uint_t
ngx_http_feed_stream_changed(ngx_str_t *version, char *since)
{
    int64_t    ms, at;
    ngx_int_t  sec, sub;

    if (ngx_http_feed_timeline_cache_version_time(version, &ms) != NGX_OK) {
        /*
         * a version of the form before times, last changed before this
         * version of the module ran: a reset at each reconnect until it
         * changes (every client at once after a reload) would cost more
         * than the changes made before the upgrade it might miss
         */
        return 0;
    }

    sec = ngx_hextoi((u_char *) since, 8);
    sub = ngx_hextoi((u_char *) since + 8, 3);

    if (sec == NGX_ERROR || sub == NGX_ERROR) {
        return 1;
    }

    /* the 12 bits after the seconds: 10 of milliseconds, 2 of sequence */

    sub >>= 2;

    at = (int64_t) sec * 1000 + (sub < 1000 ? sub : 0);

    return ms + NGX_HTTP_FEED_STREAM_SKEW >= at;
}


/*
 * The read is the reader's last: its ids, and how the worker vouches.  A
 * post deleted while the read was out is not kept: its streams were told
 * at the delete, and the next read, which has it no more, would tell them
 * again.
 */

static void
ngx_http_feed_stream_user_keep(ngx_http_feed_stream_user_t *su)
{
    u_char                  *lists, *id;
    ngx_uint_t               i, n, last;
    ngx_http_feed_cached_t  *p = su->page;

    n = 0;
    last = ngx_min(p->nitems, NGX_HTTP_FEED_STREAM_WINDOW);

    for (i = 0; i < last; i++) {
        id = p->ids.data + i * 24;

        if (ngx_http_feed_track_is_deleted(id)) {
            ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                           "feed stream: \"%s\" read %*s, deleted since",
                           su->user.data, (size_t) 24, id);
            continue;
        }

        ngx_memcpy(su->ids + n++ * 24, id, 24);
    }

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

    su->page = NULL;

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

        /* no client waits for Redis to see its stream open */

        for (q = ngx_queue_head(&su->streams);
             q != ngx_queue_sentinel(&su->streams);
             q = ngx_queue_next(q))
        {
            ngx_http_feed_stream_opened(
                ngx_queue_data(q, ngx_http_feed_stream_t, queue));
        }

        return;
    }

    if (su->again) {
        su->again = 0;
        ngx_http_feed_stream_user_want(su);

    } else if (su->ntold) {
        ngx_http_feed_stream_user_settle(su);
    }
}


void
ngx_http_feed_stream_user_free(ngx_http_feed_stream_user_t *su)
{
    if (su->pool) {
        ngx_destroy_pool(su->pool);
    }

    ngx_http_feed_stream_user_drop_told(su);
    ngx_free(su->lists);
    ngx_http_feed_slots_free(su);
}


/* whether id is one of n ids (24 hex digits each, one after another) */

ngx_uint_t
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
