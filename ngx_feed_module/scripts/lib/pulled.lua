-- The version of the pull authors' lists a user merges (the members of
-- the set "pull"): each author with their list's own version, in a stable
-- order, hashed.  Returns nil and the authors whose lists are missing
-- when any is: those are loaded from MongoDB before the read goes on.
-- MGET 1000 keys at a time, as Lua unpacks at most 8000 values.
local function pulled(pull, vprefix)
  table.sort(pull)
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
        parts[#parts + 1] = a .. '=' .. vs[j]
      else
        missing[#missing + 1] = a
      end
    end
  end
  if #missing > 0 then return nil, missing end
  return string.sub(redis.sha1hex(table.concat(parts, ',')), 1, 16)
end
