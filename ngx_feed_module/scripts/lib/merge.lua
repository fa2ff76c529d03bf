-- A page of a user who follows pull authors: merged from the user's list
-- (its first chunk is "part") and each pull author's list, newest first,
-- an id once (a post pushed before its author turned to pull is in both).
-- Each list is exact down to its last entry, or whole when it ends with
-- END: the page stops at the first post older than the end of a list that
-- is not whole (deep: the rest comes from the fallback), as the plain read
-- does at the end of the user's list.  Fills "out" as the plain read does.
-- Entries hold ids as bytes (lib/ids.lua): each entry's id is turned into
-- hex once, when it is looked at, and the merge compares those.
local function merge(out, part, pull)
  local t0 = redis.call('time')
  local lists = {{key = tl, buf = part, pos = #part, i = 1,
                  chunk = limit + 1, eof = #part < limit + 1}}
  -- a pull author the user filters out is not merged at all
  if filtered then
    local keep = {}
    for k = 1, #pull do
      if redis.call('hexists', KEYS[6], pull[k]) == 0 then
        keep[#keep + 1] = pull[k]
      end
    end
    pull = keep
  end
  for k = 1, #pull do
    -- a pull author gives a page a few posts: their list is read a few
    -- entries at a time, twice as many each time
    lists[#lists + 1] = {key = key_pull_list(ARGV[7], pull[k]), buf = {},
                         pos = 0, i = 1, chunk = 2, pulled = true,
                         author = pull[k]}
  end

  -- past max_id: where each list's entries older than it begin, found in
  -- a few LINDEX (the lists are sorted), not by reading those before
  if max ~= '' then
    for _, s in ipairs(lists) do
      local lo, hi = 0, redis.call('llen', s.key)
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if id_hex(redis.call('lindex', s.key, mid)) < max then
          hi = mid
        else
          lo = mid + 1
        end
      end
      s.buf, s.i, s.pos, s.eof = {}, 1, lo, false
      if lo > 0 then
        s.last = id_hex(redis.call('lindex', s.key, lo - 1))
      end
    end
  end

  -- the id of a list's next entry in (since_id, max_id), nil at its end;
  -- false when a pull author's list is gone
  local function peek(s)
    while true do
      if s.i > #s.buf then
        if s.eof then return nil end
        s.buf = redis.call('lrange', s.key, s.pos, s.pos + s.chunk - 1)
        if #s.buf == 0 and s.pos == 0 and s.pulled then return false end
        if s.pulled and #s.buf > 0 and id_old(s.buf[1]) then
          -- written before ids were bytes: loaded again
          redis.call('del', s.key)
          return false
        end
        s.pos, s.i = s.pos + #s.buf, 1
        s.eof = #s.buf < s.chunk
        s.chunk = math.min(s.chunk * 2, 1000)
        if #s.buf == 0 then return nil end
      end
      local e = s.buf[s.i]
      if s.at ~= e then s.at, s.id = e, id_hex(e) end
      local id = s.id
      if id == END_HEX or (since ~= '' and id <= since) then
        s.whole, s.eof, s.buf = true, true, {}
        return nil
      end
      if max == '' or id < max then return id end
      s.last = id
      s.i = s.i + 1
    end
  end

  -- the next few candidates, newest first; stop: none follow them
  local prev
  local function next_ids(want)
    local c = {}
    while #c < want do
      local best, bid
      for _, s in ipairs(lists) do
        local id = peek(s)
        if id == false then
          redis.call('del', key_pull_version(ARGV[7], s.author))
          return nil, s.author
        end
        if id and (not bid or id > bid) then best, bid = s, id end
      end
      for _, s in ipairs(lists) do
        if s.eof and not s.whole and s.i > #s.buf and s.last
           and (not bid or bid < s.last)
        then
          return c, 'deep'
        end
      end
      if not best then return c, 'end' end
      best.last = bid
      if bid ~= prev then
        c[#c + 1] = {bid, best.buf[best.i], best.pulled}
        prev = bid
      end
      best.i = best.i + 1
    end
    return c
  end

  local got, n, pulled_n = {}, 0, 0
  while true do
    local c, stop = next_ids(limit + 1 - n)
    if not c then return {PULL, stop} end
    local dead, keys, posts = {}, {}, {}
    if (deleting or filtered or seen) and #c > 0 then
      local ids = {}
      for i = 1, #c do ids[i] = c[i][1] end
      if deleting then dead = deleted(ARGV[9], ids) end
      -- a post the user hid, pushed or pulled, is left out as a deleted
      -- one is
      if filtered then
        local hid = hidden_posts(KEYS[6], ids)
        for i = 1, #c do dead[i] = dead[i] or hid[i] end
      end
      if seen then seen_drop(seen, dead, ids) end
    end
    if not embed then
      for i = 1, #c do
        if not dead[i] and not c[i][3] then
          keys[#keys + 1] = key_post_json(string.sub(c[i][2], 1, 12))
        end
      end
      if #keys > 0 then posts = redis.call('mget', unpack(keys)) end
    end
    local k = 0
    for i = 1, #c do
      if not dead[i] then
        local json
        if c[i][3] or embed then
          json = string.sub(c[i][2], 13)
        else
          k = k + 1
          json = posts[k]
          if not json then
            redis.call('del', tl, KEYS[3])
            return {MISSING, 0}
          end
        end
        if not c[i][3] and filtered and hidden(KEYS[6], json) then
          json = nil
        end
        if json then
          if n == limit then
            out[2], out[3] = 1, 0
            stop = 'more'
            break
          end
          n = n + 1
          out[ITEMS + n] = json
          out[4] = string.sub(c[i][2], 1, 12)
          got[n] = out[4]
          if c[i][3] then pulled_n = pulled_n + 1 end
        end
      end
    end
    if stop then
      if stop == 'end' then
        out[3] = 0
        for _, s in ipairs(lists) do
          if not s.whole then out[3] = 1 end
        end
      end
      break
    end
  end
  local t1 = redis.call('time')
  out[6] = table.concat(got)
  out[7] = pulled_n
  out[8] = math.max(1, (t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2]))
  return out
end
