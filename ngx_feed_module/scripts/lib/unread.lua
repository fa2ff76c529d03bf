-- Unread counts (docs/timeline.md#unread-counts): the entries of a home
-- timeline newer than the user's read marker, each once, less the posts
-- being deleted, those the user hid and those of authors the user filters
-- out, pull authors' posts merged in.  Needs tl, embed, deleting,
-- filtered, hidden and hidden_posts (the read's, lib/filtered.lua), END
-- and deleted; the marker's copy is
-- feed:mk:{user} {v: version, l: last_read_id ('' for no marker), j}.

-- The entries of a list newer than the marker m ('' for none) that no
-- other list gave (seen), less deleted and hidden ones and those hide()
-- hides (by their authors), their ids added to counted; and whether the
-- list holds none as old as the marker and is trimmed (no END): what lies
-- below its end is not known; nil when the list is gone (a pull author's,
-- which is never empty).  Read 32 entries, then twice as many each time
-- up to 1000: a marker is usually near the head.
local function unread_list(key, m, seen, hide, emb, counted)
  local pos, chunk, n = 0, 32, 0
  while true do
    local part = redis.call('lrange', key, pos, pos + chunk - 1)
    if #part == 0 and pos == 0 then return nil end
    local ids, ents, stop = {}, {}, false
    for i = 1, #part do
      if key ~= tl and i == 1 and pos == 0 and id_old(part[1]) then
        -- a pull author's list written before ids were bytes: loaded
        -- again (a user's own was checked by the caller)
        redis.call('del', key)
        return nil
      end
      if string.sub(part[i], 1, 12) == END then stop = true break end
      local id = id_hex(part[i])
      if id <= m then stop = true break end
      if not seen[id] then
        seen[id] = true
        ids[#ids + 1], ents[#ents + 1] = id, part[i]
      end
    end
    if #ids > 0 then
      local dead, hid, posts = {}, {}, {}
      if deleting then dead = deleted(ARGV[9], ids) end
      if filtered then hid = hidden_posts(KEYS[6], ids) end
      if hide and not emb then
        local keys = {}
        for i = 1, #ids do
          keys[i] = key_post_json(string.sub(ents[i], 1, 12))
        end
        posts = redis.call('mget', unpack(keys))
      end
      for i = 1, #ids do
        local json = emb and string.sub(ents[i], 13) or posts[i]
        if not dead[i] and not hid[i]
           and not (hide and json and hide(json))
        then
          n = n + 1
          counted[#counted + 1] = ids[i]
        end
      end
    end
    if stop then return n, false end
    if #part < chunk then return n, pos + #part > 0 end
    pos = pos + #part
    chunk = math.min(chunk * 2, 1000)
  end
end

-- "<n>", or "<n>+" when a list is trimmed above the marker: the user's
-- list, then each pull author's (embedded entries, by that author) that
-- the user does not filter out; and the ids counted.  nil and the author
-- when a pull author's list is gone: its version goes too, and a read
-- loads it (as merge's).
local function unread_count(m, pull)
  local hide = filtered and function(json) return hidden(KEYS[6], json) end
  local seen, counted = {}, {}
  local n, more = unread_list(tl, m, seen, hide, embed, counted)
  for k = 1, #pull do
    if not (filtered and redis.call('hexists', KEYS[6], pull[k]) == 1) then
      local c, t = unread_list(key_pull_list(ARGV[7], pull[k]), m, seen,
                               nil, true, counted)
      if not c then
        redis.call('del', key_pull_version(ARGV[7], pull[k]))
        return nil, pull[k]
      end
      n, more = n + c, more or t
    end
  end
  return n .. (more and '+' or ''), counted
end

-- The marker to count from: given ('-' for none, else its id, as MongoDB
-- gave it), or the copy's; nil when the copy is not in Redis (or was
-- written by a module without the field l).
local function unread_marker(mk, given)
  if given ~= '' then
    return given == '-' and '' or given
  end
  local c = redis.call('hmget', mk, 'v', 'l')
  if not c[1] or not c[2] then return nil end
  return c[2]
end

-- The count kept for the list of version lv (lib/unread_kept.lua), for
-- the next reads, with the ids counted (ui; '*' past 1000: such a count
-- is not kept while posts are being deleted): the kept pages' hash lives
-- as long as the list keeps its version, and the marker's every change
-- drops the field
local function unread_keep(lv, c, ids)
  ids = ids or {}
  redis.call('hset', KEYS[3], 'u', lv .. ' ' .. c,
             'ui', #ids > 1000 and '*' or table.concat(ids))
  if redis.call('ttl', KEYS[3]) < 0 then
    redis.call('expire', KEYS[3], ARGV[4])
  end
end

-- The count of a first page from the marker's copy, kept when keep (not
-- for an empty timeline): false for no header (no marker, its copy not in
-- Redis, a pull author's list found gone: the next read loads it)
local function unread_first(lv, pull, keep)
  local m = unread_marker(KEYS[7], '')
  local c, ids
  if m and m ~= '' then
    c, ids = unread_count(m, pull)
    if not c then return false end
  end
  c = c or (m and '-' or '?')
  if keep then unread_keep(lv, c, ids) end
  return c ~= '-' and c ~= '?' and c
end
