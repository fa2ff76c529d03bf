
/*
 * ngx_feed_module: the posts store, the only owner of the posts in
 * MongoDB: their documents, what "visible" means, and the outbox fields.
 */


#ifndef _NGX_HTTP_FEED_POSTS_STORE_H_INCLUDED_
#define _NGX_HTTP_FEED_POSTS_STORE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_util.h"


/*
 * MongoDB merges index scans for at most 200 values of an $in, beyond
 * that it sorts in memory: a timeline's authors are read in such chunks
 */
#define NGX_HTTP_FEED_POSTS_CHUNK   200

/* how long the request that stored a post has to enqueue it itself */
#define NGX_HTTP_FEED_OUTBOX_GRACE  3000


/*
 * A timeline's time window (feed_timeline_window): its posts are read
 * newer than the edge first, older ones only for a page not full yet.
 * Ranges copied from one another share it, so that every read of a page
 * says in "older" whether it went past the edge.
 */
typedef struct {
    bson_oid_t                    edge;       /* its second, then zeros */
    bson_oid_t                    above;      /* the lowest id above it */
    ngx_uint_t                    older;      /* set: read past the edge */
} ngx_http_feed_posts_window_t;


/*
 * The deadline of a timeline's reads in one thread (the models' fanout on
 * read): a chunk not read by then, or that fails, is left out, and the
 * page is partial; as long as no chunk of a read was, the next one is
 * waited for, and its last one has no deadline.  Ranges copied from one
 * another share it.
 */
typedef struct {
    int64_t                       at;         /* ms since the epoch */
    ngx_uint_t                    chunks;     /* chunks asked */
    ngx_uint_t                    read;       /* chunks read */
    ngx_uint_t                    round_read; /* of the read under way */
    ngx_uint_t                    late;       /* chunks left out */
} ngx_http_feed_posts_cut_t;


/* posts newest first, their ids below max_id and above since_id */
typedef struct {
    const bson_oid_t             *max_id;     /* NULL: from the newest */
    const bson_oid_t             *since_id;   /* NULL: back to the oldest */
    ngx_uint_t                    limit;

    /* a timeline's reads only (ngx_http_feed_posts_timeline), NULL: none */
    ngx_http_feed_posts_window_t *window;
    ngx_http_feed_posts_cut_t    *cut;
} ngx_http_feed_posts_range_t;


/* a post found, its JSON in its list's buf */
typedef struct {
    char                          id[25];     /* hex: compares as the id */
    size_t                        off;
    size_t                        len;
} ngx_http_feed_posts_found_item_t;


/*
 * Posts found, newest first, each as its id and its JSON as the API shows
 * it (ngx_http_feed_posts_chunk_read()); bson_malloc()ed, freed by
 * ngx_http_feed_posts_found_free()
 */
typedef struct {
    ngx_http_feed_posts_found_item_t *items;
    ngx_uint_t                    n;
    char                         *buf;
    size_t                        len;
    size_t                        size;
} ngx_http_feed_posts_found_t;


/* a post whose queue entries are overdue, claimed for the sweeper */
typedef struct {
    bson_oid_t                    id;
    ngx_http_feed_user_t          author;
    int64_t                       ts;
    ngx_uint_t                    awaits_post;
    ngx_uint_t                    awaits_delete;
} ngx_http_feed_posts_due_t;

typedef void (*ngx_http_feed_posts_due_pt)(void *data,
    ngx_http_feed_posts_due_t *due);


/* a post in flight: not in every timeline of the model yet */
typedef struct {
    bson_oid_t                    id;
    ngx_http_feed_user_t          author;
} ngx_http_feed_posts_flight_t;


extern ngx_http_feed_mongo_indexes_t  ngx_http_feed_posts_indexes;


ngx_int_t ngx_http_feed_posts_insert(mongoc_client_t *client,
    const char *database, const bson_t *post, int64_t now, ngx_uint_t model,
    bson_error_t *error);
ngx_int_t ngx_http_feed_posts_find(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_t **doc,
    bson_error_t *error);
ngx_int_t ngx_http_feed_posts_get(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, ngx_uint_t *found,
    char **json, size_t *len, bson_error_t *error);
ngx_int_t ngx_http_feed_posts_list(mongoc_client_t *client,
    const char *database, ngx_http_feed_user_t *author,
    ngx_http_feed_posts_range_t *range, bson_t *items, char *next,
    bson_error_t *error);
void ngx_http_feed_posts_window_init(ngx_http_feed_posts_window_t *window,
    time_t edge);
ngx_int_t ngx_http_feed_posts_timeline(mongoc_client_t *client,
    const char *database, char **authors, size_t n,
    ngx_http_feed_posts_range_t *range, bson_t *items, bson_error_t *error);
ngx_int_t ngx_http_feed_posts_chunk_read(mongoc_client_t *client,
    const char *database, char **authors, size_t n,
    ngx_http_feed_posts_range_t *range, int64_t max_time_ms,
    ngx_http_feed_posts_found_t *found, bson_error_t *error);
void ngx_http_feed_posts_found_free(ngx_http_feed_posts_found_t *found);
ngx_int_t ngx_http_feed_posts_by_ids(mongoc_client_t *client,
    const char *database, const bson_oid_t *ids, size_t n, bson_t *items,
    bson_error_t *error);
ngx_int_t ngx_http_feed_posts_in_flight(mongoc_client_t *client,
    const char *database, ngx_http_feed_posts_range_t *range, size_t max,
    ngx_http_feed_posts_flight_t **posts, size_t *n, ngx_uint_t *more,
    bson_error_t *error);
ngx_int_t ngx_http_feed_posts_landed(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, bson_error_t *error);

/* a delete's *found: 1 deleted now, this: deleted before, not yet in Redis */
#define NGX_HTTP_FEED_POSTS_PENDING  2

ngx_int_t ngx_http_feed_posts_delete(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, ngx_http_feed_user_t *author,
    int64_t now, ngx_uint_t *found, bson_error_t *error);

ngx_int_t ngx_http_feed_posts_claim_due(mongoc_client_t *client,
    const char *database, int64_t now, int64_t lease, ngx_uint_t batch,
    ngx_http_feed_posts_due_pt each, void *data, bson_error_t *error);
ngx_int_t ngx_http_feed_posts_dequeue(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, const char *kind,
    bson_error_t *error);
ngx_int_t ngx_http_feed_posts_due_now(mongoc_client_t *client,
    const char *database, const bson_oid_t *id, int64_t now,
    bson_error_t *error);

ngx_int_t ngx_http_feed_posts_json(const bson_t *stored, bson_t *out);


#endif /* _NGX_HTTP_FEED_POSTS_STORE_H_INCLUDED_ */
