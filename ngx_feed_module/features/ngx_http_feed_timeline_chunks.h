
/*
 * ngx_feed_module: a rebuild's chunks of authors, read in parallel under
 * one deadline (ngx_http_feed_timeline_chunks.c).
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_CHUNKS_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_CHUNKS_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_mongo.h"
#include "ngx_http_feed_posts_store.h"


typedef struct ngx_http_feed_chunks_s  ngx_http_feed_chunks_t;

typedef void (*ngx_http_feed_chunks_done_pt)(ngx_http_feed_chunks_t *ch);


/* a post of the page: its id (24 hex digits) and its JSON */
typedef struct {
    char                         *id;
    char                         *json;
    size_t                        len;
} ngx_http_feed_chunks_post_t;


/* what a rebuild reads: the page's range, its window's edge (0: none) */
typedef struct {
    char                        **authors;   /* bson_malloc()ed, taken */
    size_t                        nauthors;
    ngx_uint_t                    limit;
    const char                   *max_id;     /* 24 hex digits, or NULL */
    const char                   *since_id;
    time_t                        edge;
    ngx_msec_t                    started;    /* ngx_current_msec's */
} ngx_http_feed_chunks_ask_t;


struct ngx_http_feed_chunks_s {
    /* the request waiting, and what it is told: NULL once it went */
    ngx_http_request_t           *request;
    ngx_http_feed_chunks_done_pt  done;
    void                         *data;

    /* the answer: NGX_OK with the page, or the error of the chunks */
    ngx_int_t                     rc;
    bson_error_t                  error;
    ngx_http_feed_chunks_post_t  *page;
    ngx_uint_t                    npage;

    /* chunks: how many, and those missing (late or failed) */
    ngx_uint_t                    nchunks;
    ngx_uint_t                    late;

    unsigned                      finished:1;
    unsigned                      partial:1;   /* some chunks are missing */
    unsigned                      windowed:1;  /* read with the window */
    unsigned                      older:1;     /* read past its edge */
};


ngx_http_feed_chunks_t *ngx_http_feed_chunks_start(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_chunks_ask_t *ask,
    ngx_http_feed_chunks_done_pt done, void *data);
void ngx_http_feed_chunks_release(ngx_http_feed_chunks_t *ch);
void ngx_http_feed_chunks_free_authors(char **authors, size_t n);


#endif /* _NGX_HTTP_FEED_TIMELINE_CHUNKS_H_INCLUDED_ */
