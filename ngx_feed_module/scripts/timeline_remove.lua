--[[
  Fanout of a post's delete to a batch of followers
  (ngx_http_feed_timeline_cache_remove): takes the post out of their
  timelines.  The timelines are arguments, as in timeline_deliver.lua:
  on a cluster, a batch is made of timelines of one node.

  Input:
    KEYS[1] route             the first timeline

    ARGV[1] id                the post's, hex (the lists hold its 12
                              bytes, lib/ids.lua)
    ARGV[2] ttl               seconds
    ARGV[3] nonce             a new version for a list that changes
    ARGV[4] channel           '' for timelines, whose versions are
                              feed:tln:{user}; for a pull author's list
                              (feed:pl<copy>:{author}, its version
                              feed:pv<copy>:{author}), where the workers
                              hear of its new version
    ARGV[5...]                the followers' timelines, feed:tl:{user}

  Output:
    how many timelines had it
]]

-- @include keys
-- @include ids
-- @include changed
-- @include pull_changed

local id, n = id_bin(ARGV[1]), 0
local idn = id_n(id)
for i = 5, #ARGV do
  if ARGV[4] ~= '' and redis.call('exists', ARGV[i]) == 0 then
    -- a pull author's list gone (expired, evicted): pages merged from it
    -- may still show the post, their workers must not vouch for them
    pull_forgotten(ARGV[i], ARGV[4])
  end
  local pos, done = 0, false
  while not done do
    local part = redis.call('lrange', ARGV[i], pos, pos + 63)
    if #part == 0 then break end
    if pos == 0 and id_old(part[1]) then
      -- written before ids were bytes: made again at the next read
      if ARGV[4] == '' then
        drop_old(ARGV[i], key_kept_pages(key_timeline_parts(ARGV[i])),
                 false)
      else
        redis.call('del', ARGV[i])
        pull_forgotten(ARGV[i], ARGV[4])
      end
      break
    end
    for j = 1, #part do
      local eid = string.sub(part[j], 1, 12)
      if eid == id then
        n = n + redis.call('lrem', ARGV[i], 1, part[j])
        if ARGV[4] == '' then
          changed(key_timeline_nonce(key_timeline_parts(ARGV[i])), ARGV[2],
                  ARGV[3])
        else
          pull_changed(key_pull_version(key_pull_list_parts(ARGV[i])),
                       ARGV[2], ARGV[3], ARGV[4])
        end
        done = true break
      end
      if id_lt_n(eid, idn) then done = true break end
    end
    pos = pos + #part
  end
end
return n
