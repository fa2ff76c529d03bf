
/*
 * ngx_feed_module: deliveries told to the worker's readers of streamed
 * timelines.
 *
 * While a worker streams, the nodes' live marks are set, and each batch
 * the fanout delivers is published with the users it reached and the
 * post (timeline_deliver.lua, ngx_http_feed_timeline_live.c).  A reader
 * of one of those users keeps the post, and sends it to its streams
 * NGX_HTTP_FEED_STREAM_SETTLE ms later with the others told meanwhile,
 * oldest first, as a read would have found them: a delivery costs Redis
 * no read per streaming follower, and reaches them as soon as it is made.
 *
 * A reader reads instead when only a read can tell: its user has filters
 * (a post told may be of an author they mute), it has not read yet, its
 * last read failed or found no list, more were told than it keeps, or
 * something else changed (ngx_http_feed_stream_users.c).  What it was
 * told before a read is in that read.
 */


#include "ngx_http_feed_stream_users.h"


static ngx_int_t ngx_http_feed_stream_told_keep(
    ngx_http_feed_stream_user_t *su, ngx_http_feed_stream_told_t *t);
static int ngx_libc_cdecl ngx_http_feed_stream_told_cmp(const void *one,
    const void *two);
static void ngx_http_feed_stream_told_release(ngx_http_feed_stream_told_t *t);


/* a batch told: "<user> <user> ...\n<id><JSON>" */

void
ngx_http_feed_stream_told(u_char *msg, size_t len)
{
    u_char                       *p, *last, *nl, *end;
    ngx_http_feed_user_t          u;
    ngx_http_feed_stream_told_t  *t;
    ngx_http_feed_stream_user_t  *su;

    if (ngx_http_feed_stream_users == NULL
        || ngx_http_feed_stream_users->users == 0)
    {
        return;
    }

    last = msg + len;

    nl = ngx_strlchr(msg, last, '\n');

    if (nl == NULL || last - (nl + 1) < 24) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "feed stream: a delivery told malformed, ignored");
        return;
    }

    t = NULL;

    for (p = msg; p < nl; p = end + 1) {
        end = ngx_strlchr(p, nl, ' ');

        if (end == NULL) {
            end = nl;
        }

        if (end == p || (size_t) (end - p) > NGX_HTTP_FEED_USER_MAX) {
            continue;
        }

        ngx_memcpy(u.data, p, end - p);
        u.data[end - p] = '\0';
        u.len = end - p;

        su = ngx_http_feed_stream_user_find(&u);
        if (su == NULL) {
            continue;
        }

        if (t == NULL) {
            t = ngx_alloc(sizeof(ngx_http_feed_stream_told_t)
                          + (last - (nl + 1)), ngx_cycle->log);
            if (t == NULL) {
                /* read, as before deliveries were told */
                ngx_http_feed_stream_user_want(su);
                continue;
            }

            t->refs = 0;
            t->len = last - (nl + 1);
            ngx_memcpy(t->data, nl + 1, t->len);
        }

        if (ngx_http_feed_stream_told_keep(su, t) != NGX_OK) {
            ngx_http_feed_stream_user_want(su);
        }
    }

    if (t && t->refs == 0) {
        ngx_free(t);
    }
}


/* the reader keeps what it was told, or reads */

static ngx_int_t
ngx_http_feed_stream_told_keep(ngx_http_feed_stream_user_t *su,
    ngx_http_feed_stream_told_t *t)
{
    if (su->filtered || su->broken || su->failed
        || (!su->ready && !su->reading) || su->stale)
    {
        return NGX_DECLINED;
    }

    if (su->told == NULL) {
        su->told = ngx_alloc(NGX_HTTP_FEED_STREAM_TOLD
                             * sizeof(ngx_http_feed_stream_told_t *),
                             ngx_cycle->log);
        if (su->told == NULL) {
            return NGX_ERROR;
        }
    }

    if (su->ntold == NGX_HTTP_FEED_STREAM_TOLD) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                       "feed stream: \"%s\" told too much, reading",
                       su->user.data);
        return NGX_DECLINED;
    }

    su->told[su->ntold++] = t;
    t->refs++;

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: \"%s\" told %*s", su->user.data,
                   (size_t) 24, t->data);

    ngx_http_feed_stream_user_settle(su);

    return NGX_OK;
}


/*
 * What the reader was told goes into its window, newest first, as a read
 * would find it: an entry it has, one deleted lately, and one older than
 * its window's oldest when the window is full are not news.  The rest is
 * sent to its live streams, oldest first.
 */

void
ngx_http_feed_stream_user_send_told(ngx_http_feed_stream_user_t *su)
{
    u_char                       *id, newest[24],
                                  ids[NGX_HTTP_FEED_STREAM_WINDOW * 24];
    ngx_str_t                     json;
    ngx_uint_t                    i, j, k, n, ncome;
    ngx_queue_t                  *q, *next;
    ngx_http_feed_stream_t       *s;
    ngx_http_feed_stream_told_t  *come[NGX_HTTP_FEED_STREAM_TOLD];

    ngx_qsort(su->told, su->ntold, sizeof(ngx_http_feed_stream_told_t *),
              ngx_http_feed_stream_told_cmp);

    /* newest first: the news, then the window merged with them */

    ncome = 0;

    for (i = 0; i < su->ntold; i++) {
        id = su->told[i]->data;

        if (ngx_http_feed_stream_has(su->ids, su->nids, id)
            || (su->full && ngx_memcmp(id, su->floor, 24) <= 0)
            || ngx_http_feed_track_is_deleted(id)
            || (ncome && ngx_memcmp(id, come[ncome - 1]->data, 24) == 0))
        {
            continue;
        }

        come[ncome++] = su->told[i];
    }

    i = 0;
    j = 0;
    n = 0;

    while (n < NGX_HTTP_FEED_STREAM_WINDOW && (i < ncome || j < su->nids)) {
        if (j == su->nids
            || (i < ncome
                && ngx_memcmp(come[i]->data, su->ids + j * 24, 24) > 0))
        {
            ngx_memcpy(ids + n++ * 24, come[i++]->data, 24);

        } else {
            ngx_memcpy(ids + n++ * 24, su->ids + j++ * 24, 24);
        }
    }

    /* those merged past the window's end did not come into view */

    k = i;

    if (i < ncome || j < su->nids) {
        su->full = 1;
    }

    ngx_memcpy(su->ids, ids, n * 24);
    su->nids = n;

    if (n) {
        ngx_memcpy(su->floor, su->ids + (n - 1) * 24, 24);
    }

    ngx_log_debug3(NGX_LOG_DEBUG_HTTP, ngx_cycle->log, 0,
                   "feed stream: \"%s\" told, %ui of %ui come",
                   su->user.data, k, su->ntold);

    for (q = ngx_queue_head(&su->streams);
         q != ngx_queue_sentinel(&su->streams);
         q = next)
    {
        next = ngx_queue_next(q);
        s = ngx_queue_data(q, ngx_http_feed_stream_t, queue);

        /* (one not live yet is sent its backlog by the read it waits for) */

        for (i = k; i > 0 && s->live && !s->ended; i--) {
            json.data = come[i - 1]->data + 24;
            json.len = come[i - 1]->len - 24;
            ngx_http_feed_stream_update(s, come[i - 1]->data, &json);
        }
    }

    ngx_http_feed_stat(stream_told, k);

    if (k) {
        ngx_memcpy(newest, come[0]->data, 24);
    }

    ngx_http_feed_stream_user_drop_told(su);

    /* last: a long poll woken may take the reader with it */

    if (k) {
        ngx_http_feed_stream_user_wake(su, newest);
    }
}


/* what it was told goes (a read has it, or it was sent) */

void
ngx_http_feed_stream_user_drop_told(ngx_http_feed_stream_user_t *su)
{
    ngx_uint_t  i;

    for (i = 0; i < su->ntold; i++) {
        ngx_http_feed_stream_told_release(su->told[i]);
    }

    su->ntold = 0;

    ngx_free(su->told);
    su->told = NULL;
}


static void
ngx_http_feed_stream_told_release(ngx_http_feed_stream_told_t *t)
{
    if (--t->refs == 0) {
        ngx_free(t);
    }
}


/* newest first */

static int ngx_libc_cdecl
ngx_http_feed_stream_told_cmp(const void *one, const void *two)
{
    ngx_http_feed_stream_told_t  *a = *(ngx_http_feed_stream_told_t **) one,
                                 *b = *(ngx_http_feed_stream_told_t **) two;

    return ngx_memcmp(b->data, a->data, 24);
}
