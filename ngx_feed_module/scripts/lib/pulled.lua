-- The version of the pull authors' lists a user merges: their lists' own
-- versions, hashed, in the order SMEMBERS gives them (the same while the
-- set does not change; another order only makes a kept page stale, and
-- versions are never reused, so two states never hash alike).  Returns
-- nil and the authors whose lists are missing when any is: those are
-- loaded from MongoDB before the read goes on.  MGET 1000 keys at a time,
-- as Lua unpacks at most 8000 values.
local function pulled(pull, vprefix)
  local parts, missing = {}, {}
  for i = 1, #pull, 1000 do
    local keys = {}
    for j = i, math.min(i + 999, #pull) do
      keys[#keys + 1] = vprefix .. pull[j] .. '}'
    end
    local vs = redis.call('mget', unpack(keys))
    for j = 1, #vs do
      local a = pull[i + j - 1]
      if vs[j] then
        parts[#parts + 1] = vs[j]
      else
        missing[#missing + 1] = a
      end
    end
  end
  if #missing > 0 then return nil, missing end
  return string.sub(redis.sha1hex(table.concat(parts, ',')), 1, 16)
end
