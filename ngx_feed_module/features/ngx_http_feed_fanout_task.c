
/*
 * ngx_feed_module: fanout's thread side: what it reads from MongoDB (in
 * thread pool tasks): the post, and the author's followers a page at a
 * time, newest relationship first, from the follows store.
 */


#include "ngx_http_feed_fanout.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_pull.h"
#include "ngx_http_feed_model.h"


static ngx_int_t ngx_http_feed_fanout_post(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_followers(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_follower(void *data,
    ngx_http_feed_user_t *user, int64_t created);
static ngx_int_t ngx_http_feed_fanout_model_add(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    ngx_http_feed_user_t *users, size_t n, bson_error_t *error);
static ngx_int_t ngx_http_feed_fanout_landed(mongoc_client_t *client,
    const char *database, ngx_http_feed_fanout_page_t *page,
    bson_error_t *error);


void
ngx_http_feed_fanout_page_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_fanout_page_t  *page = t->data;

    ngx_uint_t  alive;

    t->rc = NGX_ERROR;

    if (page->want_post) {
        if (ngx_http_feed_fanout_post(client, t->database, page, &t->error)
            != NGX_OK)
        {
            return;
        }

        if (!page->found) {
            t->rc = NGX_OK;
            return;
        }

        if (ngx_http_feed_pull_decide(client, t->database, &page->author,
                                      page->post_id, page->pull_threshold,
                                      page->pull_stale, &page->pull,
                                      &page->to_push, &t->error)
            != NGX_OK)
        {
            return;
        }

        /* the author's own timeline in the model, whatever the followers get */

        if (page->model.ops
            && ngx_http_feed_fanout_model_add(client, t->database, page,
                                              &page->author, 1, &t->error)
               != NGX_OK)
        {
            return;
        }

    } else if (page->removing && page->model.ops && !page->has_cursor) {
        bson_oid_t  oid;

        bson_oid_init_from_string(&oid, page->post_id);

        if (ngx_http_feed_model_remove(client, t->database,
                                       &page->model, &oid, &t->error)
            != NGX_OK)
        {
            return;
        }

    } else if (page->pull == NGX_HTTP_FEED_PULL_TURN
               && ngx_http_feed_pull_turn(client, t->database,
                                          &page->author, page->post_id, 0,
                                          &alive, &t->error)
                  != NGX_OK)
    {
        return;
    }

    if (page->pull == NGX_HTTP_FEED_PULL_LIST) {
        /* a pull author's post: no follower is read */
        t->rc = ngx_http_feed_fanout_landed(client, t->database, page,
                                            &t->error);
        return;
    }

    if (page->limit == 0) {
        t->rc = ngx_http_feed_fanout_landed(client, t->database, page,
                                            &t->error);
        return;
    }

    t->rc = ngx_http_feed_fanout_followers(client, t->database, page,
                                           &t->error);

    if (t->rc == NGX_OK && page->model.ops && !page->removing
        && page->nusers)
    {
        t->rc = ngx_http_feed_fanout_model_add(client, t->database, page,
                                               page->users, page->nusers,
                                               &t->error);
    }

    if (t->rc == NGX_OK && page->nusers < page->limit) {
        /* the last page */
        t->rc = ngx_http_feed_fanout_landed(client, t->database, page,
                                            &t->error);
    }
}


/*
 * Every timeline in the model has the post (feed_timeline_store): it is
 * no longer in flight, and their reads stop looking for it
 * (ngx_http_feed_timeline_model.c).  Only once they all have it: until
 * then, a read of a timeline that lacks it finds it in flight.
 */

static ngx_int_t
ngx_http_feed_fanout_landed(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, bson_error_t *error)
{
    bson_oid_t  oid;

    if (!page->model.ops || page->removing) {
        return NGX_OK;
    }

    bson_oid_init_from_string(&oid, page->post_id);

    return ngx_http_feed_posts_landed(client, database, &oid, error);
}


/*
 * The post into the timelines in the model of these users who have one
 * (feed_timeline_store), once
 */

static ngx_int_t
ngx_http_feed_fanout_model_add(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, ngx_http_feed_user_t *users, size_t n,
    bson_error_t *error)
{
    bson_t  entry;

    if (page->model_entry == NULL) {
        if (page->json == NULL) {
            bson_set_error(error, 0, 0, "the post for the model is not read");
            return NGX_ERROR;
        }

        if (ngx_http_feed_model_entry(page->json, page->json_len,
                                      page->model.embed, &entry)
            != NGX_OK)
        {
            bson_set_error(error, 0, 0, "the post for the model is not valid");
            return NGX_ERROR;
        }

        page->model_entry = bson_copy(&entry);
        bson_destroy(&entry);
    }

    return ngx_http_feed_model_add(client, database, &page->model, users,
                                   n, page->model_entry, error);
}


/* the post as the cache keeps it; not found when absent or deleted */

static ngx_int_t
ngx_http_feed_fanout_post(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, bson_error_t *error)
{
    bson_oid_t  oid;

    bson_oid_init_from_string(&oid, page->post_id);

    return ngx_http_feed_posts_get(client, database, &oid, &page->found,
                                   &page->json, &page->json_len, error);
}


static ngx_int_t
ngx_http_feed_fanout_followers(mongoc_client_t *client, const char *database,
    ngx_http_feed_fanout_page_t *page, bson_error_t *error)
{
    ngx_int_t                      rc;
    ngx_http_feed_follows_page_t   fp;

    ngx_memzero(&fp, sizeof(ngx_http_feed_follows_page_t));
    fp.user = &page->author;
    fp.followers = 1;
    fp.has_after = page->has_cursor;
    fp.after_created = page->cursor_created;
    fp.after_user = &page->cursor_src;
    fp.batch = page->limit;
    fp.each = ngx_http_feed_fanout_follower;
    fp.data = page;

    page->users = bson_malloc(page->limit * sizeof(ngx_http_feed_user_t));
    page->nusers = 0;

    rc = ngx_http_feed_follows_page(client, database, &fp, error);

    page->skipped += fp.skipped;

    return rc == NGX_ERROR ? NGX_ERROR : NGX_OK;
}


/* NGX_DONE: the page is full */

static ngx_int_t
ngx_http_feed_fanout_follower(void *data, ngx_http_feed_user_t *user,
    int64_t created)
{
    ngx_http_feed_fanout_page_t  *page = data;

    page->users[page->nusers++] = *user;

    page->cursor_src = *user;
    page->cursor_created = created;

    return page->nusers < page->limit ? NGX_OK : NGX_DONE;
}
