
/*
 * ngx_feed_module: the worker's watches of the pull authors' lists
 * (ngx_http_feed_timeline_watch.c), one per copy of the lists: the single
 * Redis's, or one per master of a Redis Cluster, each subscribed on its
 * master, where that master's copies publish their changes.  A read is
 * vouched for, and learns from, the watch of its user's node.
 *
 * On a cluster the watches follow the map: at each heartbeat, a master
 * gets a watch, a node that is no master loses it, and a master whose
 * copies changed name (its last slot moved), or a node number now given
 * to another address (a node forgotten, another made), gets a new one,
 * which knows nothing yet.
 */


#include "ngx_http_feed_timeline_watch.h"


typedef struct {
    ngx_cycle_t                  *cycle;
    ngx_http_feed_main_conf_t    *fmcf;

    ngx_event_t                   beat;
    ngx_connection_t              dummy;

    /* [0]: a single Redis's; [n]: a cluster's node number n */
    ngx_http_feed_watch_t        *watches[NGX_HTTP_FEED_REDIS_NODES_MAX + 1];
} ngx_http_feed_watch_set_t;


static void ngx_http_feed_timeline_watch_beat(ngx_event_t *ev);
static void ngx_http_feed_timeline_watch_sync(ngx_http_feed_watch_set_t *ws);
static ngx_http_feed_watch_t *ngx_http_feed_timeline_watch_of(
    ngx_http_feed_user_t *user, ngx_uint_t *n);
static ngx_http_feed_watch_t *ngx_http_feed_timeline_watch_of_mark(
    ngx_http_feed_user_t *user, ngx_http_feed_watch_mark_t *m);


static ngx_http_feed_watch_set_t  *ngx_http_feed_watch_set;


ngx_int_t
ngx_http_feed_timeline_watch_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf)
{
    ngx_str_t                   none = ngx_string("");
    ngx_http_feed_watch_set_t  *ws;

    /*
     * Copies of first pages are vouched for by the watches: of the pull
     * authors' lists they were merged from, and of the user's own keys
     * when Redis tracks them (ngx_http_feed_timeline_track.c); so are the
     * reads of live streams
     */

    if (fmcf->redis_client == NULL
        || (fmcf->cache_local == 0 && !fmcf->live))
    {
        return NGX_OK;
    }

    if (fmcf->cache_tracking && ngx_http_feed_track_init(cycle) != NGX_OK) {
        return NGX_ERROR;
    }

    ws = ngx_pcalloc(cycle->pool, sizeof(ngx_http_feed_watch_set_t));
    if (ws == NULL) {
        return NGX_ERROR;
    }

    ws->cycle = cycle;
    ws->fmcf = fmcf;

    ws->dummy.fd = (ngx_socket_t) -1;
    ws->beat.handler = ngx_http_feed_timeline_watch_beat;
    ws->beat.data = &ws->dummy;
    ws->beat.log = cycle->log;
    ws->beat.cancelable = 1;

    /* a cluster's watches come with its map, at the heartbeats */

    if (!fmcf->redis.cluster) {
        ws->watches[0] = ngx_http_feed_watch_create(cycle, fmcf,
                                                    &fmcf->redis, &none);
        if (ws->watches[0] == NULL) {
            return NGX_ERROR;
        }
    }

    ngx_http_feed_watch_set = ws;

    ngx_add_timer(&ws->beat, NGX_HTTP_FEED_WATCH_BEAT);

    return NGX_OK;
}


void
ngx_http_feed_timeline_watch_exit(void)
{
    ngx_uint_t                  n;
    ngx_http_feed_watch_set_t  *ws = ngx_http_feed_watch_set;

    if (ws == NULL) {
        return;
    }

    if (ws->beat.timer_set) {
        ngx_del_timer(&ws->beat);
    }

    for (n = 0; n <= NGX_HTTP_FEED_REDIS_NODES_MAX; n++) {
        if (ws->watches[n]) {
            ngx_http_feed_watch_destroy(ws->watches[n]);
            ws->watches[n] = NULL;
        }
    }

    ngx_http_feed_watch_set = NULL;

    ngx_http_feed_track_exit();
}


static void
ngx_http_feed_timeline_watch_beat(ngx_event_t *ev)
{
    ngx_uint_t                  n;
    ngx_http_feed_watch_set_t  *ws = ngx_http_feed_watch_set;

    if (ws == NULL || ngx_exiting) {
        return;
    }

    if (ws->fmcf->redis.cluster) {
        ngx_http_feed_timeline_watch_sync(ws);
    }

    for (n = 0; n <= NGX_HTTP_FEED_REDIS_NODES_MAX; n++) {
        if (ws->watches[n]) {
            ngx_http_feed_watch_beat(ws->watches[n]);
        }
    }

    ngx_add_timer(&ws->beat, NGX_HTTP_FEED_WATCH_BEAT);
}


/*
 * A watch for each master that has slots, under its copies' name, on its
 * address
 */

static void
ngx_http_feed_timeline_watch_sync(ngx_http_feed_watch_set_t *ws)
{
    u_char                       buf[NGX_HTTP_FEED_REDIS_TAG_COPY_MAX];
    ngx_str_t                    copy, *had, *addr;
    ngx_uint_t                   n;
    ngx_http_feed_watch_t       *w;
    ngx_http_feed_redis_conf_t  *conf;

    copy.data = buf;

    for (n = 1; n <= NGX_HTTP_FEED_REDIS_NODES_MAX; n++) {
        conf = ngx_http_feed_redis_master(ws->fmcf->redis_client, n, buf,
                                          &copy.len);
        w = ws->watches[n];

        if (w) {
            had = ngx_http_feed_watch_copy(w);
            addr = ngx_http_feed_watch_addr(w);

            if (conf && had->len == copy.len
                && ngx_strncmp(had->data, copy.data, copy.len) == 0
                && addr->len == conf->addr_text.len
                && ngx_strncmp(addr->data, conf->addr_text.data, addr->len)
                   == 0)
            {
                continue;
            }

            ngx_log_debug2(NGX_LOG_DEBUG_CORE, ws->cycle->log, 0,
                           "feed pull watch of node %ui%V ends", n, had);

            ngx_http_feed_watch_destroy(w);
            ws->watches[n] = NULL;
        }

        if (conf == NULL) {
            continue;
        }

        ws->watches[n] = ngx_http_feed_watch_create(ws->cycle, ws->fmcf, conf,
                                                    &copy);
        if (ws->watches[n] == NULL) {
            ngx_log_error(NGX_LOG_ERR, ws->cycle->log, 0,
                          "feed pull watch of %V cannot be made",
                          &conf->addr_text);
        }
    }
}


/* the watch of a user's node, and its number */

static ngx_http_feed_watch_t *
ngx_http_feed_timeline_watch_of(ngx_http_feed_user_t *user, ngx_uint_t *n)
{
    u_char                       buf[NGX_HTTP_FEED_REDIS_TAG_COPY_MAX];
    size_t                       len;
    ngx_str_t                   *copy, *addr;
    ngx_http_feed_watch_t       *w;
    ngx_http_feed_redis_conf_t  *conf;
    ngx_http_feed_watch_set_t   *ws = ngx_http_feed_watch_set;

    *n = 0;

    if (ws == NULL) {
        return NULL;
    }

    if (!ws->fmcf->redis.cluster) {
        return ws->watches[0];
    }

    *n = ngx_http_feed_timeline_cache_node(ws->fmcf, user);
    w = ws->watches[*n];

    /*
     * Not a watch of other copies than the read's: the node's copies
     * changed name, or its number went to another node, since the last
     * heartbeat, and the new ones are not watched yet
     */

    if (w == NULL) {
        return NULL;
    }

    conf = ngx_http_feed_redis_master(ws->fmcf->redis_client, *n, buf, &len);
    if (conf == NULL) {
        return NULL;
    }

    copy = ngx_http_feed_watch_copy(w);
    addr = ngx_http_feed_watch_addr(w);

    if (copy->len != len || ngx_strncmp(copy->data, buf, len) != 0
        || addr->len != conf->addr_text.len
        || ngx_strncmp(addr->data, conf->addr_text.data, addr->len) != 0)
    {
        return NULL;
    }

    return w;
}


/*
 * Whether the worker can vouch for a copy of a user's page merged from
 * these lists ("author version\n" each)
 */

ngx_uint_t
ngx_http_feed_timeline_watch_vouch(ngx_http_feed_user_t *user,
    ngx_str_t *lists)
{
    ngx_uint_t              n;
    ngx_http_feed_watch_t  *w;

    w = ngx_http_feed_timeline_watch_of(user, &n);

    return w ? ngx_http_feed_watch_vouch(w, lists) : 0;
}


/* where the watch of a user's node is when a read is sent */

void
ngx_http_feed_timeline_watch_mark(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m)
{
    ngx_http_feed_watch_t  *w;

    w = ngx_http_feed_timeline_watch_of(user, &m->node);

    if (w == NULL) {
        m->era = 0;
        m->skipped = 0;
        return;
    }

    ngx_http_feed_watch_mark(w, m);
}


/*
 * A first page's read that Redis will track the keys of: its stamp in
 * the mark (made by mark() just before), or 0 when the watch of the user's
 * node does not track now
 */

ngx_uint_t
ngx_http_feed_timeline_watch_track(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m)
{
    ngx_uint_t              n;
    ngx_http_feed_watch_t  *w;

    m->stamp = 0;

    w = ngx_http_feed_timeline_watch_of(user, &n);

    if (w == NULL || n != m->node) {
        return 0;
    }

    return ngx_http_feed_watch_track(w, m);
}


/*
 * Whether a copy found current by the read of this mark still is, by
 * the word of the watch of the user's node: then it is answered without
 * asking Redis
 */

ngx_uint_t
ngx_http_feed_timeline_watch_tracks(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m, ngx_uint_t fresh)
{
    ngx_http_feed_watch_t  *w;

    w = ngx_http_feed_timeline_watch_of_mark(user, m);

    return w ? ngx_http_feed_watch_tracks(w, user, m, fresh) : 0;
}


/* the watch of a tracked read's mark, if it still watches the user */

static ngx_http_feed_watch_t *
ngx_http_feed_timeline_watch_of_mark(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m)
{
    ngx_uint_t              n;
    ngx_http_feed_watch_t  *w;

    if (m->stamp == 0) {
        return NULL;
    }

    w = ngx_http_feed_timeline_watch_of(user, &n);

    return (w && n == m->node) ? w : NULL;
}


/*
 * The worker streams timelines (on), or stopped: while it does, each
 * watch keeps its node's live mark set, from now on; once it stopped,
 * the mark may lapse, and the worker forgets its era
 */

void
ngx_http_feed_timeline_watch_streaming(ngx_uint_t on)
{
    ngx_uint_t                  n;
    ngx_http_feed_watch_set_t  *ws = ngx_http_feed_watch_set;

    ngx_http_feed_timeline_live_streaming(on);

    if (ws == NULL) {
        return;
    }

    for (n = 0; n <= NGX_HTTP_FEED_REDIS_NODES_MAX; n++) {
        if (ws->watches[n]) {
            ngx_http_feed_watch_live(ws->watches[n], on);
        }
    }
}


/*
 * Whether a stream's read of this mark misses nothing its node told since,
 * deliveries included (ngx_http_feed_watch_live_vouch)
 */

ngx_uint_t
ngx_http_feed_timeline_watch_live(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m)
{
    ngx_http_feed_watch_t  *w;

    w = ngx_http_feed_timeline_watch_of_mark(user, m);

    return w ? ngx_http_feed_watch_live_vouch(w, m) : 0;
}


/* the versions a read's reply saw, learned by its node's watch */

void
ngx_http_feed_timeline_watch_learn(ngx_str_t *lists,
    ngx_http_feed_watch_mark_t *m)
{
    ngx_http_feed_watch_t      *w;
    ngx_http_feed_watch_set_t  *ws = ngx_http_feed_watch_set;

    if (ws == NULL || m->era == 0
        || m->node > NGX_HTTP_FEED_REDIS_NODES_MAX)
    {
        return;
    }

    w = ws->watches[m->node];

    if (w) {
        ngx_http_feed_watch_learn(w, lists, m);
    }
}


/* for feed_status: the watches together */

ngx_int_t
ngx_http_feed_timeline_watch_status(bson_t *doc)
{
    bson_t                         sub;
    ngx_uint_t                     n;
    ngx_http_feed_watch_set_t     *ws = ngx_http_feed_watch_set;
    ngx_http_feed_watch_counts_t   c;

    if (ws == NULL) {
        return NGX_OK;
    }

    ngx_memzero(&c, sizeof(ngx_http_feed_watch_counts_t));
    c.heard_ms_ago = -1;

    for (n = 0; n <= NGX_HTTP_FEED_REDIS_NODES_MAX; n++) {
        if (ws->watches[n]) {
            ngx_http_feed_watch_count(ws->watches[n], &c);
        }
    }

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "watch", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_BOOL(&sub, "subscribed",
                     c.watches > 0 && c.subscribed == c.watches);
    BSON_APPEND_INT64(&sub, "heard_ms_ago", (int64_t) c.heard_ms_ago);
    BSON_APPEND_INT64(&sub, "authors", (int64_t) c.authors);
    BSON_APPEND_INT64(&sub, "messages", (int64_t) c.messages);
    BSON_APPEND_INT64(&sub, "passed_over", (int64_t) c.passed_over);
    BSON_APPEND_BOOL(&sub, "tracking",
                     c.watches > 0 && c.tracking == c.watches);
    BSON_APPEND_INT64(&sub, "invalidations", (int64_t) c.invalidations);
    BSON_APPEND_INT64(&sub, "deletes", (int64_t) c.deleted);
    BSON_APPEND_INT64(&sub, "deliveries", (int64_t) c.deliveries);

    if (ws->fmcf->redis.cluster) {
        BSON_APPEND_INT64(&sub, "watches", (int64_t) c.watches);
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}
