
/*
 * ngx_feed_module: the authors store: the push/pull mode of authors, kept
 * with their counters in MongoDB (ngx_http_feed_pull.c says how the mode
 * moves).  Runs in thread pool tasks.
 */


#ifndef _NGX_HTTP_FEED_AUTHORS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_AUTHORS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/* an author's mode: no document is push */
#define NGX_HTTP_FEED_AUTHOR_PUSH       0
#define NGX_HTTP_FEED_AUTHOR_SWITCHING  's'     /* push, turning to pull */
#define NGX_HTTP_FEED_AUTHOR_PULL       'p'
#define NGX_HTTP_FEED_AUTHOR_BOTH       'b'     /* push, and listed */


typedef struct {
    int64_t                       followers;
    u_char                        mode;
    char                          token[25];  /* the post turning it */
    int64_t                       changed;    /* ms since the epoch */
} ngx_http_feed_author_mode_t;


/* called for each pull author found; NGX_OK goes on */
typedef ngx_int_t (*ngx_http_feed_authors_pt)(void *data,
    ngx_http_feed_user_t *user);


int64_t ngx_http_feed_authors_now(void);
ngx_int_t ngx_http_feed_authors_get(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_author_mode_t *mode, bson_error_t *error);
ngx_int_t ngx_http_feed_authors_set(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *user,
    ngx_http_feed_author_mode_t *from, ngx_http_feed_author_mode_t *to,
    ngx_uint_t *changed, bson_error_t *error);
ngx_int_t ngx_http_feed_authors_pulled(mongoc_client_t *client,
    const char *database, char **users, size_t n,
    ngx_http_feed_authors_pt each, void *data, bson_error_t *error);
ngx_int_t ngx_http_feed_authors_all(mongoc_client_t *client,
    const char *database, size_t max, ngx_http_feed_authors_pt each,
    void *data, bson_error_t *error);
ngx_int_t ngx_http_feed_authors_count(mongoc_client_t *client,
    const char *database, int64_t *n, bson_error_t *error);


#endif /* _NGX_HTTP_FEED_AUTHORS_STORE_H_INCLUDED_ */
