
/*
 * ngx_feed_module: the pull authors' recent-posts lists in Redis, the only
 * owner of feed:pl:{author} (the list: id then JSON, newest first, capped
 * at feed_cache_size, with the END entry when it holds the author's whole
 * history) and feed:pv:{author} (its version).  Readers merge them into
 * their pages (timeline_read.lua), fanout adds the posts of pull authors
 * to them, and a missing list is made again from MongoDB's newest posts.
 * A list lives twice feed_cache_ttl from its author's last post.  The
 * read script makes these keys itself, of the copy it is given
 * (scripts/keys).
 *
 * On a Redis Cluster, a read merges the lists in its script, on the node
 * of its user's keys: each master has its own copy of every list it needs,
 * feed:pl{tag}:{author} and feed:pv{tag}:{author}, with the hash tag of one
 * of its slots ("{tag}" is the copy, "" names the one list of a single
 * Redis).  Fanout adds a post to every master's copy, and a copy that is
 * missing is made from MongoDB by whoever needs it, a reader of that node
 * or fanout, as the one list is.  Pull authors are few: a copy of their
 * lists on each master costs little memory, and no read leaves its node.
 */


#include "ngx_http_feed_timeline_watch.h"
#include "ngx_http_feed_json.h"
#include "ngx_http_feed_scripts.h"
#include "ngx_http_feed_keys.h"


/* what each post of a list made from MongoDB is added to */
typedef struct {
    ngx_pool_t                   *pool;
    ngx_http_feed_redis_call_t   *call;
} ngx_http_feed_timeline_pull_call_t;


/* what pull_add.lua and pull_warm.lua's first arguments are written in */
#define NGX_HTTP_FEED_PULL_ARGS_LEN  (2 * NGX_INT_T_LEN                     \
                                      + NGX_HTTP_FEED_NONCE_LEN)

/*
 * A list's key or its version's: the prefix, the copy, ":{", the author,
 * "}" (scripts/keys)
 */
#define NGX_HTTP_FEED_PULL_KEY_LEN                                           \
    (sizeof(NGX_HTTP_FEED_KEY_PULL_LIST) + NGX_HTTP_FEED_PULL_COPY_LEN + 2   \
     + NGX_HTTP_FEED_USER_MAX + 1)

/*
 * The keys of pull_add.lua and pull_warm.lua (the list, its version, the
 * posts being deleted), and what their arguments are written in
 */
typedef struct {
    char                          list[NGX_HTTP_FEED_PULL_KEY_LEN];
    char                          version[NGX_HTTP_FEED_PULL_KEY_LEN];
    char                          deleting[NGX_HTTP_FEED_PULL_KEY_LEN];
    size_t                        deleting_len;
    u_char                        mark[NGX_HTTP_FEED_REDIS_MARK_LEN];
    u_char                        args[NGX_HTTP_FEED_PULL_ARGS_LEN];
    u_char                        channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
} ngx_http_feed_timeline_pull_keys_t;


static size_t ngx_http_feed_timeline_pull_key(char *buf, const char *prefix,
    ngx_str_t *copy, ngx_http_feed_user_t *author);
static void ngx_http_feed_timeline_pull_keys(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_str_t *copy,
    ngx_http_feed_user_t *author);
static size_t ngx_http_feed_timeline_pull_mark(
    ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_str_t *copy);
static void ngx_http_feed_timeline_pull_args(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy);
static void ngx_http_feed_timeline_pull_channel(
    ngx_http_feed_redis_call_t *call, ngx_uint_t i, u_char *buf,
    ngx_str_t *copy);
static ngx_int_t ngx_http_feed_timeline_pull_item(void *data,
    ngx_str_t *id, ngx_str_t *json);


/*
 * Every copy a list has: the handler is called with each ("" once on a
 * single Redis).  Returns how many: 0 on a cluster whose map is not known
 * yet, where a write reaches no copy and must be made again later.
 */

ngx_uint_t
ngx_http_feed_timeline_pull_copies(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_redis_tag_copy_pt handler, void *data)
{
    ngx_uint_t  up;
    ngx_str_t   none = ngx_string("");

    if (!ngx_http_feed_redis_clustered(fmcf->redis_client)) {
        handler(data, (u_char *) "", 0);
        return 1;
    }

    if (ngx_http_feed_redis_masters(fmcf->redis_client, &up) == 0) {
        return 0;
    }

    ngx_http_feed_redis_tag_copies(fmcf->redis_client, &none, handler, data);

    return ngx_http_feed_redis_masters(fmcf->redis_client, &up);
}


/* a pull author's post into a copy of their list: 1 in, 0 not, -1 none */

ngx_int_t
ngx_http_feed_timeline_pull_add(ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy, ngx_http_feed_user_t *author, ngx_str_t *entry,
    ngx_http_feed_redis_pt handler, void *data)
{
    size_t                      argvlen[NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARGC];
    const char                 *argv[NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARGC];
    ngx_http_feed_redis_call_t  call;

    ngx_http_feed_timeline_pull_keys_t  keys;

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_pull_add,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_PULL_ADD_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_PULL_ADD_NARGS);

    ngx_http_feed_timeline_pull_keys(&call, &keys, copy, author);
    ngx_http_feed_timeline_pull_args(&call, &keys, fmcf, copy);
    ngx_http_feed_redis_call_arg(&call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_COPY,
        keys.mark, ngx_http_feed_timeline_pull_mark(fmcf, &keys, copy));

    ngx_http_feed_redis_call_arg(&call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_ENTRY,
                                 entry->data, entry->len);

    return ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call, handler,
                                    data);
}


/*
 * A list made from the author's newest posts in MongoDB ("items", newest
 * first, as the posts store lists them); complete: they are all there are.
 */

ngx_int_t
ngx_http_feed_timeline_pull_warm(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_str_t *copy, ngx_http_feed_user_t *author,
    bson_t *items, ngx_uint_t complete, ngx_http_feed_redis_pt handler,
    void *data)
{
    size_t                     *argvlen;
    ngx_uint_t                  argc;
    const char                **argv;
    ngx_http_feed_redis_call_t  call;

    ngx_http_feed_timeline_pull_call_t  pc;
    ngx_http_feed_timeline_pull_keys_t *keys;

    argc = NGX_HTTP_FEED_REDIS_CALL_ARGC(NGX_HTTP_FEED_SCRIPT_PULL_WARM_NKEYS,
               NGX_HTTP_FEED_SCRIPT_PULL_WARM_NARGS + bson_count_keys(items));

    argv = ngx_palloc(pool, argc * sizeof(char *));
    argvlen = ngx_palloc(pool, argc * sizeof(size_t));
    keys = ngx_palloc(pool, sizeof(ngx_http_feed_timeline_pull_keys_t));

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_pull_warm,
                                  argv, argvlen,
                                  NGX_HTTP_FEED_SCRIPT_PULL_WARM_NKEYS,
                                  NGX_HTTP_FEED_SCRIPT_PULL_WARM_NARGS);

    ngx_http_feed_timeline_pull_keys(&call, keys, copy, author);
    ngx_http_feed_timeline_pull_args(&call, keys, fmcf, copy);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_PULL_WARM_ARG_COPY, keys->mark,
        ngx_http_feed_timeline_pull_mark(fmcf, keys, copy));
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_PULL_WARM_ARG_COMPLETE, complete ? "1" : "0", 1);

    pc.pool = pool;
    pc.call = &call;

    if (ngx_http_feed_json_posts(pool, items,
                                 ngx_http_feed_timeline_pull_item, &pc)
        != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call, handler,
                                    data);
}


/* each post as its entry, the id then the JSON */

static ngx_int_t
ngx_http_feed_timeline_pull_item(void *data, ngx_str_t *id, ngx_str_t *json)
{
    ngx_http_feed_timeline_pull_call_t  *pc = data;

    u_char  *p;

    p = ngx_pnalloc(pc->pool, 24 + json->len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(p, id->data, 24);
    ngx_memcpy(p + 24, json->data, json->len);

    ngx_http_feed_redis_call_arg(pc->call, pc->call->nargs, p,
                                 24 + json->len);
    pc->call->nargs++;

    return NGX_OK;
}


/* a deleted post out of a copy of its author's list, if it is there */

ngx_int_t
ngx_http_feed_timeline_pull_remove(ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy, ngx_http_feed_user_t *author, const char *id,
    ngx_http_feed_redis_pt handler, void *data)
{
    char                        list[NGX_HTTP_FEED_PULL_KEY_LEN];
    u_char                      ttl[NGX_INT_T_LEN],
                                nonce[NGX_HTTP_FEED_NONCE_LEN],
                                channel[NGX_HTTP_FEED_WATCH_CHANNEL_LEN];
    size_t                      len, argvlen[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARGC
                                    + 1];
    const char                 *argv[
                                    NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARGC
                                    + 1];
    ngx_http_feed_redis_call_t  call;

    /*
     * The timelines' remove script, on one list: the lists are a tail of
     * its arguments, the first its key
     */

    ngx_http_feed_redis_call_init(&call, &ngx_http_feed_script_timeline_remove,
                                  argv, argvlen, 1,
                                  NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_NARGS
                                  + 1);

    len = ngx_http_feed_timeline_pull_key(list, NGX_HTTP_FEED_KEY_PULL_LIST,
                                          copy, author);

    ngx_http_feed_redis_call_key(&call, 0, list, len);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_NARGS, list, len);

    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_ID, id, 24);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_TTL,
        ttl, ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl);
    ngx_http_feed_redis_call_arg(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);
    ngx_http_feed_timeline_pull_channel(&call,
        NGX_HTTP_FEED_SCRIPT_TIMELINE_REMOVE_ARG_CHANNEL, channel, copy);

    return ngx_http_feed_redis_call(NULL, fmcf->redis_client, &call, handler,
                                    data);
}


/* a key of a copy: feed:pl<copy>:{<author>}, feed:pv<copy>:{<author>} */

static size_t
ngx_http_feed_timeline_pull_key(char *buf, const char *prefix,
    ngx_str_t *copy, ngx_http_feed_user_t *author)
{
    return (char *) ngx_sprintf((u_char *) buf, "%s%V:{%*s}", prefix, copy,
                                author->len, author->data)
           - buf;
}


static void
ngx_http_feed_timeline_pull_keys(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_str_t *copy,
    ngx_http_feed_user_t *author)
{
    u_char  *p;

    /* pull_add.lua and pull_warm.lua have the same keys */

    ngx_http_feed_redis_call_key(call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_KEY_LIST,
        keys->list,
        ngx_http_feed_timeline_pull_key(keys->list,
                                        NGX_HTTP_FEED_KEY_PULL_LIST, copy,
                                        author));
    ngx_http_feed_redis_call_key(call,
        NGX_HTTP_FEED_SCRIPT_PULL_ADD_KEY_VERSION, keys->version,
        ngx_http_feed_timeline_pull_key(keys->version,
                                        NGX_HTTP_FEED_KEY_PULL_VERSION, copy,
                                        author));

    p = ngx_sprintf((u_char *) keys->deleting, "%V%V",
                    &ngx_http_feed_timeline_cache_deleting_key, copy);
    keys->deleting_len = p - (u_char *) keys->deleting;

    ngx_http_feed_redis_call_key(call,
        NGX_HTTP_FEED_SCRIPT_PULL_ADD_KEY_DELETING, keys->deleting,
        keys->deleting_len);
}


/*
 * The mark of the copy of the posts being deleted on the copies' node, in
 * keys->mark (lib/deleted.lua): its run's, "" on a single Redis
 */

static size_t
ngx_http_feed_timeline_pull_mark(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_str_t *copy)
{
    if (copy->len == 0) {
        return 0;
    }

    return ngx_http_feed_redis_tag_copy_mark(fmcf->redis_client,
                                             (u_char *) keys->deleting,
                                             keys->deleting_len, keys->mark);
}


/* pull_add.lua and pull_warm.lua begin with the same arguments */

static void
ngx_http_feed_timeline_pull_args(ngx_http_feed_redis_call_t *call,
    ngx_http_feed_timeline_pull_keys_t *keys, ngx_http_feed_main_conf_t *fmcf,
    ngx_str_t *copy)
{
    u_char  *buf, *ttl, *nonce;

    buf = keys->args;

    ttl = ngx_sprintf(buf, "%ui", fmcf->cache_size);
    nonce = ngx_sprintf(ttl, "%T", fmcf->cache_ttl);

    ngx_http_feed_redis_call_arg(call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_CAP,
                                 buf, ttl - buf);
    ngx_http_feed_redis_call_arg(call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_TTL,
                                 ttl, nonce - ttl);
    ngx_http_feed_redis_call_arg(call, NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_NONCE,
        nonce, ngx_http_feed_timeline_cache_nonce(nonce) - nonce);
    ngx_http_feed_timeline_pull_channel(call,
        NGX_HTTP_FEED_SCRIPT_PULL_ADD_ARG_CHANNEL, keys->channel, copy);
}


/*
 * Where the workers hear of the new versions of a copy's lists: on a
 * cluster, a channel of the copy's own (ngx_http_feed_timeline_watch.c)
 */

static void
ngx_http_feed_timeline_pull_channel(ngx_http_feed_redis_call_t *call,
    ngx_uint_t i, u_char *buf, ngx_str_t *copy)
{
    ngx_http_feed_redis_call_arg(call, i, buf,
                                 ngx_http_feed_watch_channel(copy, buf));
}
