-- Read filters (blocks, mutes, hidden posts), as reads apply them: the
-- authors whose posts a user must not see, and the posts the user hid
-- ('#' and the id), are the fields of the hash feed:tlf:{user}
-- (lib/filter_bits.lua).  Lists are not filtered when
-- written: a filter added later, or taken back, takes effect at the next
-- read.  Included where a read needs it, past the kept pages: what it
-- defines costs every call that runs it.

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

-- the post is by an author the user filters out; each author is looked
-- up once a call (a page's posts are by few authors)
local hidden_authors = {}
local function hidden(filters, json)
  local a = author_of(json)
  if a == nil then return false end
  local h = hidden_authors[a]
  if h == nil then
    h = redis.call('hexists', filters, a) == 1
    hidden_authors[a] = h
  end
  return h
end

-- which of the ids the user hid (true at their index), one HMGET of their
-- fields a thousand at a time (Lua unpacks at most 8000 values)
local function hidden_posts(filters, ids)
  local f, h = {}, {}
  for i = 1, #ids do f[i] = '#' .. ids[i] end
  for i = 1, #f, 1000 do
    local part = redis.call('hmget', filters,
                            unpack(f, i, math.min(i + 999, #f)))
    for j = 1, #part do h[i + j - 1] = part[j] ~= false end
  end
  return h
end
