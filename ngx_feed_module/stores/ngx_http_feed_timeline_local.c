
/*
 * ngx_feed_module: each worker's copies of the first pages it answered.
 *
 * A kept first page ("version\nnext\nJSON", see the timeline cache) is
 * also kept here, in the worker's memory, by user and limit.  A read that
 * has a copy asks Redis only whether that version is still the current
 * one: the page's bytes then do not cross the network again.  A version
 * names one page stored once (its list's nonce, head and a token of the
 * store), so a copy is never answered for a page that differs from it.
 *
 * Least recently used copies go first when feed_cache_local is full.
 */


#include "ngx_http_feed_timeline_cache.h"


/* one copy of a first page, found in the tree by "<limit>:<user>" */
typedef struct {
    ngx_str_node_t                sn;       /* the key and its hash */
    ngx_queue_t                   queue;    /* in the LRU list */
    size_t                        size;     /* bytes allocated for it */
    ngx_str_t                     page;     /* "version\nnext\nJSON" */
    ngx_str_t                     lists;    /* the pull authors' lists it
                                               was merged from, with their
                                               versions, "author version\n"
                                               each (see the watch) */
    ngx_http_feed_local_track_t   track;    /* when it was found current,
                                               for the answers made of it
                                               without asking Redis */
} ngx_http_feed_timeline_local_t;


#define NGX_HTTP_FEED_LOCAL_KEY_LEN  (NGX_INT_T_LEN + 1                       \
                                      + NGX_HTTP_FEED_USER_MAX)


/* the worker's copies */
typedef struct {
    ngx_rbtree_t                  rbtree;
    ngx_rbtree_node_t             sentinel;
    ngx_queue_t                   lru;      /* most recently used first */
    size_t                        size;     /* bytes the copies take */
    size_t                        max;      /* feed_cache_local, 0: off */
    ngx_uint_t                    pages;    /* how many copies there are */
} ngx_http_feed_timeline_locals_t;


static ngx_http_feed_timeline_local_t *ngx_http_feed_timeline_local_find(
    ngx_str_t *key, uint32_t hash);
static void ngx_http_feed_timeline_local_free(
    ngx_http_feed_timeline_local_t *lp);
static uint32_t ngx_http_feed_timeline_local_key(u_char *buf,
    ngx_http_feed_user_t *user, ngx_uint_t limit, ngx_str_t *key);


static ngx_http_feed_timeline_locals_t  ngx_http_feed_timeline_locals;


void
ngx_http_feed_timeline_local_init(size_t max)
{
    ngx_http_feed_timeline_locals_t  *ls = &ngx_http_feed_timeline_locals;

    ngx_rbtree_init(&ls->rbtree, &ls->sentinel, ngx_str_rbtree_insert_value);
    ngx_queue_init(&ls->lru);
    ls->size = 0;
    ls->pages = 0;
    ls->max = max;
}


void
ngx_http_feed_timeline_local_exit(void)
{
    ngx_queue_t                      *q;
    ngx_http_feed_timeline_locals_t  *ls = &ngx_http_feed_timeline_locals;

    if (ls->max == 0) {
        return;
    }

    while (!ngx_queue_empty(&ls->lru)) {
        q = ngx_queue_last(&ls->lru);
        ngx_http_feed_timeline_local_free(
            ngx_queue_data(q, ngx_http_feed_timeline_local_t, queue));
    }
}


/*
 * The copy of a user's first page of this limit, "version\nnext\nJSON",
 * or an empty string; lists (unless NULL): the pull authors' lists it was
 * merged from; track (unless NULL): when it was found current.  They stay
 * valid until the next call of put: a request that needs them after
 * waiting copies them.
 */

ngx_str_t
ngx_http_feed_timeline_local_get(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *lists, ngx_http_feed_local_track_t *track)
{
    u_char                            buf[NGX_HTTP_FEED_LOCAL_KEY_LEN];
    uint32_t                          hash;
    ngx_str_t                         key, none = ngx_null_string;
    ngx_http_feed_timeline_local_t   *lp;
    ngx_http_feed_timeline_locals_t  *ls = &ngx_http_feed_timeline_locals;

    if (lists) {
        ngx_str_null(lists);
    }

    if (ls->max == 0) {
        return none;
    }

    hash = ngx_http_feed_timeline_local_key(buf, user, limit, &key);

    lp = ngx_http_feed_timeline_local_find(&key, hash);
    if (lp == NULL) {
        return none;
    }

    ngx_queue_remove(&lp->queue);
    ngx_queue_insert_head(&ls->lru, &lp->queue);

    if (lists) {
        *lists = lp->lists;
    }

    if (track) {
        *track = lp->track;
    }

    return lp->page;
}


/*
 * A read found the copy of this version current (a copy of another
 * version is left as it is): how, for the answers made of it without
 * asking Redis.  A read that kept nothing alive leaves the time the last
 * one did.
 */

void
ngx_http_feed_timeline_local_track(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *version, ngx_http_feed_local_track_t *track)
{
    u_char                           buf[NGX_HTTP_FEED_LOCAL_KEY_LEN];
    uint32_t                         hash;
    ngx_msec_t                       refreshed;
    ngx_str_t                        key;
    ngx_http_feed_timeline_local_t  *lp;

    if (ngx_http_feed_timeline_locals.max == 0) {
        return;
    }

    hash = ngx_http_feed_timeline_local_key(buf, user, limit, &key);

    lp = ngx_http_feed_timeline_local_find(&key, hash);

    if (lp == NULL || lp->page.len <= version->len
        || lp->page.data[version->len] != '\n'
        || ngx_memcmp(lp->page.data, version->data, version->len) != 0)
    {
        return;
    }

    refreshed = track->refreshed ? track->refreshed : lp->track.refreshed;
    lp->track = *track;
    lp->track.refreshed = refreshed;
    lp->track.searched = track->mark.stamp;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed local copy of \"%V\" current, stamp %uL, %s",
                   &key, track->mark.stamp,
                   track->mark.stamp ? "tracked" : "not tracked");
}


/* a copy of the page replaces the one there was; errors just skip it */

void
ngx_http_feed_timeline_local_put(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *page, ngx_str_t *lists)
{
    u_char                            buf[NGX_HTTP_FEED_LOCAL_KEY_LEN];
    size_t                            size;
    uint32_t                          hash;
    ngx_str_t                         key;
    ngx_queue_t                      *q;
    ngx_http_feed_timeline_local_t   *lp;
    ngx_http_feed_timeline_locals_t  *ls = &ngx_http_feed_timeline_locals;

    hash = ngx_http_feed_timeline_local_key(buf, user, limit, &key);
    size = sizeof(ngx_http_feed_timeline_local_t) + key.len + page->len
           + lists->len;

    if (ls->max == 0) {
        return;
    }

    lp = ngx_http_feed_timeline_local_find(&key, hash);
    if (lp) {
        ngx_http_feed_timeline_local_free(lp);
    }

    if (size > ls->max / 8) {
        return;
    }

    while (ls->size + size > ls->max && !ngx_queue_empty(&ls->lru)) {
        q = ngx_queue_last(&ls->lru);
        ngx_http_feed_timeline_local_free(
            ngx_queue_data(q, ngx_http_feed_timeline_local_t, queue));
    }

    lp = ngx_alloc(size, ngx_cycle->log);
    if (lp == NULL) {
        return;
    }

    lp->sn.node.key = hash;
    lp->sn.str.data = (u_char *) (lp + 1);
    lp->sn.str.len = key.len;
    lp->size = size;
    lp->page.data = ngx_cpymem(lp->sn.str.data, key.data, key.len);
    lp->page.len = page->len;
    lp->lists.data = ngx_cpymem(lp->page.data, page->data, page->len);
    lp->lists.len = lists->len;
    ngx_memzero(&lp->track, sizeof(ngx_http_feed_local_track_t));

    if (lists->len) {
        ngx_memcpy(lp->lists.data, lists->data, lists->len);
    }

    ngx_rbtree_insert(&ls->rbtree, &lp->sn.node);
    ngx_queue_insert_head(&ls->lru, &lp->queue);
    ls->size += size;
    ls->pages++;
    ngx_http_feed_gauge(local_bytes, size);
    ngx_http_feed_gauge(local_pages, 1);
}


/* the copy of this version was searched for posts deleted up to stamp */

void
ngx_http_feed_timeline_local_searched(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *version, uint64_t stamp)
{
    u_char                           buf[NGX_HTTP_FEED_LOCAL_KEY_LEN];
    uint32_t                         hash;
    ngx_str_t                        key;
    ngx_http_feed_timeline_local_t  *lp;

    hash = ngx_http_feed_timeline_local_key(buf, user, limit, &key);

    lp = ngx_http_feed_timeline_local_find(&key, hash);

    if (lp == NULL || lp->page.len <= version->len
        || lp->page.data[version->len] != '\n'
        || ngx_memcmp(lp->page.data, version->data, version->len) != 0
        || lp->track.searched >= stamp)
    {
        return;
    }

    lp->track.searched = stamp;
}


/* for feed_status: what the worker holds, and how often it served it */

ngx_int_t
ngx_http_feed_timeline_local_status(bson_t *doc)
{
    bson_t                            sub;
    ngx_http_feed_timeline_locals_t  *ls = &ngx_http_feed_timeline_locals;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "local_pages", &sub)) {
        return NGX_ERROR;
    }

    BSON_APPEND_INT64(&sub, "max_bytes", (int64_t) ls->max);
    BSON_APPEND_INT64(&sub, "bytes", (int64_t) ls->size);
    BSON_APPEND_INT64(&sub, "pages", (int64_t) ls->pages);
    BSON_APPEND_INT64(&sub, "answered",
                      (int64_t) ngx_http_feed_stats.local_answers);
    BSON_APPEND_INT64(&sub, "answered_without_redis",
                      (int64_t) ngx_http_feed_stats.local_hits);

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


static ngx_http_feed_timeline_local_t *
ngx_http_feed_timeline_local_find(ngx_str_t *key, uint32_t hash)
{
    ngx_str_node_t  *sn;

    sn = ngx_str_rbtree_lookup(&ngx_http_feed_timeline_locals.rbtree, key,
                               hash);

    return (ngx_http_feed_timeline_local_t *) sn;
}


static void
ngx_http_feed_timeline_local_free(ngx_http_feed_timeline_local_t *lp)
{
    ngx_rbtree_delete(&ngx_http_feed_timeline_locals.rbtree, &lp->sn.node);
    ngx_queue_remove(&lp->queue);
    ngx_http_feed_timeline_locals.size -= lp->size;
    ngx_http_feed_timeline_locals.pages--;
    ngx_http_feed_gauge(local_bytes, -(ngx_atomic_int_t) lp->size);
    ngx_http_feed_gauge(local_pages, -1);
    ngx_free(lp);
}


static uint32_t
ngx_http_feed_timeline_local_key(u_char *buf, ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *key)
{
    key->data = buf;
    key->len = ngx_sprintf(buf, "%ui:%*s", limit, user->len, user->data)
               - buf;

    return ngx_crc32_short(key->data, key->len);
}
