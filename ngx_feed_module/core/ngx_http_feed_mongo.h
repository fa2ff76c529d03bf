
/*
 * ngx_feed_module: MongoDB through a per-worker mongoc_client_pool_t,
 * used only from nginx thread pool tasks, never on the event loop.
 */


#ifndef _NGX_HTTP_FEED_MONGO_H_INCLUDED_
#define _NGX_HTTP_FEED_MONGO_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_util.h"

#include <mongoc.h>


/* MongoDB's error code of a query stopped at its maxTimeMS */
#define NGX_HTTP_FEED_MONGO_MAX_TIME_EXPIRED  50


typedef struct ngx_http_feed_mongo_task_s  ngx_http_feed_mongo_task_t;

/* runs in a thread: must touch no nginx pool, request, or log */
typedef void (*ngx_http_feed_mongo_run_pt)(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);

/* runs back on the event loop */
typedef void (*ngx_http_feed_mongo_done_pt)(ngx_http_feed_mongo_task_t *t);

/*
 * A request's task done well: what to answer, or NGX_DONE when a callback
 * answers later
 */
typedef ngx_int_t (*ngx_http_feed_mongo_answer_pt)(ngx_http_request_t *r,
    void *data);


struct ngx_http_feed_mongo_task_s {
    ngx_http_feed_mongo_run_pt    run;
    ngx_http_feed_mongo_done_pt   done;
    void                         *data;

    ngx_http_feed_mongo_t        *mongo;
    const char                   *database;
    ngx_http_request_t           *request;
    ngx_thread_task_t            *thread_task;

    /* keeps a graceful shutdown waiting for the task, as a timer must */
    ngx_event_t                   watchdog;

    /* past this (ms since the epoch) the task is not worth running */
    int64_t                       deadline;

    /* when it was posted, and how long it waited for a thread (ms) */
    int64_t                       posted;
    int64_t                       waited;

    /* a request's task: its answer when the task did not fail */
    ngx_http_feed_mongo_answer_pt answer;

    /* a background task's own pool, and what to call before freeing it */
    ngx_pool_t                   *pool;
    ngx_http_feed_mongo_done_pt   bg_done;

    /* results, written by run() */
    ngx_int_t                     rc;
    bson_error_t                  error;

    /*
     * run()'s bson_malloc()ed answer, for done() to free; freed here when
     * done() is not called: the request was terminated meanwhile
     */
    char                        **result;
};


/*
 * Called for each document of a list with its user and its time (0 when
 * not read): NGX_OK for the next one, any other value stops the list and
 * is what the list returns.
 */
typedef ngx_int_t (*ngx_http_feed_mongo_user_pt)(void *data,
    ngx_http_feed_user_t *user, int64_t time);


/* a store's indexes on its collection, made at start (schema.c) */
typedef struct {
    const char                   *collection;
    const char                   *indexes;    /* createIndexes', as JSON */
} ngx_http_feed_mongo_indexes_t;


char *ngx_http_feed_mongo_uri(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
ngx_int_t ngx_http_feed_mongo_init_conf(ngx_conf_t *cf,
    ngx_http_feed_mongo_conf_t *conf);
ngx_http_feed_mongo_t *ngx_http_feed_mongo_create(ngx_cycle_t *cycle,
    ngx_http_feed_mongo_conf_t *conf);
void ngx_http_feed_mongo_destroy(ngx_http_feed_mongo_t *m);

ngx_http_feed_mongo_task_t *ngx_http_feed_mongo_task(ngx_pool_t *pool,
    ngx_http_feed_mongo_t *m, ngx_http_feed_mongo_run_pt run,
    ngx_http_feed_mongo_done_pt done, void *data);
ngx_int_t ngx_http_feed_mongo_post(ngx_http_feed_mongo_task_t *t);
ngx_http_feed_mongo_task_t *ngx_http_feed_mongo_task_bg(
    ngx_http_feed_mongo_t *m, ngx_http_feed_mongo_run_pt run,
    ngx_http_feed_mongo_done_pt done);
ngx_int_t ngx_http_feed_mongo_post_bg(ngx_http_feed_mongo_task_t *t);
ngx_int_t ngx_http_feed_mongo_post_r(ngx_http_request_t *r,
    ngx_http_feed_mongo_task_t *t);
ngx_int_t ngx_http_feed_mongo_request(ngx_http_request_t *r,
    ngx_http_feed_mongo_run_pt run, ngx_http_feed_mongo_answer_pt answer,
    void *data, char **result);
ngx_int_t ngx_http_feed_mongo_send(ngx_http_request_t *r, char *json,
    size_t len, ngx_uint_t nl);
ngx_uint_t ngx_http_feed_mongo_error_is_transient(const bson_error_t *err);

ngx_int_t ngx_http_feed_mongo_find_one(mongoc_collection_t *coll,
    const bson_t *filter, const bson_t *projection, bson_t *doc,
    bson_error_t *error);
int64_t ngx_http_feed_bson_int(const bson_t *doc, const char *key);
ngx_int_t ngx_http_feed_bson_user(const bson_t *doc, const char *key,
    ngx_http_feed_user_t *user);
void ngx_http_feed_mongo_after(bson_t *filter, const char *time, int64_t t,
    const char *key, const char *k);
ngx_int_t ngx_http_feed_mongo_each_user(mongoc_collection_t *coll,
    const bson_t *filter, const bson_t *opts, const char *key,
    const char *time, ngx_http_feed_mongo_user_pt each, void *data,
    ngx_uint_t *skipped, bson_error_t *error);
void ngx_http_feed_mongo_upserted(const bson_t *reply, u_char *made,
    size_t n);
ngx_int_t ngx_http_feed_mongo_insert_new(mongoc_collection_t *coll,
    const bson_t *selector, const bson_t *fields, bson_error_t *error);
void ngx_http_feed_mongo_newest(bson_t *opts, const char *time,
    const char *key, ngx_uint_t batch);


#endif /* _NGX_HTTP_FEED_MONGO_H_INCLUDED_ */
