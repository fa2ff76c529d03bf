
/*
 * ngx_feed_module: fanout's part of the push/pull hybrid
 * (ngx_http_feed_pull.c): a pull author's post into the author's list
 * (made from MongoDB first when it is missing), a deleted post out of it,
 * and the end of the post that turned its author to pull.
 */


#include "ngx_http_feed_fanout_entry.h"
#include "ngx_http_feed_timeline_cache.h"
#include "ngx_http_feed_pull.h"


/* one copy of the author's list that a post goes into */
typedef struct {
    ngx_http_feed_fanout_entry_t  *fe;
    ngx_str_t                      copy;
    unsigned                       loaded:1;
} ngx_http_feed_fanout_copy_t;


static void ngx_http_feed_fanout_list_copy(void *data, u_char *copy,
    size_t len);
static void ngx_http_feed_fanout_list_add(ngx_http_feed_fanout_copy_t *fc);
static void ngx_http_feed_fanout_listed(void *data, redisReply *reply);
static void ngx_http_feed_fanout_list_loaded(void *data, ngx_int_t rc);
static void ngx_http_feed_fanout_unlist_copy(void *data, u_char *copy,
    size_t len);
static void ngx_http_feed_fanout_unlisted(void *data, redisReply *reply);
static void ngx_http_feed_fanout_turn_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static void ngx_http_feed_fanout_turn_done(ngx_http_feed_mongo_task_t *t);


/*
 * A pull author's post (or one of an author turning either way) into the
 * author's list, in each of its copies (one per master on a cluster).  A
 * missing copy is loaded from MongoDB first, and the post added again
 * after: the load may have begun before it was stored.  With no copy to
 * write (a cluster's map not known yet), the entry is tried again later.
 */

void
ngx_http_feed_fanout_list(ngx_http_feed_fanout_entry_t *fe)
{
    if (ngx_http_feed_timeline_pull_copies(fe->fo->fmcf,
                                           ngx_http_feed_fanout_list_copy, fe)
        == 0)
    {
        ngx_http_feed_fanout_failing(fe, "redis unavailable");
    }
}


static void
ngx_http_feed_fanout_list_copy(void *data, u_char *copy, size_t len)
{
    ngx_http_feed_fanout_entry_t  *fe = data;

    ngx_http_feed_fanout_copy_t  *fc;

    fc = ngx_pcalloc(fe->pool, sizeof(ngx_http_feed_fanout_copy_t) + len);
    if (fc == NULL) {
        ngx_http_feed_fanout_failing(fe, "out of memory");
        return;
    }

    fc->fe = fe;
    fc->copy.len = len;
    fc->copy.data = (u_char *) (fc + 1);
    ngx_memcpy(fc->copy.data, copy, len);

    ngx_http_feed_fanout_list_add(fc);
}


static void
ngx_http_feed_fanout_list_add(ngx_http_feed_fanout_copy_t *fc)
{
    ngx_http_feed_fanout_entry_t  *fe = fc->fe;

    if (ngx_http_feed_timeline_pull_add(fe->fo->fmcf, &fc->copy,
                                        &fe->page.author, &fe->pull_entry,
                                        ngx_http_feed_fanout_listed, fc)
        != NGX_OK)
    {
        ngx_http_feed_fanout_failing(fe, "redis unavailable");
        return;
    }

    fe->waiting++;
}


static void
ngx_http_feed_fanout_listed(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_copy_t  *fc = data;

    ngx_http_feed_fanout_entry_t  *fe = fc->fe;

    fe->waiting--;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_feed_timeline_cache_error(reply);
        ngx_http_feed_fanout_failing(fe, reply && reply->str ? reply->str
                                                 : "redis unavailable");

    } else if (reply->integer >= 0) {
        ngx_log_debug3(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                       "feed fanout entry %s: %s the author's list%V",
                       fe->sid, reply->integer ? "into" : "already in",
                       &fc->copy);

        ngx_http_feed_stat(pull_listed, reply->integer);

    } else if (!fc->loaded
               && ngx_http_feed_pull_load(fe->fo->fmcf, &fc->copy,
                                          &fe->page.author,
                                          ngx_http_feed_fanout_list_loaded,
                                          fc)
                  == NGX_OK)
    {
        fc->loaded = 1;
        fe->waiting++;
        return;

    } else {
        ngx_http_feed_fanout_failing(fe, "the author's list cannot be made");
    }

    ngx_http_feed_fanout_settle(fe);
}


static void
ngx_http_feed_fanout_list_loaded(void *data, ngx_int_t rc)
{
    ngx_http_feed_fanout_copy_t  *fc = data;

    ngx_http_feed_fanout_entry_t  *fe = fc->fe;

    fe->waiting--;

    if (rc != NGX_OK) {
        ngx_http_feed_fanout_failing(fe, "the author's list cannot be made");

    } else {
        ngx_http_feed_fanout_list_add(fc);
    }

    ngx_http_feed_fanout_settle(fe);
}


/* a deleted post out of each copy of its author's list, if there is one */

void
ngx_http_feed_fanout_unlist(ngx_http_feed_fanout_entry_t *fe)
{
    if (ngx_http_feed_timeline_pull_copies(fe->fo->fmcf,
                                           ngx_http_feed_fanout_unlist_copy,
                                           fe)
        == 0)
    {
        ngx_http_feed_fanout_failing(fe, "redis unavailable");
    }
}


static void
ngx_http_feed_fanout_unlist_copy(void *data, u_char *copy, size_t len)
{
    ngx_http_feed_fanout_entry_t  *fe = data;

    ngx_str_t  c;

    c.len = len;
    c.data = copy;

    if (ngx_http_feed_timeline_pull_remove(fe->fo->fmcf, &c, &fe->page.author,
                                           fe->page.post_id,
                                           ngx_http_feed_fanout_unlisted, fe)
        != NGX_OK)
    {
        ngx_http_feed_fanout_failing(fe, "redis unavailable");
        return;
    }

    fe->waiting++;
}


static void
ngx_http_feed_fanout_unlisted(void *data, redisReply *reply)
{
    ngx_http_feed_fanout_entry_t  *fe = data;

    fe->waiting--;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        ngx_http_feed_fanout_failing(fe, reply && reply->str ? reply->str
                                                 : "redis unavailable");
    }

    ngx_http_feed_fanout_settle(fe);
}


/*
 * The post that turns its author to pull reached every follower, each of
 * whom merges the author's list now: the author is pull.
 */

void
ngx_http_feed_fanout_turn(ngx_http_feed_fanout_entry_t *fe)
{
    ngx_http_feed_mongo_task_t  *t;

    t = ngx_http_feed_mongo_task(fe->pool, fe->fo->fmcf->mongo_client,
                                 ngx_http_feed_fanout_turn_run,
                                 ngx_http_feed_fanout_turn_done, fe);

    if (t == NULL) {
        ngx_http_feed_fanout_fail(fe, "out of memory");
        return;
    }

    if (ngx_http_feed_mongo_post(t) != NGX_OK) {
        ngx_http_feed_fanout_fail(fe, "thread pool queue overflow");
        return;
    }

    fe->fetching = 1;
}


static void
ngx_http_feed_fanout_turn_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_fanout_entry_t  *fe = t->data;

    t->rc = ngx_http_feed_pull_turn(client, t->database, &fe->page.author,
                                    fe->page.post_id, 1, &fe->turn_changed,
                                    &t->error);
}


static void
ngx_http_feed_fanout_turn_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_fanout_entry_t  *fe = t->data;

    fe->fetching = 0;

    if (t->rc != NGX_OK) {
        ngx_http_feed_fanout_failing(fe, t->error.message);

    } else {
        fe->turned = 1;

        if (fe->turn_changed) {
            ngx_http_feed_stat(pull_to_pull, 1);
        }

        ngx_log_debug3(NGX_LOG_DEBUG_CORE, fe->fo->log, 0,
                       "feed fanout entry %s: \"%s\" %s", fe->sid,
                       fe->page.author.data,
                       fe->turn_changed ? "is a pull author now"
                                        : "was turned by another post");
    }

    ngx_http_feed_fanout_settle(fe);
}
