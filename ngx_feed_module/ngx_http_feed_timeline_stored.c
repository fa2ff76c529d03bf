
/*
 * ngx_feed_module: a page of a home timeline from the timelines kept in
 * MongoDB (feed_timeline_store cache), in the fallback source's thread,
 * for a read that missed the Redis cache.
 *
 * A user with a document gets the entries of the page's range from it,
 * those still visible (ngx_http_feed_posts_by_ids()), merged with the
 * posts of the pull authors they follow (which fanout does not deliver),
 * down to the document's bound; past it, the rest of the page comes from
 * fanout on read, which has every post.  A user without one, asking for a
 * first page, gets fanout on read, and a document made from that answer.
 * The answer is the same as fanout on read's, however it is made.
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_timelines_store.h"
#include "ngx_http_feed_pull.h"


/* entries read beyond the page: room for posts deleted meanwhile */
#define NGX_HTTP_FEED_STORED_SLACK  16

/* a document being made for longer than this was left: made again */
#define NGX_HTTP_FEED_STORED_STALE  60000


typedef struct {
    bson_t                       *items;
    size_t                        n;
    ngx_uint_t                    limit;
    char                          last[25];  /* the last id appended */
} ngx_http_feed_stored_out_t;


static ngx_int_t ngx_http_feed_timeline_stored_make(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_stored_page(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    ngx_http_feed_timelines_page_t *tp, bson_t *items, bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_stored_pulled(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error);
static void ngx_http_feed_timeline_stored_merge(
    ngx_http_feed_stored_out_t *out, const bson_t *a, const bson_t *b,
    const char *bound);
static ngx_uint_t ngx_http_feed_timeline_stored_next(bson_iter_t *it,
    bson_t *post, const char **id);
static void ngx_http_feed_timeline_stored_append(
    ngx_http_feed_stored_out_t *out, const bson_t *post, const char *id);


ngx_int_t
ngx_http_feed_timeline_stored(mongoc_client_t *client, const char *database,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error)
{
    ngx_int_t                       rc;
    ngx_http_feed_timelines_page_t  tp;
    ngx_http_feed_timelines_conf_t  tc;

    ngx_http_feed_timelines_conf(fmcf, &tc);

    if (ngx_http_feed_timelines_read(client, database, &tc, user, range,
                                     range->limit
                                     + NGX_HTTP_FEED_STORED_SLACK,
                                     &tp, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    switch (tp.state) {

    case NGX_HTTP_FEED_TIMELINES_THERE:
        rc = ngx_http_feed_timeline_stored_page(client, database, fmcf, user,
                                                range, &tp, items, error);
        bson_free(tp.ids);
        return rc;

    case NGX_HTTP_FEED_TIMELINES_BUILDING:
        if (ngx_http_feed_now_ms() - tp.building > NGX_HTTP_FEED_STORED_STALE
            && ngx_http_feed_timelines_abandon(client, database, &tc, user,
                                               tp.building, error)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        break;

    default: /* NGX_HTTP_FEED_TIMELINES_NONE */
        if (range->max_id == NULL && range->since_id == NULL) {
            return ngx_http_feed_timeline_stored_make(client, database, fmcf,
                                                      user, range, items,
                                                      error);
        }
    }

    return ngx_http_feed_timeline_source_read(client, database, user, range,
                                              items, error);
}


/*
 * A reader without a document: fanout on read answers, and the document
 * is made from that answer.  It is there, empty, before the posts are
 * read: posts fanned out meanwhile land in it.
 */

static ngx_int_t
ngx_http_feed_timeline_stored_make(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error)
{
    int64_t                          now;
    ngx_uint_t                       mine;
    bson_error_t                     err;
    ngx_http_feed_timelines_conf_t   tc;

    ngx_http_feed_timelines_conf(fmcf, &tc);

    now = ngx_http_feed_now_ms();

    if (ngx_http_feed_timelines_begin(client, database, &tc, user, now,
                                      &mine, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (ngx_http_feed_timeline_source_read(client, database, user, range,
                                           items, error)
        != NGX_OK)
    {
        if (mine) {
            (void) ngx_http_feed_timelines_abandon(client, database, &tc,
                                                   user, now, &err);
        }

        return NGX_ERROR;
    }

    /*
     * The answer is given whatever becomes of the document: one that
     * cannot be filled is left to be made again
     */

    if (mine
        && ngx_http_feed_timelines_fill(client, database, &tc, user, items,
                                        bson_count_keys(items) < range->limit,
                                        &err)
           != NGX_OK)
    {
        (void) ngx_http_feed_timelines_abandon(client, database, &tc, user,
                                               now, &err);
    }

    return NGX_OK;
}


/*
 * A page from a document: its visible entries and the pull authors' posts
 * from the bound up, then fanout on read below it when the page is not
 * full
 */

static ngx_int_t
ngx_http_feed_timeline_stored_page(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    ngx_http_feed_timelines_page_t *tp, bson_t *items, bson_error_t *error)
{
    char                         bound[25];
    bson_t                       kept, pulled, rest;
    ngx_int_t                    rc;
    ngx_http_feed_posts_range_t  below;
    ngx_http_feed_stored_out_t   out;

    bson_init(&kept);
    bson_init(&pulled);
    bson_init(&rest);

    rc = ngx_http_feed_posts_by_ids(client, database, tp->ids, tp->n, &kept,
                                    error);

    if (rc == NGX_OK && fmcf->pull_threshold) {
        rc = ngx_http_feed_timeline_stored_pulled(client, database, user,
                                                  range, &pulled, error);
    }

    if (rc != NGX_OK) {
        goto done;
    }

    bson_oid_to_string(&tp->bound, bound);

    out.items = items;
    out.n = 0;
    out.limit = range->limit;
    out.last[0] = '\0';

    ngx_http_feed_timeline_stored_merge(&out, &kept, &pulled,
                                        tp->whole ? NULL : bound);

    /* below the bound, fanout on read has the rest */

    if (out.n < range->limit && !tp->whole
        && (range->since_id == NULL
            || bson_oid_compare(range->since_id, &tp->bound) < 0))
    {
        below = *range;
        below.limit = range->limit - out.n;

        if (range->max_id == NULL
            || bson_oid_compare(range->max_id, &tp->bound) > 0)
        {
            below.max_id = &tp->bound;
        }

        rc = ngx_http_feed_timeline_source_read(client, database, user,
                                                &below, &rest, error);
        if (rc == NGX_OK) {
            ngx_http_feed_timeline_stored_merge(&out, &rest, NULL, NULL);
        }
    }

done:

    bson_destroy(&rest);
    bson_destroy(&pulled);
    bson_destroy(&kept);

    return rc;
}


/* the posts in range of the pull authors the user follows */

static ngx_int_t
ngx_http_feed_timeline_stored_pulled(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error)
{
    char       *authors, **list, *p, *last;
    size_t      len, n;
    ngx_int_t   rc;

    if (ngx_http_feed_pull_followed(client, database, user, &authors, &len,
                                    error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    if (authors == NULL || len == 0) {
        bson_free(authors);
        return NGX_OK;
    }

    /* "a b c": split in place */

    list = bson_malloc((len / 2 + 1) * sizeof(char *));
    n = 0;
    p = authors;
    last = authors + len;

    while (p < last) {
        list[n++] = p;

        while (p < last && *p != ' ') {
            p++;
        }

        *p++ = '\0';
    }

    rc = ngx_http_feed_posts_timeline(client, database, list, n, range,
                                      items, error);

    bson_free(list);
    bson_free(authors);

    return rc;
}


/*
 * Two lists of posts, newest first, appended newest first, each id once,
 * those from bound up only (NULL: all), until the page is full
 */

static void
ngx_http_feed_timeline_stored_merge(ngx_http_feed_stored_out_t *out,
    const bson_t *a, const bson_t *b, const char *bound)
{
    int          c;
    bson_t       pa, pb;
    ngx_uint_t   ha, hb;
    const char  *ia, *ib;
    bson_iter_t  ita, itb;

    ha = bson_iter_init(&ita, a)
         && ngx_http_feed_timeline_stored_next(&ita, &pa, &ia);
    hb = b && bson_iter_init(&itb, b)
         && ngx_http_feed_timeline_stored_next(&itb, &pb, &ib);

    while ((ha || hb) && out->n < out->limit) {
        c = (ha && hb) ? ngx_strcmp(ia, ib) : (ha ? 1 : -1);

        if (c >= 0) {
            if (bound && ngx_strcmp(ia, bound) < 0) {
                ha = 0;
                continue;
            }

            ngx_http_feed_timeline_stored_append(out, &pa, ia);
            ha = ngx_http_feed_timeline_stored_next(&ita, &pa, &ia);

            if (c == 0) {
                hb = ngx_http_feed_timeline_stored_next(&itb, &pb, &ib);
            }

        } else {
            if (bound && ngx_strcmp(ib, bound) < 0) {
                hb = 0;
                continue;
            }

            ngx_http_feed_timeline_stored_append(out, &pb, ib);
            hb = ngx_http_feed_timeline_stored_next(&itb, &pb, &ib);
        }
    }
}


/* the next post of a list, and its id */

static ngx_uint_t
ngx_http_feed_timeline_stored_next(bson_iter_t *it, bson_t *post,
    const char **id)
{
    uint32_t        len;
    bson_iter_t     f;
    const uint8_t  *data;

    while (bson_iter_next(it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(it)) {
            continue;
        }

        bson_iter_document(it, &len, &data);

        if (bson_init_static(post, data, len)
            && bson_iter_init_find(&f, post, "id")
            && BSON_ITER_HOLDS_UTF8(&f))
        {
            *id = bson_iter_utf8(&f, NULL);
            return 1;
        }
    }

    return 0;
}


static void
ngx_http_feed_timeline_stored_append(ngx_http_feed_stored_out_t *out,
    const bson_t *post, const char *id)
{
    char         key[16];
    const char  *k;

    if (out->n && ngx_strcmp(id, out->last) == 0) {
        return;
    }

    bson_uint32_to_string((uint32_t) out->n++, &k, key, sizeof(key));
    BSON_APPEND_DOCUMENT(out->items, k, post);

    ngx_cpystrn((u_char *) out->last, (u_char *) id, sizeof(out->last));
}
