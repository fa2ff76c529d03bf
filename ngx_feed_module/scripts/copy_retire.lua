--[[
  The copies of a hash tag that is no master's any more, on a Redis
  Cluster (ngx_http_feed_timeline_cache_retire): the worker that saw the
  tag go writes no delete and no pull author's post to them from now on,
  so they may lack some before the tag names a master's copies again.
  They go: the copy of the posts being deleted, and every copy of a pull
  author's list and its version under the tag, found among the keys of
  the tag's slot, wherever that slot is now.  A copy that is needed again
  is made anew: the first from feed:deleting (NOCOPY), the lists from
  MongoDB, as missing ones are.  The workers that watch the lists forget
  their versions.

  Input:
    KEYS[1] deleting          the copy of the posts being deleted,
                              feed:deleting{tag}

    ARGV[1] channel           where the workers hear of the lists'
                              versions, feed:pvc{tag}

  Output:
    the number of keys deleted
]]

-- @include keys
-- @include pull_changed

local n = redis.call('del', KEYS[1])
local copy = key_deleting_parts(KEYS[1])
local slot = redis.call('cluster', 'keyslot', KEYS[1])
local count = redis.call('cluster', 'countkeysinslot', slot)
if count == 0 then return n end
local keys = redis.call('cluster', 'getkeysinslot', slot, count)
for _, k in ipairs(keys) do
  -- the lists of the copy, feed:pl{tag}:{author}, and their versions
  if key_pull_list_parts(k) == copy then
    n = n + redis.call('del', k)
    pull_forgotten(k, ARGV[1])
  elseif key_pull_version_parts(k) == copy then
    n = n + redis.call('del', k)
  end
end
return n
