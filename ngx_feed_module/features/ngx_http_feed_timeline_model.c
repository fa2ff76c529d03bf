
/*
 * ngx_feed_module: a page of a home timeline from the model of the
 * MongoDB timelines (feed_timeline_store), in the fallback source's
 * thread, for a read that missed the Redis cache.
 *
 * A user with a document gets the entries of the page's range from it,
 * those still visible (ngx_http_feed_posts_by_ids()), merged with the
 * posts of the pull authors they follow (which fanout does not deliver),
 * down to the document's bound; past it, the rest of the page comes from
 * fanout on read, which has every post.  A user without one, asking for a
 * first page, gets fanout on read, and a document made from that answer.
 * The answer is the same as fanout on read's, however it is made.
 *
 * Fanout may be behind: a post is in MongoDB before it is in the model's
 * timelines, and posts reach them in about, not exactly, their order.  The
 * posts still in flight are read first, then the model's timeline: a post
 * that landed meanwhile is in that timeline, and those still in flight
 * that the user follows are added to its entries, so the model never
 * vouches for a range with a post it has not received.  When more
 * are in flight than are read, it vouches only for the range of those
 * read, and fanout on read answers below.
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_model.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_pull.h"


/* entries read beyond the page: room for posts deleted meanwhile */
#define NGX_HTTP_FEED_TL_MODEL_SLACK  16

/* a document being made for longer than this was left: made again */
#define NGX_HTTP_FEED_TL_MODEL_STALE  60000

/* posts in flight read at most, newest first, for a page */
#define NGX_HTTP_FEED_TL_MODEL_FLIGHT  1000


/* the authors of the posts in flight the model's timeline lacks */
typedef struct {
    char                        **authors;
    u_char                       *followed;
    size_t                        n;
} ngx_http_feed_tl_model_authors_t;


typedef struct {
    bson_t                       *items;
    size_t                        n;
    ngx_uint_t                    limit;
    char                          last[25];  /* the last id appended */
} ngx_http_feed_tl_model_out_t;


static ngx_int_t ngx_http_feed_timeline_model_make(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_model_page(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    ngx_http_feed_model_page_t *tp, bson_t *items, bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_model_flight(
    mongoc_client_t *client, const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_flight_t *fl, size_t n, ngx_uint_t more,
    ngx_http_feed_model_page_t *tp, bson_error_t *error);
static ngx_uint_t ngx_http_feed_timeline_model_has(
    ngx_http_feed_model_page_t *tp, const bson_oid_t *id);
static ngx_int_t ngx_http_feed_timeline_model_authors(
    mongoc_client_t *client, const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_flight_t *fl, size_t n,
    ngx_http_feed_tl_model_authors_t *a, bson_error_t *error);
static ngx_int_t ngx_http_feed_timeline_model_followee(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static ngx_uint_t ngx_http_feed_timeline_model_follows(
    ngx_http_feed_tl_model_authors_t *a, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_flight_t *post);
static void ngx_http_feed_timeline_model_add(
    ngx_http_feed_model_page_t *tp, ngx_http_feed_posts_flight_t *fl,
    size_t n);
static ngx_int_t ngx_http_feed_timeline_model_pulled(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error);
static void ngx_http_feed_timeline_model_merge(
    ngx_http_feed_tl_model_out_t *out, const bson_t *a, const bson_t *b,
    const char *bound);
static ngx_uint_t ngx_http_feed_timeline_model_next(bson_iter_t *it,
    bson_t *post, const char **id);
static void ngx_http_feed_timeline_model_append(
    ngx_http_feed_tl_model_out_t *out, const bson_t *post, const char *id);


ngx_int_t
ngx_http_feed_timeline_model(mongoc_client_t *client, const char *database,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error)
{
    size_t                           n;
    ngx_int_t                        rc;
    ngx_uint_t                       more;
    ngx_http_feed_posts_flight_t    *fl;
    ngx_http_feed_model_page_t       tp;
    ngx_http_feed_model_conf_t       mc;

    ngx_http_feed_model_conf(fmcf, &mc);

    /* in flight, before the model: one that landed meanwhile is in it */

    if (ngx_http_feed_posts_in_flight(client, database, range,
                                      NGX_HTTP_FEED_TL_MODEL_FLIGHT, &fl, &n,
                                      &more, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    rc = ngx_http_feed_model_read(client, database, &mc, user, range,
                                  range->limit
                                  + NGX_HTTP_FEED_TL_MODEL_SLACK,
                                  &tp, error);

    if (rc == NGX_OK && tp.state == NGX_HTTP_FEED_MODEL_PAGE_THERE) {
        rc = ngx_http_feed_timeline_model_flight(client, database, user, fl,
                                                 n, more, &tp, error);
    }

    bson_free(fl);

    if (rc != NGX_OK) {
        bson_free(tp.ids);
        return NGX_ERROR;
    }

    switch (tp.state) {

    case NGX_HTTP_FEED_MODEL_PAGE_THERE:
        rc = ngx_http_feed_timeline_model_page(client, database, fmcf, user,
                                               range, &tp, items, error);
        bson_free(tp.ids);
        return rc;

    case NGX_HTTP_FEED_MODEL_PAGE_BUILDING:
        if (ngx_http_feed_now_ms() - tp.building > NGX_HTTP_FEED_TL_MODEL_STALE
            && ngx_http_feed_model_abandon(client, database, &mc, user,
                                           tp.building, error)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        break;

    default: /* NGX_HTTP_FEED_MODEL_PAGE_NONE */
        if (range->max_id == NULL && range->since_id == NULL) {
            return ngx_http_feed_timeline_model_make(client, database, fmcf,
                                                     user, range, items,
                                                     error);
        }
    }

    return ngx_http_feed_timeline_source_read(client, database, user, range,
                                              items, error);
}


/*
 * The posts in flight (fl, newest first) that the model's timeline may lack,
 * from its bound up: those of the user and of whom the user follows are
 * added to its entries.  With more in flight than were read, it vouches
 * for the range of those read only.
 */

static ngx_int_t
ngx_http_feed_timeline_model_flight(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_flight_t *fl, size_t n, ngx_uint_t more,
    ngx_http_feed_model_page_t *tp, bson_error_t *error)
{
    size_t                            i, m;
    ngx_int_t                         rc;
    ngx_http_feed_tl_model_authors_t  a;

    if (more && n) {
        ngx_http_feed_model_raise(tp, &fl[n - 1].id);
    }

    /* those the model's timeline lacks, in its range */

    for (i = 0, m = 0; i < n; i++) {
        if (!tp->whole && bson_oid_compare(&fl[i].id, &tp->bound) < 0) {
            break;
        }

        if (!ngx_http_feed_timeline_model_has(tp, &fl[i].id)) {
            fl[m++] = fl[i];
        }
    }

    if (m == 0) {
        return NGX_OK;
    }

    rc = ngx_http_feed_timeline_model_authors(client, database, user, fl, m,
                                              &a, error);

    if (rc == NGX_OK) {
        for (i = 0, n = 0; i < m; i++) {
            if (ngx_http_feed_timeline_model_follows(&a, user, &fl[i])) {
                fl[n++] = fl[i];
            }
        }

        ngx_http_feed_timeline_model_add(tp, fl, n);
    }

    bson_free(a.followed);
    bson_free(a.authors);

    return rc;
}


/* whether the model's timeline has this id among the page's (newest first) */

static ngx_uint_t
ngx_http_feed_timeline_model_has(ngx_http_feed_model_page_t *tp,
    const bson_oid_t *id)
{
    int     c;
    size_t  lo, hi, mid;

    lo = 0;
    hi = tp->n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;
        c = bson_oid_compare(&tp->ids[mid], id);

        if (c == 0) {
            return 1;
        }

        if (c > 0) {
            lo = mid + 1;

        } else {
            hi = mid;
        }
    }

    return 0;
}


/*
 * Which of the authors of these posts the user follows (the user's own
 * posts are theirs): the follows among them, in one query
 */

static ngx_int_t
ngx_http_feed_timeline_model_authors(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_posts_flight_t *fl, size_t n,
    ngx_http_feed_tl_model_authors_t *a, bson_error_t *error)
{
    size_t                        i, k;
    ngx_http_feed_follows_page_t  fp;

    a->authors = bson_malloc(n * sizeof(char *));
    a->followed = bson_malloc0(n);
    a->n = 0;

    for (i = 0; i < n; i++) {
        if (ngx_strcmp(fl[i].author.data, user->data) == 0) {
            continue;
        }

        for (k = 0; k < a->n; k++) {
            if (ngx_strcmp(a->authors[k], fl[i].author.data) == 0) {
                break;
            }
        }

        if (k == a->n) {
            a->authors[a->n++] = fl[i].author.data;
        }
    }

    if (a->n == 0) {
        return NGX_OK;
    }

    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = user;
    fp.among = a->authors;
    fp.namong = a->n;
    fp.each = ngx_http_feed_timeline_model_followee;
    fp.data = a;

    return ngx_http_feed_follows_page(client, database, &fp, error)
           == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


static ngx_int_t
ngx_http_feed_timeline_model_followee(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_tl_model_authors_t *a = data;

    size_t  k;

    for (k = 0; k < a->n; k++) {
        if (ngx_strcmp(a->authors[k], user->data) == 0) {
            a->followed[k] = 1;
            break;
        }
    }

    return NGX_OK;
}


/* a post in flight is the user's timeline's: their own, or a followee's */

static ngx_uint_t
ngx_http_feed_timeline_model_follows(ngx_http_feed_tl_model_authors_t *a,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_flight_t *post)
{
    size_t  k;

    if (ngx_strcmp(post->author.data, user->data) == 0) {
        return 1;
    }

    for (k = 0; k < a->n; k++) {
        if (ngx_strcmp(a->authors[k], post->author.data) == 0) {
            return a->followed[k];
        }
    }

    return 0;
}


/* the page's ids and the posts in flight (both newest first), merged */

static void
ngx_http_feed_timeline_model_add(ngx_http_feed_model_page_t *tp,
    ngx_http_feed_posts_flight_t *fl, size_t n)
{
    size_t       i, k, m;
    bson_oid_t  *ids;

    if (n == 0) {
        return;
    }

    ids = bson_malloc((tp->n + n) * sizeof(bson_oid_t));

    for (i = 0, k = 0, m = 0; i < tp->n || k < n; m++) {
        if (k == n
            || (i < tp->n && bson_oid_compare(&tp->ids[i], &fl[k].id) > 0))
        {
            bson_oid_copy(&tp->ids[i++], &ids[m]);

        } else {
            bson_oid_copy(&fl[k++].id, &ids[m]);
        }
    }

    bson_free(tp->ids);
    tp->ids = ids;
    tp->n = m;
}


/*
 * A reader without a document: fanout on read answers, and the document
 * is made from that answer.  It is there, empty, before the posts are
 * read: posts fanned out meanwhile land in it.
 */

static ngx_int_t
ngx_http_feed_timeline_model_make(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error)
{
    int64_t                          now;
    ngx_uint_t                       mine;
    bson_error_t                     err;
    ngx_http_feed_model_conf_t       mc;

    ngx_http_feed_model_conf(fmcf, &mc);

    now = ngx_http_feed_now_ms();

    if (ngx_http_feed_model_begin(client, database, &mc, user, now,
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
            (void) ngx_http_feed_model_abandon(client, database, &mc,
                                               user, now, &err);
        }

        return NGX_ERROR;
    }

    /*
     * The answer is given whatever becomes of the document: one that
     * cannot be filled is left to be made again
     */

    /* a page without some chunks' posts makes no document */

    if (mine && range->cut && range->cut->late) {
        (void) ngx_http_feed_model_abandon(client, database, &mc, user, now,
                                           &err);
        return NGX_OK;
    }

    if (mine
        && ngx_http_feed_model_fill(client, database, &mc, user, items,
                                    bson_count_keys(items) < range->limit,
                                    &err)
           != NGX_OK)
    {
        (void) ngx_http_feed_model_abandon(client, database, &mc, user,
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
ngx_http_feed_timeline_model_page(mongoc_client_t *client,
    const char *database, ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_http_feed_posts_range_t *range,
    ngx_http_feed_model_page_t *tp, bson_t *items, bson_error_t *error)
{
    char                          bound[25];
    bson_t                        posts, pulled, rest;
    ngx_int_t                     rc;
    ngx_http_feed_posts_range_t   below;
    ngx_http_feed_tl_model_out_t  out;

    bson_init(&posts);
    bson_init(&pulled);
    bson_init(&rest);

    rc = ngx_http_feed_posts_by_ids(client, database, tp->ids, tp->n, &posts,
                                    error);

    if (rc == NGX_OK && fmcf->pull_threshold) {
        rc = ngx_http_feed_timeline_model_pulled(client, database, user,
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

    ngx_http_feed_timeline_model_merge(&out, &posts, &pulled,
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
            ngx_http_feed_timeline_model_merge(&out, &rest, NULL, NULL);
        }
    }

done:

    bson_destroy(&rest);
    bson_destroy(&pulled);
    bson_destroy(&posts);

    return rc;
}


/* the posts in range of the pull authors the user follows */

static ngx_int_t
ngx_http_feed_timeline_model_pulled(mongoc_client_t *client,
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
ngx_http_feed_timeline_model_merge(ngx_http_feed_tl_model_out_t *out,
    const bson_t *a, const bson_t *b, const char *bound)
{
    int          c;
    bson_t       pa, pb;
    ngx_uint_t   ha, hb;
    const char  *ia, *ib;
    bson_iter_t  ita, itb;

    ha = bson_iter_init(&ita, a)
         && ngx_http_feed_timeline_model_next(&ita, &pa, &ia);
    hb = b && bson_iter_init(&itb, b)
         && ngx_http_feed_timeline_model_next(&itb, &pb, &ib);

    while ((ha || hb) && out->n < out->limit) {
        c = (ha && hb) ? ngx_strcmp(ia, ib) : (ha ? 1 : -1);

        if (c >= 0) {
            if (bound && ngx_strcmp(ia, bound) < 0) {
                ha = 0;
                continue;
            }

            ngx_http_feed_timeline_model_append(out, &pa, ia);
            ha = ngx_http_feed_timeline_model_next(&ita, &pa, &ia);

            if (c == 0) {
                hb = ngx_http_feed_timeline_model_next(&itb, &pb, &ib);
            }

        } else {
            if (bound && ngx_strcmp(ib, bound) < 0) {
                hb = 0;
                continue;
            }

            ngx_http_feed_timeline_model_append(out, &pb, ib);
            hb = ngx_http_feed_timeline_model_next(&itb, &pb, &ib);
        }
    }
}


/* the next post of a list, and its id */

static ngx_uint_t
ngx_http_feed_timeline_model_next(bson_iter_t *it, bson_t *post,
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
ngx_http_feed_timeline_model_append(ngx_http_feed_tl_model_out_t *out,
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
