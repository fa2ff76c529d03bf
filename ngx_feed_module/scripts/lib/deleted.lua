-- Which of the ids are in the sorted set of posts being deleted, as
-- ZMSCORE answers them (false: not), asked 1000 at a time: Redis's Lua
-- unpacks at most 8000 values into one call ("too many results to
-- unpack"), and a warm checks up to feed_cache_size ids.
local function deleted(set, ids)
  local d = {}
  for i = 1, #ids, 1000 do
    local part = redis.call('zmscore', set,
                            unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #part do d[i + j - 1] = part[j] end
  end
  return d
end
