
/*
 * ngx_feed_module: the home timeline cache in Redis.
 *
 * A list per user, "feed:tl:{user}", newest first, capped at
 * feed_cache_size: each entry is the post id (24 hex digits, so entries
 * compare as ids do) followed, in embed mode, by the post's JSON; in link
 * mode the JSON is in "feed:p:<id>" instead.  An entry of all zeroes ends a
 * timeline that holds the user's whole history: without it the list was
 * trimmed, and pages past its end continue from the fallback.
 *
 * Deleted posts are marked "feed:del:<id>" and skipped by every read.
 * Each read is one EVALSHA: one round trip, the JSON of the page ready.
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_post.h"


#define NGX_HTTP_FEED_TL_PREFIX    "feed:tl:{"
#define NGX_HTTP_FEED_LOCK_PREFIX  "feed:lock:{"
#define NGX_HTTP_FEED_TLV_PREFIX   "feed:tlv:{"
#define NGX_HTTP_FEED_TLQ_PREFIX   "feed:tlq:{"

#define NGX_HTTP_FEED_KEY_LEN      (sizeof(NGX_HTTP_FEED_LOCK_PREFIX)        \
                                    + NGX_HTTP_FEED_USER_MAX + 1)


/*
 * Puts an entry in its place, newest first: once (an entry already there
 * is left alone, so a redelivered post leaves one copy), within the cap,
 * and nowhere if it is older than the end of a trimmed list.
 */

#define NGX_HTTP_FEED_LUA_INSERT                                              \
    "local function insert(tl, entry, cap) "                                  \
    "  local id = string.sub(entry, 1, 24) "                                  \
    "  local pos = 0 "                                                        \
    "  while true do "                                                        \
    "    local part = redis.call('lrange', tl, pos, pos + 63) "               \
    "    if #part == 0 then return 0 end "                                    \
    "    for i = 1, #part do "                                                \
    "      local eid = string.sub(part[i], 1, 24) "                           \
    "      if eid == id then return 2 end "                                   \
    "      if eid < id then "                                                 \
    "        if pos + i == 1 then "                                           \
    "          redis.call('lpush', tl, entry) "                               \
    "        else "                                                           \
    "          redis.call('linsert', tl, 'BEFORE', part[i], entry) "          \
    "        end "                                                            \
    "        redis.call('ltrim', tl, 0, cap - 1) "                            \
    "        return 1 "                                                       \
    "      end "                                                              \
    "    end "                                                                \
    "    pos = pos + #part "                                                  \
    "  end "                                                                  \
    "end "


/*
 * KEYS: timeline, lock.  ARGV: limit, max_id, since_id, ttl, mode,
 * post prefix, deleted prefix.  {0, locked} when there is no timeline,
 * else {1, more, deep, last id, JSON, ...}.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_read_lua = {
    "local tl = KEYS[1] "
    "if redis.call('exists', tl) == 0 then "
    "  return {0, redis.call('exists', KEYS[2])} "
    "end "
    "redis.call('expire', tl, ARGV[4]) "
    "local limit, max, since = tonumber(ARGV[1]), ARGV[2], ARGV[3] "
    "local embed = ARGV[5] == 'e' "
    "local out = {1, 0, 1, ''} "
    "local n, pos = 0, 0 "
    "while true do "
    "  local part = redis.call('lrange', tl, pos, pos + 63) "
    "  if #part == 0 then return out end "
    "  pos = pos + #part "
    "  for i = 1, #part do "
    "    local e = part[i] "
    "    local id = string.sub(e, 1, 24) "
    "    if id == '" NGX_HTTP_FEED_TIMELINE_END "' then "
    "      out[3] = 0 return out "
    "    end "
    "    if since ~= '' and id <= since then out[3] = 0 return out end "
    "    if (max == '' or id < max) "
    "       and redis.call('exists', ARGV[7] .. id) == 0 then "
    "      if n == limit then out[2] = 1 out[3] = 0 return out end "
    "      local json "
    "      if embed then "
    "        json = string.sub(e, 25) "
    "      else "
    "        json = redis.call('get', ARGV[6] .. id) "
    "        if not json then redis.call('del', tl) return {0, 0} end "
    "        redis.call('expire', ARGV[6] .. id, ARGV[4]) "
    "      end "
    "      n = n + 1 "
    "      out[4 + n] = json "
    "      out[4] = id "
    "    end "
    "  end "
    "end",
    0, ""
};


/*
 * KEYS: lock, version.  ARGV: token, ms.  {1, version} when the rebuild
 * is ours, {0} when another one runs.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_lock_lua = {
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "  return {1, redis.call('get', KEYS[2]) or ''} "
    "end "
    "return {0}",
    0, ""
};


/*
 * KEYS: timeline, lock, version, queue.  ARGV: ttl, cap, mode, post
 * prefix, complete, version, then id, JSON pairs, newest first.
 *
 * Creates the timeline in one step, unless someone else did already or
 * the user's follows changed since the rebuild began (the version moved:
 * 0 is returned), then puts in the posts fanout queued meanwhile, and
 * releases the rebuild lock.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_warm_lua = {
    NGX_HTTP_FEED_LUA_INSERT
    "local tl, cap = KEYS[1], tonumber(ARGV[2]) "
    "if (redis.call('get', KEYS[3]) or '') ~= ARGV[6] then "
    "  redis.call('del', KEYS[2]) "
    "  return 0 "
    "end "
    "if redis.call('exists', tl) == 0 then "
    "  local entries = {} "
    "  for i = 7, #ARGV, 2 do "
    "    if ARGV[3] == 'e' then "
    "      entries[#entries + 1] = ARGV[i] .. ARGV[i + 1] "
    "    else "
    "      entries[#entries + 1] = ARGV[i] "
    "      redis.call('set', ARGV[4] .. ARGV[i], ARGV[i + 1], "
    "                 'EX', ARGV[1]) "
    "    end "
    "  end "
    "  if ARGV[5] == '1' then "
    "    entries[#entries + 1] = '" NGX_HTTP_FEED_TIMELINE_END "' "
    "  end "
    "  for i = 1, #entries, 1000 do "
    "    redis.call('rpush', tl, "
    "               unpack(entries, i, math.min(i + 999, #entries))) "
    "  end "
    "  if #entries > 0 then "
    "    redis.call('ltrim', tl, 0, cap - 1) "
    "    for _, e in ipairs(redis.call('lrange', KEYS[4], 0, -1)) do "
    "      insert(tl, e, cap) "
    "    end "
    "    redis.call('expire', tl, ARGV[1]) "
    "  end "
    "end "
    "redis.call('del', KEYS[2], KEYS[4]) "
    "return 1",
    0, ""
};


/*
 * Fanout.  KEYS: timeline, lock, queue of each follower.  ARGV: entry,
 * cap, queue ms.  Delivers into the timelines that exist (inactive users
 * get nothing: they are rebuilt on their next read), and queues it for
 * those being rebuilt right now.  Returns how many got it.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_deliver_lua = {
    NGX_HTTP_FEED_LUA_INSERT
    "local entry, cap, n = ARGV[1], tonumber(ARGV[2]), 0 "
    "for i = 1, #KEYS, 3 do "
    "  if redis.call('exists', KEYS[i]) == 1 then "
    "    if insert(KEYS[i], entry, cap) == 1 then n = n + 1 end "
    "  elseif redis.call('exists', KEYS[i + 1]) == 1 then "
    "    redis.call('rpush', KEYS[i + 2], entry) "
    "    redis.call('pexpire', KEYS[i + 2], ARGV[3]) "
    "  end "
    "end "
    "return n",
    0, ""
};


/*
 * KEYS: timeline, version.  ARGV: ttl.  The user's follows changed: the
 * cache goes, and a rebuild that began before is not warmed.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_drop_lua = {
    "redis.call('del', KEYS[1]) "
    "redis.call('incr', KEYS[2]) "
    "redis.call('expire', KEYS[2], ARGV[1]) "
    "return 1",
    0, ""
};


/* KEYS: timelines.  ARGV: post id.  Takes the post out of each. */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_remove_lua = {
    "local id, n = ARGV[1], 0 "
    "for i = 1, #KEYS do "
    "  local pos, done = 0, false "
    "  while not done do "
    "    local part = redis.call('lrange', KEYS[i], pos, pos + 63) "
    "    if #part == 0 then break end "
    "    for j = 1, #part do "
    "      local eid = string.sub(part[j], 1, 24) "
    "      if eid == id then "
    "        n = n + redis.call('lrem', KEYS[i], 1, part[j]) "
    "        done = true break "
    "      end "
    "      if eid < id then done = true break end "
    "    end "
    "    pos = pos + #part "
    "  end "
    "end "
    "return n",
    0, ""
};


static size_t ngx_http_feed_timeline_key(char *buf, const char *prefix,
    ngx_http_feed_user_t *user);


ngx_int_t
ngx_http_feed_timeline_cache_init(ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    static ngx_http_feed_redis_script_t  *scripts[] = {
        &ngx_http_feed_timeline_read_lua,
        &ngx_http_feed_timeline_lock_lua,
        &ngx_http_feed_timeline_warm_lua,
        &ngx_http_feed_timeline_deliver_lua,
        &ngx_http_feed_timeline_remove_lua,
        &ngx_http_feed_timeline_drop_lua
    };

    for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
        if (ngx_http_feed_redis_add_script(rd, scripts[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


ngx_int_t
ngx_http_feed_timeline_cache_read(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         tl[NGX_HTTP_FEED_KEY_LEN], lock[NGX_HTTP_FEED_KEY_LEN];
    u_char       limit[NGX_INT_T_LEN], ttl[NGX_INT_T_LEN];
    size_t       argvlen[12];
    const char  *argv[12];

    argv[0] = "EVALSHA";
    argv[1] = ngx_http_feed_timeline_read_lua.sha1;
    argv[2] = "2";
    argv[3] = tl;
    argvlen[3] = ngx_http_feed_timeline_key(tl, NGX_HTTP_FEED_TL_PREFIX,
                                            &page->user);
    argv[4] = lock;
    argvlen[4] = ngx_http_feed_timeline_key(lock, NGX_HTTP_FEED_LOCK_PREFIX,
                                            &page->user);
    argv[5] = (const char *) limit;
    argvlen[5] = ngx_sprintf(limit, "%ui", page->limit) - limit;
    argv[6] = page->has_max ? page->max_id : "";
    argvlen[6] = page->has_max ? 24 : 0;
    argv[7] = page->has_since ? page->since_id : "";
    argvlen[7] = page->has_since ? 24 : 0;
    argv[8] = (const char *) ttl;
    argvlen[8] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[9] = fmcf->cache_embed ? "e" : "l";
    argv[10] = NGX_HTTP_FEED_POST_PREFIX;
    argvlen[10] = sizeof(NGX_HTTP_FEED_POST_PREFIX) - 1;
    argv[11] = NGX_HTTP_FEED_DEL_PREFIX;
    argvlen[11] = sizeof(NGX_HTTP_FEED_DEL_PREFIX) - 1;

    argvlen[0] = 7;
    argvlen[1] = 40;
    argvlen[2] = 1;
    argvlen[9] = 1;

    return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                      12, argv, argvlen);
}


/* the page as Redis answered it, copied once into the request pool */

ngx_int_t
ngx_http_feed_timeline_cache_parse(ngx_http_request_t *r, redisReply *reply,
    ngx_http_feed_cached_t *cached)
{
    size_t       i;
    redisReply  *e;

    ngx_memzero(cached, sizeof(ngx_http_feed_cached_t));

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER
        || reply->element[1]->type != REDIS_REPLY_INTEGER)
    {
        return NGX_DECLINED;
    }

    if (reply->element[0]->integer == 0) {
        cached->locked = reply->element[1]->integer;
        return NGX_OK;
    }

    if (reply->elements < 4 || reply->element[3]->type != REDIS_REPLY_STRING
        || reply->element[3]->len > 24)
    {
        return NGX_DECLINED;
    }

    cached->found = 1;
    cached->more = reply->element[1]->integer;
    cached->deep = reply->element[2]->type == REDIS_REPLY_INTEGER
                   && reply->element[2]->integer;

    ngx_memcpy(cached->last, reply->element[3]->str,
               reply->element[3]->len);
    cached->last[reply->element[3]->len] = '\0';

    cached->nitems = reply->elements - 4;

    if (cached->nitems == 0) {
        return NGX_OK;
    }

    cached->items = ngx_palloc(r->pool,
                               cached->nitems * sizeof(ngx_str_t));
    if (cached->items == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < cached->nitems; i++) {
        e = reply->element[4 + i];

        if (e->type != REDIS_REPLY_STRING) {
            return NGX_DECLINED;
        }

        cached->items[i].len = e->len;
        cached->items[i].data = ngx_pnalloc(r->pool, e->len);
        if (cached->items[i].data == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(cached->items[i].data, e->str, e->len);
    }

    return NGX_OK;
}


/* the rebuild lock: one rebuild per user across workers and nodes */

ngx_int_t
ngx_http_feed_timeline_cache_lock(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         lock[NGX_HTTP_FEED_KEY_LEN], tlv[NGX_HTTP_FEED_KEY_LEN];
    u_char       ms[NGX_INT_T_LEN], token[NGX_INT_T_LEN];
    size_t       argvlen[7];
    const char  *argv[7];

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_lock_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "2";
    argvlen[2] = 1;
    argv[3] = lock;
    argvlen[3] = ngx_http_feed_timeline_key(lock, NGX_HTTP_FEED_LOCK_PREFIX,
                                            user);
    argv[4] = tlv;
    argvlen[4] = ngx_http_feed_timeline_key(tlv, NGX_HTTP_FEED_TLV_PREFIX,
                                            user);
    argv[5] = (const char *) token;
    argvlen[5] = ngx_sprintf(token, "%P", ngx_pid) - token;
    argv[6] = (const char *) ms;
    argvlen[6] = ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms;

    return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                      7, argv, argvlen);
}


void
ngx_http_feed_timeline_cache_unlock(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user)
{
    char         lock[NGX_HTTP_FEED_KEY_LEN];
    size_t       argvlen[2];
    const char  *argv[2];

    argv[0] = "DEL";
    argvlen[0] = 3;
    argv[1] = lock;
    argvlen[1] = ngx_http_feed_timeline_key(lock, NGX_HTTP_FEED_LOCK_PREFIX,
                                            user);

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, 2, argv,
                                    argvlen);
}


/* items: the fallback's "items" array of posts, newest first */

ngx_int_t
ngx_http_feed_timeline_cache_warm(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *version, bson_t *items, ngx_uint_t complete,
    ngx_http_feed_redis_pt handler, void *data)
{
    int             argc;
    char           *json;
    size_t          len, *argvlen;
    u_char         *ttl, *cap, *keys;
    bson_t          post;
    ngx_uint_t      i;
    uint32_t        n, doclen, idlen;
    ngx_int_t       rc;
    ngx_str_t       value;
    bson_oid_t      oid;
    bson_iter_t     it, id;
    const char    **argv;
    const uint8_t  *raw;

    static const char  *prefixes[] = {
        NGX_HTTP_FEED_TL_PREFIX, NGX_HTTP_FEED_LOCK_PREFIX,
        NGX_HTTP_FEED_TLV_PREFIX, NGX_HTTP_FEED_TLQ_PREFIX
    };

    n = bson_count_keys(items);

    argv = ngx_palloc(r->pool, (13 + 2 * n) * sizeof(char *));
    argvlen = ngx_palloc(r->pool, (13 + 2 * n) * sizeof(size_t));
    keys = ngx_pnalloc(r->pool, 4 * NGX_HTTP_FEED_KEY_LEN
                                + 2 * NGX_INT_T_LEN);

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_warm_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "4";
    argvlen[2] = 1;

    for (i = 0; i < 4; i++) {
        argv[3 + i] = (char *) keys + i * NGX_HTTP_FEED_KEY_LEN;
        argvlen[3 + i] = ngx_http_feed_timeline_key((char *) argv[3 + i],
                                                    prefixes[i], user);
    }

    ttl = keys + 4 * NGX_HTTP_FEED_KEY_LEN;
    cap = ttl + NGX_INT_T_LEN;

    argv[7] = (const char *) ttl;
    argvlen[7] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[8] = (const char *) cap;
    argvlen[8] = ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap;
    argv[9] = fmcf->cache_embed ? "e" : "l";
    argvlen[9] = 1;
    argv[10] = NGX_HTTP_FEED_POST_PREFIX;
    argvlen[10] = sizeof(NGX_HTTP_FEED_POST_PREFIX) - 1;
    argv[11] = complete ? "1" : "0";
    argvlen[11] = 1;
    argv[12] = (const char *) version->data;
    argvlen[12] = version->len;

    argc = 13;

    if (!bson_iter_init(&it, items)) {
        return NGX_ERROR;
    }

    while (bson_iter_next(&it)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            continue;
        }

        bson_iter_document(&it, &doclen, &raw);

        if (!bson_init_static(&post, raw, doclen)
            || !bson_iter_init_find(&id, &post, "id")
            || !BSON_ITER_HOLDS_UTF8(&id))
        {
            continue;
        }

        value.data = (u_char *) bson_iter_utf8(&id, &idlen);
        value.len = idlen;

        if (ngx_http_feed_post_id(&value, &oid) != NGX_OK) {
            /* not a post id: the fallback answered something else */
            continue;
        }

        json = bson_as_relaxed_extended_json(&post, &len);
        if (json == NULL) {
            return NGX_ERROR;
        }

        argv[argc] = (const char *) value.data;
        argvlen[argc] = 24;

        argv[argc + 1] = ngx_pnalloc(r->pool, len);
        if (argv[argc + 1] == NULL) {
            bson_free(json);
            return NGX_ERROR;
        }

        ngx_memcpy((u_char *) argv[argc + 1], json, len);
        argvlen[argc + 1] = len;
        bson_free(json);

        argc += 2;
    }

    rc = ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                    argc, argv, argvlen);

    return rc;
}


/* r: NULL for the worker's own commands */

ngx_int_t
ngx_http_feed_timeline_cache_drop(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         tl[NGX_HTTP_FEED_KEY_LEN], tlv[NGX_HTTP_FEED_KEY_LEN];
    u_char       ttl[NGX_INT_T_LEN];
    size_t       argvlen[6];
    const char  *argv[6];

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_drop_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "2";
    argvlen[2] = 1;
    argv[3] = tl;
    argvlen[3] = ngx_http_feed_timeline_key(tl, NGX_HTTP_FEED_TL_PREFIX,
                                            user);
    argv[4] = tlv;
    argvlen[4] = ngx_http_feed_timeline_key(tlv, NGX_HTTP_FEED_TLV_PREFIX,
                                            user);
    argv[5] = (const char *) ttl;
    argvlen[5] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;

    if (r) {
        return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler,
                                          data, 6, argv, argvlen);
    }

    return ngx_http_feed_redis_send(fmcf->redis_client, handler, data, 6,
                                    argv, argvlen)
           ? NGX_OK : NGX_DECLINED;
}


/*
 * Fanout of one entry (the id, and the JSON in embed mode) to a batch of
 * users: one script call, one round trip.  Keys and arguments are copied
 * by hiredis before this returns.
 */

ngx_int_t
ngx_http_feed_timeline_cache_deliver(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    ngx_str_t *entry, ngx_http_feed_redis_pt handler, void *data)
{
    u_char       *keys, *p, *nkeys, *cap, *ms;
    size_t       *argvlen;
    ngx_uint_t    i, k;
    const char  **argv;

    static const char  *prefixes[] = {
        NGX_HTTP_FEED_TL_PREFIX, NGX_HTTP_FEED_LOCK_PREFIX,
        NGX_HTTP_FEED_TLQ_PREFIX
    };

    argv = ngx_palloc(pool, (6 + 3 * n) * sizeof(char *));
    argvlen = ngx_palloc(pool, (6 + 3 * n) * sizeof(size_t));
    keys = ngx_pnalloc(pool, 3 * n * NGX_HTTP_FEED_KEY_LEN
                             + 3 * NGX_INT_T_LEN);

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    nkeys = keys + 3 * n * NGX_HTTP_FEED_KEY_LEN;
    cap = nkeys + NGX_INT_T_LEN;
    ms = cap + NGX_INT_T_LEN;

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_deliver_lua.sha1;
    argvlen[1] = 40;
    argv[2] = (const char *) nkeys;
    argvlen[2] = ngx_sprintf(nkeys, "%ui", 3 * n) - nkeys;

    p = keys;

    for (i = 0; i < n; i++) {
        for (k = 0; k < 3; k++) {
            argv[3 + 3 * i + k] = (const char *) p;
            argvlen[3 + 3 * i + k] = ngx_http_feed_timeline_key((char *) p,
                                                    prefixes[k], &users[i]);
            p += NGX_HTTP_FEED_KEY_LEN;
        }
    }

    i = 3 + 3 * n;

    argv[i] = (const char *) entry->data;
    argvlen[i] = entry->len;
    argv[i + 1] = (const char *) cap;
    argvlen[i + 1] = ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap;
    argv[i + 2] = (const char *) ms;
    argvlen[i + 2] = ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms;

    return ngx_http_feed_redis_send(fmcf->redis_client, handler, data,
                                    (int) (i + 3), argv, argvlen)
           ? NGX_OK : NGX_DECLINED;
}


ngx_int_t
ngx_http_feed_timeline_cache_remove(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    const char *id, ngx_http_feed_redis_pt handler, void *data)
{
    u_char       *keys, *nkeys;
    size_t       *argvlen;
    ngx_uint_t    i;
    const char  **argv;

    argv = ngx_palloc(pool, (4 + n) * sizeof(char *));
    argvlen = ngx_palloc(pool, (4 + n) * sizeof(size_t));
    keys = ngx_pnalloc(pool, n * NGX_HTTP_FEED_KEY_LEN + NGX_INT_T_LEN);

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    nkeys = keys + n * NGX_HTTP_FEED_KEY_LEN;

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_remove_lua.sha1;
    argvlen[1] = 40;
    argv[2] = (const char *) nkeys;
    argvlen[2] = ngx_sprintf(nkeys, "%ui", n) - nkeys;

    for (i = 0; i < n; i++) {
        argv[3 + i] = (const char *) keys + i * NGX_HTTP_FEED_KEY_LEN;
        argvlen[3 + i] = ngx_http_feed_timeline_key((char *) argv[3 + i],
                                                    NGX_HTTP_FEED_TL_PREFIX,
                                                    &users[i]);
    }

    argv[3 + n] = id;
    argvlen[3 + n] = 24;

    return ngx_http_feed_redis_send(fmcf->redis_client, handler, data,
                                    (int) (4 + n), argv, argvlen)
           ? NGX_OK : NGX_DECLINED;
}


static size_t
ngx_http_feed_timeline_key(char *buf, const char *prefix,
    ngx_http_feed_user_t *user)
{
    u_char  *p;

    p = ngx_cpymem(buf, prefix, ngx_strlen(prefix));
    p = ngx_cpymem(p, user->data, user->len);
    *p++ = '}';

    return p - (u_char *) buf;
}
