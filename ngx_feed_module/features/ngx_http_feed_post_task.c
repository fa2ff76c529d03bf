
/*
 * ngx_feed_module: posts, thread side: what each posts request does in a
 * thread pool task, through the posts store, and the answer's JSON, made
 * there so that the loop only copies it out.
 */


#include "ngx_http_feed_post.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_json.h"


void
ngx_http_feed_post_insert_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_new_t  *np = t->data;

    t->rc = ngx_http_feed_posts_insert(client, t->database, np->doc, np->ts,
                                       np->model, &t->error);
}


void
ngx_http_feed_post_get_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    t->rc = ngx_http_feed_posts_get(client, t->database, &op->id, &op->found,
                                    &op->json, &op->json_len, &t->error);
}


/*
 * The author's own posts, newest first, between max_id and since_id; none
 * for a reader the author blocks
 */

void
ngx_http_feed_post_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    bson_t                        doc, items;
    ngx_int_t                     rc;
    ngx_http_feed_posts_range_t   range;

    if (op->has_reader) {
        t->rc = ngx_http_feed_filters_blocked(client, t->database,
                                              &op->author, &op->reader, 0,
                                              &op->blocked, &t->error);
        if (t->rc != NGX_OK || op->blocked) {
            return;
        }
    }

    range.max_id = op->has_max ? &op->max_id : NULL;
    range.since_id = op->has_since ? &op->since_id : NULL;
    range.limit = op->limit;
    range.window = NULL;
    range.cut = NULL;

    bson_init(&doc);
    bson_init(&items);

    rc = ngx_http_feed_posts_list(client, t->database, &op->author, &range,
                                  &items, op->next, &t->error);

    op->has_next = (rc == NGX_AGAIN);

    t->rc = NGX_ERROR;

    if (rc != NGX_ERROR) {
        BSON_APPEND_ARRAY(&doc, "items", &items);

        if (op->has_next) {
            BSON_APPEND_UTF8(&doc, "next", op->next);

        } else {
            BSON_APPEND_NULL(&doc, "next");
        }

        op->json = ngx_http_feed_json_text(&doc, &op->json_len);
        t->rc = op->json ? NGX_OK : NGX_ERROR;
    }

    bson_destroy(&items);
    bson_destroy(&doc);
}


void
ngx_http_feed_post_delete_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_http_feed_post_op_t  *op = t->data;

    t->rc = ngx_http_feed_posts_delete(client, t->database, &op->id,
                                       &op->author, op->now, &op->found,
                                       &t->error);
}

