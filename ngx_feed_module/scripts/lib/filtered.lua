-- Read filters (blocks and mutes): the authors whose posts a user must
-- not see are the fields of the hash feed:tlf:{user}, each with its
-- reasons as a bit mask; the field '' is there from the timeline's warm
-- on, so that a hash with no author still says it was loaded.  Lists are
-- not filtered when written: a filter added later, or taken back, takes
-- effect at the next read.
local FILTER_BITS = {b = 1, m = 2, B = 4}

-- The author of a post's JSON: right after the id, where the module puts
-- it, else wherever a fallback application put it (decoded only then).
local function author_of(json)
  local a = string.match(json, '^{%s*"id"%s*:%s*"%x+"%s*,%s*"author"%s*:'
                               .. '%s*"([^"\\]*)"')
  if a then return a end
  local ok, p = pcall(cjson.decode, json)
  if ok and type(p) == 'table' and type(p.author) == 'string' then
    return p.author
  end
  return nil
end

-- the post is by an author the user filters out
local function hidden(filters, json)
  local a = author_of(json)
  return a ~= nil and redis.call('hexists', filters, a) == 1
end
