
/*
 * ngx_feed_module: the push/pull hybrid (seed 004: push for ordinary
 * authors, pull for the few with huge audiences, merged when read).
 *
 * An author's mode (the authors store) moves when fanout meets their
 * posts, by their follower count against feed_pull_threshold:
 *
 *   push       every post is fanned out to the followers' timelines;
 *   switching  the count reached the threshold: the post is fanned out
 *              once more, also into the author's own list, and every
 *              cached follower it reaches adds the author to the pull
 *              authors it merges (a rebuild in progress gets it in its
 *              queue); once that post's fanout is complete, the author
 *              is pull;
 *   pull       posts go to the author's list only: O(1) however many
 *              followers; every follower with a cache merges the list,
 *              and a rebuild asks which followees are pull authors before
 *              it asks for the posts;
 *   both       the count fell below the threshold: posts are fanned out
 *              again, and still listed, so that the followers who merge
 *              the list see no gap (a post in both places is read once).
 *
 * A post is never only where a follower does not look: before the author
 * is pull, every cached follower merges the list, and while some may not,
 * posts are fanned out too.
 */


#include "ngx_http_feed_pull.h"
#include "ngx_http_feed_authors_store.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_timeline_cache.h"


/* pull authors looked for among a user's followees in one query */
#define NGX_HTTP_FEED_PULL_FEW  1000


typedef struct {
    ngx_http_feed_pull_loaded_pt  handler;
    void                         *data;
} ngx_http_feed_pull_waiter_t;


/*
 * A list being loaded from MongoDB: one per author and copy (on a cluster,
 * each master has its own) at a time, per worker
 */
typedef struct {
    ngx_queue_t                   queue;
    ngx_pool_t                   *pool;
    ngx_http_feed_main_conf_t    *fmcf;
    ngx_http_feed_user_t          author;
    ngx_str_t                     copy;
    ngx_array_t                   waiters;
    ngx_uint_t                    limit;

    /* the thread's results */
    bson_t                       *items;
    ngx_uint_t                    complete;
} ngx_http_feed_pull_load_t;


/* the followees of a rebuilt user, and which of them are pull authors */
typedef struct {
    char                        **users;
    size_t                        n;
    size_t                        size;
    char                         *authors;
    size_t                        len;
} ngx_http_feed_pull_set_t;


static ngx_int_t ngx_http_feed_pull_move(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *author,
    ngx_http_feed_author_mode_t *from, u_char to, const char *post_id,
    ngx_uint_t *changed, bson_error_t *error);
static ngx_uint_t ngx_http_feed_pull_set_authors(
    ngx_http_feed_pull_set_t *set, size_t n);
static void ngx_http_feed_pull_set_free(ngx_http_feed_pull_set_t *set);
static ngx_int_t ngx_http_feed_pull_candidate(void *data,
    ngx_http_feed_user_t *user);
static ngx_int_t ngx_http_feed_pull_followee_all(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static ngx_int_t ngx_http_feed_pull_followee(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static ngx_int_t ngx_http_feed_pull_author(void *data,
    ngx_http_feed_user_t *user);
static void ngx_http_feed_pull_load_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_pull_load_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_pull_warmed(void *data, redisReply *reply);
static void ngx_http_feed_pull_load_end(ngx_http_feed_pull_load_t *ld,
    ngx_int_t rc);
static void ngx_http_feed_pull_counters(bson_t *doc,
    ngx_http_feed_stats_t *st);


static ngx_queue_t  ngx_http_feed_pull_loads;


void
ngx_http_feed_pull_init(void)
{
    ngx_queue_init(&ngx_http_feed_pull_loads);
}


/*
 * In fanout's thread, once the post is found: what to do with it, and
 * the author's mode moved if the count says so.  to_push: this post
 * turned a pull author back to push.
 */

ngx_int_t
ngx_http_feed_pull_decide(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *author, const char *post_id, ngx_int_t threshold,
    ngx_msec_t stale, ngx_uint_t *action, ngx_uint_t *to_push,
    bson_error_t *error)
{
    ngx_uint_t                   want, changed, was_pull;
    ngx_http_feed_author_mode_t  mode;

    *action = NGX_HTTP_FEED_PULL_PUSH;
    *to_push = 0;

    /* one read: the follower count and the mode */

    if (ngx_http_feed_authors_get(client, database, author, &mode, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    want = (threshold && mode.followers >= threshold);

    if (mode.mode == NGX_HTTP_FEED_AUTHOR_PULL && want) {
        *action = NGX_HTTP_FEED_PULL_LIST;
        return NGX_OK;
    }

    if (!want) {
        if (mode.mode == NGX_HTTP_FEED_AUTHOR_PUSH) {
            return NGX_OK;
        }

        *action = NGX_HTTP_FEED_PULL_BOTH;

        if (mode.mode == NGX_HTTP_FEED_AUTHOR_BOTH) {
            return NGX_OK;
        }

        /* back to push: counted only for an author who was pull */

        was_pull = (mode.mode == NGX_HTTP_FEED_AUTHOR_PULL);

        if (ngx_http_feed_pull_move(client, database, author, &mode,
                                    NGX_HTTP_FEED_AUTHOR_BOTH, post_id,
                                    &changed, error)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        *to_push = changed && was_pull;

        return NGX_OK;
    }

    /*
     * Turning to pull.  This post turns the author when it is the one
     * that turns it (a redelivery), or when the turn is left alone: its
     * post's fanout has not been heard of for "stale" (deleted meanwhile,
     * or its entry cannot finish).  A turn in progress is left to finish:
     * posts meanwhile are fanned out and listed, and whoever they reach
     * before the turn does sees them in their list.
     */

    if (mode.mode == NGX_HTTP_FEED_AUTHOR_SWITCHING) {
        if (ngx_strncmp(mode.token, post_id, 24) == 0) {
            *action = NGX_HTTP_FEED_PULL_TURN;
            return NGX_OK;
        }

        if (ngx_http_feed_authors_now() - mode.changed < (int64_t) stale) {
            *action = NGX_HTTP_FEED_PULL_BOTH;
            return NGX_OK;
        }
    }

    if (ngx_http_feed_pull_move(client, database, author, &mode,
                                NGX_HTTP_FEED_AUTHOR_SWITCHING, post_id,
                                &changed, error)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    *action = changed ? NGX_HTTP_FEED_PULL_TURN : NGX_HTTP_FEED_PULL_BOTH;

    return NGX_OK;
}


/*
 * The post turning its author, from its fanout's thread: the fanout is
 * alive (at each page of followers it reads: the turn is not taken over
 * while it goes on, however long), or done (it reached every follower:
 * the author is pull now).  changed: the author was still this post's.
 */

ngx_int_t
ngx_http_feed_pull_turn(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *author, const char *post_id, ngx_uint_t done,
    ngx_uint_t *changed, bson_error_t *error)
{
    ngx_http_feed_author_mode_t  from;

    from.mode = NGX_HTTP_FEED_AUTHOR_SWITCHING;
    ngx_memcpy(from.token, post_id, 24);
    from.token[24] = '\0';

    return ngx_http_feed_pull_move(client, database, author, &from,
                                   done ? NGX_HTTP_FEED_AUTHOR_PULL
                                        : NGX_HTTP_FEED_AUTHOR_SWITCHING,
                                   post_id, changed, error);
}


static ngx_int_t
ngx_http_feed_pull_move(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *author, ngx_http_feed_author_mode_t *from,
    u_char to, const char *post_id, ngx_uint_t *changed, bson_error_t *error)
{
    ngx_http_feed_author_mode_t  mode;

    mode.mode = to;
    ngx_memcpy(mode.token, post_id, 24);
    mode.token[24] = '\0';

    return ngx_http_feed_authors_set(client, database, author, from, &mode,
                                     changed, error);
}


/*
 * In a rebuild's thread, before it asks for the posts: the pull authors
 * among the user's followees, separated by spaces, bson_malloc()ed (NULL
 * and 0 for none).  Pull authors are few: which of them the user follows
 * is one indexed query, and none at all when there are none.  Past
 * NGX_HTTP_FEED_PULL_FEW of them, the user's followees are read instead
 * and each is looked up.
 */

ngx_int_t
ngx_http_feed_pull_followed(mongoc_client_t *client, const char *database,
    ngx_http_feed_user_t *user, char **authors, size_t *len,
    bson_error_t *error)
{
    ngx_int_t                      rc;
    ngx_http_feed_pull_set_t       set;
    ngx_http_feed_follows_page_t   fp;

    ngx_memzero(&set, sizeof(ngx_http_feed_pull_set_t));
    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = user;
    fp.data = &set;

    rc = ngx_http_feed_authors_all(client, database, NGX_HTTP_FEED_PULL_FEW,
                                   ngx_http_feed_pull_candidate, &set,
                                   error);

    if (rc == NGX_OK && set.n) {
        /* the pull authors the user follows */
        fp.among = set.users;
        fp.namong = set.n;
        fp.each = ngx_http_feed_pull_followee;

        rc = ngx_http_feed_pull_set_authors(&set, set.n)
             ? ngx_http_feed_follows_page(client, database, &fp, error)
             : NGX_ERROR;

    } else if (rc == NGX_DECLINED) {
        /* many pull authors: the user's followees, each looked up */
        ngx_http_feed_pull_set_free(&set);
        fp.each = ngx_http_feed_pull_followee_all;

        rc = ngx_http_feed_follows_page(client, database, &fp, error);

        if (rc != NGX_ERROR && set.n) {
            rc = ngx_http_feed_pull_set_authors(&set, set.n)
                 ? ngx_http_feed_authors_pulled(client, database, set.users,
                                                set.n,
                                                ngx_http_feed_pull_author,
                                                &set, error)
                 : NGX_ERROR;
        }
    }

    ngx_http_feed_pull_set_free(&set);

    if (rc == NGX_ERROR) {
        bson_free(set.authors);
        return NGX_ERROR;
    }

    *authors = set.authors;
    *len = set.len;

    return NGX_OK;
}


static ngx_uint_t
ngx_http_feed_pull_set_authors(ngx_http_feed_pull_set_t *set, size_t n)
{
    set->authors = bson_malloc(n * (NGX_HTTP_FEED_USER_MAX + 1));

    return set->authors != NULL;
}


static void
ngx_http_feed_pull_set_free(ngx_http_feed_pull_set_t *set)
{
    size_t  i;

    for (i = 0; i < set->n; i++) {
        bson_free(set->users[i]);
    }

    bson_free(set->users);

    set->users = NULL;
    set->n = 0;
    set->size = 0;
}


/* a pull author, or any followee: kept for the next query */

static ngx_int_t
ngx_http_feed_pull_candidate(void *data, ngx_http_feed_user_t *user)
{
    ngx_http_feed_pull_set_t  *set = data;

    if (set->n == set->size) {
        set->size = set->size ? 2 * set->size : 64;
        set->users = bson_realloc(set->users, set->size * sizeof(char *));
    }

    set->users[set->n++] = bson_strdup(user->data);

    return NGX_OK;
}


static ngx_int_t
ngx_http_feed_pull_followee_all(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    return ngx_http_feed_pull_candidate(data, user);
}


/* a followee who is a pull author: into the answer */

static ngx_int_t
ngx_http_feed_pull_followee(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    return ngx_http_feed_pull_author(data, user);
}


static ngx_int_t
ngx_http_feed_pull_author(void *data, ngx_http_feed_user_t *user)
{
    ngx_http_feed_pull_set_t  *set = data;

    if (set->len) {
        set->authors[set->len++] = ' ';
    }

    ngx_memcpy(set->authors + set->len, user->data, user->len);
    set->len += user->len;

    return NGX_OK;
}


/*
 * A pull author's list is missing from a copy (a Redis restart, no post
 * for a long time, the author just turned, a new master): made from the
 * newest posts in MongoDB, once per author and copy at a time in this
 * worker, whoever asks.  handler (may be NULL) is called when it is done.
 */

ngx_int_t
ngx_http_feed_pull_load(ngx_http_feed_main_conf_t *fmcf, ngx_str_t *copy,
    ngx_http_feed_user_t *author, ngx_http_feed_pull_loaded_pt handler,
    void *data)
{
    ngx_pool_t                   *pool;
    ngx_queue_t                  *q;
    ngx_http_feed_pull_load_t    *ld;
    ngx_http_feed_mongo_task_t   *t;
    ngx_http_feed_pull_waiter_t  *w;

    ld = NULL;

    for (q = ngx_queue_head(&ngx_http_feed_pull_loads);
         q != ngx_queue_sentinel(&ngx_http_feed_pull_loads);
         q = ngx_queue_next(q))
    {
        ld = ngx_queue_data(q, ngx_http_feed_pull_load_t, queue);

        if (ld->author.len == author->len
            && ngx_strcmp(ld->author.data, author->data) == 0
            && ld->copy.len == copy->len
            && ngx_strncmp(ld->copy.data, copy->data, copy->len) == 0)
        {
            break;
        }

        ld = NULL;
    }

    if (ld == NULL) {
        pool = ngx_create_pool(4096, ngx_cycle->log);
        if (pool == NULL) {
            return NGX_ERROR;
        }

        ld = ngx_pcalloc(pool, sizeof(ngx_http_feed_pull_load_t));

        if (ld == NULL
            || ngx_array_init(&ld->waiters, pool, 4,
                              sizeof(ngx_http_feed_pull_waiter_t))
               != NGX_OK)
        {
            ngx_destroy_pool(pool);
            return NGX_ERROR;
        }

        ld->pool = pool;
        ld->fmcf = fmcf;
        ld->author = *author;
        ld->limit = fmcf->cache_size;

        ld->copy.len = copy->len;
        ld->copy.data = ngx_pstrdup(pool, copy);

        if (ld->copy.data == NULL && copy->len) {
            ngx_destroy_pool(pool);
            return NGX_ERROR;
        }

        t = ngx_http_feed_mongo_task(pool, fmcf->mongo_client,
                                     ngx_http_feed_pull_load_run,
                                     ngx_http_feed_pull_load_done, ld);

        if (t == NULL || ngx_http_feed_mongo_post(t) != NGX_OK) {
            ngx_destroy_pool(pool);
            return NGX_ERROR;
        }

        ngx_queue_insert_tail(&ngx_http_feed_pull_loads, &ld->queue);

        ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "feed pull list of \"%s\" loading%V", author->data,
                       copy);
    }

    if (handler) {
        w = ngx_array_push(&ld->waiters);
        if (w == NULL) {
            return NGX_ERROR;
        }

        w->handler = handler;
        w->data = data;
    }

    return NGX_OK;
}


static void
ngx_http_feed_pull_load_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_pull_load_t  *ld = t->data;

    char                         next[25];
    ngx_int_t                    rc;
    ngx_http_feed_posts_range_t  range;

    ngx_memzero(&range, sizeof(ngx_http_feed_posts_range_t));
    range.limit = ld->limit;

    ld->items = bson_new();

    rc = ngx_http_feed_posts_list(client, t->database, &ld->author, &range,
                                  ld->items, next, &t->error);

    ld->complete = (rc == NGX_OK);
    t->rc = (rc == NGX_ERROR) ? NGX_ERROR : NGX_OK;
}


static void
ngx_http_feed_pull_load_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_pull_load_t  *ld = t->data;

    if (t->rc != NGX_OK) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "pull list of \"%s\" not loaded: %s",
                      ld->author.data, t->error.message);
        ngx_http_feed_pull_load_end(ld, NGX_ERROR);
        return;
    }

    if (ngx_http_feed_timeline_pull_warm(ld->fmcf, ld->pool, &ld->copy,
                                         &ld->author, ld->items, ld->complete,
                                         ngx_http_feed_pull_warmed, ld)
        != NGX_OK)
    {
        ngx_http_feed_pull_load_end(ld, NGX_ERROR);
    }
}


static void
ngx_http_feed_pull_warmed(void *data, redisReply *reply)
{
    ngx_http_feed_pull_load_t  *ld = data;

    /* 0: nothing could be made (every post was being deleted) */

    if (reply && reply->type == REDIS_REPLY_INTEGER && reply->integer == 1) {
        ngx_http_feed_stat(pull_loads, 1);
        ngx_http_feed_pull_load_end(ld, NGX_OK);
        return;
    }

    ngx_http_feed_pull_load_end(ld, NGX_ERROR);
}


static void
ngx_http_feed_pull_load_end(ngx_http_feed_pull_load_t *ld, ngx_int_t rc)
{
    ngx_uint_t                    i;
    ngx_http_feed_pull_waiter_t  *w;

    ngx_log_debug3(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed pull list of \"%s\"%V %s", ld->author.data,
                   &ld->copy, rc == NGX_OK ? "loaded" : "not loaded");

    ngx_queue_remove(&ld->queue);

    w = ld->waiters.elts;

    for (i = 0; i < ld->waiters.nelts; i++) {
        w[i].handler(w[i].data, rc);
    }

    if (ld->items) {
        bson_destroy(ld->items);
    }

    ngx_destroy_pool(ld->pool);
}


/* feed_status: this worker's counters, and the count of pull authors */

ngx_int_t
ngx_http_feed_pull_status(bson_t *doc, ngx_http_feed_main_conf_t *fmcf,
    int64_t authors)
{
    bson_t  sub;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "pull", &sub)) {
        return NGX_ERROR;
    }

    if (fmcf->pull_threshold) {
        BSON_APPEND_INT64(&sub, "threshold", fmcf->pull_threshold);

    } else {
        BSON_APPEND_NULL(&sub, "threshold");
    }

    if (authors >= 0) {
        BSON_APPEND_INT64(&sub, "authors", authors);

    } else {
        BSON_APPEND_NULL(&sub, "authors");
    }

    ngx_http_feed_pull_counters(&sub, &ngx_http_feed_stats);

    if (ngx_http_feed_timeline_watch_status(&sub) != NGX_OK) {
        return NGX_ERROR;
    }

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


/* the node's counters (all workers), in its part of feed_status */

ngx_int_t
ngx_http_feed_pull_node_status(bson_t *doc, ngx_http_feed_stats_t *st)
{
    bson_t  sub;

    if (!BSON_APPEND_DOCUMENT_BEGIN(doc, "pull", &sub)) {
        return NGX_ERROR;
    }

    ngx_http_feed_pull_counters(&sub, st);

    return bson_append_document_end(doc, &sub) ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_feed_pull_counters(bson_t *doc, ngx_http_feed_stats_t *st)
{
    BSON_APPEND_INT64(doc, "listed", (int64_t) st->pull_listed);
    BSON_APPEND_INT64(doc, "reads", (int64_t) st->pull_reads);
    BSON_APPEND_INT64(doc, "pulled", (int64_t) st->pull_pulled);
    BSON_APPEND_INT64(doc, "merge_us", (int64_t) st->pull_merge_us);
    BSON_APPEND_DOUBLE(doc, "pulled_per_read",
                       st->pull_reads ? (double) st->pull_pulled
                                        / st->pull_reads
                                      : 0.0);
    BSON_APPEND_DOUBLE(doc, "merge_us_per_read",
                       st->pull_reads ? (double) st->pull_merge_us
                                        / st->pull_reads
                                      : 0.0);
    BSON_APPEND_INT64(doc, "loads", (int64_t) st->pull_loads);
    BSON_APPEND_INT64(doc, "to_pull", (int64_t) st->pull_to_pull);
    BSON_APPEND_INT64(doc, "to_push", (int64_t) st->pull_to_push);
    BSON_APPEND_INT64(doc, "vouched", (int64_t) st->pull_vouched);
}
