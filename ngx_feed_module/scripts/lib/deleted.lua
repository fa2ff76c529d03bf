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
-- feed:deleting itself (mark ''), or on a Redis Cluster the copy of it on
-- this node, whose member mark ('~' and the node's run id, as the worker
-- read it) says it is whole for the data this node serves now.  Without
-- it the copy is not made yet (a new master, a slot moved, a node
-- emptied), or was made for another run: the node came back on older
-- data (its own old file, a replica promoted behind its master), and the
-- copy lacks the deletes made since.  The call fails with NOCOPY rather
-- than miss a delete; the worker makes it, for this run.
local function deleting_any(set, mark)
  if mark == '' then
    return redis.call('zcard', set) > 0
  end
  if not redis.call('zscore', set, mark) then
    error({err = 'NOCOPY ' .. set})
  end
  -- marks of runs before this one count as members: a check more, never
  -- a delete missed
  return redis.call('zcard', set) > 1
end

-- The part of a timeline's version (feed:tln) that names the run it was
-- made on, on a cluster ('' on a single Redis): a list kept from another
-- run may hold posts deleted, or authors unfollowed, since that run's
-- data, and is made again (timeline_read.lua).
local function run_of(mark)
  if mark == '' then return '' end
  return string.sub(mark, 2) .. '/'
end
