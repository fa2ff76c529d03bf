
/*
 * ngx_feed_module: the home timeline cache in Redis.
 *
 * A list per user, "feed:tl:{user}", newest first, capped at
 * feed_cache_size: each entry is the post id's 12 bytes (half its hex
 * digits' room; the scripts compare them as numbers, scripts/lib/ids.lua)
 * followed, in embed mode, by the post's JSON; in link mode the JSON is in
 * "feed:p:<id's 12 bytes>" instead.  An entry of all zero bytes ends a
 * timeline that holds the user's whole history: without it the list was
 * trimmed, and pages past its end continue from the fallback.  The worker
 * gives the scripts ids in hex, and reads a page's ids back as bytes.
 *
 * The first pages, as answered, are kept by each worker (a copy, answered
 * with no Redis command while Redis tracks its keys); "feed:tlp:{user}"
 * keeps what says such a copy is current, not the page's bytes: the
 * version of the list it was made from, its span in the list and the ids
 * it merged from pull authors' lists (timeline_page.lua).  A worker
 * without a copy of a current page reads it again from the list, under
 * that version.  A version is the list's nonce, "feed:tln:{user}", which every
 * change but one moves, and its head.  The exception is the common one,
 * a delivery of a post newer than the head: it deletes the kept pages
 * instead (cheaper than a new nonce per follower), and the new head keeps
 * a page made before it from being stored after it.
 *
 * Deleted posts are in the sorted set "feed:deleting" until fanout has
 * taken them out of every list (score +inf), then for a grace period that
 * covers rebuilds already under way: every read skips them, every warm
 * leaves them out.
 *
 * This file is the only one that names these keys: their formats are in
 * ngx_feed_module/scripts/keys, their names are made here and given to the
 * scripts (ngx_feed_module/scripts/timeline_*.lua) as keys; a script that
 * makes a follower's other keys itself (or a post's, in link mode) makes
 * them of the user by the same formats.  Each read is one EVALSHA: one
 * round trip, the JSON of the page ready.
 */


#include "ngx_http_feed_timeline_watch.h"
#include "ngx_http_feed_timeline_live.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"
#include "ngx_http_feed_markers_store.h"


/* the name of feed:deleting's copy on a cluster's node */
#define NGX_HTTP_FEED_DELETING_LEN                                           \
    NGX_HTTP_FEED_REDIS_TAG_COPY_LEN(NGX_HTTP_FEED_KEY_DELETING)

/* a script's two arguments about them: a copy's name and its mark */
#define NGX_HTTP_FEED_DELETING_ARGS_LEN                                      \
    (NGX_HTTP_FEED_DELETING_LEN + NGX_HTTP_FEED_REDIS_MARK_LEN)

/* the tags whose copies a worker retires at once (copy_retire.lua) */
#define NGX_HTTP_FEED_RETIRES        16

/* a user's key (the longest prefix, the user, "}"), a post's */
#define NGX_HTTP_FEED_USER_KEY_LEN                                           \
    (sizeof(NGX_HTTP_FEED_KEY_REBUILD_LOCK) + NGX_HTTP_FEED_USER_MAX + 1)
#define NGX_HTTP_FEED_POST_KEY_LEN                                           \
    (sizeof(NGX_HTTP_FEED_KEY_POST_JSON) + 24)

/* an id as the lists hold it */
#define NGX_HTTP_FEED_ID_BYTES       12

/*
 * ms a rebuild's lock says how it ended, 'failed' or its partial page
 * (timeline_unlock.lua): the reads that wait for it elsewhere poll every
 * 20 ms (the timeline's NGX_HTTP_FEED_POLL), and each reads it within a
 * poll, well under this even on a loaded node; a read that did not wait
 * takes the lock and rebuilds meanwhile
 */
#define NGX_HTTP_FEED_LOCK_ENDED     1000


/*
 * A tag no master has, whose copies are to go (copy_retire.lua): sent,
 * and sent again while it fails, until done
 */
typedef struct {
    u_char                        copy[NGX_HTTP_FEED_PULL_COPY_LEN];
    size_t                        len;      /* 0: a free entry */
    unsigned                      sent:1;   /* in flight */
} ngx_http_feed_timeline_retire_t;


/*
 * A call of timeline_read.lua or timeline_unread.lua, which take the same
 * keys and arguments, and the buffers they are made in
 */
typedef struct {
    ngx_http_feed_redis_call_t    call;
    char                          keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_NKEYS]
                                      [NGX_HTTP_FEED_USER_KEY_LEN];
    u_char                        limit[NGX_INT_T_LEN];
    size_t                        limit_len;
    u_char                        ttl[NGX_INT_T_LEN];
    u_char                        deleting[NGX_HTTP_FEED_DELETING_ARGS_LEN];
    u_char                        copy[NGX_HTTP_FEED_PULL_COPY_LEN];
    size_t                        argvlen[
                                      NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARGC];
    const char                   *argv[
                                      NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARGC];
} ngx_http_feed_timeline_read_call_t;


/* the kinds of reply of timeline_read.lua, its first element */
typedef enum {
    NGX_HTTP_FEED_TIMELINE_READ_MISSING = 0,
    NGX_HTTP_FEED_TIMELINE_READ_PAGE = 1,
    NGX_HTTP_FEED_TIMELINE_READ_LOCAL = 4,
    NGX_HTTP_FEED_TIMELINE_READ_PULL = 5,
    NGX_HTTP_FEED_TIMELINE_READ_UNREAD = 6,     /* timeline_unread.lua */
    NGX_HTTP_FEED_TIMELINE_READ_COUNTED = 7,    /* LOCAL, with the count */
    NGX_HTTP_FEED_TIMELINE_READ_AGAIN = 8       /* PAGE, of a kept version */
} ngx_http_feed_timeline_read_e;


/* the other elements of each kind */
enum {
    NGX_HTTP_FEED_TIMELINE_READ_LOCKED = 1,        /* MISSING */
    NGX_HTTP_FEED_TIMELINE_READ_PARTIAL = 2,

    NGX_HTTP_FEED_TIMELINE_READ_KEPT_VERSION = 1,  /* LOCAL */
    NGX_HTTP_FEED_TIMELINE_READ_KEPT_LISTS = 3,
    NGX_HTTP_FEED_TIMELINE_READ_KEPT_UNREAD = 4,

    NGX_HTTP_FEED_TIMELINE_READ_COUNTED_UNREAD = 2, /* COUNTED */

    NGX_HTTP_FEED_TIMELINE_READ_COUNT = 1,         /* UNREAD */

    NGX_HTTP_FEED_TIMELINE_READ_MORE = 1,          /* PAGE */
    NGX_HTTP_FEED_TIMELINE_READ_DEEP = 2,
    NGX_HTTP_FEED_TIMELINE_READ_LAST = 3,
    NGX_HTTP_FEED_TIMELINE_READ_VERSION = 4,
    NGX_HTTP_FEED_TIMELINE_READ_IDS = 5,
    NGX_HTTP_FEED_TIMELINE_READ_PULLED = 6,
    NGX_HTTP_FEED_TIMELINE_READ_USEC = 7,
    NGX_HTTP_FEED_TIMELINE_READ_LISTS = 8,
    NGX_HTTP_FEED_TIMELINE_READ_FILTERS = 9,
    NGX_HTTP_FEED_TIMELINE_READ_UNREAD_COUNT = 10,
    NGX_HTTP_FEED_TIMELINE_READ_ITEMS = 11
};


/*
 * The writes of a delete, whose replies go to the delete's handler (none
 * for fanout's own), and the mark's two commands, made again for copies,
 * with the delete's message to the workers' watches (none for fanout's)
 */
typedef struct {
    ngx_http_request_t           *r;
    ngx_http_feed_redis_pt        handler;
    void                         *data;
    ngx_uint_t                    sent;
    ngx_uint_t                    unsent;
    ngx_http_feed_redis_args_t   *write[2];
    ngx_http_feed_redis_args_t   *told;
} ngx_http_feed_timeline_cache_mark_t;


static void ngx_http_feed_timeline_cache_caching_yes(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_timeline_read_call_t *rc);
static void ngx_http_feed_timeline_cache_caching(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_timeline_read_call_t *rc);
static void ngx_http_feed_timeline_cache_read_call(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_timeline_read_call_t *rc,
    ngx_http_feed_redis_script_t *script, ngx_http_feed_page_t *page,
    ngx_str_t *have, ngx_uint_t vouched, ngx_str_t *unread);
static ngx_int_t ngx_http_feed_timeline_cache_warm_items(
    ngx_http_request_t *r, ngx_http_feed_redis_call_t *call, bson_t *items);
static ngx_int_t ngx_http_feed_timeline_cache_warm_item(void *data,
    ngx_str_t *id, ngx_str_t *json);
static ngx_http_feed_redis_call_t *ngx_http_feed_timeline_cache_batch(
    ngx_log_t *log, ngx_http_feed_redis_script_t *script,
    ngx_http_feed_user_t *users, ngx_uint_t n);
static void ngx_http_feed_timeline_cache_deleting_args(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_call_t *call,
    ngx_uint_t i, u_char *buf, ngx_uint_t key);
static void ngx_http_feed_timeline_cache_deleting_copy(void *data,
    u_char *key, size_t len);
static void ngx_http_feed_timeline_cache_copies_ready(
    ngx_http_feed_redis_t *rd, void *data);
static void ngx_http_feed_timeline_cache_copies_got(void *data,
    redisReply *reply);
static void ngx_http_feed_timeline_cache_copy_make(void *data, u_char *key,
    size_t len);
static void ngx_http_feed_timeline_cache_retire(void *data, u_char *copy,
    size_t len);
static void ngx_http_feed_timeline_cache_retire_send(
    ngx_http_feed_main_conf_t *fmcf);
static void ngx_http_feed_timeline_cache_retired(void *data,
    redisReply *reply);
static ngx_int_t ngx_http_feed_timeline_cache_batch_send(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_call_t *call,
    ngx_http_feed_redis_pt handler, void *data);
static void ngx_http_feed_timeline_cache_deleting(
    ngx_http_feed_main_conf_t *fmcf, const char *id, ngx_uint_t done,
    ngx_http_feed_timeline_cache_mark_t *m);
static void ngx_http_feed_timeline_cache_mark_send(
    ngx_http_feed_timeline_cache_mark_t *m, ngx_http_feed_redis_args_t *args);
static ngx_int_t ngx_http_feed_timeline_cache_parse_partial(
    ngx_pool_t *pool, redisReply *reply, ngx_http_feed_cached_t *cached);
static ngx_int_t ngx_http_feed_timeline_cache_parse_kept(
    ngx_pool_t *pool, redisReply *reply, ngx_http_feed_cached_t *cached);
static ngx_int_t ngx_http_feed_timeline_cache_parse_pull(
    ngx_pool_t *pool, redisReply *reply, ngx_http_feed_cached_t *cached);
static ngx_int_t ngx_http_feed_timeline_cache_unread_count(
    ngx_pool_t *pool, redisReply *reply, size_t i,
    ngx_http_feed_cached_t *cached);
static ngx_uint_t ngx_http_feed_timeline_cache_flag(redisReply *e);
static ngx_uint_t ngx_http_feed_timeline_cache_int(redisReply *e);
static void ngx_http_feed_timeline_cache_copy_arg(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_redis_call_t *call,
    ngx_uint_t i, u_char *buf, ngx_uint_t key);
static ngx_int_t ngx_http_feed_timeline_cache_lists(ngx_pool_t *pool,
    redisReply *reply, size_t i, ngx_str_t *lists);
static ngx_int_t ngx_http_feed_timeline_cache_filters(ngx_pool_t *pool,
    redisReply *e, ngx_http_feed_filter_set_t *filters);
static void ngx_http_feed_timeline_cache_watched(
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_timeline_read_call_t *rc,
    ngx_http_feed_user_t *user);
static ngx_int_t ngx_http_feed_timeline_cache_copy(ngx_pool_t *pool,
    redisReply *e, ngx_str_t *to);
static ngx_int_t ngx_http_feed_timeline_cache_ids(ngx_pool_t *pool,
    redisReply *e, ngx_str_t *to);
static size_t ngx_http_feed_timeline_cache_key(
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, char *buf,
    const char *prefix, ngx_http_feed_user_t *user);
static size_t ngx_http_feed_timeline_cache_post_key(u_char *buf,
    const char *id);
static size_t ngx_http_feed_timeline_cache_old_post_key(u_char *buf,
    const char *id);
static void ngx_http_feed_timeline_cache_local(ngx_http_feed_page_t *page,
    ngx_http_feed_cached_t *cached, ngx_str_t *kept, size_t vlen);
static u_char *ngx_http_feed_timeline_cache_token(u_char *buf);


/* the set of posts being deleted, for the pull authors' lists too */
ngx_str_t  ngx_http_feed_timeline_cache_deleting_key =
    ngx_string(NGX_HTTP_FEED_KEY_DELETING);

static ngx_http_feed_main_conf_t  *ngx_http_feed_timeline_cache_fmcf;

/* feed:deleting is being read to make its copies */
static ngx_uint_t                  ngx_http_feed_timeline_cache_copying;

/* the tags whose copies are being retired */
static ngx_http_feed_timeline_retire_t
    ngx_http_feed_timeline_cache_retires[NGX_HTTP_FEED_RETIRES];


ngx_int_t
ngx_http_feed_timeline_cache_init(ngx_http_feed_main_conf_t *fmcf)
{
    ngx_http_feed_timeline_cache_fmcf = fmcf;

    /* a tag gone from the map: its copies are not written any more */

    ngx_http_feed_redis_on_retire(fmcf->redis_client,
                                  ngx_http_feed_timeline_cache_retire, fmcf);

    /* a cluster's map, new or changed: each master needs its copy */

    return ngx_http_feed_redis_on_ready(fmcf->redis_client,
               ngx_http_feed_timeline_cache_copies_ready, fmcf);
}


/*
 * The read script: one round trip.  unread: the first page answers the
 * user's unread count too.  polling: the read waits for a rebuild
 * elsewhere, and is answered the partial page it left in its lock, if it
 * did (no other read carries that page).
 */

ngx_int_t
ngx_http_feed_timeline_cache_read(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_str_t *have, ngx_uint_t vouched, ngx_uint_t unread,
    ngx_uint_t tracked, ngx_uint_t polling, ngx_http_feed_redis_pt handler,
    void *data)
{
    ngx_str_t                           arg;
    ngx_http_feed_timeline_read_call_t  rc_call;

    ngx_str_set(&arg, "1");

    if (!unread) {
        arg.len = 0;
    }

    ngx_http_feed_timeline_cache_read_call(fmcf, &rc_call,
                                           &ngx_http_feed_script_timeline_read,
                                           page, have, vouched, &arg);

    if (polling) {
        ngx_http_feed_redis_call_lit(&rc_call.call,
            NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_POLLING, "1");
    }

    /*
     * Redis tracks the keys of the script that comes next on the same
     * connection (OPTIN), and tells the watch when one changes; the script
     * then leaves the list's TTL alone, which would change a key it
     * tracks: the worker's reads keep it alive (the timeline's
     * NGX_HTTP_FEED_LOCAL_REFRESH)
     */

    if (tracked) {
        ngx_http_feed_timeline_cache_caching(fmcf, &rc_call);
    }

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &rc_call.call,
                                    handler, data);
}


/*
 * Whether a change of this key tells a stream's reader nothing: a kept
 * page, the rebuild lock, the read marker's copy leave the user's entries
 * as they were; a change of the list itself comes with one of another key
 * the reader tracks, or is told with its post (a delivery)
 */

ngx_uint_t
ngx_http_feed_timeline_cache_quiet(ngx_str_t *key)
{
    ngx_uint_t  i;

    static ngx_str_t  quiet[] = {
        ngx_string(NGX_HTTP_FEED_KEY_TIMELINE),
        ngx_string(NGX_HTTP_FEED_KEY_KEPT_PAGES),
        ngx_string(NGX_HTTP_FEED_KEY_REBUILD_LOCK)
    };

    for (i = 0; i < sizeof(quiet) / sizeof(ngx_str_t); i++) {
        if (key->len > quiet[i].len
            && ngx_strncmp(key->data, quiet[i].data, quiet[i].len) == 0)
        {
            return 1;
        }
    }

    return ngx_http_feed_markers_is_cache_key(key);
}


/*
 * A page read from the list itself, each post's JSON and id, never a page
 * kept as answered: a live stream's (ngx_http_feed_stream_users.c), for
 * the worker, not for a request.  known: ids whose JSON the caller has
 * (24 hex digits each), answered with an empty JSON, not read.
 *
 * tracked: Redis tracks, for the watch of the user's node, the keys that
 * move when the list changes in another way than by a delivery (which is
 * told with its post, ngx_http_feed_timeline_live.c): its version, the
 * follows' version, the filters, the pull authors.  Not the list: each
 * delivery would cost Redis an invalidation per streaming follower.  They
 * are read, tracked, just before the page, so that a change after that
 * read is heard and one before it is in the page.  keep: the read keeps
 * the list alive (EXPIRE), as a local hit's does now and then.
 */

ngx_int_t
ngx_http_feed_timeline_cache_fresh(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_page_t *page, ngx_uint_t tracked, ngx_uint_t keep,
    ngx_str_t *known, ngx_http_feed_redis_pt handler, void *data)
{
    ngx_str_t                           none, have;
    ngx_http_feed_timeline_read_call_t  rc_call;

    ngx_str_null(&none);
    ngx_str_null(&have);

    ngx_http_feed_timeline_cache_read_call(fmcf, &rc_call,
                                           &ngx_http_feed_script_timeline_read,
                                           page, &have, 0, &none);

    ngx_http_feed_redis_call_lit(&rc_call.call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_FRESH, "1");

    if (known) {
        ngx_http_feed_redis_call_arg(&rc_call.call,
            NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_KNOWN, known->data,
            known->len);
    }

    if (tracked) {
        ngx_http_feed_timeline_cache_watched(fmcf, &rc_call, &page->user);
    }

    if (!keep) {
        ngx_http_feed_redis_call_lit(&rc_call.call,
            NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_TRACKED, "1");
    }

    return ngx_http_feed_redis_call(NULL, fmcf->redis_client, &rc_call.call,
                                    handler, data);
}


/*
 * A stream's read: CLIENT CACHING yes, then an EXISTS of the keys its
 * reader must hear of, which Redis then tracks, on the connection to the
 * user's node; their replies are not needed
 */

static void
ngx_http_feed_timeline_cache_watched(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_read_call_t *rc, ngx_http_feed_user_t *user)
{
    char                        follows[NGX_HTTP_FEED_USER_KEY_LEN];
    size_t                      argvlen[5];
    ngx_uint_t                  k;
    const char                 *argv[5];
    ngx_http_feed_redis_args_t  args;

    static ngx_uint_t  keys[] = {
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_VERSION,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_FILTERS,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_PULL
    };

    ngx_http_feed_timeline_cache_caching_yes(fmcf, rc);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "EXISTS");

    for (k = 0; k < sizeof(keys) / sizeof(ngx_uint_t); k++) {
        ngx_http_feed_redis_args_key(&args, rc->keys[keys[k]],
                                     rc->call.argvlen[3 + keys[k]]);
    }

    ngx_http_feed_redis_args_key(&args, follows,
        ngx_http_feed_timeline_cache_user_key(follows,
            NGX_HTTP_FEED_KEY_FOLLOWS_VERSION, user));

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, &args);
}


/*
 * Redis tracks the keys of the call that comes next on the same
 * connection (OPTIN): CLIENT CACHING yes on the connection to the user's
 * node, then the call says it is tracked
 */

static void
ngx_http_feed_timeline_cache_caching(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_read_call_t *rc)
{
    ngx_http_feed_timeline_cache_caching_yes(fmcf, rc);

    ngx_http_feed_redis_call_lit(&rc->call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_TRACKED, "1");
}


/* CLIENT CACHING yes, on the connection to the read's user's node */

static void
ngx_http_feed_timeline_cache_caching_yes(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_read_call_t *rc)
{
    size_t                      argvlen[3];
    ngx_uint_t                  i;
    const char                 *argv[3];
    ngx_http_feed_redis_args_t  args;

    i = NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_TIMELINE;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "CLIENT");
    ngx_http_feed_redis_args_lit(&args, "CACHING");
    ngx_http_feed_redis_args_lit(&args, "yes");
    ngx_http_feed_redis_args_route(&args, rc->keys[i],
                                   rc->call.argvlen[3 + i]);

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, &args);
}


/*
 * The unread count of a user (timeline_unread.lua), whose keys and
 * arguments are the read's: marker '' for the copy in Redis, "-" for no
 * marker, or its id, as MongoDB has it; polling as a read's.
 */

ngx_int_t
ngx_http_feed_timeline_cache_unread(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *marker, ngx_uint_t polling, ngx_http_feed_redis_pt handler,
    void *data)
{
    ngx_str_t                           none = ngx_string("");
    ngx_http_feed_page_t                page;
    ngx_http_feed_timeline_read_call_t  rc_call;

    ngx_memzero(&page, sizeof(ngx_http_feed_page_t));
    page.user = *user;

    ngx_http_feed_timeline_cache_read_call(fmcf, &rc_call,
        &ngx_http_feed_script_timeline_unread, &page, &none, 0, marker);

    if (polling) {
        ngx_http_feed_redis_call_lit(&rc_call.call,
            NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_POLLING, "1");
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed unread of \"%s\": counting, marker \"%V\"",
                   user->data, marker);

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &rc_call.call,
                                    handler, data);
}


/*
 * The keys and arguments of timeline_read.lua, and of timeline_unread.lua,
 * which takes them in the same places (its header says so)
 */

static void
ngx_http_feed_timeline_cache_read_call(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_read_call_t *rc,
    ngx_http_feed_redis_script_t *script, ngx_http_feed_page_t *page,
    ngx_str_t *have, ngx_uint_t vouched, ngx_str_t *unread)
{
    ngx_http_feed_redis_call_t  *call;

    call = &rc->call;

    ngx_http_feed_redis_call_init(call, script, rc->argv, rc->argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_NARGS);

    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_TIMELINE,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_TIMELINE],
        NGX_HTTP_FEED_KEY_TIMELINE, &page->user);
    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_LOCK,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_LOCK],
        NGX_HTTP_FEED_KEY_REBUILD_LOCK, &page->user);
    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_PAGES,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_PAGES],
        NGX_HTTP_FEED_KEY_KEPT_PAGES, &page->user);
    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_VERSION,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_VERSION],
        NGX_HTTP_FEED_KEY_TIMELINE_NONCE, &page->user);
    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_PULL,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_PULL],
        NGX_HTTP_FEED_KEY_PULL_AUTHORS, &page->user);
    ngx_http_feed_timeline_cache_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_FILTERS,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_FILTERS],
        NGX_HTTP_FEED_KEY_FILTERS, &page->user);

    /* the markers store's key: the scripts read the marker's copy */

    ngx_http_feed_redis_call_key(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_MARKER,
        rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_MARKER],
        ngx_http_feed_markers_cache_key(
            rc->keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_MARKER],
            &page->user));

    rc->limit_len = page->limit
                    ? (size_t) (ngx_sprintf(rc->limit, "%ui", page->limit)
                                - rc->limit)
                    : 0;

    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_LIMIT, rc->limit,
        rc->limit_len);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_MAX_ID,
        page->has_max ? page->max_id : "", page->has_max ? 24 : 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_SINCE_ID,
        page->has_since ? page->since_id : "", page->has_since ? 24 : 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_TTL,
        rc->ttl, ngx_sprintf(rc->ttl, "%T", fmcf->cache_ttl) - rc->ttl);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_MODE,
        fmcf->cache_embed ? "e" : "l", 1);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_HAVE, have->data, have->len);
    ngx_http_feed_timeline_cache_copy_arg(fmcf, call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_PULL_COPY, rc->copy,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_TIMELINE);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_VOUCHED, vouched ? "1" : "", 1);
    ngx_http_feed_timeline_cache_deleting_args(fmcf, call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_DELETING, rc->deleting,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_KEY_TIMELINE);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_UNSEEN,
        page->unseen ? "1" : "", page->unseen ? 1 : 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_UNREAD, unread->data,
        unread->len);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_TRACKED, "", 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_FRESH, "", 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_KNOWN, "", 0);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_READ_ARG_POLLING, "", 0);
}


/*
 * A first page as the read answered it, kept for the next reads while the
 * list stays as it is: the worker's copy, "version\nnext\nJSON", and in
 * Redis what says it is current (timeline_page.lua: fire and forget).  A
 * page read again under the version kept (cached->again) is copied under
 * that version, and nothing is stored.
 */

void
ngx_http_feed_timeline_cache_page(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_http_feed_cached_t *cached, ngx_str_t *body)
{
    u_char                     *p, *value, limit[NGX_INT_T_LEN],
                                ttl[NGX_INT_T_LEN],
                                copy[NGX_HTTP_FEED_PULL_COPY_LEN],
                                deleting[NGX_HTTP_FEED_DELETING_ARGS_LEN];
    char                        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_NKEYS]
                                    [NGX_HTTP_FEED_USER_KEY_LEN];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARGC];
    size_t                      len, vlen;
    ngx_str_t                   kept;
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARGC];
    ngx_http_feed_redis_call_t  call;

    len = cached->version.len + 1 + NGX_HTTP_FEED_NONCE_LEN + body->len
          + 24 + 2;

    value = ngx_pnalloc(r->pool, len);
    if (value == NULL) {
        return;
    }

    /* the version the page is stored under: the list's, and a token */

    p = ngx_cpymem(value, cached->version.data, cached->version.len);

    if (!cached->again) {
        *p++ = ':';
        p = ngx_http_feed_timeline_cache_token(p);
    }

    vlen = p - value;
    *p++ = '\n';

    if (cached->more && cached->nitems) {
        p = ngx_cpymem(p, cached->last, 24);
    }

    *p++ = '\n';
    p = ngx_cpymem(p, body->data, body->len);

    kept.data = value;
    kept.len = p - value;

    if (cached->again) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "feed timeline of \"%s\": kept version read again",
                       page->user.data);
        ngx_http_feed_timeline_cache_local(page, cached, &kept, vlen);
        return;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_timeline_page,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_PAGES,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_PAGES],
        NGX_HTTP_FEED_KEY_KEPT_PAGES, &page->user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_VERSION,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_VERSION],
        NGX_HTTP_FEED_KEY_TIMELINE_NONCE, &page->user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_TIMELINE,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_TIMELINE],
        NGX_HTTP_FEED_KEY_TIMELINE, &page->user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_PULL,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_PULL],
        NGX_HTTP_FEED_KEY_PULL_AUTHORS, &page->user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_FILTERS,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_FILTERS],
        NGX_HTTP_FEED_KEY_FILTERS, &page->user);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_LIMIT,
        limit, ngx_sprintf(limit, "%ui", page->limit) - limit);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_VERSION, value, vlen);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_IDS,
        cached->ids.data, cached->ids.len);
    ngx_http_feed_timeline_cache_copy_arg(fmcf, &call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_PULL_COPY, copy,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_TIMELINE);
    ngx_http_feed_timeline_cache_deleting_args(fmcf, &call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_ARG_DELETING, deleting,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_PAGE_KEY_TIMELINE);

    (void) ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call, NULL,
                                    NULL);

    /*
     * The worker's own copy, under the same version: if the store is
     * refused, no current page has that version, and the copy is never
     * answered.
     */

    ngx_http_feed_timeline_cache_local(page, cached, &kept, vlen);
}


/* the worker's copy of a page, "version\nnext\nJSON" (vlen: the version) */

static void
ngx_http_feed_timeline_cache_local(ngx_http_feed_page_t *page,
    ngx_http_feed_cached_t *cached, ngx_str_t *kept, size_t vlen)
{
    ngx_str_t                    version;
    ngx_http_feed_local_track_t  track;

    ngx_http_feed_timeline_local_put(&page->user, page->limit, kept,
                                     &cached->lists);

    /* the read that made the page kept its list alive */

    ngx_memzero(&track, sizeof(ngx_http_feed_local_track_t));
    track.refreshed = ngx_current_msec;
    version.data = kept->data;
    version.len = vlen;

    ngx_http_feed_timeline_local_track(&page->user, page->limit, &version,
                                       &track);
}


/* the page as Redis answered it, kept by the request, not copied */

ngx_int_t
ngx_http_feed_timeline_cache_parse(ngx_pool_t *pool, redisReply *reply,
    ngx_http_feed_cached_t *cached)
{
    size_t       i;
    redisReply  *e;

    ngx_memzero(cached, sizeof(ngx_http_feed_cached_t));

    ngx_http_feed_timeline_cache_error(reply);

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
        return NGX_DECLINED;
    }

    switch (reply->element[0]->integer) {

    case NGX_HTTP_FEED_TIMELINE_READ_MISSING:
        e = reply->element[NGX_HTTP_FEED_TIMELINE_READ_LOCKED];

        if (e->type != REDIS_REPLY_INTEGER) {
            return NGX_DECLINED;
        }

        cached->locked = e->integer;

        if (cached->locked == NGX_HTTP_FEED_LOCK_PARTIAL
            && reply->elements > NGX_HTTP_FEED_TIMELINE_READ_PARTIAL)
        {
            return ngx_http_feed_timeline_cache_parse_partial(pool, reply,
                                                              cached);
        }

        return NGX_OK;

    case NGX_HTTP_FEED_TIMELINE_READ_LOCAL:
    case NGX_HTTP_FEED_TIMELINE_READ_COUNTED:
        return ngx_http_feed_timeline_cache_parse_kept(pool, reply, cached);

    case NGX_HTTP_FEED_TIMELINE_READ_PULL:
        return ngx_http_feed_timeline_cache_parse_pull(pool, reply, cached);

    case NGX_HTTP_FEED_TIMELINE_READ_UNREAD:
        cached->found = 1;
        cached->counted = 1;
        return ngx_http_feed_timeline_cache_unread_count(pool, reply,
                   NGX_HTTP_FEED_TIMELINE_READ_COUNT, cached);

    case NGX_HTTP_FEED_TIMELINE_READ_AGAIN:
        cached->again = 1;
        break;

    case NGX_HTTP_FEED_TIMELINE_READ_PAGE:
        break;

    default:
        return NGX_DECLINED;
    }

    if (reply->elements < NGX_HTTP_FEED_TIMELINE_READ_ITEMS) {
        return NGX_DECLINED;
    }

    if (ngx_http_feed_redis_hold_reply(pool, reply) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = NGX_HTTP_FEED_TIMELINE_READ_LAST; i < reply->elements; i++) {
        if (reply->element[i]->type != REDIS_REPLY_STRING
            && i != NGX_HTTP_FEED_TIMELINE_READ_PULLED
            && i != NGX_HTTP_FEED_TIMELINE_READ_USEC
            && i != NGX_HTTP_FEED_TIMELINE_READ_LISTS
            && i != NGX_HTTP_FEED_TIMELINE_READ_FILTERS
            && i != NGX_HTTP_FEED_TIMELINE_READ_UNREAD_COUNT)
        {
            return NGX_DECLINED;
        }
    }

    /* the last post's id and the page's, as bytes (none: an empty page) */

    e = reply->element[NGX_HTTP_FEED_TIMELINE_READ_LAST];

    if ((e->len != 0 && e->len != NGX_HTTP_FEED_ID_BYTES)
        || reply->element[NGX_HTTP_FEED_TIMELINE_READ_IDS]->len
           % NGX_HTTP_FEED_ID_BYTES)
    {
        return NGX_DECLINED;
    }

    *ngx_hex_dump((u_char *) cached->last, (u_char *) e->str, e->len) = '\0';

    cached->found = 1;
    cached->more = ngx_http_feed_timeline_cache_flag(
                       reply->element[NGX_HTTP_FEED_TIMELINE_READ_MORE]);
    cached->deep = ngx_http_feed_timeline_cache_flag(
                       reply->element[NGX_HTTP_FEED_TIMELINE_READ_DEEP]);
    cached->pulled = ngx_http_feed_timeline_cache_int(
                         reply->element[NGX_HTTP_FEED_TIMELINE_READ_PULLED]);
    cached->merge_us = ngx_http_feed_timeline_cache_int(
                           reply->element[NGX_HTTP_FEED_TIMELINE_READ_USEC]);

    if (ngx_http_feed_timeline_cache_copy(pool,
            reply->element[NGX_HTTP_FEED_TIMELINE_READ_VERSION],
            &cached->version)
        != NGX_OK
        || ngx_http_feed_timeline_cache_ids(pool,
               reply->element[NGX_HTTP_FEED_TIMELINE_READ_IDS], &cached->ids)
           != NGX_OK
        || ngx_http_feed_timeline_cache_lists(pool, reply,
               NGX_HTTP_FEED_TIMELINE_READ_LISTS, &cached->lists)
           != NGX_OK
        || ngx_http_feed_timeline_cache_filters(pool,
               reply->element[NGX_HTTP_FEED_TIMELINE_READ_FILTERS],
               &cached->filters)
           != NGX_OK
        || ngx_http_feed_timeline_cache_unread_count(pool, reply,
               NGX_HTTP_FEED_TIMELINE_READ_UNREAD_COUNT, cached)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    cached->nitems = reply->elements - NGX_HTTP_FEED_TIMELINE_READ_ITEMS;

    if (cached->nitems == 0) {
        return NGX_OK;
    }

    cached->items = ngx_palloc(pool,
                               cached->nitems * sizeof(ngx_str_t));
    if (cached->items == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < cached->nitems; i++) {
        if (ngx_http_feed_timeline_cache_copy(pool,
                reply->element[NGX_HTTP_FEED_TIMELINE_READ_ITEMS + i],
                &cached->items[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The partial page a rebuild left in its lock, "<limit>\n<filters>\n<JSON>"
 * (timeline_unlock.lua): the reply is held, the filters in memory being
 * made of its bytes
 */

static ngx_int_t
ngx_http_feed_timeline_cache_parse_partial(ngx_pool_t *pool,
    redisReply *reply, ngx_http_feed_cached_t *cached)
{
    u_char                   *p, *nl, *last;
    ngx_int_t                 limit;
    redisReply               *e;
    ngx_http_feed_partial_t  *partial;

    e = reply->element[NGX_HTTP_FEED_TIMELINE_READ_PARTIAL];

    if (e->type != REDIS_REPLY_STRING) {
        return NGX_DECLINED;
    }

    p = (u_char *) e->str;
    last = p + e->len;

    nl = ngx_strlchr(p, last, '\n');
    limit = nl ? ngx_atoi(p, nl - p) : NGX_ERROR;

    if (limit <= 0) {
        return NGX_DECLINED;
    }

    partial = &cached->partial;
    partial->limit = limit;

    p = nl + 1;
    nl = ngx_strlchr(p, last, '\n');

    if (nl == NULL) {
        return NGX_DECLINED;
    }

    partial->filters.data = p;
    partial->filters.len = nl - p;
    partial->json.data = nl + 1;
    partial->json.len = last - (nl + 1);

    return ngx_http_feed_redis_hold_reply(pool, reply);
}


/* a page kept as answered is current: the worker's own copy */

static ngx_int_t
ngx_http_feed_timeline_cache_parse_kept(ngx_pool_t *pool,
    redisReply *reply, ngx_http_feed_cached_t *cached)
{
    if (reply->element[NGX_HTTP_FEED_TIMELINE_READ_KEPT_VERSION]->type
        != REDIS_REPLY_STRING
        || ngx_http_feed_redis_hold_reply(pool, reply) != NGX_OK)
    {
        return NGX_DECLINED;
    }

    cached->found = 1;
    cached->kept = 1;

    /* the worker's copy is current, and the count is all there is to it */

    if (reply->element[0]->integer == NGX_HTTP_FEED_TIMELINE_READ_COUNTED) {
        if (ngx_http_feed_timeline_cache_unread_count(pool, reply,
                NGX_HTTP_FEED_TIMELINE_READ_COUNTED_UNREAD, cached)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        return ngx_http_feed_timeline_cache_copy(pool,
                   reply->element[NGX_HTTP_FEED_TIMELINE_READ_KEPT_VERSION],
                   &cached->version);
    }

    if (ngx_http_feed_timeline_cache_lists(pool, reply,
            NGX_HTTP_FEED_TIMELINE_READ_KEPT_LISTS, &cached->lists)
        != NGX_OK
        || ngx_http_feed_timeline_cache_unread_count(pool, reply,
               NGX_HTTP_FEED_TIMELINE_READ_KEPT_UNREAD, cached)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_feed_timeline_cache_copy(pool,
               reply->element[NGX_HTTP_FEED_TIMELINE_READ_KEPT_VERSION],
               &cached->version);
}


/* the pull authors whose lists are missing: loaded, then read again */

static ngx_int_t
ngx_http_feed_timeline_cache_parse_pull(ngx_pool_t *pool,
    redisReply *reply, ngx_http_feed_cached_t *cached)
{
    size_t                 i;
    redisReply            *e;
    ngx_http_feed_user_t  *u;

    cached->found = 1;
    cached->pull = ngx_palloc(pool, (reply->elements - 1)
                                       * sizeof(ngx_http_feed_user_t));
    if (cached->pull == NULL) {
        return NGX_ERROR;
    }

    for (i = 1; i < reply->elements; i++) {
        e = reply->element[i];

        if (e->type != REDIS_REPLY_STRING
            || !ngx_http_feed_user_valid((u_char *) e->str, e->len))
        {
            return NGX_DECLINED;
        }

        u = &cached->pull[cached->npull++];
        ngx_memcpy(u->data, e->str, e->len);
        u->data[e->len] = '\0';
        u->len = e->len;
    }

    return NGX_OK;
}


/*
 * The unread count at element i, "<n>" or "<n>+" (lib/unread.lua), when
 * the reply has one: copied, as the answer keeps it past the reply
 */

static ngx_int_t
ngx_http_feed_timeline_cache_unread_count(ngx_pool_t *pool,
    redisReply *reply, size_t i, ngx_http_feed_cached_t *cached)
{
    size_t       n;
    redisReply  *e;

    if (reply->elements <= i
        || reply->element[i]->type != REDIS_REPLY_STRING)
    {
        return NGX_OK;
    }

    e = reply->element[i];

    for (n = 0; n < e->len && e->str[n] >= '0' && e->str[n] <= '9'; n++) {
        /* void */
    }

    if (n == 0 || n > NGX_INT_T_LEN
        || (e->len != n && (e->len != n + 1 || e->str[n] != '+')))
    {
        ngx_log_error(NGX_LOG_ERR, pool->log, 0,
                      "timeline script answered a malformed unread count "
                      "\"%*s\"", ngx_min(e->len, 32), e->str);
        return NGX_OK;
    }

    cached->unread.data = ngx_pnalloc(pool, e->len);
    if (cached->unread.data == NULL) {
        return NGX_ERROR;
    }

    cached->unread.len = e->len;
    ngx_memcpy(cached->unread.data, e->str, e->len);

    return NGX_OK;
}


static ngx_uint_t
ngx_http_feed_timeline_cache_flag(redisReply *e)
{
    return e->type == REDIS_REPLY_INTEGER && e->integer;
}


static ngx_uint_t
ngx_http_feed_timeline_cache_int(redisReply *e)
{
    return (e->type == REDIS_REPLY_INTEGER && e->integer > 0)
           ? (ngx_uint_t) e->integer : 0;
}


/*
 * The copy of the pull authors' lists a read merges, as its script makes
 * their keys (scripts/keys): "" on a single Redis, the tag of the node of
 * the call's key of index key on a cluster (buf:
 * NGX_HTTP_FEED_PULL_COPY_LEN bytes).
 */

static void
ngx_http_feed_timeline_cache_copy_arg(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, u_char *buf,
    ngx_uint_t key)
{
    ngx_str_t  none = ngx_string("");

    if (!fmcf->redis.cluster) {
        /* the hot path: the one copy, "" */
        ngx_http_feed_redis_call_lit(call, i, "");
        return;
    }

    ngx_http_feed_redis_call_arg(call, i, buf,
        ngx_http_feed_redis_tag_copy(fmcf->redis_client,
            (u_char *) call->argv[3 + key], call->argvlen[3 + key], &none,
            buf));
}


/*
 * The worker's copy of a page, "version\nnext\nJSON", if it is the version
 * the script found current: its JSON is the answer as it is.
 */

ngx_int_t
ngx_http_feed_timeline_cache_kept(ngx_str_t *page,
    ngx_http_feed_cached_t *cached)
{
    u_char  *p, *last, *nl;

    /* none: the copy went away */

    if (page->len == 0) {
        return NGX_DECLINED;
    }

    p = page->data;
    last = p + page->len;

    nl = ngx_strlchr(p, last, '\n');

    if (nl == NULL || (size_t) (nl - p) != cached->version.len
        || ngx_strncmp(p, cached->version.data, cached->version.len) != 0)
    {
        return NGX_DECLINED;
    }

    p = nl + 1;
    nl = ngx_strlchr(p, last, '\n');

    if (nl == NULL || (nl - p != 0 && nl - p != 24)) {
        return NGX_DECLINED;
    }

    if (nl - p == 24) {
        ngx_memcpy(cached->last, p, 24);
        cached->last[24] = '\0';
        cached->more = 1;
        cached->nitems = 1;
    }

    cached->body.data = nl + 1;
    cached->body.len = last - (nl + 1);

    return NGX_OK;
}


/*
 * The pull authors merged and their lists' versions, {a1, v1, ...} in the
 * reply (none for a user who follows none), as "author version\n" each:
 * the worker's copy of the page keeps them.
 */

static ngx_int_t
ngx_http_feed_timeline_cache_lists(ngx_pool_t *pool, redisReply *reply,
    size_t i, ngx_str_t *lists)
{
    u_char      *p;
    size_t       j, len;
    redisReply  *e, *a, *v;

    ngx_str_null(lists);

    if (reply->elements <= i
        || reply->element[i]->type != REDIS_REPLY_ARRAY
        || reply->element[i]->elements == 0)
    {
        return NGX_OK;
    }

    e = reply->element[i];
    len = 0;

    for (j = 0; j + 1 < e->elements; j += 2) {
        a = e->element[j];
        v = e->element[j + 1];

        if (a->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) {
            return NGX_OK;
        }

        len += a->len + 1 + v->len + 1;
    }

    p = ngx_pnalloc(pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    lists->data = p;

    for (j = 0; j + 1 < e->elements; j += 2) {
        a = e->element[j];
        v = e->element[j + 1];

        p = ngx_cpymem(p, a->str, a->len);
        *p++ = ' ';
        p = ngx_cpymem(p, v->str, v->len);
        *p++ = '\n';
    }

    lists->len = p - lists->data;

    return NGX_OK;
}


/*
 * The authors the rest of a deep page leaves out, {a1, a2, ...} in the
 * reply (empty unless the page is deep and the user has filters).
 */

static ngx_int_t
ngx_http_feed_timeline_cache_filters(ngx_pool_t *pool, redisReply *e,
    ngx_http_feed_filter_set_t *filters)
{
    size_t  j;

    if (e->type != REDIS_REPLY_ARRAY) {
        return NGX_OK;
    }

    if (ngx_http_feed_filter_set_init(pool, filters, e->elements)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    for (j = 0; j < e->elements; j++) {
        if (e->element[j]->type == REDIS_REPLY_STRING) {
            ngx_http_feed_filter_set_add(filters,
                                         (u_char *) e->element[j]->str,
                                         e->element[j]->len);
        }
    }

    ngx_http_feed_filter_set_done(filters);

    return NGX_OK;
}


/* the reply is kept by the request: its strings are used where they are */

static ngx_int_t
ngx_http_feed_timeline_cache_copy(ngx_pool_t *pool, redisReply *e,
    ngx_str_t *to)
{
    to->len = e->len;
    to->data = (u_char *) e->str;

    return NGX_OK;
}


/* a page's ids, their bytes one after another, in hex as the worker uses */

static ngx_int_t
ngx_http_feed_timeline_cache_ids(ngx_pool_t *pool, redisReply *e,
    ngx_str_t *to)
{
    to->data = ngx_pnalloc(pool, 2 * e->len + 1);
    if (to->data == NULL) {
        return NGX_ERROR;
    }

    to->len = ngx_hex_dump(to->data, (u_char *) e->str, e->len) - to->data;

    return NGX_OK;
}


/* the rebuild lock: one rebuild per user across workers and nodes */

ngx_int_t
ngx_http_feed_timeline_cache_lock(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *token, ngx_http_feed_redis_pt handler, void *data)
{
    char                        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_NKEYS]
                                    [NGX_HTTP_FEED_USER_KEY_LEN];
    u_char                      ms[NGX_INT_T_LEN];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_ARGC];
    ngx_http_feed_redis_call_t  call;

    /* token->data: NGX_HTTP_FEED_NONCE_LEN bytes of the caller's */

    token->len = ngx_http_feed_timeline_cache_nonce(token->data) - token->data;

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_timeline_lock,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_KEY_LOCK,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_KEY_LOCK],
        NGX_HTTP_FEED_KEY_REBUILD_LOCK, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_KEY_FOLLOWS_VERSION,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_KEY_FOLLOWS_VERSION],
        NGX_HTTP_FEED_KEY_FOLLOWS_VERSION, user);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_ARG_TOKEN,
        token->data, token->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_LOCK_ARG_MS,
        ms, ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms);

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &call, handler,
                                    data);
}


/*
 * A rebuild that did not warm releases its lock; one that failed leaves it
 * saying so for a moment, and one that answered a partial page (partial)
 * leaves that page in it, so that those waiting on it elsewhere give the
 * same answer instead of each rebuilding in turn.
 */

void
ngx_http_feed_timeline_cache_unlock(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_str_t *token, ngx_uint_t failed,
    ngx_http_feed_partial_t *partial)
{
    char                        lock[NGX_HTTP_FEED_USER_KEY_LEN];
    u_char                      ms[NGX_INT_T_LEN], limit[NGX_INT_T_LEN];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARGC];
    ngx_str_t                   ending, number, filters, json;
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_str_null(&ending);
    ngx_str_null(&number);
    ngx_str_null(&filters);
    ngx_str_null(&json);

    if (failed) {
        ngx_str_set(&ending, "failed");

    } else if (partial) {
        ngx_str_set(&ending, "partial");
        number.data = limit;
        number.len = ngx_sprintf(limit, "%ui", partial->limit) - limit;
        filters = partial->filters;
        json = partial->json;
    }

    ngx_http_feed_redis_call_init(&call,
                                  &ngx_http_feed_script_timeline_unlock,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_KEY_LOCK, lock,
        NGX_HTTP_FEED_KEY_REBUILD_LOCK, user);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_TOKEN,
        token->data, token->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_ENDING,
        ending.len ? (char *) ending.data : "", ending.len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_MS,
        ms, ngx_sprintf(ms, "%d", NGX_HTTP_FEED_LOCK_ENDED) - ms);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_LIMIT,
        number.len ? (char *) number.data : "", number.len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_FILTERS,
        filters.len ? (char *) filters.data : "", filters.len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_UNLOCK_ARG_PAGE,
        json.len ? (char *) json.data : "", json.len);

    (void) ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call, NULL,
                                    NULL);
}


/* items: the fallback's "items" array of posts, newest first */

ngx_int_t
ngx_http_feed_timeline_cache_warm(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *version, ngx_str_t *token, ngx_str_t *pull, ngx_str_t *filters,
    bson_t *items, ngx_uint_t complete, ngx_http_feed_redis_pt handler,
    void *data)
{
    char                       *keys;
    u_char                     *ttl, *cap, *nonce;
    size_t                     *argvlen;
    uint32_t                    n;
    ngx_uint_t                  argc;
    const char                **argv;
    ngx_http_feed_redis_call_t  call;

    /* the fixed arguments, then an id and a JSON for each post */

    n = bson_count_keys(items);
    argc = NGX_HTTP_FEED_REDIS_CALL_ARGC(
               NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NKEYS,
               NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NARGS + 2 * n);

    argv = ngx_palloc(r->pool, argc * sizeof(char *));
    argvlen = ngx_palloc(r->pool, argc * sizeof(size_t));
    keys = ngx_pnalloc(r->pool, NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NKEYS
                                * NGX_HTTP_FEED_USER_KEY_LEN
                                + 2 * NGX_INT_T_LEN
                                + NGX_HTTP_FEED_NONCE_LEN
                                + NGX_HTTP_FEED_DELETING_ARGS_LEN);

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_timeline_warm,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_TIMELINE,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_TIMELINE
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_TIMELINE, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_LOCK,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_LOCK
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_REBUILD_LOCK, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_FOLLOWS_VERSION,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_FOLLOWS_VERSION
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_FOLLOWS_VERSION, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_QUEUE,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_QUEUE
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_REBUILD_QUEUE, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_VERSION,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_VERSION
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_TIMELINE_NONCE, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_PULL,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_PULL
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_PULL_AUTHORS, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_FILTERS,
        keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_FILTERS
               * NGX_HTTP_FEED_USER_KEY_LEN,
        NGX_HTTP_FEED_KEY_FILTERS, user);

    ttl = (u_char *) keys + NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_NKEYS
                            * NGX_HTTP_FEED_USER_KEY_LEN;
    cap = ttl + NGX_INT_T_LEN;
    nonce = cap + NGX_INT_T_LEN;

    /*
     * An empty timeline (no follows, no posts) is kept only briefly: any
     * id can be read, and each would otherwise leave its keys for days.
     */

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", (n == 0 && complete)
                                    ? fmcf->cache_empty_ttl
                                    : fmcf->cache_ttl)
             - ttl);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_CAP,
        cap, ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_MODE,
        fmcf->cache_embed ? "e" : "l", 1);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_COMPLETE,
        complete ? "1" : "0", 1);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_FOLLOWS_VERSION,
        version->data, version->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_TOKEN,
        token->data, token->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_PULL,
        pull->len ? (char *) pull->data : "", pull->len);
    ngx_http_feed_timeline_cache_deleting_args(fmcf, &call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_DELETING,
        nonce + NGX_HTTP_FEED_NONCE_LEN,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_KEY_TIMELINE);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_WARM_ARG_FILTERS,
        filters->len ? (char *) filters->data : "", filters->len);

    if (ngx_http_feed_timeline_cache_warm_items(r, &call, items) != NGX_OK) {
        return NGX_ERROR;
    }

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &call, handler,
                                    data);
}


/* the posts after the fixed arguments, as id, JSON pairs */

static ngx_int_t
ngx_http_feed_timeline_cache_warm_items(ngx_http_request_t *r,
    ngx_http_feed_redis_call_t *call, bson_t *items)
{
    return ngx_http_feed_json_posts(r->pool, items,
                                    ngx_http_feed_timeline_cache_warm_item,
                                    call);
}


static ngx_int_t
ngx_http_feed_timeline_cache_warm_item(void *data, ngx_str_t *id,
    ngx_str_t *json)
{
    ngx_http_feed_redis_call_t  *call = data;

    ngx_http_feed_redis_call_arg(call, call->nargs, id->data, id->len);
    ngx_http_feed_redis_call_arg(call, call->nargs + 1, json->data,
                                 json->len);
    call->nargs += 2;

    return NGX_OK;
}


/*
 * The user's follows or filters changed: the cached timeline goes, and a
 * rebuild that began before is not warmed.  NGX_DECLINED when Redis is
 * not connected; r may be NULL (the sweeper of ngx_http_feed_effects.c,
 * which applies again a drop Redis could not take).
 */

ngx_int_t
ngx_http_feed_timeline_cache_drop(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_NKEYS]
                                    [NGX_HTTP_FEED_USER_KEY_LEN];
    u_char                      ttl[NGX_INT_T_LEN];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP,
                   r ? r->connection->log : ngx_cycle->log, 0,
                   "feed timeline of \"%s\": dropping", user->data);

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_timeline_drop,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_TIMELINE,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_TIMELINE],
        NGX_HTTP_FEED_KEY_TIMELINE, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_FOLLOWS_VERSION,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_FOLLOWS_VERSION],
        NGX_HTTP_FEED_KEY_FOLLOWS_VERSION, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_PAGES,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_PAGES],
        NGX_HTTP_FEED_KEY_KEPT_PAGES, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_PULL,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_PULL],
        NGX_HTTP_FEED_KEY_PULL_AUTHORS, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_QUEUE,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_KEY_QUEUE],
        NGX_HTTP_FEED_KEY_REBUILD_QUEUE, user);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DROP_ARG_TTL, ttl,
        ngx_sprintf(ttl, "%T", ngx_http_feed_timeline_cache_fmcf->cache_ttl)
        - ttl);

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &call, handler,
                                    data);
}


/*
 * A read filter of the user changed (a block, a mute or a hidden post,
 * given or taken back, or an unfollow, in MongoDB already): the next read
 * applies it, without a rebuild (scripts/timeline_filter.lua).  kinds:
 * the reasons changed together, such as a block's and its unfollow's.
 */

ngx_int_t
ngx_http_feed_timeline_cache_filter(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_user_t *author, ngx_str_t *kinds, ngx_uint_t add,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_NKEYS]
                                    [NGX_HTTP_FEED_USER_KEY_LEN];
    u_char                      ttl[NGX_INT_T_LEN],
                                nonce[NGX_HTTP_FEED_NONCE_LEN];
    size_t                      argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_log_debug4(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "feed timeline filter of \"%s\": %V%s \"%s\"",
                   user->data, kinds, add ? "+" : "-", author->data);

    ngx_http_feed_redis_call_init(&call,
                                  &ngx_http_feed_script_timeline_filter,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_NARGS);

    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_FILTERS,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_FILTERS],
        NGX_HTTP_FEED_KEY_FILTERS, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_FOLLOWS_VERSION,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_FOLLOWS_VERSION],
        NGX_HTTP_FEED_KEY_FOLLOWS_VERSION, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_PAGES,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_PAGES],
        NGX_HTTP_FEED_KEY_KEPT_PAGES, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_VERSION,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_VERSION],
        NGX_HTTP_FEED_KEY_TIMELINE_NONCE, user);
    ngx_http_feed_timeline_cache_key(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_QUEUE,
        keys[NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_KEY_QUEUE],
        NGX_HTTP_FEED_KEY_REBUILD_QUEUE, user);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARG_AUTHOR,
        author->data, author->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARG_KIND, kinds->data,
        kinds->len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARG_ADD, add ? "1" : "0", 1);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_FILTER_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);

    return ngx_http_feed_redis_call(r, fmcf->redis_client, &call, handler,
                                    data);
}


/*
 * A post's JSON in link mode, where timelines point to it: sent ahead of
 * its delivery on the same connection, so it is there before any
 * timeline points to it.
 */

ngx_int_t
ngx_http_feed_timeline_cache_post(ngx_http_feed_main_conf_t *fmcf,
    const char *id, const char *json, size_t len,
    ngx_http_feed_redis_pt handler, void *data)
{
    u_char                      key[NGX_HTTP_FEED_POST_KEY_LEN],
                                ttl[NGX_INT_T_LEN];
    size_t                      argvlen[5];
    const char                 *argv[5];
    ngx_http_feed_redis_args_t  args;

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "SET");
    ngx_http_feed_redis_args_key(&args, key,
                                 ngx_http_feed_timeline_cache_post_key(key,
                                                                       id));
    ngx_http_feed_redis_args_add(&args, json, len);
    ngx_http_feed_redis_args_lit(&args, "EX");
    ngx_http_feed_redis_args_add(&args, ttl,
                                 ngx_sprintf(ttl, "%T", 2 * fmcf->cache_ttl)
                                 - ttl);

    return ngx_http_feed_redis_send(fmcf->redis_client, handler, data, &args)
           ? NGX_OK : NGX_DECLINED;
}


/*
 * Fanout of one entry (the id, and the JSON in embed mode) to a batch of
 * users: one script call, one round trip.  json: the post's in link mode,
 * told with the delivery while streams are live.
 */

ngx_int_t
ngx_http_feed_timeline_cache_deliver(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    ngx_str_t *entry, ngx_str_t *json, ngx_http_feed_user_t *member,
    ngx_http_feed_redis_pt handler, void *data)
{
    u_char                      cap[NGX_INT_T_LEN], ms[NGX_INT_T_LEN],
                                ttl[NGX_INT_T_LEN],
                                nonce[NGX_HTTP_FEED_NONCE_LEN],
                                deleting[NGX_HTTP_FEED_DELETING_ARGS_LEN],
                                live[NGX_HTTP_FEED_LIVE_ARGS_LEN];
    ngx_http_feed_redis_call_t *call;

    call = ngx_http_feed_timeline_cache_batch(pool->log,
                                &ngx_http_feed_script_timeline_deliver,
                                users, n);
    if (call == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_timeline_cache_deleting_args(fmcf, call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_DELETING, deleting,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_KEY_ROUTE);
    ngx_http_feed_timeline_live_args(fmcf, call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_LIVE, live,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_KEY_ROUTE);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_JSON,
        (json && json->len) ? json->data : (u_char *) "",
        json ? json->len : 0);

    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_ENTRY,
        entry->data, entry->len);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_CAP,
        cap, ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_QUEUE_MS,
        ms, ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_DELIVER_ARG_MEMBER,
        member ? member->data : "", member ? member->len : 0);

    return ngx_http_feed_timeline_cache_batch_send(fmcf, call, handler,
                                                   data);
}


/*
 * A post is deleted: reads skip it until fanout has taken it out of every
 * timeline, and its JSON in link mode goes.  Sent ahead of the delete's
 * fanout entry, on the same connection, so it is in Redis before anyone
 * hears of the delete.  handler gets the reply of each write: the mark
 * reads check, its copy on each master of a cluster, the JSON's removal;
 * *sent counts them.  NGX_DECLINED: some could not be sent.
 */

ngx_int_t
ngx_http_feed_timeline_cache_delete(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, const char *id,
    ngx_http_feed_redis_pt handler, void *data, ngx_uint_t *sent)
{
    u_char                               key[NGX_HTTP_FEED_POST_KEY_LEN],
                                         old[NGX_HTTP_FEED_POST_KEY_LEN];
    size_t                               argvlen[3];
    const char                          *argv[3];
    ngx_http_feed_redis_args_t           args;
    ngx_http_feed_timeline_cache_mark_t  mark;

    mark.r = r;
    mark.handler = handler;
    mark.data = data;
    mark.sent = 0;
    mark.unsent = 0;

    ngx_http_feed_timeline_cache_deleting(fmcf, id, 0, &mark);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "DEL");
    ngx_http_feed_redis_args_key(&args, key,
                                 ngx_http_feed_timeline_cache_post_key(key,
                                                                       id));

    /*
     * And the copy a version before ids were bytes may have left, in link
     * mode, which a cluster refuses (a DEL there is of one slot)
     */

    if (!fmcf->redis.cluster) {
        ngx_http_feed_redis_args_key(&args, old,
            ngx_http_feed_timeline_cache_old_post_key(old, id));
    }

    ngx_http_feed_timeline_cache_mark_send(&mark, &args);

    *sent = mark.sent;

    return mark.unsent ? NGX_DECLINED : NGX_OK;
}


/* a write of a delete: its reply to the delete's handler, if it has one */

static void
ngx_http_feed_timeline_cache_mark_send(ngx_http_feed_timeline_cache_mark_t *m,
    ngx_http_feed_redis_args_t *args)
{
    ngx_http_feed_redis_t  *rd;

    rd = ngx_http_feed_timeline_cache_fmcf->redis_client;

    if (m == NULL || m->handler == NULL) {
        (void) ngx_http_feed_redis_send(rd, NULL, NULL, args);
        return;
    }

    if (ngx_http_feed_redis_send_r(m->r, rd, m->handler, m->data, args)
        == NGX_OK)
    {
        m->sent++;

    } else {
        m->unsent++;
    }
}


/* the delete of a post fanned out to a batch of users */

ngx_int_t
ngx_http_feed_timeline_cache_remove(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    const char *id, ngx_http_feed_redis_pt handler, void *data)
{
    u_char                      ttl[NGX_INT_T_LEN],
                                nonce[NGX_HTTP_FEED_NONCE_LEN];
    ngx_http_feed_redis_call_t *call;

    call = ngx_http_feed_timeline_cache_batch(pool->log,
                                &ngx_http_feed_script_timeline_remove,
                                users, n);
    if (call == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_ID, id, 24);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl);
    ngx_http_feed_redis_call_arg(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);
    ngx_http_feed_redis_call_lit(call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_CHANNEL, "");

    return ngx_http_feed_timeline_cache_batch_send(fmcf, call, handler,
                                                   data);
}


/* fanout took the deleted post out of every timeline */

void
ngx_http_feed_timeline_cache_removed(ngx_http_feed_main_conf_t *fmcf,
    const char *id)
{
    ngx_http_feed_timeline_cache_deleting(fmcf, id, 1, NULL);
}


/*
 * A script call on the timelines of a batch of users, arguments after the
 * script's own, the first timeline its only key (its route: on a cluster,
 * the users of a batch are on one node); its other arguments are the
 * caller's to add.  It and what it is built in are one block, freed as
 * soon as hiredis has copied it: one entry may go to hundreds of
 * thousands of followers, batch after batch.
 */

static ngx_http_feed_redis_call_t *
ngx_http_feed_timeline_cache_batch(ngx_log_t *log,
    ngx_http_feed_redis_script_t *script, ngx_http_feed_user_t *users,
    ngx_uint_t n)
{
    char                        *p;
    size_t                      *argvlen, len;
    ngx_uint_t                   i, argc;
    const char                 **argv;
    ngx_http_feed_redis_call_t  *call;

    argc = NGX_HTTP_FEED_REDIS_CALL_ARGC(1, script->nargs + n);

    call = ngx_alloc(sizeof(ngx_http_feed_redis_call_t)
                     + argc * (sizeof(char *) + sizeof(size_t))
                     + n * NGX_HTTP_FEED_USER_KEY_LEN, log);
    if (call == NULL) {
        return NULL;
    }

    argv = (const char **) (call + 1);
    argvlen = (size_t *) (argv + argc);
    p = (char *) (argvlen + argc);

    ngx_http_feed_redis_call_init(call, script, argv, argvlen, 1,
                                  script->nargs + n);

    for (i = 0; i < n; i++) {
        len = ngx_http_feed_timeline_cache_user_key(p,
                  NGX_HTTP_FEED_KEY_TIMELINE, &users[i]);
        ngx_http_feed_redis_call_arg(call, script->nargs + i, p, len);

        if (i == 0) {
            ngx_http_feed_redis_call_key(call, 0, p, len);
        }

        p += NGX_HTTP_FEED_USER_KEY_LEN;
    }

    return call;
}


static ngx_int_t
ngx_http_feed_timeline_cache_batch_send(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_call_t *call, ngx_http_feed_redis_pt handler,
    void *data)
{
    ngx_int_t  rc;

    rc = ngx_http_feed_redis_call(NULL, fmcf->redis_client, call, handler,
                                  data);

    ngx_free(call);

    return rc;
}


/*
 * A post is deleted (done: 0) or fanout took it out of every timeline
 * (done: 1).  Reads skip it until then, and for a grace period after,
 * in which a rebuild begun before the delete could still warm it; without
 * fanout nothing takes it out, and it is skipped as long as lists live.
 */

static void
ngx_http_feed_timeline_cache_deleting(ngx_http_feed_main_conf_t *fmcf,
    const char *id, ngx_uint_t done, ngx_http_feed_timeline_cache_mark_t *m)
{
    u_char                      score[NGX_INT64_LEN + 1],
                                now[NGX_INT64_LEN + 1],
                                channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    size_t                      argvlen[5], targvlen[4], pargvlen[3];
    int64_t                     ms;
    ngx_str_t                   single = ngx_string("");
    const char                           *argv[5], *targv[4], *pargv[3];
    ngx_http_feed_redis_args_t            args, trim, tell;
    ngx_http_feed_timeline_cache_mark_t  *mark, none;

    ms = ngx_http_feed_now_ms();

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "ZADD");
    ngx_http_feed_redis_args_key(&args, NGX_HTTP_FEED_KEY_DELETING,
                                 sizeof(NGX_HTTP_FEED_KEY_DELETING) - 1);

    if (done) {
        ngx_http_feed_redis_args_lit(&args, "XX");
        ngx_http_feed_redis_args_add(&args, score,
            ngx_sprintf(score, "%L",
                        ms + 2 * (int64_t) fmcf->cache_lock_timeout)
            - score);

    } else if (fmcf->fanout) {
        ngx_http_feed_redis_args_lit(&args, "GT");
        ngx_http_feed_redis_args_lit(&args, "+inf");

    } else {
        ngx_http_feed_redis_args_lit(&args, "GT");
        ngx_http_feed_redis_args_add(&args, score,
            ngx_sprintf(score, "%L", ms + 2000 * (int64_t) fmcf->cache_ttl)
            - score);
    }

    ngx_http_feed_redis_args_add(&args, id, 24);

    /* what no read needs any more */

    ngx_http_feed_redis_args_init(&trim, targv, targvlen);
    ngx_http_feed_redis_args_lit(&trim, "ZREMRANGEBYSCORE");
    ngx_http_feed_redis_args_key(&trim, NGX_HTTP_FEED_KEY_DELETING,
                                 sizeof(NGX_HTTP_FEED_KEY_DELETING) - 1);
    ngx_http_feed_redis_args_lit(&trim, "-inf");
    ngx_http_feed_redis_args_add(&trim, now,
                                 ngx_sprintf(now, "(%L", ms) - now);

    /*
     * The workers' copies of first pages may hold the post: their watches
     * hear it, after the mark, on the node that has it (a message is
     * heard in order with those published on the same node)
     */

    ngx_http_feed_redis_args_init(&tell, pargv, pargvlen);
    ngx_http_feed_redis_args_lit(&tell, "PUBLISH");
    ngx_http_feed_redis_args_key(&tell, channel,
        ngx_http_feed_watch_deletes_channel(&single, channel));
    ngx_http_feed_redis_args_add(&tell, id, 24);

    /* the trim only forgets marks no read needs: it may be lost */

    ngx_http_feed_timeline_cache_mark_send(m, &args);
    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, &trim);

    /* a cluster's watches hear their masters' copies' channels only */

    if (m && !fmcf->redis.cluster) {
        ngx_http_feed_timeline_cache_mark_send(m, &tell);
    }

    /*
     * On a cluster, the same on each master's copy, which the reads of
     * its users check: the mark at +inf is never trimmed.
     */

    if (m) {
        m->write[0] = &args;
        m->write[1] = &trim;
        m->told = &tell;
        mark = m;

    } else {
        none.handler = NULL;
        none.write[0] = &args;
        none.write[1] = &trim;
        none.told = NULL;
        mark = &none;
    }

    ngx_http_feed_redis_tag_copies(fmcf->redis_client,
                                   &ngx_http_feed_timeline_cache_deleting_key,
                                   ngx_http_feed_timeline_cache_deleting_copy,
                                   mark);
}


/* a write of feed:deleting made again on a copy: the same, another key */

static void
ngx_http_feed_timeline_cache_deleting_copy(void *data, u_char *key,
    size_t len)
{
    ngx_http_feed_timeline_cache_mark_t  *m = data;

    u_char                       channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    ngx_str_t                    copy;
    ngx_uint_t                   i;
    ngx_http_feed_redis_args_t  *w;

    for (i = 0; i < 2; i++) {
        w = m->write[i];
        w->argv[w->key] = (const char *) key;
        w->argvlen[w->key] = len;
    }

    ngx_http_feed_timeline_cache_mark_send(m->handler ? m : NULL,
                                           m->write[0]);
    (void) ngx_http_feed_redis_send(
               ngx_http_feed_timeline_cache_fmcf->redis_client, NULL, NULL,
               m->write[1]);

    if (m->told == NULL) {
        return;
    }

    /* the copy's name ends with its "{<tag>}": so does its channel's */

    copy.data = key + ngx_http_feed_timeline_cache_deleting_key.len;
    copy.len = len - ngx_http_feed_timeline_cache_deleting_key.len;

    w = m->told;
    w->argv[w->key] = (const char *) channel;
    w->argvlen[w->key] = ngx_http_feed_watch_deletes_channel(&copy, channel);

    ngx_http_feed_timeline_cache_mark_send(m->handler ? m : NULL, w);
}


/*
 * The two arguments (i, i + 1) of a script that checks the posts being
 * deleted (lib/deleted.lua): feed:deleting, or on a cluster its copy on the
 * node of the call's key of index key, and the mark that says that copy
 * is whole for the node's run ("" for a single Redis), both in buf
 * (NGX_HTTP_FEED_DELETING_ARGS_LEN bytes).  The mark is the run id this
 * worker's connection to that node read before any command: a node that
 * came back on older data (its own old file, a replica behind) has
 * another, and the script fails with NOCOPY rather than trust its copy.
 */

static void
ngx_http_feed_timeline_cache_deleting_args(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, u_char *buf,
    ngx_uint_t key)
{
    size_t   len, mlen;
    u_char  *mark;

    len = ngx_http_feed_redis_tag_copy(fmcf->redis_client,
              (u_char *) call->argv[3 + key], call->argvlen[3 + key],
              &ngx_http_feed_timeline_cache_deleting_key, buf);

    ngx_http_feed_redis_call_arg(call, i, buf, len);

    mark = buf + len;
    mlen = ngx_http_feed_redis_tag_copy_mark(fmcf->redis_client,
               (u_char *) call->argv[3 + key], call->argvlen[3 + key], mark);

    ngx_http_feed_redis_call_arg(call, i + 1, mark, mlen);
}


/*
 * A script found a copy of feed:deleting without its mark (a new master,
 * a slot moved, a node emptied): reads of that node's users fail until it
 * is made.  The other errors are the caller's.
 */

void
ngx_http_feed_timeline_cache_error(redisReply *reply)
{
    if (reply != NULL && reply->type == REDIS_REPLY_ERROR
        && reply->len > 7 && ngx_strncmp(reply->str, "NOCOPY ", 7) == 0)
    {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "feed deleted posts: %*s, making it",
                      (size_t) ngx_min(reply->len, 64), reply->str);

        ngx_http_feed_timeline_cache_copies_ready(NULL,
            ngx_http_feed_timeline_cache_fmcf);

        /*
         * A copy retired by a worker whose map is newer: if its tag is no
         * master's any more, this worker retires it too once it knows,
         * and what it makes now goes with it
         */

        if (ngx_http_feed_timeline_cache_fmcf) {
            ngx_http_feed_redis_stale(
                ngx_http_feed_timeline_cache_fmcf->redis_client,
                "a copy missing");
        }
    }
}


/*
 * Each master's copy of feed:deleting, made or completed from it: its
 * members added where missing (NX: a copy's own writes are as new), and
 * the mark.  One at a time per worker: the reads that fail meanwhile were
 * sent before the copy's ZADD, the next ones are sent after it.
 */

static void
ngx_http_feed_timeline_cache_copies_ready(ngx_http_feed_redis_t *rd,
    void *data)
{
    ngx_http_feed_main_conf_t  *fmcf = data;

    size_t                      argvlen[5];
    ngx_uint_t                  up;
    const char                 *argv[5];
    ngx_http_feed_redis_args_t  args;

    /* a worker's own: no configuration yet is no cluster */

    if (fmcf == NULL
        || ngx_http_feed_redis_masters(fmcf->redis_client, &up) == 0)
    {
        return;
    }

    /* a master back: the retires it failed go again */

    if (rd != NULL) {
        ngx_http_feed_timeline_cache_retire_send(fmcf);
    }

    if (ngx_http_feed_timeline_cache_copying) {
        return;
    }

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "ZRANGE");
    ngx_http_feed_redis_args_key(&args, NGX_HTTP_FEED_KEY_DELETING,
                                 sizeof(NGX_HTTP_FEED_KEY_DELETING) - 1);
    ngx_http_feed_redis_args_lit(&args, "0");
    ngx_http_feed_redis_args_lit(&args, "-1");
    ngx_http_feed_redis_args_lit(&args, "WITHSCORES");

    if (ngx_http_feed_redis_send(fmcf->redis_client,
                                 ngx_http_feed_timeline_cache_copies_got,
                                 fmcf, &args)
        == NULL)
    {
        return;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed deleted posts: making the copies");

    ngx_http_feed_timeline_cache_copying = 1;
}


static void
ngx_http_feed_timeline_cache_copies_got(void *data, redisReply *reply)
{
    ngx_http_feed_main_conf_t  *fmcf = data;

    ngx_http_feed_timeline_cache_copying = 0;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements % 2)
    {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "feed deleted posts not read for their copies: %s",
                      reply && reply->type == REDIS_REPLY_ERROR
                      ? reply->str : "no answer");
        return;
    }

    ngx_http_feed_redis_tag_copies(fmcf->redis_client,
                                   &ngx_http_feed_timeline_cache_deleting_key,
                                   ngx_http_feed_timeline_cache_copy_make,
                                   reply);
}


/*
 * ZADD copy NX +inf ~<run> score id ...: the members as ZRANGE gave
 * them, and the mark of the run of the copy's node (the copy's slot is its
 * master's).  The members a copy already has stay: a copy made for an
 * older run (a node back on older data) lacks deletes, it holds none
 * that is not one.  A node whose run this worker does not know yet is
 * left: its reads fail meanwhile, and the next NOCOPY makes it.
 */

static void
ngx_http_feed_timeline_cache_copy_make(void *data, u_char *key, size_t len)
{
    redisReply *reply = data;

    u_char                      run[NGX_HTTP_FEED_REDIS_MARK_LEN];
    size_t                     *argvlen, rlen;
    ngx_uint_t                  i, argc;
    const char                **argv;
    ngx_http_feed_redis_args_t  args;

    rlen = ngx_http_feed_redis_tag_copy_mark(
               ngx_http_feed_timeline_cache_fmcf->redis_client, key, len,
               run);

    if (rlen != NGX_HTTP_FEED_REDIS_MARK_LEN) {
        ngx_log_debug2(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "feed deleted posts: copy %*s waits for its node's "
                       "run id", len, key);
        return;
    }

    argc = 5 + reply->elements;

    argv = ngx_alloc(argc * (sizeof(char *) + sizeof(size_t)),
                     ngx_cycle->log);
    if (argv == NULL) {
        return;
    }

    argvlen = (size_t *) (argv + argc);

    ngx_http_feed_redis_args_init(&args, argv, argvlen);
    ngx_http_feed_redis_args_lit(&args, "ZADD");
    ngx_http_feed_redis_args_key(&args, key, len);
    ngx_http_feed_redis_args_lit(&args, "NX");
    ngx_http_feed_redis_args_lit(&args, "+inf");
    ngx_http_feed_redis_args_add(&args, run, rlen);

    for (i = 0; i + 1 < reply->elements; i += 2) {
        ngx_http_feed_redis_args_add(&args, reply->element[i + 1]->str,
                                     reply->element[i + 1]->len);
        ngx_http_feed_redis_args_add(&args, reply->element[i]->str,
                                     reply->element[i]->len);
    }

    ngx_log_debug4(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                   "feed deleted posts: copy %*s made for run %*s", len, key,
                   rlen - 1, run + 1);

    (void) ngx_http_feed_redis_send(
               ngx_http_feed_timeline_cache_fmcf->redis_client, NULL, NULL,
               &args);

    ngx_free(argv);
}



/*
 * A tag is no master's in this worker's map (copy: "{<tag>}"): the worker
 * writes its copies no more, so that they may lack a delete, or a pull
 * author's post, if the tag names a master's copies again (its slot back
 * as a master's last).  They go, wherever the slot is now.  A tag that
 * goes again while its copies are being retired is retired again after.
 */

static void
ngx_http_feed_timeline_cache_retire(void *data, u_char *copy, size_t len)
{
    ngx_http_feed_main_conf_t  *fmcf = data;

    ngx_uint_t                        i;
    ngx_http_feed_timeline_retire_t  *rt, *empty;

    empty = NULL;

    for (i = 0; i < NGX_HTTP_FEED_RETIRES; i++) {
        rt = &ngx_http_feed_timeline_cache_retires[i];

        if (rt->len == 0) {
            empty = empty ? empty : rt;
            continue;
        }

        if (!rt->sent && rt->len == len
            && ngx_memcmp(rt->copy, copy, len) == 0)
        {
            ngx_http_feed_timeline_cache_retire_send(fmcf);
            return;
        }
    }

    if (empty == NULL || len > sizeof(empty->copy)) {
        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "feed copies %*s not retired: too many tags gone at "
                      "once, a deleted post may show if the tag comes back",
                      len, copy);
        return;
    }

    ngx_memcpy(empty->copy, copy, len);
    empty->len = len;
    empty->sent = 0;

    ngx_http_feed_timeline_cache_retire_send(fmcf);
}


/* copy_retire.lua for each tag not in flight; those without a route wait */

static void
ngx_http_feed_timeline_cache_retire_send(ngx_http_feed_main_conf_t *fmcf)
{
    u_char                      deleting[NGX_HTTP_FEED_DELETING_LEN],
                                channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    size_t                      argvlen[NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_ARGC];
    ngx_str_t                   copy;
    ngx_uint_t                  i;
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_http_feed_timeline_retire_t  *rt;

    for (i = 0; i < NGX_HTTP_FEED_RETIRES; i++) {
        rt = &ngx_http_feed_timeline_cache_retires[i];

        if (rt->len == 0 || rt->sent) {
            continue;
        }

        copy.data = rt->copy;
        copy.len = rt->len;

        ngx_http_feed_redis_call_init(&call,
            &ngx_http_feed_script_copy_retire, argv, argvlen,
            NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_NKEYS,
            NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_NARGS);

        ngx_http_feed_redis_call_key(&call,
            NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_KEY_DELETING, deleting,
            ngx_sprintf(deleting, "%V%V",
                        &ngx_http_feed_timeline_cache_deleting_key, &copy)
            - deleting);
        ngx_http_feed_redis_call_arg(&call,
            NGX_HTTP_FEED_SCRIPT_COPY_RETIRE_ARG_CHANNEL, channel,
            ngx_http_feed_watch_channel(&copy, channel));

        if (ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call,
                                     ngx_http_feed_timeline_cache_retired, rt)
            != NGX_OK)
        {
            ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                           "feed copies %V: retire waits for redis", &copy);
            continue;
        }

        ngx_log_debug1(NGX_LOG_DEBUG_CORE, ngx_cycle->log, 0,
                       "feed copies %V: retiring", &copy);

        rt->sent = 1;
    }
}


static void
ngx_http_feed_timeline_cache_retired(void *data, redisReply *reply)
{
    ngx_http_feed_timeline_retire_t  *rt = data;

    rt->sent = 0;

    if (reply == NULL || reply->type != REDIS_REPLY_INTEGER) {
        /* sent again when a master is back, or with the next tag gone */

        ngx_log_error(NGX_LOG_WARN, ngx_cycle->log, 0,
                      "feed copies %*s not retired yet: %s", rt->len,
                      rt->copy,
                      reply && reply->type == REDIS_REPLY_ERROR
                      ? reply->str : "no answer");
        return;
    }

    ngx_log_error(NGX_LOG_INFO, ngx_cycle->log, 0,
                  "feed copies %*s retired, their tag no master's: "
                  "%L keys deleted", rt->len, rt->copy,
                  (int64_t) reply->integer);

    rt->len = 0;
}


/*
 * The Redis node of a user's timeline, as a number (0 for a single Redis):
 * a batch of deliveries or removes is of one node.
 */

ngx_uint_t
ngx_http_feed_timeline_cache_node(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user)
{
    char  key[NGX_HTTP_FEED_USER_KEY_LEN];

    return ngx_http_feed_redis_node_of(fmcf->redis_client, (u_char *) key,
               ngx_http_feed_timeline_cache_user_key(key,
                                                     NGX_HTTP_FEED_KEY_TIMELINE,
                                                     user));
}


/*
 * The copy of the lists a user's reads merge: the one on the node of
 * their timeline, "" on a single Redis.  0 on a cluster whose map does
 * not know that node: there is none to name yet.  buf: at least
 * NGX_HTTP_FEED_PULL_COPY_LEN bytes.
 */

size_t
ngx_http_feed_timeline_pull_copy(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, u_char *buf)
{
    char       key[NGX_HTTP_FEED_USER_KEY_LEN];
    ngx_str_t  none = ngx_string("");

    return ngx_http_feed_redis_tag_copy(fmcf->redis_client, (u_char *) key,
               ngx_http_feed_timeline_cache_user_key(key,
                                                     NGX_HTTP_FEED_KEY_TIMELINE,
                                                     user),
               &none, buf);
}


/*
 * A version no other change of any list ever had, on any node: 64 random
 * bits drawn once per worker, and a count; then the time it is made, in
 * milliseconds of the wall clock, which says when a list last changed
 * otherwise than by a newer post (a stream that resumes needs to know).
 */

u_char *
ngx_http_feed_timeline_cache_nonce(u_char *buf)
{
    uint64_t     ms;
    ngx_time_t  *tp;

    tp = ngx_timeofday();
    ms = (uint64_t) tp->sec * 1000 + tp->msec;

    buf = ngx_http_feed_timeline_cache_token(buf);

    return ngx_sprintf(buf, "-%uL", ms);
}


/*
 * A value no other one ever was, on any node: 64 random bits drawn once
 * per worker, and a count.  A kept page's token, short enough that its
 * version in feed:tlp, "<head>:<token>", stays within a listpack's 64
 * bytes (timeline_page.lua).
 */

static u_char *
ngx_http_feed_timeline_cache_token(u_char *buf)
{
    static uint64_t  seed, n;

    while (seed == 0) {
        ngx_http_feed_random((u_char *) &seed, sizeof(seed));
    }

    return ngx_sprintf(buf, "%xL-%uL", seed, ++n);
}


/*
 * The time a list's version was made, "[run/]seed-count-ms[PN]", or that
 * of the list a kept page was made from, "version:head:token":
 * NGX_DECLINED for a version made before versions said it, or none
 */

ngx_int_t
ngx_http_feed_timeline_cache_version_time(ngx_str_t *version, int64_t *ms)
{
    u_char  *p, *last, *q;

    p = version->data;
    last = ngx_strlchr(p, p + version->len, ':');

    if (last == NULL) {
        last = p + version->len;
    }

    if (last > p && (last[-1] == 'P' || last[-1] == 'N')) {
        last--;
    }

    for (q = last; q > p && q[-1] >= '0' && q[-1] <= '9'; q--) {
        /* void */
    }

    if (q == last || q - p < 4 || q[-1] != '-') {
        return NGX_DECLINED;
    }

    /* the count before it, and its dash: the older form has one dash */

    for (p = q - 1; p > version->data && p[-1] >= '0' && p[-1] <= '9'; p--) {
        /* void */
    }

    if (p == q - 1 || p == version->data || p[-1] != '-') {
        return NGX_DECLINED;
    }

    *ms = ngx_atoof(q, last - q);

    return *ms == NGX_ERROR ? NGX_DECLINED : NGX_OK;
}


/* key i of a call: the user's key of that prefix, made in buf */

static size_t
ngx_http_feed_timeline_cache_key(ngx_http_feed_redis_call_t *call,
    ngx_uint_t i, char *buf, const char *prefix, ngx_http_feed_user_t *user)
{
    size_t  len;

    len = ngx_http_feed_timeline_cache_user_key(buf, prefix, user);

    ngx_http_feed_redis_call_key(call, i, buf, len);

    return len;
}


/* a post's key in link mode, feed:p:<the id's 12 bytes> (id: valid hex) */

static size_t
ngx_http_feed_timeline_cache_post_key(u_char *buf, const char *id)
{
    u_char      *p;
    bson_oid_t   oid;

    bson_oid_init_from_string(&oid, id);

    p = ngx_cpymem(buf, NGX_HTTP_FEED_KEY_POST_JSON,
                   sizeof(NGX_HTTP_FEED_KEY_POST_JSON) - 1);
    p = ngx_cpymem(p, oid.bytes, NGX_HTTP_FEED_ID_BYTES);

    return p - buf;
}


/* the key of versions before ids were bytes, feed:p:<id in hex> */

static size_t
ngx_http_feed_timeline_cache_old_post_key(u_char *buf, const char *id)
{
    return ngx_sprintf(buf, "%s%*s", NGX_HTTP_FEED_KEY_POST_JSON, (size_t) 24,
                       id)
           - buf;
}


/* a user's key of a prefix that ends in the hash tag's "{" */

size_t
ngx_http_feed_timeline_cache_user_key(char *buf, const char *prefix,
    ngx_http_feed_user_t *user)
{
    u_char  *p;

    p = ngx_cpymem(buf, prefix, ngx_strlen(prefix));
    p = ngx_cpymem(p, user->data, user->len);
    *p++ = '}';

    return p - (u_char *) buf;
}
