
/*
 * ngx_feed_module: posts, the content store, and the fanout queue.
 */


#ifndef _NGX_HTTP_FEED_POST_H_INCLUDED_
#define _NGX_HTTP_FEED_POST_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_posts_store.h"


/* an Idempotency-Key: 1 to 64 characters, up to 4 bytes each in UTF-8 */
#define NGX_HTTP_FEED_POST_KEY_MAX   64
#define NGX_HTTP_FEED_POST_KEY_SIZE  (4 * NGX_HTTP_FEED_POST_KEY_MAX + 1)


/*
 * A new post: checked on the loop, inserted by a thread.  The document is
 * on the heap: libbson declares bson_t 128-byte aligned, which memory from
 * an nginx pool is not (gcc moves such fields with aligned SSE moves).
 */
typedef struct {
    bson_oid_t                    id;
    ngx_http_feed_user_t          author;
    int64_t                       ts;
    bson_t                       *doc;

    /* with an Idempotency-Key: the key, the content's sha1 in hex */
    ngx_uint_t                    keyed;
    char                          key[NGX_HTTP_FEED_POST_KEY_SIZE];
    char                          hash[41];

    /*
     * what the keyed task did: NGX_OK made the post, NGX_DONE found it
     * made (doc, id and ts are then the stored post's), NGX_DECLINED the
     * key is another content's, NGX_ABORT its post was deleted
     */
    ngx_int_t                     outcome;

    /*
     * feed_timeline_store's model (0: none): the post is stored in flight,
     * until fanout has put it in every timeline of the model
     */
    ngx_uint_t                    model;
} ngx_http_feed_post_new_t;


/* reads and deletes, run in a thread */
typedef struct {
    ngx_http_feed_user_t          author;
    bson_oid_t                    id;

    /* an author's page: at most limit posts, max_id > id > since_id */
    ngx_uint_t                    limit;
    ngx_uint_t                    has_max;
    ngx_uint_t                    has_since;
    bson_oid_t                    max_id;
    bson_oid_t                    since_id;

    /*
     * who reads an author's page (feed_identity), and whether the author
     * blocks them: then the page is refused
     */
    ngx_uint_t                    has_reader;
    ngx_http_feed_user_t          reader;
    ngx_uint_t                    blocked;

    /* the time of a delete in ms, from which its fanout is scheduled */
    int64_t                       now;

    /* the post asked for or deleted exists */
    ngx_uint_t                    found;

    /* the page has a next one, which begins after the id in next */
    ngx_uint_t                    has_next;
    char                          next[25];

    /* the answer, bson_malloc()ed by the thread, freed on the loop */
    char                         *json;
    size_t                        json_len;
} ngx_http_feed_post_op_t;


extern ngx_http_feed_handler_t  ngx_http_feed_posts_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_post_handler;
extern ngx_http_feed_handler_t  ngx_http_feed_user_post_handler;


ngx_int_t ngx_http_feed_post_parse(ngx_http_feed_main_conf_t *fmcf,
    u_char *p, size_t len, ngx_http_feed_post_new_t *np,
    ngx_http_feed_error_t *err);
bson_t *ngx_http_feed_post_doc(ngx_http_feed_post_new_t *np,
    const bson_t *content);
int64_t ngx_http_feed_post_oid(bson_oid_t *oid, int64_t ms);
ngx_int_t ngx_http_feed_post_key(ngx_http_request_t *r,
    ngx_http_feed_post_new_t *np, const ngx_http_feed_error_t **err);
ngx_int_t ngx_http_feed_post_hash(ngx_http_feed_post_new_t *np,
    ngx_log_t *log);

void ngx_http_feed_post_insert_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
void ngx_http_feed_post_keyed_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
void ngx_http_feed_post_get_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
void ngx_http_feed_post_list_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
void ngx_http_feed_post_delete_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);


#endif /* _NGX_HTTP_FEED_POST_H_INCLUDED_ */
