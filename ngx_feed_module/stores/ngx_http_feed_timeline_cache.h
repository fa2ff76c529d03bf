
/*
 * ngx_feed_module: the home timeline cache in Redis, the only owner of
 * every feed:tl* key, of the posts' JSON in link mode (feed:p:<id>) and
 * of the posts being deleted (feed:deleting); and the worker's own copy
 * of first pages (ngx_http_feed_timeline_local.c).
 */


#ifndef _NGX_HTTP_FEED_TIMELINE_CACHE_H_INCLUDED_
#define _NGX_HTTP_FEED_TIMELINE_CACHE_H_INCLUDED_


#include "ngx_http_feed_conf.h"
#include "ngx_http_feed_redis.h"
#include "ngx_http_feed_util.h"
#include "ngx_http_feed_filter_set.h"

#include <bson.h>


/*
 * Which copy of the pull authors' lists: "" on a single Redis, "{tag}" of
 * a cluster's master (ngx_http_feed_timeline_pull.c), the <copy> of their
 * keys (scripts/keys)
 */
#define NGX_HTTP_FEED_PULL_COPY_LEN  NGX_HTTP_FEED_REDIS_TAG_COPY_LEN("")

/*
 * The reason of the read filters kept only in the cache: the user
 * unfollowed the author.  The posts already in the list are hidden until
 * the list is made again, by then without them (scripts/lib/filter_bits).
 */
#define NGX_HTTP_FEED_TIMELINE_UNFOLLOWED  'u'

/* a value no other node or worker ever makes: versions, lock tokens */
#define NGX_HTTP_FEED_NONCE_LEN    (3 * NGX_INT64_LEN)


/*
 * Where a worker's watch of the pull authors' lists was when a read was
 * sent (ngx_http_feed_timeline_watch.c): what the read's reply tells is
 * learned only if the watch heard everything since.
 */
typedef struct {
    ngx_uint_t                    node;       /* whose watch: the user's
                                                 node on a cluster */
    ngx_uint_t                    era;
    ngx_uint_t                    skipped;
    uint64_t                      stamp;      /* of a read Redis tracks the
                                                 keys of, 0 for others
                                                 (ngx_http_feed_timeline_
                                                 track.c) */
} ngx_http_feed_watch_mark_t;


/*
 * How a worker's copy of a first page was last found current: the mark
 * of the read that did, when the read last kept the list alive, and the
 * unread count it answered
 */
typedef struct {
    ngx_http_feed_watch_mark_t    mark;
    uint64_t                      searched;   /* for deleted posts, up to
                                                 this stamp */
    ngx_msec_t                    refreshed;
    u_char                        unread[NGX_INT_T_LEN + 1];
    size_t                        unread_len;
    unsigned                      counted:1;  /* the read asked the count */
} ngx_http_feed_local_track_t;


/*
 * ms a delete's answer waits: a worker answers its copies without asking
 * Redis only while its last heartbeat heard was sent less than 300 ms ago
 * (the watch), and its clock may lag a little
 */
#define NGX_HTTP_FEED_LOCAL_SETTLE  400


/* what a timeline's rebuild lock says when the timeline is not cached */
typedef enum {
    NGX_HTTP_FEED_LOCK_NONE = 0,
    NGX_HTTP_FEED_LOCK_HELD,        /* a rebuild runs */
    NGX_HTTP_FEED_LOCK_FAILED,      /* one just failed */
    NGX_HTTP_FEED_LOCK_PARTIAL      /* one just answered a partial page */
} ngx_http_feed_lock_e;


/*
 * A partial page a rebuild left in its lock for the reads that polled for
 * it elsewhere (ngx_http_feed_timeline_cache_unlock()), as the rebuild
 * had it: they make their pages of it as its own waiters do
 */
typedef struct {
    ngx_uint_t                    limit;      /* the posts the rebuild
                                                 asked the fallback for */
    ngx_str_t                     filters;    /* the filters it applied,
                                                 as
                                                 ngx_http_feed_filters_of()
                                                 gives them */
    ngx_str_t                     json;       /* the fallback's answer */
} ngx_http_feed_partial_t;


/* what the cache answered for a page */
typedef struct {
    ngx_uint_t                    found;      /* the timeline is cached */
    ngx_uint_t                    locked;     /* when not found: what its
                                                 lock says
                                                 (ngx_http_feed_lock_e) */
    ngx_http_feed_partial_t       partial;    /* LOCK_PARTIAL, to a read
                                                 that polls: the page */
    ngx_uint_t                    more;       /* posts follow this page */
    ngx_uint_t                    deep;       /* the page runs past the
                                                 end of a trimmed cache */
    char                          last[25];   /* the id of the page's last
                                                 post, NUL-terminated */
    ngx_uint_t                    nitems;     /* how many posts are in
                                                 items */
    ngx_str_t                    *items;      /* each post's JSON */

    ngx_str_t                     version;    /* the version of the list
                                                 read, or of the kept page */
    ngx_str_t                     ids;        /* the page's post ids,
                                                 concatenated: their span is
                                                 stored when it is kept */

    ngx_uint_t                    kept;       /* the answer is the
                                                 worker's own copy of a
                                                 first page, current */
    ngx_uint_t                    again;      /* the page kept, read again
                                                 for a worker without a
                                                 copy: under its version */
    ngx_str_t                     body;       /* its JSON, sent as it is */

    ngx_uint_t                    pulled;     /* posts of the page merged
                                                 from pull authors' lists */
    ngx_uint_t                    merge_us;   /* the time the merge took */

    ngx_str_t                     lists;      /* the pull authors merged,
                                                 with their lists' versions:
                                                 "author version\n" each */

    ngx_http_feed_user_t         *pull;       /* pull authors whose lists
                                                 are missing: load them */
    ngx_uint_t                    npull;

    /* of a deep page: the authors the rest leaves out */
    ngx_http_feed_filter_set_t    filters;

    ngx_uint_t                    counted;    /* the reply is an unread
                                                 count (timeline_unread.lua),
                                                 no page */
    ngx_str_t                     unread;     /* the unread count, "<n>" or
                                                 "<n>+": none when asked of
                                                 no first page, the user has
                                                 no marker or its copy is
                                                 not in Redis */
} ngx_http_feed_cached_t;


/*
 * What the watches heard, told to whoever asked (the live streams'
 * readers, a layer above): a key of a user that holds or hides entries
 * changed (not a kept page, a lock or a read marker), everything may
 * have, a post was deleted (its id), a pull author's list changed, a
 * delivery into timelines was told (ngx_http_feed_timeline_live.c)
 */
typedef struct {
    void                        (*changed)(u_char *user, size_t len);
    void                        (*all)(const char *why);
    void                        (*deleted)(u_char *id);
    void                        (*author)(u_char *author, size_t len);
    void                        (*told)(u_char *msg, size_t len);
} ngx_http_feed_track_hooks_t;


extern ngx_str_t  ngx_http_feed_timeline_cache_deleting_key;


ngx_int_t ngx_http_feed_timeline_cache_init(ngx_http_feed_main_conf_t *fmcf);

ngx_int_t ngx_http_feed_timeline_cache_read(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_str_t *have, ngx_uint_t vouched, ngx_uint_t unread,
    ngx_uint_t tracked, ngx_uint_t polling, ngx_http_feed_redis_pt handler,
    void *data);
ngx_uint_t ngx_http_feed_timeline_cache_quiet(ngx_str_t *key);
ngx_int_t ngx_http_feed_timeline_cache_fresh(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_page_t *page, ngx_uint_t tracked, ngx_uint_t keep,
    ngx_str_t *known, ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_timeline_cache_unread(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *marker, ngx_uint_t polling, ngx_http_feed_redis_pt handler,
    void *data);
ngx_int_t ngx_http_feed_timeline_cache_parse(ngx_pool_t *pool,
    redisReply *reply, ngx_http_feed_cached_t *cached);
ngx_int_t ngx_http_feed_timeline_cache_kept(ngx_str_t *page,
    ngx_http_feed_cached_t *cached);
void ngx_http_feed_timeline_cache_page(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_http_feed_cached_t *cached, ngx_str_t *body);

ngx_int_t ngx_http_feed_timeline_cache_lock(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *token, ngx_http_feed_redis_pt handler, void *data);
void ngx_http_feed_timeline_cache_unlock(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_str_t *token, ngx_uint_t failed,
    ngx_http_feed_partial_t *partial);
ngx_int_t ngx_http_feed_timeline_cache_warm(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *version, ngx_str_t *token, ngx_str_t *pull, ngx_str_t *filters,
    bson_t *items, ngx_uint_t complete, ngx_http_feed_redis_pt handler,
    void *data);

ngx_int_t ngx_http_feed_timeline_cache_drop(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_timeline_cache_filter(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_user_t *author, ngx_str_t *kinds, ngx_uint_t add,
    ngx_http_feed_redis_pt handler, void *data);

ngx_int_t ngx_http_feed_timeline_cache_post(ngx_http_feed_main_conf_t *fmcf,
    const char *id, const char *json, size_t len,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_timeline_cache_deliver(
    ngx_http_feed_main_conf_t *fmcf, ngx_pool_t *pool,
    ngx_http_feed_user_t *users, ngx_uint_t n, ngx_str_t *entry,
    ngx_str_t *json, ngx_http_feed_user_t *member,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_timeline_cache_delete(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *id,
    ngx_http_feed_redis_pt handler, void *data, ngx_uint_t *sent);
ngx_int_t ngx_http_feed_timeline_cache_remove(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    const char *id, ngx_http_feed_redis_pt handler, void *data);
void ngx_http_feed_timeline_cache_error(redisReply *reply);
ngx_uint_t ngx_http_feed_timeline_cache_node(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user);
void ngx_http_feed_timeline_cache_removed(ngx_http_feed_main_conf_t *fmcf,
    const char *id);

u_char *ngx_http_feed_timeline_cache_nonce(u_char *buf);
ngx_int_t ngx_http_feed_timeline_cache_version_time(ngx_str_t *version,
    int64_t *ms);
size_t ngx_http_feed_timeline_cache_user_key(char *buf, const char *prefix,
    ngx_http_feed_user_t *user);

size_t ngx_http_feed_timeline_pull_copy(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, u_char *buf);
ngx_uint_t ngx_http_feed_timeline_pull_copies(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_tag_copy_pt handler,
    void *data);
ngx_int_t ngx_http_feed_timeline_pull_add(ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy, ngx_http_feed_user_t *author, ngx_str_t *entry,
    ngx_http_feed_redis_pt handler, void *data);
ngx_int_t ngx_http_feed_timeline_pull_warm(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_str_t *copy, ngx_http_feed_user_t *author,
    bson_t *items, ngx_uint_t complete, ngx_http_feed_redis_pt handler,
    void *data);
ngx_int_t ngx_http_feed_timeline_pull_remove(
    ngx_http_feed_main_conf_t *fmcf, ngx_str_t *copy,
    ngx_http_feed_user_t *author, const char *id,
    ngx_http_feed_redis_pt handler, void *data);

ngx_int_t ngx_http_feed_timeline_watch_init(ngx_cycle_t *cycle,
    ngx_http_feed_main_conf_t *fmcf);
void ngx_http_feed_timeline_watch_exit(void);
ngx_uint_t ngx_http_feed_timeline_watch_vouch(ngx_http_feed_user_t *user,
    ngx_str_t *lists);
void ngx_http_feed_timeline_watch_mark(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m);
void ngx_http_feed_timeline_watch_learn(ngx_str_t *lists,
    ngx_http_feed_watch_mark_t *m);
ngx_int_t ngx_http_feed_timeline_watch_status(bson_t *doc);
ngx_uint_t ngx_http_feed_timeline_watch_track(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m);
ngx_uint_t ngx_http_feed_timeline_watch_tracks(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m, ngx_uint_t fresh);
void ngx_http_feed_timeline_watch_streaming(ngx_uint_t on);
ngx_uint_t ngx_http_feed_timeline_watch_live(ngx_http_feed_user_t *user,
    ngx_http_feed_watch_mark_t *m);

ngx_int_t ngx_http_feed_track_init(ngx_cycle_t *cycle);
void ngx_http_feed_track_exit(void);
uint64_t ngx_http_feed_track_stamp(void);
void ngx_http_feed_track_hook(ngx_http_feed_track_hooks_t *hooks);
void ngx_http_feed_track_changed(u_char *user, size_t len, ngx_str_t *key);
void ngx_http_feed_track_author(u_char *author, size_t len);
void ngx_http_feed_track_told(u_char *msg, size_t len);
void ngx_http_feed_track_streams(const char *why);
ngx_uint_t ngx_http_feed_track_is_deleted(u_char *id);
void ngx_http_feed_track_all(const char *why);
void ngx_http_feed_track_deleted(u_char *id);
ngx_int_t ngx_http_feed_track_deletes(ngx_str_t *page, uint64_t stamp,
    uint64_t *checked);
ngx_uint_t ngx_http_feed_track_current(ngx_http_feed_user_t *user,
    uint64_t stamp);
ngx_uint_t ngx_http_feed_track_lost(void);

void ngx_http_feed_timeline_local_init(size_t max);
void ngx_http_feed_timeline_local_exit(void);
ngx_str_t ngx_http_feed_timeline_local_get(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *lists, ngx_http_feed_local_track_t *track);
void ngx_http_feed_timeline_local_track(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *version, ngx_http_feed_local_track_t *track);
void ngx_http_feed_timeline_local_searched(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *version, uint64_t stamp);
void ngx_http_feed_timeline_local_put(ngx_http_feed_user_t *user,
    ngx_uint_t limit, ngx_str_t *page, ngx_str_t *lists);
ngx_int_t ngx_http_feed_timeline_local_status(bson_t *doc);


#endif /* _NGX_HTTP_FEED_TIMELINE_CACHE_H_INCLUDED_ */
