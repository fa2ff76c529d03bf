
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
 * The first pages, as answered, are kept in "feed:tlp:{user}" with the
 * version of the list they were made from: a read whose page is there and
 * current gets it whole, a single string, instead of each post through the
 * script.  A version is the list's nonce, "feed:tln:{user}", which every
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
 * Each read is one EVALSHA: one round trip, the JSON of the page ready.
 */


#include "ngx_http_feed_timeline.h"
#include "ngx_http_feed_post.h"


#define NGX_HTTP_FEED_TL_PREFIX    "feed:tl:{"
#define NGX_HTTP_FEED_LOCK_PREFIX  "feed:lock:{"
#define NGX_HTTP_FEED_TLV_PREFIX   "feed:tlv:{"
#define NGX_HTTP_FEED_TLQ_PREFIX   "feed:tlq:{"
#define NGX_HTTP_FEED_TLN_PREFIX   "feed:tln:{"
#define NGX_HTTP_FEED_TLP_PREFIX   "feed:tlp:{"

/*
 * A list changed: its version moves, the pages made from it are stale.
 * Versions are never reused (a nonce of the worker, not a counter that
 * could start over after expiring), and outlive the pages made from them.
 */
#define NGX_HTTP_FEED_LUA_CHANGED                                             \
    NGX_HTTP_FEED_LUA_KEY                                                     \
    "local function changed(tl, ttl, nonce) "                                 \
    "  redis.call('set', key('" NGX_HTTP_FEED_TLN_PREFIX "', tl), nonce, "   \
    "             'EX', 2 * tonumber(ttl)) "                                  \
    "end "

/* another key of the timeline's user, in a script: key(prefix, timeline) */
#define NGX_HTTP_FEED_LUA_KEY                                                 \
    "local function key(prefix, tl) "                                         \
    "  return prefix .. string.sub(tl, #'" NGX_HTTP_FEED_TL_PREFIX "' + 1) " \
    "end "

#define NGX_HTTP_FEED_KEY_LEN      (sizeof(NGX_HTTP_FEED_LOCK_PREFIX)        \
                                    + NGX_HTTP_FEED_USER_MAX + 1)

#define NGX_HTTP_FEED_DELETING     "feed:deleting"


/*
 * Which of the ids are being deleted (KEYS[5]), as ZMSCORE answers them
 * (false: not), asked 1000 at a time: Redis's Lua unpacks at most 8000
 * values into one call ("too many results to unpack"), and a warm checks
 * up to feed_cache_size ids.
 */

#define NGX_HTTP_FEED_LUA_DELETED                                             \
    "local function deleted(ids) "                                            \
    "  local d = {} "                                                         \
    "  for i = 1, #ids, 1000 do "                                             \
    "    local part = redis.call('zmscore', KEYS[5], "                        \
    "                            unpack(ids, i, math.min(i + 999, #ids))) "   \
    "    for j = 1, #part do d[i + j - 1] = part[j] end "                     \
    "  end "                                                                  \
    "  return d "                                                             \
    "end "


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
 * KEYS: timeline, lock, pages, version, deleting.  ARGV: limit, max_id,
 * since_id, ttl, mode, post prefix, the version of the worker's own copy
 * of the first page ('' without one).
 *
 *   {0, locked}                          no timeline: 1 while being
 *                                        rebuilt, 2 when a rebuild just
 *                                        failed
 *   {3, version}                         the first page kept as answered
 *                                        (read by the HGET sent just before
 *                                        this, in the same round trip) is
 *                                        current: its bytes never go
 *                                        through the script
 *   {4, version}                         the worker's own copy is current
 *   {3, version, page}                   it is not, this one is
 *   {1, more, deep, last, version, ids, JSON, ...}
 *
 * A few calls per page, whatever its size: a chunk of the list, a check of
 * its candidates against the deleted posts when there are any, one MGET of
 * their posts in link mode; further chunks only past deleted posts or
 * max_id, twice as large each time up to 1000 entries, so that no call
 * gets more ids than Lua can unpack, however deep max_id is.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_read_lua = {
    NGX_HTTP_FEED_LUA_DELETED
    "local tl = KEYS[1] "
    "local limit, max, since = tonumber(ARGV[1]), ARGV[2], ARGV[3] "
    "local ver = redis.call('get', KEYS[4]) or '0' "
    "local deleting = redis.call('zcard', KEYS[5]) > 0 "
    "local kv = max == '' and since == '' "
    "           and redis.call('hget', KEYS[3], 'v' .. ARGV[1]) "
    "if kv and string.sub(kv, 1, #ver + 1) == ver .. ':' then "
    "  local fresh = true "
    "  if deleting then "
    "    local ids = {} "
    "    local s = redis.call('hget', KEYS[3], 'i' .. ARGV[1]) or '' "
    "    for i = 1, #s, 24 do ids[#ids + 1] = string.sub(s, i, i + 23) end "
    "    if #ids > 0 then "
    "      local d = deleted(ids) "
    "      for i = 1, #d do if d[i] then fresh = false end end "
    "    end "
    "  end "
    "  if fresh and redis.call('expire', tl, ARGV[4]) == 1 then "
    "    if ARGV[7] == '' then return {3, kv} end "
    "    if ARGV[7] == kv then return {4, kv} end "
    "    return {3, kv, redis.call('hget', KEYS[3], ARGV[1])} "
    "  end "
    "end "
    "local embed = ARGV[5] == 'e' "
    "local chunk = limit + 1 "
    "local part = redis.call('lrange', tl, 0, chunk - 1) "
    "if #part == 0 then "
    "  local l = redis.call('get', KEYS[2]) "
    "  return {0, l and (l == 'failed' and 2 or 1) or 0} "
    "end "
    "if part[1] ~= '" NGX_HTTP_FEED_TIMELINE_END "' then "
    "  redis.call('expire', tl, ARGV[4]) "
    "end "
    "local out, got, n, pos = {1, 0, 1, '', "
    "                          ver .. ':' .. string.sub(part[1], 1, 24), "
    "                          ''}, {}, 0, 0 "
    "while true do "
    "  local ids, entries, stop = {}, {}, false "
    "  for i = 1, #part do "
    "    local id = string.sub(part[i], 1, 24) "
    "    if id == '" NGX_HTTP_FEED_TIMELINE_END "' "
    "       or (since ~= '' and id <= since) then "
    "      stop = true break "
    "    end "
    "    if max == '' or id < max then "
    "      ids[#ids + 1] = id "
    "      entries[#entries + 1] = part[i] "
    "    end "
    "  end "
    "  if #ids > 0 then "
    "    local dead = {} "
    "    if deleting then dead = deleted(ids) end "
    "    local live, keys = {}, {} "
    "    for i = 1, #ids do "
    "      if not dead[i] then "
    "        live[#live + 1] = i "
    "        keys[#keys + 1] = ARGV[6] .. ids[i] "
    "      end "
    "    end "
    "    local posts = {} "
    "    if not embed and #keys > 0 then "
    "      posts = redis.call('mget', unpack(keys)) "
    "    end "
    "    for j = 1, #live do "
    "      local i = live[j] "
    "      local json "
    "      if embed then "
    "        json = string.sub(entries[i], 25) "
    "      else "
    "        json = posts[j] "
    "        if not json then "
    "          redis.call('del', tl, KEYS[3]) "
    "          return {0, 0} "
    "        end "
    "      end "
    "      if n == limit then "
    "        out[2] = 1 out[3] = 0 out[6] = table.concat(got) "
    "        return out "
    "      end "
    "      n = n + 1 "
    "      out[6 + n] = json "
    "      out[4] = ids[i] "
    "      got[n] = ids[i] "
    "    end "
    "  end "
    "  if stop then out[3] = 0 break end "
    "  if #part < chunk then break end "
    "  pos = pos + #part "
    "  if #ids == 0 then chunk = math.min(chunk * 2, 1000) end "
    "  part = redis.call('lrange', tl, pos, pos + chunk - 1) "
    "  if #part == 0 then break end "
    "end "
    "out[6] = table.concat(got) "
    "return out",
    0, ""
};


/*
 * KEYS: pages, version, timeline.  ARGV: limit, page, ttl, version, ids.
 * Keeps a first page as answered, with its version and its posts' ids,
 * only if the list did not change since it was read: same nonce, same
 * head (a delivery of a newer post, the common change, only moves the
 * head), and not for an empty timeline (it lives feed_cache_empty_ttl, a
 * kept page would outlive it).  The version is "nonce:head:token", the
 * token new at each
 * store: two pages made from one list can still differ (a post deleted
 * in between), and workers tell their copies apart by it.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_page_lua = {
    "local head = redis.call('lindex', KEYS[3], 0) or '' "
    "local cur = (redis.call('get', KEYS[2]) or '0') .. ':' "
    "            .. string.sub(head, 1, 24) .. ':' "
    "if string.sub(ARGV[4], 1, #cur) == cur "
    "   and string.sub(head, 1, 24) ~= '" NGX_HTTP_FEED_TIMELINE_END "' "
    "then "
    "  redis.call('hset', KEYS[1], ARGV[1], ARGV[2], "
    "             'v' .. ARGV[1], ARGV[4], 'i' .. ARGV[1], ARGV[5]) "
    "  redis.call('expire', KEYS[1], ARGV[3]) "
    "end "
    "return 1",
    0, ""
};


/*
 * KEYS: lock, version.  ARGV: token, ms.  {1, version} when the rebuild
 * is ours (none runs; one that just failed is tried again), {0} when
 * another one runs.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_lock_lua = {
    "local l = redis.call('get', KEYS[1]) "
    "if not l or l == 'failed' then "
    "  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "  return {1, redis.call('get', KEYS[2]) or ''} "
    "end "
    "return {0}",
    0, ""
};


/*
 * KEYS: lock.  ARGV: token, failed.  Only a lock that is still ours goes
 * (or says that our rebuild failed): one that expired meanwhile may be
 * another rebuild's now.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_unlock_lua = {
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "  if ARGV[2] == '1' then "
    "    redis.call('set', KEYS[1], 'failed', 'PX', 1000) "
    "  else "
    "    redis.call('del', KEYS[1]) "
    "  end "
    "end "
    "return 1",
    0, ""
};


/*
 * KEYS: timeline, lock, version, queue, deleting.  ARGV: ttl, cap, mode,
 * post prefix, complete, version, nonce, lock token, then id, JSON pairs,
 * newest first.
 *
 * Creates the timeline in one step, unless someone else did already or
 * the user's follows changed since the rebuild began (the version moved:
 * 0 is returned), then puts in the posts fanout queued meanwhile, and
 * releases the rebuild lock if it is still ours.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_warm_lua = {
    NGX_HTTP_FEED_LUA_DELETED
    NGX_HTTP_FEED_LUA_INSERT
    NGX_HTTP_FEED_LUA_CHANGED
    "local tl, cap = KEYS[1], tonumber(ARGV[2]) "
    "local function unlock() "
    "  if redis.call('get', KEYS[2]) == ARGV[8] then "
    "    redis.call('del', KEYS[2]) "
    "  end "
    "end "
    "if (redis.call('get', KEYS[3]) or '') ~= ARGV[6] then "
    "  unlock() "
    "  return 0 "
    "end "
    "if redis.call('exists', tl) == 0 then "
    "  local ids, entries, dead = {}, {}, {} "
    "  for i = 9, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end "
    "  if #ids > 0 and redis.call('zcard', KEYS[5]) > 0 then "
    "    dead = deleted(ids) "
    "  end "
    "  for j = 1, #ids do "
    "    local i = 7 + 2 * j "
    "    if not dead[j] then "
    "      if ARGV[3] == 'e' then "
    "        entries[#entries + 1] = ARGV[i] .. ARGV[i + 1] "
    "      else "
    "        entries[#entries + 1] = ARGV[i] "
    "        redis.call('set', ARGV[4] .. ARGV[i], ARGV[i + 1], "
    "                   'EX', 2 * tonumber(ARGV[1])) "
    "      end "
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
    "    changed(tl, ARGV[1], ARGV[7]) "
    "  end "
    "end "
    "unlock() "
    "redis.call('del', KEYS[4]) "
    "return 1",
    0, ""
};


/*
 * Fanout.  KEYS: the followers' timelines.  ARGV: entry, cap, queue ms, ttl,
 * nonce.  Delivers into the timelines that exist (inactive users get
 * nothing: they are rebuilt on their next read), and queues it for those
 * being rebuilt right now; a post deleted meanwhile goes nowhere (its
 * delete may be fanned out at the same time).  Returns how many got it.
 *
 * The common case is a post newer than the list's head: a push, and the
 * kept pages go (a new head tells the page store they are stale, so the
 * list's version stays).  The lock and queue keys are only needed when
 * the list is missing: their names are made here, not sent for each
 * follower.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_deliver_lua = {
    NGX_HTTP_FEED_LUA_INSERT
    NGX_HTTP_FEED_LUA_CHANGED
    "local entry, cap, n = ARGV[1], tonumber(ARGV[2]), 0 "
    "local id = string.sub(entry, 1, 24) "
    "if redis.call('zscore', '" NGX_HTTP_FEED_DELETING "', id) then "
    "  return 0 "
    "end "
    "for i = 1, #KEYS do "
    "  local tl = KEYS[i] "
    "  local head = redis.call('lindex', tl, 0) "
    "  if head then "
    "    local hid = string.sub(head, 1, 24) "
    "    if hid < id then "
    "      if redis.call('lpush', tl, entry) > cap then "
    "        redis.call('rpop', tl) "
    "      end "
    "      redis.call('del', key('" NGX_HTTP_FEED_TLP_PREFIX "', tl)) "
    "      n = n + 1 "
    "    elseif hid ~= id and insert(tl, entry, cap) == 1 then "
    "      changed(tl, ARGV[4], ARGV[5]) "
    "      n = n + 1 "
    "    end "
    "  else "
    "    if redis.call('exists', key('" NGX_HTTP_FEED_LOCK_PREFIX "', tl)) "
    "       == 1 "
    "    then "
    "      local q = key('" NGX_HTTP_FEED_TLQ_PREFIX "', tl) "
    "      redis.call('rpush', q, entry) "
    "      redis.call('pexpire', q, ARGV[3]) "
    "    end "
    "  end "
    "end "
    "return n",
    0, ""
};


/*
 * KEYS: timeline, follows version, pages.  ARGV: ttl.  The user's follows
 * changed: the cache goes, and a rebuild that began before is not warmed.
 */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_drop_lua = {
    "redis.call('del', KEYS[1], KEYS[3]) "
    "redis.call('incr', KEYS[2]) "
    "redis.call('expire', KEYS[2], ARGV[1]) "
    "return 1",
    0, ""
};


/* KEYS: timelines.  ARGV: post id, ttl, nonce.  Takes the post out. */

static ngx_http_feed_redis_script_t  ngx_http_feed_timeline_remove_lua = {
    NGX_HTTP_FEED_LUA_CHANGED
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
    "        changed(KEYS[i], ARGV[2], ARGV[3]) "
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
static u_char *ngx_http_feed_timeline_nonce(u_char *buf);
static ngx_int_t ngx_http_feed_timeline_cache_batch(
    ngx_http_feed_main_conf_t *fmcf, ngx_log_t *log,
    ngx_http_feed_redis_script_t *script, ngx_http_feed_user_t *users,
    ngx_uint_t n, ngx_uint_t nargs, char **args, size_t *lens,
    ngx_http_feed_redis_pt handler, void *data);
static ngx_int_t ngx_http_feed_timeline_cache_copy(ngx_http_request_t *r,
    redisReply *e, ngx_str_t *to);


ngx_int_t
ngx_http_feed_timeline_cache_init(ngx_http_feed_redis_t *rd)
{
    ngx_uint_t  i;

    static ngx_http_feed_redis_script_t  *scripts[] = {
        &ngx_http_feed_timeline_read_lua,
        &ngx_http_feed_timeline_lock_lua,
        &ngx_http_feed_timeline_unlock_lua,
        &ngx_http_feed_timeline_warm_lua,
        &ngx_http_feed_timeline_deliver_lua,
        &ngx_http_feed_timeline_remove_lua,
        &ngx_http_feed_timeline_drop_lua,
        &ngx_http_feed_timeline_page_lua
    };

    for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
        if (ngx_http_feed_redis_add_script(rd, scripts[i]) != NGX_OK) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The read script, preceded for a first page by a plain HGET of the page
 * kept as answered: both in one round trip; kept() gets the HGET's reply.
 */

ngx_int_t
ngx_http_feed_timeline_cache_read(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_str_t *have, ngx_http_feed_redis_pt kept,
    ngx_http_feed_redis_pt handler, void *data)
{
    char         keys[4][NGX_HTTP_FEED_KEY_LEN];
    u_char       limit[NGX_INT_T_LEN], ttl[NGX_INT_T_LEN];
    size_t       argvlen[15], hgetlen[3];
    ngx_int_t    rc;
    ngx_uint_t   i;
    const char  *argv[15], *hget[3];

    static const char  *prefixes[] = {
        NGX_HTTP_FEED_TL_PREFIX, NGX_HTTP_FEED_LOCK_PREFIX,
        NGX_HTTP_FEED_TLP_PREFIX, NGX_HTTP_FEED_TLN_PREFIX
    };

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_read_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "5";
    argvlen[2] = 1;

    for (i = 0; i < 4; i++) {
        argv[3 + i] = keys[i];
        argvlen[3 + i] = ngx_http_feed_timeline_key(keys[i], prefixes[i],
                                                    &page->user);
    }

    argv[7] = NGX_HTTP_FEED_DELETING;
    argvlen[7] = sizeof(NGX_HTTP_FEED_DELETING) - 1;
    argv[8] = (const char *) limit;
    argvlen[8] = ngx_sprintf(limit, "%ui", page->limit) - limit;
    argv[9] = page->has_max ? page->max_id : "";
    argvlen[9] = page->has_max ? 24 : 0;
    argv[10] = page->has_since ? page->since_id : "";
    argvlen[10] = page->has_since ? 24 : 0;
    argv[11] = (const char *) ttl;
    argvlen[11] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[12] = fmcf->cache_embed ? "e" : "l";
    argvlen[12] = 1;
    argv[13] = NGX_HTTP_FEED_POST_PREFIX;
    argvlen[13] = sizeof(NGX_HTTP_FEED_POST_PREFIX) - 1;
    argv[14] = (const char *) have->data;
    argvlen[14] = have->len;

    /* with a copy of its own, the worker needs the page only if it changed */

    if (!page->has_max && !page->has_since && have->len == 0) {
        hget[0] = "HGET";
        hgetlen[0] = 4;
        hget[1] = keys[2];
        hgetlen[1] = argvlen[5];
        hget[2] = (const char *) limit;
        hgetlen[2] = argvlen[8];

        rc = ngx_http_feed_redis_send_r(r, fmcf->redis_client, kept, data, 3,
                                        hget, hgetlen);
        if (rc != NGX_OK) {
            return rc;
        }
    }

    return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                      15, argv, argvlen);
}


/*
 * A first page as the read answered it, kept for the next reads while the
 * list stays as it is: "version\nnext\nJSON".  Fire and forget.
 */

void
ngx_http_feed_timeline_cache_page(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_page_t *page,
    ngx_http_feed_cached_t *cached, ngx_str_t *body)
{
    u_char      *p, *value, limit[NGX_INT_T_LEN], ttl[NGX_INT_T_LEN];
    char         keys[3][NGX_HTTP_FEED_KEY_LEN];
    size_t       argvlen[11], len, vlen;
    ngx_str_t    kept;
    const char  *argv[11];

    len = cached->version.len + 1 + NGX_HTTP_FEED_NONCE_LEN + body->len
          + 24 + 2;

    value = ngx_pnalloc(r->pool, len);
    if (value == NULL) {
        return;
    }

    /* the version the page is stored under: the list's, and a token */

    p = ngx_cpymem(value, cached->version.data, cached->version.len);
    *p++ = ':';
    p = ngx_http_feed_timeline_nonce(p);
    vlen = p - value;
    *p++ = '\n';

    if (cached->more && cached->nitems) {
        p = ngx_cpymem(p, cached->last, 24);
    }

    *p++ = '\n';
    p = ngx_cpymem(p, body->data, body->len);

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_page_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "3";
    argvlen[2] = 1;
    argv[3] = keys[0];
    argvlen[3] = ngx_http_feed_timeline_key(keys[0], NGX_HTTP_FEED_TLP_PREFIX,
                                            &page->user);
    argv[4] = keys[1];
    argvlen[4] = ngx_http_feed_timeline_key(keys[1], NGX_HTTP_FEED_TLN_PREFIX,
                                            &page->user);
    argv[5] = keys[2];
    argvlen[5] = ngx_http_feed_timeline_key(keys[2], NGX_HTTP_FEED_TL_PREFIX,
                                            &page->user);
    argv[6] = (const char *) limit;
    argvlen[6] = ngx_sprintf(limit, "%ui", page->limit) - limit;
    argv[7] = (const char *) value;
    argvlen[7] = p - value;
    argv[8] = (const char *) ttl;
    argvlen[8] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[9] = (const char *) value;
    argvlen[9] = vlen;
    argv[10] = (const char *) cached->ids.data;
    argvlen[10] = cached->ids.len;

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, 11, argv,
                                    argvlen);

    /*
     * The worker's own copy, under the same version: if the store is
     * refused, no current page has that version, and the copy is never
     * answered.
     */

    kept.data = value;
    kept.len = p - value;

    ngx_http_feed_timeline_local_put(&page->user, page->limit, &kept);
}


/* the page as Redis answered it, kept by the request, not copied */

ngx_int_t
ngx_http_feed_timeline_cache_parse(ngx_http_request_t *r, redisReply *reply,
    ngx_http_feed_cached_t *cached)
{
    size_t       i;
    redisReply  *e;

    ngx_memzero(cached, sizeof(ngx_http_feed_cached_t));

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY
        || reply->elements < 2
        || reply->element[0]->type != REDIS_REPLY_INTEGER)
    {
        return NGX_DECLINED;
    }

    switch (reply->element[0]->integer) {

    case 0:
        if (reply->element[1]->type != REDIS_REPLY_INTEGER) {
            return NGX_DECLINED;
        }

        cached->locked = reply->element[1]->integer;
        return NGX_OK;

    case 3:
    case 4:
        if (reply->element[1]->type != REDIS_REPLY_STRING
            || ngx_http_feed_redis_keep_reply(r->pool, reply) != NGX_OK)
        {
            return NGX_DECLINED;
        }

        cached->found = 1;
        cached->kept = 1;
        cached->local = (reply->element[0]->integer == 4);

        if (reply->elements > 2
            && reply->element[2]->type == REDIS_REPLY_STRING)
        {
            (void) ngx_http_feed_timeline_cache_copy(r, reply->element[2],
                                                     &cached->page);
        }

        return ngx_http_feed_timeline_cache_copy(r, reply->element[1],
                                                 &cached->version);

    default:
        break;
    }

    if (reply->elements < 6) {
        return NGX_DECLINED;
    }

    if (ngx_http_feed_redis_keep_reply(r->pool, reply) != NGX_OK) {
        return NGX_ERROR;
    }

    for (i = 1; i < reply->elements; i++) {
        e = reply->element[i];

        if (i >= 3 && e->type != REDIS_REPLY_STRING) {
            return NGX_DECLINED;
        }
    }

    if (reply->element[3]->len > 24) {
        return NGX_DECLINED;
    }

    cached->found = 1;
    cached->more = reply->element[1]->type == REDIS_REPLY_INTEGER
                   && reply->element[1]->integer;
    cached->deep = reply->element[2]->type == REDIS_REPLY_INTEGER
                   && reply->element[2]->integer;

    ngx_memcpy(cached->last, reply->element[3]->str,
               reply->element[3]->len);
    cached->last[reply->element[3]->len] = '\0';

    if (ngx_http_feed_timeline_cache_copy(r, reply->element[4],
                                          &cached->version)
        != NGX_OK
        || ngx_http_feed_timeline_cache_copy(r, reply->element[5],
                                             &cached->ids)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    cached->nitems = reply->elements - 6;

    if (cached->nitems == 0) {
        return NGX_OK;
    }

    cached->items = ngx_palloc(r->pool,
                               cached->nitems * sizeof(ngx_str_t));
    if (cached->items == NULL) {
        return NGX_ERROR;
    }

    for (i = 0; i < cached->nitems; i++) {
        if (ngx_http_feed_timeline_cache_copy(r, reply->element[6 + i],
                                              &cached->items[i])
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * The page the HGET got, "version\nnext\nJSON", if it is the version the
 * script found current: its JSON is the answer as it is.
 */

ngx_int_t
ngx_http_feed_timeline_cache_kept(ngx_str_t *page,
    ngx_http_feed_cached_t *cached)
{
    u_char  *p, *last, *nl;

    /* none: the HGET before the script found none (nil), or went away */

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


/* the reply is kept by the request: its strings are used where they are */

static ngx_int_t
ngx_http_feed_timeline_cache_copy(ngx_http_request_t *r, redisReply *e,
    ngx_str_t *to)
{
    to->len = e->len;
    to->data = (u_char *) e->str;

    return NGX_OK;
}


/* the rebuild lock: one rebuild per user across workers and nodes */

ngx_int_t
ngx_http_feed_timeline_cache_lock(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *token, ngx_http_feed_redis_pt handler, void *data)
{
    char         lock[NGX_HTTP_FEED_KEY_LEN], tlv[NGX_HTTP_FEED_KEY_LEN];
    u_char       ms[NGX_INT_T_LEN];
    size_t       argvlen[7];
    const char  *argv[7];

    /* token->data: NGX_HTTP_FEED_NONCE_LEN bytes of the caller's */

    token->len = ngx_http_feed_timeline_nonce(token->data) - token->data;

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
    argv[5] = (const char *) token->data;
    argvlen[5] = token->len;
    argv[6] = (const char *) ms;
    argvlen[6] = ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms;

    return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler, data,
                                      7, argv, argvlen);
}


/*
 * A rebuild that did not warm releases its lock; one that failed leaves it
 * saying so for a moment, so that those waiting on it elsewhere give the
 * same answer instead of each rebuilding in turn.
 */

void
ngx_http_feed_timeline_cache_unlock(ngx_http_feed_main_conf_t *fmcf,
    ngx_http_feed_user_t *user, ngx_str_t *token, ngx_uint_t failed)
{
    char         lock[NGX_HTTP_FEED_KEY_LEN];
    size_t       argvlen[6];
    const char  *argv[6];

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_unlock_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "1";
    argvlen[2] = 1;
    argv[3] = lock;
    argvlen[3] = ngx_http_feed_timeline_key(lock, NGX_HTTP_FEED_LOCK_PREFIX,
                                            user);
    argv[4] = (const char *) token->data;
    argvlen[4] = token->len;
    argv[5] = failed ? "1" : "0";
    argvlen[5] = 1;

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, 6, argv,
                                    argvlen);
}


/* items: the fallback's "items" array of posts, newest first */

ngx_int_t
ngx_http_feed_timeline_cache_warm(ngx_http_request_t *r,
    ngx_http_feed_main_conf_t *fmcf, ngx_http_feed_user_t *user,
    ngx_str_t *version, ngx_str_t *token, bson_t *items,
    ngx_uint_t complete, ngx_http_feed_redis_pt handler, void *data)
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

    argv = ngx_palloc(r->pool, (16 + 2 * n) * sizeof(char *));
    argvlen = ngx_palloc(r->pool, (16 + 2 * n) * sizeof(size_t));
    keys = ngx_pnalloc(r->pool, 4 * NGX_HTTP_FEED_KEY_LEN
                                + 2 * NGX_INT_T_LEN
                                + NGX_HTTP_FEED_NONCE_LEN);

    if (argv == NULL || argvlen == NULL || keys == NULL) {
        return NGX_ERROR;
    }

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_warm_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "5";
    argvlen[2] = 1;

    for (i = 0; i < 4; i++) {
        argv[3 + i] = (char *) keys + i * NGX_HTTP_FEED_KEY_LEN;
        argvlen[3 + i] = ngx_http_feed_timeline_key((char *) argv[3 + i],
                                                    prefixes[i], user);
    }

    argv[7] = NGX_HTTP_FEED_DELETING;
    argvlen[7] = sizeof(NGX_HTTP_FEED_DELETING) - 1;

    ttl = keys + 4 * NGX_HTTP_FEED_KEY_LEN;
    cap = ttl + NGX_INT_T_LEN;

    /*
     * An empty timeline (no follows, no posts) is kept only briefly: any
     * id can be read, and each would otherwise leave its keys for days.
     */

    argv[8] = (const char *) ttl;
    argvlen[8] = ngx_sprintf(ttl, "%T", (n == 0 && complete)
                                        ? fmcf->cache_empty_ttl
                                        : fmcf->cache_ttl)
                 - ttl;
    argv[9] = (const char *) cap;
    argvlen[9] = ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap;
    argv[10] = fmcf->cache_embed ? "e" : "l";
    argvlen[10] = 1;
    argv[11] = NGX_HTTP_FEED_POST_PREFIX;
    argvlen[11] = sizeof(NGX_HTTP_FEED_POST_PREFIX) - 1;
    argv[12] = complete ? "1" : "0";
    argvlen[12] = 1;
    argv[13] = (const char *) version->data;
    argvlen[13] = version->len;
    argv[14] = (const char *) cap + NGX_INT_T_LEN;
    argvlen[14] = ngx_http_feed_timeline_nonce(cap + NGX_INT_T_LEN)
                  - (cap + NGX_INT_T_LEN);
    argv[15] = (const char *) token->data;
    argvlen[15] = token->len;

    argc = 16;

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
    char         keys[3][NGX_HTTP_FEED_KEY_LEN];
    u_char       ttl[NGX_INT_T_LEN];
    size_t       argvlen[7];
    ngx_uint_t   i;
    const char  *argv[7];

    static const char  *prefixes[] = {
        NGX_HTTP_FEED_TL_PREFIX, NGX_HTTP_FEED_TLV_PREFIX,
        NGX_HTTP_FEED_TLP_PREFIX
    };

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = ngx_http_feed_timeline_drop_lua.sha1;
    argvlen[1] = 40;
    argv[2] = "3";
    argvlen[2] = 1;

    for (i = 0; i < 3; i++) {
        argv[3 + i] = keys[i];
        argvlen[3 + i] = ngx_http_feed_timeline_key(keys[i], prefixes[i],
                                                    user);
    }

    argv[6] = (const char *) ttl;
    argvlen[6] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;

    if (r) {
        return ngx_http_feed_redis_send_r(r, fmcf->redis_client, handler,
                                          data, 7, argv, argvlen);
    }

    return ngx_http_feed_redis_send(fmcf->redis_client, handler, data, 7,
                                    argv, argvlen)
           ? NGX_OK : NGX_DECLINED;
}


/*
 * Fanout of one entry (the id, and the JSON in embed mode) to a batch of
 * users: one script call, one round trip.
 */

ngx_int_t
ngx_http_feed_timeline_cache_deliver(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    ngx_str_t *entry, ngx_http_feed_redis_pt handler, void *data)
{
    u_char  cap[NGX_INT_T_LEN], ms[NGX_INT_T_LEN], ttl[NGX_INT_T_LEN],
            nonce[NGX_HTTP_FEED_NONCE_LEN];
    size_t  argvlen[5];
    char   *argv[5];

    argv[0] = (char *) entry->data;
    argvlen[0] = entry->len;
    argv[1] = (char *) cap;
    argvlen[1] = ngx_sprintf(cap, "%ui", fmcf->cache_size) - cap;
    argv[2] = (char *) ms;
    argvlen[2] = ngx_sprintf(ms, "%M", fmcf->cache_lock_timeout) - ms;
    argv[3] = (char *) ttl;
    argvlen[3] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[4] = (char *) nonce;
    argvlen[4] = ngx_http_feed_timeline_nonce(nonce) - nonce;

    return ngx_http_feed_timeline_cache_batch(fmcf, pool->log,
                                        &ngx_http_feed_timeline_deliver_lua,
                                        users, n, 5, argv, argvlen,
                                        handler, data);
}


/* the delete of a post fanned out to a batch of users */

ngx_int_t
ngx_http_feed_timeline_cache_remove(ngx_http_feed_main_conf_t *fmcf,
    ngx_pool_t *pool, ngx_http_feed_user_t *users, ngx_uint_t n,
    const char *id, ngx_http_feed_redis_pt handler, void *data)
{
    u_char  ttl[NGX_INT_T_LEN], nonce[NGX_HTTP_FEED_NONCE_LEN];
    size_t  argvlen[3];
    char   *argv[3];

    argv[0] = (char *) id;
    argvlen[0] = 24;
    argv[1] = (char *) ttl;
    argvlen[1] = ngx_sprintf(ttl, "%T", fmcf->cache_ttl) - ttl;
    argv[2] = (char *) nonce;
    argvlen[2] = ngx_http_feed_timeline_nonce(nonce) - nonce;

    return ngx_http_feed_timeline_cache_batch(fmcf, pool->log,
                                        &ngx_http_feed_timeline_remove_lua,
                                        users, n, 3, argv, argvlen,
                                        handler, data);
}


/*
 * A script call on the timelines of a batch of users, then nargs
 * arguments.  What it is built in is freed as soon as hiredis has copied
 * it: one entry may go to hundreds of thousands of followers, batch after
 * batch.
 */

static ngx_int_t
ngx_http_feed_timeline_cache_batch(ngx_http_feed_main_conf_t *fmcf,
    ngx_log_t *log, ngx_http_feed_redis_script_t *script,
    ngx_http_feed_user_t *users, ngx_uint_t n, ngx_uint_t nargs,
    char **args, size_t *lens, ngx_http_feed_redis_pt handler, void *data)
{
    u_char       *p;
    size_t       *argvlen;
    ngx_int_t     rc;
    ngx_uint_t    i, argc;
    const char  **argv;

    argc = 3 + n + nargs;

    argv = ngx_alloc(argc * (sizeof(char *) + sizeof(size_t))
                     + NGX_INT_T_LEN + n * NGX_HTTP_FEED_KEY_LEN, log);
    if (argv == NULL) {
        return NGX_ERROR;
    }

    argvlen = (size_t *) (argv + argc);
    p = (u_char *) (argvlen + argc);

    argv[0] = "EVALSHA";
    argvlen[0] = 7;
    argv[1] = script->sha1;
    argvlen[1] = 40;
    argv[2] = (const char *) p;
    argvlen[2] = ngx_sprintf(p, "%ui", n) - p;
    p += NGX_INT_T_LEN;

    for (i = 0; i < n; i++) {
        argv[3 + i] = (const char *) p;
        argvlen[3 + i] = ngx_http_feed_timeline_key((char *) p,
                                                    NGX_HTTP_FEED_TL_PREFIX,
                                                    &users[i]);
        p += NGX_HTTP_FEED_KEY_LEN;
    }

    for (i = 0; i < nargs; i++) {
        argv[3 + n + i] = args[i];
        argvlen[3 + n + i] = lens[i];
    }

    rc = ngx_http_feed_redis_send(fmcf->redis_client, handler, data,
                                  (int) argc, argv, argvlen)
         ? NGX_OK : NGX_DECLINED;

    ngx_free(argv);

    return rc;
}


/*
 * A post is deleted (done: 0) or fanout took it out of every timeline
 * (done: 1).  Reads skip it until then, and for a grace period after,
 * in which a rebuild begun before the delete could still warm it; without
 * fanout nothing takes it out, and it is skipped as long as lists live.
 */

void
ngx_http_feed_timeline_deleted(ngx_http_feed_main_conf_t *fmcf,
    const char *id, ngx_uint_t done)
{
    u_char       score[NGX_INT64_LEN + 1], now[NGX_INT64_LEN + 1];
    size_t       argvlen[5];
    int64_t      ms;
    const char  *argv[5];

    ms = ngx_http_feed_now_ms();

    argv[0] = "ZADD";
    argvlen[0] = 4;
    argv[1] = NGX_HTTP_FEED_DELETING;
    argvlen[1] = sizeof(NGX_HTTP_FEED_DELETING) - 1;

    if (done) {
        argv[2] = "XX";
        argvlen[2] = 2;
        argv[3] = (const char *) score;
        argvlen[3] = ngx_sprintf(score, "%L",
                                 ms + 2 * (int64_t) fmcf->cache_lock_timeout)
                     - score;

    } else {
        argv[2] = "GT";
        argvlen[2] = 2;

        if (fmcf->fanout) {
            argv[3] = "+inf";
            argvlen[3] = 4;

        } else {
            argv[3] = (const char *) score;
            argvlen[3] = ngx_sprintf(score, "%L",
                                     ms + 2000 * (int64_t) fmcf->cache_ttl)
                         - score;
        }
    }

    argv[4] = id;
    argvlen[4] = 24;

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, 5, argv,
                                    argvlen);

    /* what no read needs any more */

    argv[0] = "ZREMRANGEBYSCORE";
    argvlen[0] = 16;
    argv[2] = "-inf";
    argvlen[2] = 4;
    argv[3] = (const char *) now;
    argvlen[3] = ngx_sprintf(now, "(%L", ms) - now;

    (void) ngx_http_feed_redis_send(fmcf->redis_client, NULL, NULL, 4, argv,
                                    argvlen);
}


/*
 * A version no other change of any list ever had, on any node: 64 random
 * bits drawn once per worker, and a count.
 */

static u_char *
ngx_http_feed_timeline_nonce(u_char *buf)
{
    static uint64_t  seed, n;

    while (seed == 0) {
        ngx_http_feed_random((u_char *) &seed, sizeof(seed));
    }

    return ngx_sprintf(buf, "%xL-%uL", seed, ++n);
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
