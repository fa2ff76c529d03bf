--[[
  Fanout of a post's delete to a batch of followers
  (ngx_http_feed_timeline_cache_remove): takes the post out of their
  timelines.

  Input:
    KEYS[1...]                the followers' timelines, feed:tl:{user}

    ARGV[1] id                the post's
    ARGV[2] ttl               seconds
    ARGV[3] nonce             a new version for a list that changes
    ARGV[4] version_prefix    feed:tln:{
    ARGV[5] channel           '' for timelines; for a pull author's list
                              (feed:pl:{author}), where the workers hear
                              of its new version

  Output:
    how many timelines had it
]]

-- @include changed
-- @include pull_changed

local id, n = ARGV[1], 0
for i = 1, #KEYS do
  if ARGV[5] ~= '' and redis.call('exists', KEYS[i]) == 0 then
    -- a pull author's list gone (expired, evicted): pages merged from it
    -- may still show the post, their workers must not vouch for them
    pull_forgotten(KEYS[i], ARGV[5])
  end
  local pos, done = 0, false
  while not done do
    local part = redis.call('lrange', KEYS[i], pos, pos + 63)
    if #part == 0 then break end
    for j = 1, #part do
      local eid = string.sub(part[j], 1, 24)
      if eid == id then
        n = n + redis.call('lrem', KEYS[i], 1, part[j])
        if ARGV[5] == '' then
          changed(key(ARGV[4], KEYS[i]), ARGV[2], ARGV[3])
        else
          pull_changed(key(ARGV[4], KEYS[i]), ARGV[2], ARGV[3], ARGV[5])
        end
        done = true break
      end
      if eid < id then done = true break end
    end
    pos = pos + #part
  end
end
return n
