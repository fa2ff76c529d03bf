
/*
 * ngx_feed_module: the posts store (runs in thread pool tasks), the only
 * code that knows the "posts" collection.
 *
 * {_id: ObjectId, author, body, ts, data?, deleted?, q?, qt?, k?}: the id
 * is made by the module, so ids sort by creation time and serve as
 * cursors.  "q" lists the queue entries ("post", "delete") the post still
 * awaits, "qt" when the outbox sweeper may take them over (see
 * ngx_http_feed_outbox.c).  "k" is there, with feed_timeline_store, from
 * the insert until fanout has put the post in every timeline of the
 * model: the posts in flight, which the model may lack yet.
 *
 * Every read of posts for an answer sees the visible ones only, by one
 * filter, ngx_http_feed_posts_visible(); the outbox alone sees deleted
 * posts too, as their delete entries are still to be sent.
 */


#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_json.h"


#define NGX_HTTP_FEED_POSTS         "posts"


/* one chunk of a timeline's authors, its next post first */
typedef struct {
    mongoc_cursor_t              *cursor;
    const bson_t                 *doc;
    bson_oid_t                    id;
} ngx_http_feed_posts_stream_t;


static void ngx_http_feed_posts_newest(bson_t *filter, bson_t *opts,
    ngx_http_feed_posts_range_t *range, ngx_uint_t limit);
static void ngx_http_feed_posts_range(bson_t *filter,
    ngx_http_feed_posts_range_t *range);
static void ngx_http_feed_posts_visible(bson_t *filter);
static ngx_int_t ngx_http_feed_posts_one(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_t *doc,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_page(mongoc_collection_t *posts,
    ngx_http_feed_user_t *author, ngx_http_feed_posts_range_t *range,
    bson_t *items, char *next, bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_chunks(mongoc_collection_t *posts,
    char **authors, size_t n, ngx_http_feed_posts_range_t *range,
    ngx_uint_t limit, bson_t *items, ngx_uint_t *got, bson_error_t *error);
static mongoc_cursor_t *ngx_http_feed_posts_chunk(
    mongoc_collection_t *posts, char **authors, size_t n,
    ngx_http_feed_posts_range_t *range, int64_t max_time_ms);
static ngx_int_t ngx_http_feed_posts_found_add(
    ngx_http_feed_posts_found_t *found, const bson_t *doc);
static ngx_int_t ngx_http_feed_posts_merge(ngx_http_feed_posts_stream_t *s,
    size_t ns, ngx_uint_t limit, bson_t *items, ngx_uint_t *got,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_open(mongoc_collection_t *posts,
    ngx_http_feed_posts_stream_t *s, char **authors, size_t n,
    ngx_http_feed_posts_range_t *range, ngx_uint_t last,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_next(ngx_http_feed_posts_stream_t *s,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_update(mongoc_client_t *client,
    const char *database, bson_t *selector, bson_t *update,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_delete_pending(
    mongoc_collection_t *posts, const bson_oid_t *id,
    ngx_http_feed_user_t *author, ngx_uint_t *found, bson_error_t *error);
static ngx_int_t ngx_http_feed_posts_claim(mongoc_collection_t *posts,
    const bson_t *doc, int64_t qt, ngx_http_feed_posts_due_pt each,
    void *data, bson_error_t *error);
static void ngx_http_feed_posts_awaits(const bson_t *doc,
    ngx_http_feed_posts_due_t *due);


/*
 * The author's posts newest first (fanout on read), the outbox, and the
 * posts in flight newest first
 */

ngx_http_feed_mongo_indexes_t  ngx_http_feed_posts_indexes = {
    NGX_HTTP_FEED_POSTS,
    "[{\"key\": {\"author\": 1, \"_id\": -1}, \"name\": \"author_id\"},"
    " {\"key\": {\"q\": 1}, \"name\": \"outbox\", \"sparse\": true},"
    " {\"key\": {\"k\": 1, \"_id\": -1}, \"name\": \"in_flight\","
    " \"sparse\": true}]"
};


/*
 * Stored with its queue entry pending, due from now (ms): never lost for
 * fanout; model: in flight until fanout has put it in every timeline of
 * the model (feed_timeline_store).  NGX_DECLINED: a post with this id is
 * there already.
 */

ngx_int_t
ngx_http_feed_posts_insert(mongoc_client_t *client, const char *database,
    const bson_t *post, int64_t now, ngx_uint_t model, bson_error_t *error)
{
    bool                  ok;
    bson_t                doc, q;
    mongoc_collection_t  *posts;

    bson_init(&doc);
    bson_concat(&doc, post);
    BSON_APPEND_ARRAY_BEGIN(&doc, "q", &q);
    BSON_APPEND_UTF8(&q, "0", "post");
    bson_append_array_end(&doc, &q);
    BSON_APPEND_INT64(&doc, "qt", now + NGX_HTTP_FEED_OUTBOX_GRACE);

    if (model) {
        BSON_APPEND_BOOL(&doc, "k", true);
    }

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    ok = mongoc_collection_insert_one(posts, &doc, NULL, NULL, error);

    mongoc_collection_destroy(posts);
    bson_destroy(&doc);

    if (ok) {
        return NGX_OK;
    }

    return error->code == MONGOC_ERROR_DUPLICATE_KEY ? NGX_DECLINED
                                                      : NGX_ERROR;
}


/*
 * The visible post's stored document, a bson_copy() in *doc to be
 * bson_destroy()ed: NGX_DECLINED when it is not there or deleted.
 */

ngx_int_t
ngx_http_feed_posts_find(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, bson_t **doc, bson_error_t *error)
{
    bson_t     found;
    ngx_int_t  rc;

    rc = ngx_http_feed_posts_one(client, database, id, &found, error);

    if (rc == NGX_OK) {
        *doc = bson_copy(&found);
        bson_destroy(&found);
    }

    return rc;
}


/* the visible post with this id, as ngx_http_feed_mongo_find_one() */

static ngx_int_t
ngx_http_feed_posts_one(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, bson_t *doc, bson_error_t *error)
{
    bson_t                filter;
    ngx_int_t             rc;
    mongoc_collection_t  *posts;

    bson_init(&filter);
    BSON_APPEND_OID(&filter, "_id", id);
    ngx_http_feed_posts_visible(&filter);

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    rc = ngx_http_feed_mongo_find_one(posts, &filter, NULL, doc, error);

    mongoc_collection_destroy(posts);
    bson_destroy(&filter);

    return rc;
}


/*
 * A visible post as the API shows it, in JSON made here: the loop only
 * copies it out.  *found: the post is there (its JSON may fail still).
 */

ngx_int_t
ngx_http_feed_posts_get(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, ngx_uint_t *found, char **json, size_t *len,
    bson_error_t *error)
{
    char       *p;
    bson_t      doc, out;
    ngx_int_t   rc;

    rc = ngx_http_feed_posts_one(client, database, id, &doc, error);

    if (rc != NGX_OK) {
        return rc == NGX_DECLINED ? NGX_OK : NGX_ERROR;
    }

    *found = 1;

    bson_init(&out);

    p = NULL;

    if (ngx_http_feed_posts_json(&doc, &out) == NGX_OK) {
        p = ngx_http_feed_json_text(&out, len);
    }

    bson_destroy(&out);
    bson_destroy(&doc);

    *json = p;

    return p ? NGX_OK : NGX_ERROR;
}


/*
 * The author's own posts, newest first, in range: NGX_AGAIN when there
 * are more, next the id of the last one given.
 */

ngx_int_t
ngx_http_feed_posts_list(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *author, ngx_http_feed_posts_range_t *range,
    bson_t *items, char *next, bson_error_t *error)
{
    ngx_int_t             rc;
    mongoc_collection_t  *posts;

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    rc = ngx_http_feed_posts_page(posts, author, range, items, next, error);

    mongoc_collection_destroy(posts);

    return rc;
}


static ngx_int_t
ngx_http_feed_posts_page(mongoc_collection_t *posts,
    ngx_http_feed_user_t *author, ngx_http_feed_posts_range_t *range,
    bson_t *items, char *next, bson_error_t *error)
{
    char              key[16];
    bson_t            filter, opts, item;
    bson_iter_t       it;
    ngx_int_t         rc;
    ngx_uint_t        n;
    const char       *k;
    const bson_t     *doc;
    mongoc_cursor_t  *cursor;

    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "author", author->data);
    ngx_http_feed_posts_newest(&filter, &opts, range, range->limit + 1);

    cursor = mongoc_collection_find_with_opts(posts, &filter, &opts, NULL);

    rc = NGX_OK;
    n = 0;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (n == range->limit) {
            rc = NGX_AGAIN;
            break;
        }

        bson_uint32_to_string(n++, &k, key, sizeof(key));

        BSON_APPEND_DOCUMENT_BEGIN(items, k, &item);
        (void) ngx_http_feed_posts_json(doc, &item);
        bson_append_document_end(items, &item);

        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_to_string(bson_iter_oid(&it), next);
        }
    }

    if (rc != NGX_AGAIN) {
        next[0] = '\0';
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/*
 * The window of a timeline's reads, from edge (s) on: ids at or below the
 * edge's are past it.  A post id begins with its creation time in
 * seconds, big-endian: the edge's is that second with all other bytes
 * zero, and the lowest id above it ends with a one.
 */

void
ngx_http_feed_posts_window_init(ngx_http_feed_posts_window_t *window,
    time_t edge)
{
    uint8_t  data[12];

    ngx_memzero(data, sizeof(data));

    data[0] = (uint8_t) (edge >> 24);
    data[1] = (uint8_t) (edge >> 16);
    data[2] = (uint8_t) (edge >> 8);
    data[3] = (uint8_t) edge;

    bson_oid_init_from_data(&window->edge, data);

    data[11] = 1;
    bson_oid_init_from_data(&window->above, data);

    window->older = 0;
}


/*
 * The newest posts of all these authors, in range.  With a window whose
 * edge is inside the range, those newer than the edge are read first, and
 * the older ones only when these did not fill the page: a reader of many
 * authors who have not posted for long has the {author, _id} index read
 * past the edge only for a short page.  The two reads together are the
 * range's newest posts exactly: every post newer than the edge comes
 * before any older one, and no post is on both sides.
 */

ngx_int_t
ngx_http_feed_posts_timeline(mongoc_client_t *client, const char *database,
    char **authors, size_t n, ngx_http_feed_posts_range_t *range,
    bson_t *items, bson_error_t *error)
{
    ngx_int_t                       rc;
    ngx_uint_t                      got;
    mongoc_collection_t            *posts;
    ngx_http_feed_posts_range_t     newer, older;
    ngx_http_feed_posts_window_t   *w;

    w = range->window;
    got = 0;

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    if (w == NULL
        || (range->since_id
            && bson_oid_compare(range->since_id, &w->edge) >= 0))
    {
        /* no window, or all of the range is inside it */

        rc = ngx_http_feed_posts_chunks(posts, authors, n, range,
                                        range->limit, items, &got, error);
        goto done;
    }

    if (range->max_id && bson_oid_compare(range->max_id, &w->above) <= 0) {

        /* all of the range is past the edge: a page deeper than it */

        w->older = 1;
        rc = ngx_http_feed_posts_chunks(posts, authors, n, range,
                                        range->limit, items, &got, error);
        goto done;
    }

    newer = *range;
    newer.since_id = &w->edge;

    rc = ngx_http_feed_posts_chunks(posts, authors, n, &newer, range->limit,
                                    items, &got, error);

    if (rc != NGX_OK || got == range->limit) {
        goto done;
    }

    /*
     * Each chunk read up to limit posts newer than the edge, and all of
     * them together fewer: every such post is in the page.  The rest of
     * it is the newest posts at the edge or older.
     */

    w->older = 1;

    older = *range;
    older.max_id = &w->above;

    rc = ngx_http_feed_posts_chunks(posts, authors, n, &older, range->limit,
                                    items, &got, error);

done:

    mongoc_collection_destroy(posts);

    return rc;
}


/*
 * One query per chunk of authors, their posts in range merged into items
 * after the got ones there, until limit in all
 */

static ngx_int_t
ngx_http_feed_posts_chunks(mongoc_collection_t *posts, char **authors,
    size_t n, ngx_http_feed_posts_range_t *range, ngx_uint_t limit,
    bson_t *items, ngx_uint_t *got, bson_error_t *error)
{
    size_t                          ns, i;
    ngx_int_t                       rc;
    ngx_http_feed_posts_range_t     chunk;
    ngx_http_feed_posts_stream_t   *streams;

    ns = (n + NGX_HTTP_FEED_POSTS_CHUNK - 1) / NGX_HTTP_FEED_POSTS_CHUNK;

    chunk = *range;
    chunk.limit = limit - *got;

    streams = bson_malloc0(ns * sizeof(ngx_http_feed_posts_stream_t));

    rc = NGX_OK;

    if (range->cut) {
        range->cut->round_read = 0;
    }

    for (i = 0; i < ns && rc == NGX_OK; i++) {
        rc = ngx_http_feed_posts_open(posts, &streams[i],
                                      authors + i * NGX_HTTP_FEED_POSTS_CHUNK,
                                      ngx_min(NGX_HTTP_FEED_POSTS_CHUNK,
                                          n - i * NGX_HTTP_FEED_POSTS_CHUNK),
                                      &chunk, i == ns - 1, error);
    }

    if (rc == NGX_OK && range->cut && range->cut->read == 0) {
        /* every chunk failed: the error of the last */
        rc = NGX_ERROR;
    }

    if (rc == NGX_OK) {
        rc = ngx_http_feed_posts_merge(streams, ns, limit, items, got, error);
    }

    for (i = 0; i < ns; i++) {
        if (streams[i].cursor) {
            mongoc_cursor_destroy(streams[i].cursor);
        }
    }

    bson_free(streams);

    return rc;
}


/*
 * A chunk's query, run now for its first post.  Under a deadline, each
 * query is given the time left (maxTimeMS), and a chunk whose time is up,
 * before or while it runs, or that fails, is left out of the page, which
 * is then partial.  As long as no chunk of this read was read, a page cut
 * there would lack all of it (MongoDB is slow as a whole): past the
 * deadline the next chunk is waited for, and the last one has none.
 */

static ngx_int_t
ngx_http_feed_posts_open(mongoc_collection_t *posts,
    ngx_http_feed_posts_stream_t *s, char **authors, size_t n,
    ngx_http_feed_posts_range_t *range, ngx_uint_t last,
    bson_error_t *error)
{
    int64_t                     left;
    ngx_http_feed_posts_cut_t  *cut = range->cut;

    left = 0;

    if (cut) {
        cut->chunks++;
        left = cut->at - ngx_http_feed_now_ms();

        if (left <= 0 && cut->round_read) {
            cut->late++;
            return NGX_OK;
        }

        if (left <= 0 || (last && cut->round_read == 0)) {
            left = 0;
        }
    }

    s->cursor = ngx_http_feed_posts_chunk(posts, authors, n, range, left);

    if (ngx_http_feed_posts_next(s, error) == NGX_OK) {
        if (cut) {
            cut->read++;
            cut->round_read++;
        }

        return NGX_OK;
    }

    if (cut == NULL) {
        return NGX_ERROR;
    }

    cut->late++;
    s->doc = NULL;

    return NGX_OK;
}


/*
 * The visible posts among these ids, newest first, as the API shows them:
 * what a timeline in a model (ngx_http_feed_model.c) still shows of its
 * entries.
 */

ngx_int_t
ngx_http_feed_posts_by_ids(mongoc_client_t *client, const char *database,
    const bson_oid_t *ids, size_t n, bson_t *items, bson_error_t *error)
{
    char                           key[16];
    size_t                         i;
    bson_t                         filter, in, list, opts;
    ngx_int_t                      rc;
    ngx_uint_t                     got;
    const char                    *k;
    mongoc_collection_t           *posts;
    ngx_http_feed_posts_range_t    range;
    ngx_http_feed_posts_stream_t   stream;

    if (n == 0) {
        return NGX_OK;
    }

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "_id", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &list);

    for (i = 0; i < n; i++) {
        bson_uint32_to_string(i, &k, key, sizeof(key));
        BSON_APPEND_OID(&list, k, &ids[i]);
    }

    bson_append_array_end(&in, &list);
    bson_append_document_end(&filter, &in);

    ngx_memzero(&range, sizeof(ngx_http_feed_posts_range_t));
    ngx_http_feed_posts_newest(&filter, &opts, &range, n);

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    stream.cursor = mongoc_collection_find_with_opts(posts, &filter, &opts,
                                                     NULL);

    got = 0;
    rc = ngx_http_feed_posts_next(&stream, error);

    if (rc == NGX_OK) {
        rc = ngx_http_feed_posts_merge(&stream, 1, n, items, &got, error);
    }

    mongoc_cursor_destroy(stream.cursor);
    mongoc_collection_destroy(posts);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


/*
 * The posts in range that fanout has not put in every timeline of the
 * model yet, newest first, at most max: their ids and authors in *posts
 * (n of them, bson_malloc()ed, NULL when none).  *more: max were read,
 * older ones may be in flight too.
 */

ngx_int_t
ngx_http_feed_posts_in_flight(mongoc_client_t *client, const char *database,
    ngx_http_feed_posts_range_t *range, size_t max,
    ngx_http_feed_posts_flight_t **posts, size_t *n, ngx_uint_t *more,
    bson_error_t *error)
{
    size_t                         size, seen;
    bson_t                         filter, opts, sort, proj;
    ngx_int_t                      rc;
    bson_iter_t                    it;
    const bson_t                  *doc;
    mongoc_cursor_t               *cursor;
    mongoc_collection_t           *coll;
    ngx_http_feed_posts_flight_t  *p;

    *posts = NULL;
    *n = 0;
    *more = 0;

    bson_init(&filter);
    BSON_APPEND_BOOL(&filter, "k", true);
    ngx_http_feed_posts_range(&filter, range);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", -1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "projection", &proj);
    BSON_APPEND_INT32(&proj, "author", 1);
    bson_append_document_end(&opts, &proj);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) max);

    coll = mongoc_client_get_collection(client, database,
                                        NGX_HTTP_FEED_POSTS);
    cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, NULL);

    size = 0;
    seen = 0;

    while (seen < max && mongoc_cursor_next(cursor, &doc)) {
        seen++;

        if (*n == size) {
            size = size ? 2 * size : 16;
            *posts = bson_realloc(*posts,
                                  size * sizeof(ngx_http_feed_posts_flight_t));
        }

        p = &(*posts)[*n];

        if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_OID(&it)
            && ngx_http_feed_bson_user(doc, "author", &p->author) == NGX_OK)
        {
            bson_oid_copy(bson_iter_oid(&it), &p->id);
            (*n)++;
        }
    }

    rc = mongoc_cursor_error(cursor, error) ? NGX_ERROR : NGX_OK;
    *more = (seen == max);

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(coll);
    bson_destroy(&opts);
    bson_destroy(&filter);

    if (rc != NGX_OK) {
        bson_free(*posts);
        *posts = NULL;
        *n = 0;
    }

    return rc;
}


/*
 * The newest posts in range of a chunk of authors, at most range->limit,
 * for a rebuild that reads its chunks in parallel and merges them itself
 * (ngx_http_feed_timeline_chunks.c).  max_time_ms, when not 0: MongoDB
 * stops the query then, when nobody waits for it any more.
 */

ngx_int_t
ngx_http_feed_posts_chunk_read(mongoc_client_t *client, const char *database,
    char **authors, size_t n, ngx_http_feed_posts_range_t *range,
    int64_t max_time_ms, ngx_http_feed_posts_found_t *found,
    bson_error_t *error)
{
    ngx_int_t             rc;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *posts;

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    cursor = ngx_http_feed_posts_chunk(posts, authors, n, range,
                                       max_time_ms);

    rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_posts_found_add(found, doc) == NGX_ERROR) {
            bson_set_error(error, MONGOC_ERROR_BSON,
                           MONGOC_ERROR_BSON_INVALID,
                           "a post could not be written as JSON");
            rc = NGX_ERROR;
            break;
        }
    }

    if (rc == NGX_OK && mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(posts);

    return rc;
}


/* a post found, as its id and JSON; one without an id is skipped */

static ngx_int_t
ngx_http_feed_posts_found_add(ngx_http_feed_posts_found_t *found,
    const bson_t *doc)
{
    char                              *json;
    size_t                             len;
    bson_t                             post;
    bson_iter_t                        it;
    ngx_http_feed_posts_found_item_t  *item;

    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_OID(&it)) {
        return NGX_DECLINED;
    }

    bson_init(&post);
    (void) ngx_http_feed_posts_json(doc, &post);
    json = ngx_http_feed_json_text(&post, &len);
    bson_destroy(&post);

    if (json == NULL) {
        return NGX_ERROR;
    }

    if (found->n % 64 == 0) {
        found->items = bson_realloc(found->items, (found->n + 64)
                                    * sizeof(ngx_http_feed_posts_found_item_t));
    }

    if (found->len + len > found->size) {
        found->size = ngx_max(2 * found->size, found->len + len + 4096);
        found->buf = bson_realloc(found->buf, found->size);
    }

    item = &found->items[found->n++];

    bson_oid_to_string(bson_iter_oid(&it), item->id);
    item->off = found->len;
    item->len = len;

    ngx_memcpy(found->buf + found->len, json, len);
    found->len += len;

    bson_free(json);

    return NGX_OK;
}


void
ngx_http_feed_posts_found_free(ngx_http_feed_posts_found_t *found)
{
    bson_free(found->items);
    bson_free(found->buf);
    ngx_memzero(found, sizeof(ngx_http_feed_posts_found_t));
}


static mongoc_cursor_t *
ngx_http_feed_posts_chunk(mongoc_collection_t *posts, char **authors,
    size_t n, ngx_http_feed_posts_range_t *range, int64_t max_time_ms)
{
    char              key[16];
    size_t            i;
    bson_t            filter, in, list, opts;
    const char       *k;
    mongoc_cursor_t  *cursor;

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "author", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &list);

    for (i = 0; i < n; i++) {
        bson_uint32_to_string(i, &k, key, sizeof(key));
        BSON_APPEND_UTF8(&list, k, authors[i]);
    }

    bson_append_array_end(&in, &list);
    bson_append_document_end(&filter, &in);

    ngx_http_feed_posts_newest(&filter, &opts, range, range->limit);
    BSON_APPEND_INT32(&opts, "batchSize",
                      (int32_t) ngx_min(range->limit, 1000));

    if (max_time_ms > 0) {
        BSON_APPEND_INT64(&opts, "maxTimeMS", max_time_ms);
    }

    cursor = mongoc_collection_find_with_opts(posts, &filter, &opts, NULL);

    bson_destroy(&opts);
    bson_destroy(&filter);

    return cursor;
}


/*
 * The newest of the chunks' next posts (each read its first already),
 * appended to the got items already there until limit: a k-way merge
 */

static ngx_int_t
ngx_http_feed_posts_merge(ngx_http_feed_posts_stream_t *s, size_t ns,
    ngx_uint_t limit, bson_t *items, ngx_uint_t *got, bson_error_t *error)
{
    char         key[16];
    size_t       i, best;
    bson_t       item;
    const char  *k;

    for ( /* void */ ; *got < limit; (*got)++) {
        best = ns;

        for (i = 0; i < ns; i++) {
            if (s[i].doc
                && (best == ns || bson_oid_compare(&s[i].id, &s[best].id) > 0))
            {
                best = i;
            }
        }

        if (best == ns) {
            break;
        }

        bson_uint32_to_string(*got, &k, key, sizeof(key));

        BSON_APPEND_DOCUMENT_BEGIN(items, k, &item);
        (void) ngx_http_feed_posts_json(s[best].doc, &item);
        bson_append_document_end(items, &item);

        if (ngx_http_feed_posts_next(&s[best], error) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_posts_next(ngx_http_feed_posts_stream_t *s,
    bson_error_t *error)
{
    bson_iter_t  it;

    while (mongoc_cursor_next(s->cursor, &s->doc)) {
        if (bson_iter_init_find(&it, s->doc, "_id")
            && BSON_ITER_HOLDS_OID(&it))
        {
            bson_oid_copy(bson_iter_oid(&it), &s->id);
            return NGX_OK;
        }
    }

    s->doc = NULL;

    return mongoc_cursor_error(s->cursor, error) ? NGX_ERROR : NGX_OK;
}


/* the visible posts of the filter in range, newest first, at most limit */

static void
ngx_http_feed_posts_newest(bson_t *filter, bson_t *opts,
    ngx_http_feed_posts_range_t *range, ngx_uint_t limit)
{
    bson_t  sort;

    ngx_http_feed_posts_range(filter, range);
    ngx_http_feed_posts_visible(filter);

    bson_init(opts);
    BSON_APPEND_DOCUMENT_BEGIN(opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", -1);
    bson_append_document_end(opts, &sort);
    BSON_APPEND_INT64(opts, "limit", (int64_t) limit);
}


/* ids below max_id and above since_id, when the range has them */

static void
ngx_http_feed_posts_range(bson_t *filter, ngx_http_feed_posts_range_t *range)
{
    bson_t  ids;

    if (range->max_id == NULL && range->since_id == NULL) {
        return;
    }

    BSON_APPEND_DOCUMENT_BEGIN(filter, "_id", &ids);

    if (range->max_id) {
        BSON_APPEND_OID(&ids, "$lt", range->max_id);
    }

    if (range->since_id) {
        BSON_APPEND_OID(&ids, "$gt", range->since_id);
    }

    bson_append_document_end(filter, &ids);
}


/* what every answer may show: posts not deleted */

static void
ngx_http_feed_posts_visible(bson_t *filter)
{
    bson_t  ne;

    BSON_APPEND_DOCUMENT_BEGIN(filter, "deleted", &ne);
    BSON_APPEND_BOOL(&ne, "$ne", true);
    bson_append_document_end(filter, &ne);
}


/*
 * Marks the post deleted, drops its content, and queues the delete entry,
 * all in one update: found only when author is its author and it was
 * there.  A deleted post is in flight no more: no page shows it.
 */

ngx_int_t
ngx_http_feed_posts_delete(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, ngx_http_feed_user_t *author, int64_t now,
    ngx_uint_t *found, bson_error_t *error)
{
    bool                  ok;
    bson_t                selector, update, set, unset, add, reply;
    mongoc_collection_t  *posts;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", id);
    BSON_APPEND_UTF8(&selector, "author", author->data);
    ngx_http_feed_posts_visible(&selector);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_BOOL(&set, "deleted", true);
    BSON_APPEND_INT64(&set, "qt", now + NGX_HTTP_FEED_OUTBOX_GRACE);
    bson_append_document_end(&update, &set);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "body", "");
    BSON_APPEND_UTF8(&unset, "data", "");
    BSON_APPEND_UTF8(&unset, "k", "");
    bson_append_document_end(&update, &unset);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$addToSet", &add);
    BSON_APPEND_UTF8(&add, "q", "delete");
    bson_append_document_end(&update, &add);

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    ok = mongoc_collection_update_one(posts, &selector, &update, NULL,
                                      &reply, error);

    if (ok) {
        *found = (ngx_http_feed_bson_int(&reply, "matchedCount") == 1);
    }

    if (ok && !*found) {
        ok = (ngx_http_feed_posts_delete_pending(posts, id, author, found,
                                                 error)
              == NGX_OK);
    }

    mongoc_collection_destroy(posts);
    bson_destroy(&reply);
    bson_destroy(&update);
    bson_destroy(&selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/*
 * A post deleted already whose delete Redis has yet to take (an earlier
 * try answered 503): *found is NGX_HTTP_FEED_POSTS_PENDING, and the retry
 * sends it again
 */

static ngx_int_t
ngx_http_feed_posts_delete_pending(mongoc_collection_t *posts,
    const bson_oid_t *id, ngx_http_feed_user_t *author, ngx_uint_t *found,
    bson_error_t *error)
{
    bson_t     filter, doc;
    ngx_int_t  rc;

    bson_init(&filter);
    BSON_APPEND_OID(&filter, "_id", id);
    BSON_APPEND_UTF8(&filter, "author", author->data);
    BSON_APPEND_BOOL(&filter, "deleted", true);
    BSON_APPEND_UTF8(&filter, "q", "delete");

    rc = ngx_http_feed_mongo_find_one(posts, &filter, NULL, &doc, error);

    bson_destroy(&filter);

    if (rc == NGX_OK) {
        *found = NGX_HTTP_FEED_POSTS_PENDING;
        bson_destroy(&doc);
    }

    return (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
}


/* the post's entries are due now: the sweeper's next round takes them */

ngx_int_t
ngx_http_feed_posts_due_now(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, int64_t now, bson_error_t *error)
{
    bson_t                selector, update, set, exists;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", id);
    BSON_APPEND_DOCUMENT_BEGIN(&selector, "q.0", &exists);
    BSON_APPEND_BOOL(&exists, "$exists", true);
    bson_append_document_end(&selector, &exists);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "qt", now);
    bson_append_document_end(&update, &set);

    return ngx_http_feed_posts_update(client, database, &selector, &update,
                                      error);
}


/*
 * Posts whose entries are overdue (their "qt" before now), oldest first,
 * at most batch, each claimed for lease ms by moving its "qt", so that
 * two nginx nodes do not both take one; each one claimed is given to
 * each().  Deleted posts too: their delete entries are what is due.
 */

ngx_int_t
ngx_http_feed_posts_claim_due(mongoc_client_t *client, const char *database,
    int64_t now, int64_t lease, ngx_uint_t batch,
    ngx_http_feed_posts_due_pt each, void *data, bson_error_t *error)
{
    bson_t                filter, in, kinds, lt, opts, sort;
    ngx_int_t             rc;
    const bson_t         *doc;
    mongoc_cursor_t      *cursor;
    mongoc_collection_t  *posts;

    bson_init(&filter);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "q", &in);
    BSON_APPEND_ARRAY_BEGIN(&in, "$in", &kinds);
    BSON_APPEND_UTF8(&kinds, "0", "post");
    BSON_APPEND_UTF8(&kinds, "1", "delete");
    bson_append_array_end(&in, &kinds);
    bson_append_document_end(&filter, &in);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "qt", &lt);
    BSON_APPEND_INT64(&lt, "$lt", now);
    bson_append_document_end(&filter, &lt);

    bson_init(&opts);
    BSON_APPEND_DOCUMENT_BEGIN(&opts, "sort", &sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_append_document_end(&opts, &sort);
    BSON_APPEND_INT64(&opts, "limit", (int64_t) batch);

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    cursor = mongoc_collection_find_with_opts(posts, &filter, &opts, NULL);

    rc = NGX_OK;

    while (mongoc_cursor_next(cursor, &doc)) {
        if (ngx_http_feed_posts_claim(posts, doc, now + lease, each, data,
                                      error)
            != NGX_OK)
        {
            rc = NGX_ERROR;
            break;
        }
    }

    if (mongoc_cursor_error(cursor, error)) {
        rc = NGX_ERROR;
    }

    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(posts);
    bson_destroy(&opts);
    bson_destroy(&filter);

    return rc;
}


static ngx_int_t
ngx_http_feed_posts_claim(mongoc_collection_t *posts, const bson_t *doc,
    int64_t qt, ngx_http_feed_posts_due_pt each, void *data,
    bson_error_t *error)
{
    bson_t                     selector, update, set, reply;
    bson_iter_t                it;
    ngx_http_feed_posts_due_t  due;

    if (ngx_http_feed_bson_user(doc, "author", &due.author) != NGX_OK
        || !bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_OID(&it))
    {
        return NGX_OK;
    }

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", bson_iter_oid(&it));
    BSON_APPEND_INT64(&selector, "qt", ngx_http_feed_bson_int(doc, "qt"));

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$set", &set);
    BSON_APPEND_INT64(&set, "qt", qt);
    bson_append_document_end(&update, &set);

    if (!mongoc_collection_update_one(posts, &selector, &update, NULL,
                                      &reply, error))
    {
        bson_destroy(&update);
        bson_destroy(&selector);
        return NGX_ERROR;
    }

    bson_destroy(&update);
    bson_destroy(&selector);

    if (ngx_http_feed_bson_int(&reply, "modifiedCount") != 1) {
        /* somebody else claimed it */
        bson_destroy(&reply);
        return NGX_OK;
    }

    bson_destroy(&reply);

    bson_oid_copy(bson_iter_oid(&it), &due.id);
    due.ts = ngx_http_feed_bson_int(doc, "ts");
    ngx_http_feed_posts_awaits(doc, &due);

    each(data, &due);

    return NGX_OK;
}


/* which entries the post still awaits, by its "q" */

static void
ngx_http_feed_posts_awaits(const bson_t *doc, ngx_http_feed_posts_due_t *due)
{
    const char   *kind;
    bson_iter_t   q, it;

    due->awaits_post = 0;
    due->awaits_delete = 0;

    if (!bson_iter_init_find(&q, doc, "q") || !BSON_ITER_HOLDS_ARRAY(&q)
        || !bson_iter_recurse(&q, &it))
    {
        return;
    }

    while (bson_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            continue;
        }

        kind = bson_iter_utf8(&it, NULL);

        if (ngx_strcmp(kind, "post") == 0) {
            due->awaits_post = 1;

        } else if (ngx_strcmp(kind, "delete") == 0) {
            due->awaits_delete = 1;
        }
    }
}


/* the entry of this kind is in the stream: the post no longer awaits it */

ngx_int_t
ngx_http_feed_posts_dequeue(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, const char *kind, bson_error_t *error)
{
    bson_t                selector, update, pull;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", id);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$pull", &pull);
    BSON_APPEND_UTF8(&pull, "q", kind);
    bson_append_document_end(&update, &pull);

    return ngx_http_feed_posts_update(client, database, &selector, &update,
                                      error);
}


/*
 * Fanout has put the post in every timeline of the model: it is in
 * flight no more
 */

ngx_int_t
ngx_http_feed_posts_landed(mongoc_client_t *client, const char *database,
    const bson_oid_t *id, bson_error_t *error)
{
    bson_t                selector, update, unset;

    bson_init(&selector);
    BSON_APPEND_OID(&selector, "_id", id);
    BSON_APPEND_BOOL(&selector, "k", true);

    bson_init(&update);
    BSON_APPEND_DOCUMENT_BEGIN(&update, "$unset", &unset);
    BSON_APPEND_UTF8(&unset, "k", "");
    bson_append_document_end(&update, &unset);

    return ngx_http_feed_posts_update(client, database, &selector, &update,
                                      error);
}


/* one update of a post (thread side); selector and update are destroyed */

static ngx_int_t
ngx_http_feed_posts_update(mongoc_client_t *client, const char *database,
    bson_t *selector, bson_t *update, bson_error_t *error)
{
    bool                  ok;
    mongoc_collection_t  *posts;

    posts = mongoc_client_get_collection(client, database,
                                         NGX_HTTP_FEED_POSTS);

    ok = mongoc_collection_update_one(posts, selector, update, NULL, NULL,
                                      error);

    mongoc_collection_destroy(posts);
    bson_destroy(update);
    bson_destroy(selector);

    return ok ? NGX_OK : NGX_ERROR;
}


/* a stored post as the API shows it: {id, author, body, ts, data?} */

ngx_int_t
ngx_http_feed_posts_json(const bson_t *stored, bson_t *out)
{
    char         hex[25];
    bson_iter_t  it;

    if (!bson_iter_init_find(&it, stored, "_id") || !BSON_ITER_HOLDS_OID(&it))
    {
        return NGX_ERROR;
    }

    bson_oid_to_string(bson_iter_oid(&it), hex);
    BSON_APPEND_UTF8(out, "id", hex);

    if (bson_iter_init_find(&it, stored, "author")) {
        BSON_APPEND_VALUE(out, "author", bson_iter_value(&it));
    }

    if (bson_iter_init_find(&it, stored, "body")) {
        BSON_APPEND_VALUE(out, "body", bson_iter_value(&it));
    }

    BSON_APPEND_INT64(out, "ts", ngx_http_feed_bson_int(stored, "ts"));

    if (bson_iter_init_find(&it, stored, "data")) {
        BSON_APPEND_VALUE(out, "data", bson_iter_value(&it));
    }

    return NGX_OK;
}
