
/*
 * ngx_feed_module: the module's MongoDB indexes, created at start-up.
 *
 * createIndexes is idempotent, so the first worker simply sends it at
 * every start; when MongoDB is not there yet it tries again later.  The
 * same can be done by hand, see docs/storage.md.
 */


#include "ngx_http_feed_schema.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_follows_store.h"
#include "ngx_http_feed_filters_store.h"
#include "ngx_http_feed_posts_store.h"
#include "ngx_http_feed_idempotency_store.h"
#include "ngx_http_feed_effects_store.h"
#include "ngx_http_feed_model.h"


#define NGX_HTTP_FEED_SCHEMA_RETRY  5000


typedef struct {
    ngx_http_feed_mongo_task_t   *task;
    ngx_event_t                   retry;
    ngx_connection_t              dummy;
    ngx_log_t                    *log;
    ngx_uint_t                    model;      /* feed_timeline_store */
} ngx_http_feed_schema_t;


static void ngx_http_feed_schema_post(ngx_http_feed_schema_t *s);
static void ngx_http_feed_schema_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client);
static ngx_int_t ngx_http_feed_schema_create(mongoc_database_t *db,
    ngx_http_feed_mongo_indexes_t *store, bson_error_t *error);
static void ngx_http_feed_schema_done(ngx_http_feed_mongo_task_t *t);
static void ngx_http_feed_schema_retry(ngx_event_t *ev);


static ngx_http_feed_schema_t  ngx_http_feed_schema;


/* the stores, each the owner of its collection and of its indexes */

static ngx_http_feed_mongo_indexes_t  *ngx_http_feed_schema_stores[] = {
    &ngx_http_feed_follows_indexes,
    &ngx_http_feed_follow_counts_indexes,
    &ngx_http_feed_filters_indexes,
    &ngx_http_feed_posts_indexes,
    &ngx_http_feed_idempotency_indexes,
    &ngx_http_feed_effects_indexes,
    NULL
};


ngx_int_t
ngx_http_feed_schema_init(ngx_cycle_t *cycle, ngx_http_feed_mongo_t *m,
    ngx_uint_t model)
{
    ngx_http_feed_schema_t  *s = &ngx_http_feed_schema;

    /* one worker is enough */

    if (m == NULL || ngx_worker != 0) {
        return NGX_OK;
    }

    s->log = cycle->log;
    s->model = model;
    s->dummy.fd = (ngx_socket_t) -1;

    s->retry.handler = ngx_http_feed_schema_retry;
    s->retry.data = &s->dummy;
    s->retry.log = cycle->log;
    s->retry.cancelable = 1;

    s->task = ngx_http_feed_mongo_task(cycle->pool, m,
                                       ngx_http_feed_schema_run,
                                       ngx_http_feed_schema_done, s);
    if (s->task == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_schema_post(s);

    return NGX_OK;
}


void
ngx_http_feed_schema_exit(void)
{
    if (ngx_http_feed_schema.retry.timer_set) {
        ngx_del_timer(&ngx_http_feed_schema.retry);
    }
}


static void
ngx_http_feed_schema_post(ngx_http_feed_schema_t *s)
{
    if (ngx_exiting) {
        return;
    }

    if (ngx_http_feed_mongo_post(s->task) != NGX_OK) {
        ngx_add_timer(&s->retry, NGX_HTTP_FEED_SCHEMA_RETRY);
    }
}


/* each store's indexes, in turn, until one fails */

static void
ngx_http_feed_schema_run(ngx_http_feed_mongo_task_t *t,
    mongoc_client_t *client)
{
    ngx_uint_t                      i;
    mongoc_database_t              *db;
    ngx_http_feed_schema_t         *s = t->data;
    ngx_http_feed_mongo_indexes_t  *model;

    db = mongoc_client_get_database(client, t->database);

    t->rc = NGX_OK;

    for (i = 0; ngx_http_feed_schema_stores[i] && t->rc == NGX_OK; i++) {
        t->rc = ngx_http_feed_schema_create(db, ngx_http_feed_schema_stores[i],
                                            &t->error);
    }

    /*
     * The timelines in MongoDB: only the model in use gets its
     * collections, so that "read" leaves MongoDB without any
     */

    model = ngx_http_feed_model_indexes(s->model);

    if (model && t->rc == NGX_OK) {
        t->rc = ngx_http_feed_schema_create(db, model, &t->error);
    }

    mongoc_database_destroy(db);
}


static ngx_int_t
ngx_http_feed_schema_create(mongoc_database_t *db,
    ngx_http_feed_mongo_indexes_t *store, bson_error_t *error)
{
    bool     ok;
    bson_t  *indexes, cmd;

    indexes = bson_new_from_json((const uint8_t *) store->indexes, -1,
                                 error);
    if (indexes == NULL) {
        return NGX_ERROR;
    }

    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "createIndexes", store->collection);
    BSON_APPEND_ARRAY(&cmd, "indexes", indexes);

    ok = mongoc_database_write_command_with_opts(db, &cmd, NULL, NULL, error);

    bson_destroy(&cmd);
    bson_destroy(indexes);

    return ok ? NGX_OK : NGX_ERROR;
}


static void
ngx_http_feed_schema_done(ngx_http_feed_mongo_task_t *t)
{
    ngx_http_feed_schema_t  *s = t->data;

    if (t->rc == NGX_OK) {
        ngx_log_error(NGX_LOG_INFO, s->log, 0, "mongodb indexes ready");
        return;
    }

    ngx_log_error(NGX_LOG_WARN, s->log, 0,
                  "mongodb indexes not created, will retry: %s",
                  t->error.message);

    if (!ngx_exiting) {
        ngx_add_timer(&s->retry, NGX_HTTP_FEED_SCHEMA_RETRY);
    }
}


static void
ngx_http_feed_schema_retry(ngx_event_t *ev)
{
    ngx_http_feed_schema_post(&ngx_http_feed_schema);
}
