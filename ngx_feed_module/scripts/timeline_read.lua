--[[
  Reads a page of a home timeline (ngx_http_feed_timeline_cache_read).

  Input:
    KEYS[1] timeline      the list, feed:tl:{user}
    KEYS[2] lock          its rebuild lock, feed:lock:{user}
    KEYS[3] pages         the first pages kept as answered, feed:tlp:{user}
    KEYS[4] version       the list's nonce, feed:tln:{user}
    KEYS[5] pull          the pull authors the user follows, feed:tla:{user},
                          read when the version ends with 'P' (it ends with
                          'N' for a user who follows none)
    KEYS[6] filters       the authors the user does not see, feed:tlf:{user}
                          (lib/filtered.lua): a list without it is made
                          again, with it
    KEYS[7] marker        the user's read marker's copy, feed:mk:{user}

    ARGV[1] limit         posts per page
    ARGV[2] max_id        only older posts ('' for none), in hex
    ARGV[3] since_id      only newer posts ('' for none), in hex
    ARGV[4] ttl           seconds a read keeps the list alive
    ARGV[5] mode          'e': the JSON is in the entry, else in the
                          post's key (link mode), feed:p:<id>
    ARGV[6] have          the version of the worker's own copy of the first
                          page ('' without one)
    ARGV[7] pull_copy     the copy of the pull authors' lists the user's
                          reads merge, feed:pl<copy>:{author} with their
                          versions feed:pv<copy>:{author}: '' on a single
                          Redis, the user's node's '{tag}' on a cluster
    ARGV[8] vouched       '1': the worker has heard of no change of the
                          pull authors' lists its copy (ARGV[6]) was
                          merged from since it was made
    ARGV[9] deleting      the posts being deleted, feed:deleting (on a
                          cluster, its copy on the user's node)
    ARGV[10] copy         the copy's mark for its node's run, '~<run>'
                          (lib/deleted.lua); '' on a single Redis
    ARGV[11] unseen       '1': the page leaves out the posts the user saw
                          (lib/seen.lua), and no kept page answers it
    ARGV[12] unread       '1': a first page answers the unread count
                          too (lib/unread.lua), when the user has a
                          marker and its copy is in Redis
    ARGV[13] tracked      '1': Redis tracks this call's keys for the
                          worker, which answers its copy of the first page
                          without asking while none of them changes: a
                          kept page found current leaves the list's TTL
                          alone (a change of a key tracked), the worker
                          sends a read without it now and then
    ARGV[14] fresh        '1': the page is read from the list, never a
                          kept one (a live stream's read, which needs each
                          post's JSON and id); tracked, it leaves the
                          list's TTL alone too (its reader has Redis track
                          the keys that change when the list changes in
                          other ways than by a delivery, not these)
    ARGV[15] known        of a fresh read: the ids (24 hex digits each,
                          one after another) whose JSON the caller has: an
                          entry among them is answered with '' for its
                          JSON, which is then not read (but by a reader
                          with filters, who needs it to tell what to skip)
    ARGV[16] polling      '1': the read polls for a rebuild elsewhere, and
                          a partial page the rebuild left in its lock is
                          its answer (lib/locked.lua)

  Output, the first element the kind of reply:
    {0, locked}           MISSING: no timeline; locked 1 while being
                          rebuilt, 2 when a rebuild just failed, 3 when it
                          just answered a partial page
    {0, 3, page}          MISSING, to a read that polls: that page,
                          "<limit>\n<filters>\n<JSON>" (timeline_unlock.lua)
    {1, more, deep, last, version, ids, pulled, usec, lists, filters,
     unread, JSON...}
                          PAGE: the page, each post's JSON; last: the id of
                          its last post, ids: theirs concatenated, each as
                          the lists hold it, 12 bytes (lib/ids.lua: the
                          worker turns them into hex); pulled:
                          how many came from pull authors' lists, usec: the
                          time their merge took; lists: the pull authors
                          merged and their lists' versions, {a1, v1, ...};
                          filters: when the page goes on past the end of
                          a trimmed list (deep), the authors the rest must
                          leave out, {a1, a2, ...}, and of a fresh read
                          never empty when the user has filters; unread:
                          the count
                          ("<n>" or "<n>+", lib/unread.lua) or false
    {8, more, deep, last, version, ids, ...}
                          AGAIN: a PAGE as above, of the first page kept
                          (its version, span and pulled ids in
                          feed:tlp, not its bytes), which is current but
                          which the worker has no copy of: read again
                          from the lists, under the kept version, so that
                          every worker's copy has the same; the worker
                          keeps a copy of it and stores nothing
    {4, version, false, lists}
                          LOCAL: the worker's own copy is current
    {4, version}          LOCAL: the same, on the worker's word (vouched)
                          LOCAL ends with the unread count when asked and
                          known: {4, version, false, lists|false, unread}
    {7, version, unread}  LOCAL with the unread count and no lists: as
                          short a reply as can be, as for a plain user
    {5, author...}        PULL: these pull authors' lists are missing (a
                          Redis restart, or no post for a long time): they
                          are loaded from MongoDB, and the page read again

  A user who follows pull authors (feed_pull_threshold) has their ids in
  "pull": their posts are not in the user's list but in each author's
  own, and a page is merged from all of them (lib/merge.lua).  The lists'
  versions are part of the version of kept pages, so that a kept page or
  a worker's copy is current only while none of the lists changed.  A
  worker hears of every change of those lists (lib/pull_changed.lua): for
  a copy it vouches for, only the user's own keys are read, as for a user
  who follows none, so that a hit costs the same whatever the number of
  pull authors.  A change of the set itself moves the version or deletes
  the kept pages.

  A few calls per page, whatever its size: a chunk of the list, a check of
  its candidates against the deleted posts when there are any, one MGET of
  their posts in link mode; further chunks only past deleted posts or
  max_id, twice as large each time up to 1000 entries, so that no call
  gets more ids than Lua can unpack, however deep max_id is.  The tail
  entry END (lib/end.lua) ends a complete list.

  Posts of authors the user filters out (blocks, mutes), and posts the
  user hid, are skipped as deleted ones are, and the page goes on until
  it is full: a user with no filter pays one HLEN, one with filters one
  HMGET of the hidden posts' fields per chunk.  A page kept as answered
  was made with the filters of its version (a filter's change moves the
  version).
]]

local MISSING, PAGE, LOCAL, PULL, COUNTED, AGAIN = 0, 1, 4, 5, 7, 8
local ITEMS = 11
-- only what the hot path needs comes first: every function a script
-- defines is made again at each call, before it runs (about 0.1 µs each)
-- @include deleted

local tl = KEYS[1]
local ver = redis.call('get', KEYS[4])
-- kept pages hold what a plain read shows, not an unseen one
local first = ARGV[2] == '' and ARGV[3] == '' and ARGV[11] ~= '1'
              and ARGV[14] ~= '1'
local deleting = deleting_any(ARGV[9], ARGV[10])
-- @include unread_kept
-- a list kept from another run of its node, which came back on older data
-- (lib/deleted.lua): it may hold posts deleted or authors unfollowed
-- since, that nothing else hides any more; made again, as one without its
-- version, and its kept pages with it
if ver and ARGV[10] ~= '' then
  local run = run_of(ARGV[10])
  if string.sub(ver, 1, #run) ~= run then
    redis.call('del', tl, KEYS[3])
    ver = nil
  end
end
local mark = ver and string.sub(ver, -1)

-- A first page kept (kv: its version) is current when none of the posts
-- it shows is being deleted: the list's first n entries (n: the kept
-- span; while kv is current the list's head is as it was), less those it
-- skipped that were being deleted already (s), and its posts merged from
-- pull authors' lists (p), ids as bytes.  Its list lives on.
local function current(kv)
  if deleting then
    local f = redis.call('hmget', KEYS[3], 'n' .. ARGV[1], 's' .. ARGV[1],
                         'p' .. ARGV[1])
    if not f[1] or not f[2] or not f[3] then return false end
    local skip, ids, hex = {}, {}, '%08x%08x%08x'
    for i = 1, #f[2], 12 do skip[string.sub(f[2], i, i + 11)] = true end
    if tonumber(f[1]) > 0 then
      for _, e in ipairs(redis.call('lrange', tl, 0, tonumber(f[1]) - 1)) do
        if not skip[string.sub(e, 1, 12)] then
          ids[#ids + 1] = string.format(hex, struct.unpack('>I4I4I4', e))
        end
      end
    end
    for i = 1, #f[3], 12 do
      ids[#ids + 1] = string.format(hex, struct.unpack('>I4I4I4', f[3], i))
    end
    if #ids > 0 then
      local d = deleted(ARGV[9], ids)
      for i = 1, #d do if d[i] then return false end end
    end
  end
  if ARGV[13] == '1' then
    return redis.call('exists', tl) == 1
  end
  return redis.call('expire', tl, ARGV[4]) == 1
end

-- The hot path: a first page kept for the list's version (lv), and the
-- unread count kept with it when asked (lib/unread_kept.lua; one not kept
-- is counted as the page is read, below).  kv: the kept page's version;
-- the worker's copy (ARGV[6]) is current when it is kv.  A user who
-- follows pull authors has their lists' versions in lv: only a copy the
-- worker vouches for answers here (its own word for the lists), else the
-- lists are read below.  Answers, or nil to read on: with again set when
-- the kept page is current but the worker has no copy of it.
local again
local function kept(lv, kv, u, lists)
  if not kv or string.sub(kv, 1, #lv + 1) ~= lv .. ':' then return nil end
  if mark == 'P' and not lists and ARGV[6] ~= kv then return nil end
  if ARGV[12] == '1' then
    u = unread_kept(u, lv)
    if u == nil then return nil end
    if u == '-' or u == '?' then u = false end
  else
    u = false
  end
  if not current(kv) then return nil end
  if ARGV[6] == kv then
    if lists then return {LOCAL, kv, false, lists, u} end
    if u then return {COUNTED, kv, u} end
    return {LOCAL, kv}
  end
  again = {kv, u}
  return nil
end

-- A kept page's version is kept without the list's (lv), which the read
-- knows: "<head>:<token>", under the 64 bytes of a hash's listpack.  The
-- version of a pull user's lists is the copy's, on the worker's word.
local h
if first and (mark == 'N'
              or (mark == 'P' and ARGV[8] == '1'
                  and string.sub(ARGV[6], 1, #ver + 1) == ver .. '.'
                  and redis.call('exists', KEYS[5]) == 1))
then
  h = redis.call('hmget', KEYS[3], 'v' .. ARGV[1], 'u')
  local lv = mark == 'N' and ver or string.match(ARGV[6], '^[^:]*')
  local res = kept(lv, h[1] and lv .. ':' .. h[1], h[2])
  if res then return res end
end

-- @include keys
-- @include end
-- @include ids
-- @include pulled

local limit, max, since = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local pull, lists = {}, {}
if mark == 'P' then
  pull = redis.call('smembers', KEYS[5])
end
if (mark ~= 'P' and mark ~= 'N') or (mark == 'P' and #pull == 0) then
  -- a list without its version, or without its pull authors (evicted on
  -- their own, or made by an older version): made again
  redis.call('del', tl, KEYS[3])
  ver, pull = nil, {}
end
ver = ver or '0'
if #pull > 0 then
  local sig, more = pulled(pull, ARGV[7])
  if not sig then
    if redis.call('exists', tl) == 1 then
      return {PULL, unpack(more)}
    end
    pull = {}
  else
    ver, lists = ver .. '.' .. sig, more
  end
end
-- a pull user's first page kept for the lists' versions (a plain user's
-- was asked above)
if first and #pull > 0 then
  h = h or redis.call('hmget', KEYS[3], 'v' .. ARGV[1], 'u')
  local res = kept(ver, h[1] and ver .. ':' .. h[1], h[2], lists)
  if res then return res end
end
-- a list without its filters (evicted on their own, or made by an older
-- version): made again; a kept page above was made with them
local nf = redis.call('hlen', KEYS[6])
if nf == 0 then
  redis.call('del', tl, KEYS[3])
end
local embed = ARGV[5] == 'e'
local filtered = nf > 1
-- the reader's filters of posts seen, for a page asked with unseen
local seen = ARGV[11] == '1' and key_seen(key_timeline_parts(tl))
-- @include filtered
-- @include seen
-- @include unread
-- @include merge
-- the ids whose JSON the caller has (a live stream's reader)
local known = {}
if ARGV[14] == '1' and ARGV[15] then
  for i = 1, #ARGV[15], 24 do
    known[id_bin(string.sub(ARGV[15], i, i + 23))] = true
  end
end
-- the cursors as ids are in the list, and their numbers to compare with
local since_b = since ~= '' and id_bin(since)
local since_n = since_b and id_n(since_b)
local max_n = max ~= '' and id_n(id_bin(max))
local chunk = limit + 1
local part = redis.call('lrange', tl, 0, chunk - 1)
if #part > 0 and id_old(part[1]) then
  -- written by a version before ids were bytes: made again, once
  drop_old(tl, KEYS[3], embed)
  part = {}
end
if #part == 0 then
-- @include locked
  return {MISSING, locked(KEYS[2], ARGV[16] == '1')}
end
-- (a kept page found current kept the list alive already)
if part[1] ~= END and not (ARGV[14] == '1' and ARGV[13] == '1')
   and not again
then
  redis.call('expire', tl, ARGV[4])
end
local out, got, n, pos = {PAGE, 0, 1, '',
                          ver .. ':' .. id_hex(part[1]),
                          '', 0, 0, lists, {}, false}, {}, 0, 0
-- a live stream's reader is told whether the user has filters: it sends
-- the posts told to it without a read only when not
if ARGV[14] == '1' and filtered then out[10] = {'*'} end
-- (not kept for an empty timeline: its list lives feed_cache_empty_ttl,
-- and nothing of it outlives that)
if again then
  out[1], out[5], out[11] = AGAIN, again[1], again[2]
elseif first and ARGV[12] == '1' then
  out[11] = unread_first(ver, pull, part[1] ~= END)
end

-- the authors, and the posts hidden, the rest of a deep page must leave
-- out
local function deep_filters(res)
  if res[3] == 1 and filtered then
    local a = redis.call('hkeys', KEYS[6])
    for i = #a, 1, -1 do
      if a[i] == '' then table.remove(a, i) end
    end
    res[10] = a
  end
  return res
end

if #pull > 0 then
  return deep_filters(merge(out, part, pull))
end
while true do
  local ids, entries, stop = {}, {}, false
  for i = 1, #part do
    local id = string.sub(part[i], 1, 12)
    if id == END or (since_b and (id == since_b or id_lt_n(id, since_n)))
    then
      stop = true break
    end
    if not max_n or id_lt_n(id, max_n) then
      ids[#ids + 1] = id
      entries[#entries + 1] = part[i]
    end
  end
  local n0 = n
  if #ids > 0 then
    local dead, hid = {}, {}
    -- the sets of deleted and hidden posts, and the filters of posts
    -- seen, hold ids as the worker gives them: hex
    local hex = (deleting or filtered or seen) and ids_hex(ids)
    if deleting then dead = deleted(ARGV[9], hex) end
    if filtered then hid = hidden_posts(KEYS[6], hex) end
    if seen then seen_drop(seen, dead, hex) end
    local live, keys, at = {}, {}, {}
    for i = 1, #ids do
      if not dead[i] and not hid[i] then
        live[#live + 1] = i
        if not (known[ids[i]] and not filtered) then
          keys[#keys + 1] = key_post_json(ids[i])
          at[i] = #keys
        end
      end
    end
    local posts = {}
    if not embed and #keys > 0 then
      posts = redis.call('mget', unpack(keys))
    end
    for j = 1, #live do
      local i = live[j]
      local json
      if known[ids[i]] and not filtered then
        json = ''
      elseif embed then
        json = string.sub(entries[i], 13)
      else
        json = posts[at[i]]
        if not json then
          redis.call('del', tl, KEYS[3])
          return {MISSING, 0}
        end
      end
      if not (filtered and hidden(KEYS[6], json)) then
        if n == limit then
          out[2] = 1 out[3] = 0 out[6] = table.concat(got)
          return out
        end
        n = n + 1
        out[ITEMS + n] = json
        out[4] = ids[i]
        got[n] = ids[i]
      end
    end
  end
  if stop then out[3] = 0 break end
  if #part < chunk then break end
  pos = pos + #part
  -- a chunk that gave nothing (past max_id, deleted or filtered posts):
  -- the next one is larger; else twice what the page still needs
  if n == n0 then
    chunk = math.min(chunk * 2, 1000)
  else
    chunk = 2 * (limit + 1 - n)
  end
  part = redis.call('lrange', tl, pos, pos + chunk - 1)
  if #part == 0 then break end
end
out[6] = table.concat(got)
return deep_filters(out)
