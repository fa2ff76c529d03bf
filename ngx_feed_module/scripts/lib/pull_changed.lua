-- A pull author's list changed (the key "version" is feed:pv:{author}):
-- its version moves forward, and every worker is told on "channel", so
-- that a worker's copies of pages merged from the list stop being current
-- at once (ngx_http_feed_timeline_watch.c).  A version is the server's
-- time in microseconds, 16 digits, past the one it replaces, then a nonce:
-- a worker that hears of versions out of order keeps the newest.
local function pull_changed(version, ttl, nonce, channel)
  local t = redis.call('time')
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = tonumber(string.sub(redis.call('get', version) or '', 1, 16))
  if old and old >= n then n = old + 1 end
  local v = string.format('%016d', n) .. nonce
  redis.call('set', version, v, 'EX', 2 * tonumber(ttl))
  redis.call('publish', channel,
             string.match(version, '{([^}]*)}$') .. ' ' .. v)
end
