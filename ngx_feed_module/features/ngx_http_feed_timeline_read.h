
/*
 * ngx_feed_module: a timeline read's context, shared by the read's state
 * machine (ngx_http_feed_timeline.c, the only one that changes states) and
 * the fallback subrequest that reads and parses (the other file,
 * ngx_http_feed_timeline_fallback.c).  Internal to the timeline feature.
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_READ_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_READ_H_INCLUDED_


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_stream.h"


/* the states of a read; ngx_http_feed_timeline.c says how they follow */

typedef enum {
    NGX_HTTP_FEED_TL_START = 0,
    NGX_HTTP_FEED_TL_LOCAL,         /* the cache is read with the worker's
                                       copy of the first page on offer */
    NGX_HTTP_FEED_TL_READ,          /* the cache is read */
    NGX_HTTP_FEED_TL_KEPT,          /* a page kept as answered is current */
    NGX_HTTP_FEED_TL_HIT,           /* the cache has the page's posts */
    NGX_HTTP_FEED_TL_MISS,          /* no cache: the rebuild lock is asked */
    NGX_HTTP_FEED_TL_WAIT,          /* waits for this worker's rebuild */
    NGX_HTTP_FEED_TL_POLL,          /* polls for a rebuild elsewhere */
    NGX_HTTP_FEED_TL_LEAD,          /* the rebuild asks the fallback */
    NGX_HTTP_FEED_TL_WARM,          /* the rebuild is written to the cache */
    NGX_HTTP_FEED_TL_REBUILT,       /* the rebuild could not be cached */
    NGX_HTTP_FEED_TL_DEEP,          /* past the cache's end: the fallback */
    NGX_HTTP_FEED_TL_BYPASS,        /* no cache at all: the fallback */
    NGX_HTTP_FEED_TL_DONE,
    NGX_HTTP_FEED_TL_FAILED,
    NGX_HTTP_FEED_TL_PULL,          /* pull authors' lists are missing:
                                       loaded, then the cache read again */
    NGX_HTTP_FEED_TL_MEMBERS,       /* the rebuild asks which followees
                                       are pull authors, and the user's
                                       filters */
    NGX_HTTP_FEED_TL_FILTERS,       /* no cache: the user's filters are
                                       asked before the fallback */
    NGX_HTTP_FEED_TL_MARKER         /* an unread count: the read marker
                                       is asked of MongoDB, its copy not
                                       being in Redis */
} ngx_http_feed_timeline_state_e;


typedef struct ngx_http_feed_timeline_ctx_s  ngx_http_feed_timeline_ctx_t;

/* what the read does once the fallback subrequest has answered */
typedef void (*ngx_http_feed_timeline_next_pt)(
    ngx_http_feed_timeline_ctx_t *ctx);


struct ngx_http_feed_timeline_ctx_s {
    /* first, as in ngx_http_feed_ctx_t: the handler skeleton sets them */
    ngx_http_request_t             *request;
    ngx_http_feed_main_conf_t      *fmcf;
    ngx_http_feed_page_t            page;
    ngx_http_feed_cached_t          cached;
    ngx_http_feed_cache_status_e    status;
    ngx_http_feed_timeline_state_e  state;

    /* coalescing: leaders are in the worker's list, waiters in theirs */
    ngx_queue_t                     queue;
    ngx_queue_t                     waiters;
    ngx_http_feed_timeline_ctx_t   *leader;
    ngx_event_t                     poll;

    /* what the leader ended with, for a waiter it woke: NGX_OK or a status */
    ngx_int_t                       wake_rc;

    /* the fallback subrequest */
    ngx_http_feed_timeline_next_pt  next;

    /* how many posts the subrequest asked for */
    ngx_uint_t                      fb_limit;

    /* how many would have fit the buffer its too large answer overflowed */
    ngx_uint_t                      fb_fit;

    /* how many times the rebuild was asked again with fewer posts */
    ngx_uint_t                      shrinks;

    /* the subrequest has ended (nginx may say so more than once) */
    ngx_uint_t                      fb_done;

    /* its HTTP status, or 502 when its answer is missing or not JSON */
    ngx_uint_t                      fb_status;

    /*
     * The answer and its items: a heap document and a view of its array,
     * not bson_t members (libbson declares bson_t 128-byte aligned, which
     * this pool-allocated context is not)
     */
    bson_t                         *fb_doc;
    const uint8_t                  *fb_items;
    uint32_t                        fb_items_len;

    /* the user's follows version when the rebuild began */
    u_char                          version[24];
    size_t                          version_len;

    /* the rebuild lock's token, ours while lock_held */
    u_char                          token_data[NGX_HTTP_FEED_NONCE_LEN];
    ngx_str_t                       token;

    /* the first page kept as answered, as the HGET got it */
    ngx_str_t                       kept;

    /* how many times the read began again after a kept page changed */
    ngx_uint_t                      rereads;

    /* the version of the worker's own copy of it, when it has one */
    ngx_str_t                       have;

    /*
     * Where the worker's watch of its node was at the read (with the
     * read's stamp when Redis tracks its keys), and how the worker's copy
     * of the first page was last found current
     */
    ngx_http_feed_watch_mark_t      mark;
    ngx_http_feed_local_track_t     track;

    /* the pull authors the user follows, as the rebuild found them */
    ngx_str_t                       pull;

    /*
     * What the rebuild's thread found in MongoDB, bson_malloc()ed: the
     * pull authors (pull_len bytes), a newline, the filters (filters_len)
     */
    char                           *members_raw;
    size_t                          pull_len;
    size_t                          filters_len;

    /* how many times the read waited for pull authors' lists */
    ngx_uint_t                      pull_waits;

    /*
     * The user's read filters (blocks, mutes): as MongoDB gave them,
     * "<kind><author>" tokens for the warm, and as the set of authors that
     * pages made from the fallback leave out
     */
    ngx_str_t                       filters;
    ngx_http_feed_filter_set_t      filter_set;

    /*
     * The fallback's last answer: how many of its posts the filters left
     * out, the last post it gave in the page's range, and how many times
     * a page short of posts asked it again
     */
    ngx_uint_t                      fb_hidden;
    ngx_uint_t                      fb_answered;
    char                            fb_scanned[25];
    ngx_uint_t                      refills;

    /*
     * A read with ?unseen=1: of the fallback's last answer, whether the
     * user saw each of its posts in the page's range (fb_seen_n of them),
     * as Redis told once it was asked (fb_seen_ready); and the step that
     * goes on after
     */
    u_char                         *fb_seen;
    ngx_uint_t                      fb_seen_n;
    ngx_http_feed_timeline_next_pt  fill_next;

    /* when the rebuild this request leads, and its last fallback, began */
    ngx_msec_t                      rebuild_start;
    ngx_msec_t                      fb_start;

    /* this request leads its worker's rebuild of the user's timeline */
    unsigned                        is_leader:1;

    /* the Redis rebuild lock is this request's (its token is in token) */
    unsigned                        lock_held:1;

    /* the request led a rebuild: its latency is counted when it ends */
    unsigned                        rebuilding:1;

    /* fb_items holds the answer's parsed items */
    unsigned                        items_ready:1;

    /* the request has polled for a rebuild elsewhere */
    unsigned                        polling:1;

    /* the next read does not offer the worker's copy of the first page */
    unsigned                        no_local:1;

    /* the worker vouches that the pull authors' lists of its copy did
       not change since it was made */
    unsigned                        vouched:1;

    /* the answer overflowed the fallback location's subrequest buffer */
    unsigned                        fb_broke:1;

    /*
     * The answer said "partial": some authors' posts are missing (a
     * deadline passed), it is not cached
     */
    unsigned                        fb_partial:1;

    /* an unread count (feed_timeline_unread), not a page */
    unsigned                        counting:1;

    /* a first page that answers the unread count too (X-Feed-Unread) */
    unsigned                        unread:1;

    /*
     * Of a count: the read marker as MongoDB has it, for the script: "-"
     * for none, else its id; empty while not asked
     */
    ngx_str_t                       marker;
    u_char                          marker_id[25];

    /* fb_seen holds what Redis said of the last answer's posts */
    unsigned                        fb_seen_ready:1;

    /*
     * A long poll (?wait=, ngx_http_feed_timeline_wait.c): ms it waits at
     * most for a post newer than since_id, until when, how
     */
    ngx_msec_t                      wait;
    ngx_event_t                     wait_ev;
    ngx_http_feed_stream_waiter_t   waiter;
    unsigned                        waited:1;
};


ngx_int_t ngx_http_feed_timeline_start(ngx_http_request_t *r, void *data);
void ngx_http_feed_timeline_read(ngx_http_feed_timeline_ctx_t *ctx);
void ngx_http_feed_timeline_answer_now(ngx_http_feed_timeline_ctx_t *ctx);

/* ngx_http_feed_timeline_wait.c */
ngx_int_t ngx_http_feed_timeline_wait_args(ngx_http_request_t *r,
    ngx_http_feed_timeline_ctx_t *ctx, const ngx_http_feed_error_t **err);
ngx_int_t ngx_http_feed_timeline_hold(ngx_http_feed_timeline_ctx_t *ctx);
void ngx_http_feed_timeline_wait_cleanup(ngx_http_feed_timeline_ctx_t *ctx);

ngx_int_t ngx_http_feed_timeline_unread_marker(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_timeline_next_pt next);
ngx_int_t ngx_http_feed_timeline_unread_send(
    ngx_http_feed_timeline_ctx_t *ctx);

ngx_int_t ngx_http_feed_timeline_fallback_rebuild(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_uint_t limit,
    ngx_http_feed_timeline_next_pt next);
ngx_int_t ngx_http_feed_timeline_fallback_page(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_uint_t n,
    ngx_http_feed_timeline_next_pt next);
ngx_int_t ngx_http_feed_timeline_fallback_more(
    ngx_http_feed_timeline_ctx_t *ctx, ngx_http_feed_timeline_next_pt next);
ngx_int_t ngx_http_feed_timeline_fallback_items(
    ngx_http_feed_timeline_ctx_t *ctx);
ngx_int_t ngx_http_feed_timeline_fallback_ids(
    ngx_http_feed_timeline_ctx_t *ctx, u_char **ids);
ngx_int_t ngx_http_feed_timeline_fallback_add(ngx_http_feed_timeline_ctx_t *ctx,
    ngx_uint_t max, ngx_uint_t *more);


#endif /* _NGX_HTTP_FEED_TIMELINE_READ_H_INCLUDED_ */
