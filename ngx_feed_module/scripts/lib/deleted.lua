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

-- Whether any post is being deleted, in the set of them that ARGV names:
-- feed:deleting itself, or on a Redis Cluster (copy '1') the copy of it
-- on this node, whose member '~' (no id) says it is whole: without it the
-- copy is not made yet (a new master, a slot moved), and the call fails
-- with NOCOPY rather than miss a delete; the worker makes it.
local function deleting_any(set, copy)
  if copy ~= '1' then
    return redis.call('zcard', set) > 0
  end
  if not redis.call('zscore', set, '~') then
    error({err = 'NOCOPY ' .. set})
  end
  return redis.call('zcard', set) > 1
end
