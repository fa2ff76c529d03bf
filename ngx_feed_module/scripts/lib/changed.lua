-- Another key of a timeline's user, made from the timeline's own key: the
-- part from the hash tag on ("user}") after another prefix (its "{").
local function key(prefix, tl)
  return prefix .. string.sub(tl, string.find(tl, '{', 1, true) + 1)
end

-- A list changed: its version (the key "version") moves, the pages made
-- from it are stale.  Versions are never reused (a nonce of the worker,
-- not a counter that could start over after expiring), and outlive the
-- pages made from them.
local function changed(version, ttl, nonce)
  redis.call('set', version, nonce, 'EX', 2 * tonumber(ttl))
end
