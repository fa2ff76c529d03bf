-- A pull author's list changed (the key "version" is feed:pv:{author}):
-- its version moves forward, and every worker is told on "channel", so
-- that a worker's copies of pages merged from the list stop being current
-- at once (ngx_http_feed_timeline_watch.c).  A version is the server's
-- time in microseconds, 16 digits, past the one it replaces, a dot, then
-- a nonce: a worker that hears of versions out of order keeps the newest.
-- A version of another form (an older module's nonce) is not a floor.
local function pull_changed(version, ttl, nonce, channel)
  local t = redis.call('time')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = redis.call('get', version) or ''
  local o = tonumber(string.match(old, '^(%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d%d)%.'))
  if o and o >= n and o < 9000000000000000 then n = o + 1 end
  local v = string.format('%016d', n) .. '.' .. nonce
  redis.call('set', version, v, 'EX', 2 * tonumber(ttl))
  local _, author = key_pull_version_parts(version)
  redis.call('publish', channel, author .. ' ' .. v)
end

-- A pull author's list is gone (the key "list" is feed:pl:{author}), and
-- whatever the workers knew of its version with it: they forget it.
local function pull_forgotten(list, channel)
  local _, author = key_pull_list_parts(list)
  redis.call('publish', channel, author .. ' -')
end
