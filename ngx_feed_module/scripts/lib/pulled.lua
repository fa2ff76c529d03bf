-- The version of the pull authors' lists a user merges: their lists' own
-- versions, hashed, in the order SMEMBERS gives them (the same while the
-- set does not change; another order only makes a kept page stale, and
-- versions are never reused, so two states never hash alike), and the
-- authors with their versions, {a1, v1, a2, v2, ...}: a worker keeps them
-- with its copy of the page, and answers the copy on its own word while
-- it has heard of no newer version (ngx_http_feed_timeline_watch.c).
-- The lists are those of a copy: '' on a single Redis (scripts/keys).
-- Returns nil and the authors whose lists are missing when any is: those
-- are loaded from MongoDB before the read goes on.  MGET 1000 keys at a
-- time, as Lua unpacks at most 8000 values.
local function pulled(pull, copy)
  local parts, missing, known = {}, {}, {}
  for i = 1, #pull, 1000 do
    local keys = {}
    for j = i, math.min(i + 999, #pull) do
      keys[#keys + 1] = key_pull_version(copy, pull[j])
    end
    local vs = redis.call('mget', unpack(keys))
    for j = 1, #vs do
      local a = pull[i + j - 1]
      if vs[j] then
        parts[#parts + 1] = vs[j]
        known[#known + 1] = a
        known[#known + 1] = vs[j]
      else
        missing[#missing + 1] = a
      end
    end
  end
  if #missing > 0 then return nil, missing end
  return string.sub(redis.sha1hex(table.concat(parts, ',')), 1, 16), known
end
