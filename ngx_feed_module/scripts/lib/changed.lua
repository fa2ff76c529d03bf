-- A list changed: its version (the key "version") moves, the pages made
-- from it are stale.  Versions are never reused (a nonce of the worker,
-- not a counter that could start over after expiring), and outlive the
-- pages made from them.  A timeline's version ends with a mark that is
-- kept: 'P' when its user follows pull authors, 'N' when not (see
-- timeline_read.lua); on a cluster it begins with the run it was made on,
-- "<run>/", kept too (lib/deleted.lua).
--
-- A nonce ends with the time it was made, "seed-count-ms": the time of
-- the list's last change that a stream resuming before it cannot see
-- (ngx_http_feed_stream_read.c).  A post delivered after a newer one
-- (keep) keeps the time of the version before: a resume sends it with the
-- entries newer than its point.
local function changed(version, ttl, nonce, keep)
  local old = redis.call('get', version)
  local mark = old and string.sub(old, -1) or ''
  if mark ~= 'P' and mark ~= 'N' then mark = '' end
  local run = old and string.match(old, '^[^/]*/') or ''
  if keep then
    local was = old and string.match(old, '^[^/]*/?%x+%-%d+(%-%d+)[PN]?$')
    nonce = string.match(nonce, '^%x+%-%d+') .. (was or '')
  end
  redis.call('set', version, run .. nonce .. mark, 'EX', 2 * tonumber(ttl))
end
