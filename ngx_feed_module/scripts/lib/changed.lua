-- A list changed: its version (the key "version") moves, the pages made
-- from it are stale.  Versions are never reused (a nonce of the worker,
-- not a counter that could start over after expiring), and outlive the
-- pages made from them.  A timeline's version ends with a mark that is
-- kept: 'P' when its user follows pull authors, 'N' when not (see
-- timeline_read.lua); on a cluster it begins with the run it was made on,
-- "<run>/", kept too (lib/deleted.lua).
local function changed(version, ttl, nonce)
  local old = redis.call('get', version)
  local mark = old and string.sub(old, -1) or ''
  if mark ~= 'P' and mark ~= 'N' then mark = '' end
  local run = old and string.match(old, '^[^/]*/') or ''
  redis.call('set', version, run .. nonce .. mark, 'EX', 2 * tonumber(ttl))
end
