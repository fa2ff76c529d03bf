-- Post ids in lists are the ObjectId's 12 bytes, not its 24 hex digits
-- (half the bytes of an entry); the worker sends and reads hex.  Bytes
-- are compared for order by their numbers, never with Lua's "<": Redis's
-- Lua compares strings with strcoll(), in redis-server's locale, which
-- orders bytes otherwise than memcmp() does under most locales but C.
-- the END entry's id (lib/end.lua) in hex
local END_HEX = '000000000000000000000000'

local function id_bin(hex)
  return struct.pack('>I4I4I4', tonumber(string.sub(hex, 1, 8), 16),
                     tonumber(string.sub(hex, 9, 16), 16),
                     tonumber(string.sub(hex, 17, 24), 16))
end

local function id_hex(bin)
  return string.format('%08x%08x%08x', struct.unpack('>I4I4I4', bin))
end

-- an id's three numbers, compared by id_lt_n
local function id_n(bin)
  return {struct.unpack('>I4I4I4', bin)}
end

-- whether the id "a" (bytes) is older than the one whose numbers are n
local function id_lt_n(a, n)
  local a1, a2, a3 = struct.unpack('>I4I4I4', a)
  if a1 ~= n[1] then return a1 < n[1] end
  if a2 ~= n[2] then return a2 < n[2] end
  return a3 < n[3]
end

-- an entry written by a version before ids were bytes: 24 hex digits,
-- then the JSON in embed mode ("{" follows the 12 bytes of an entry now)
local function id_old(entry)
  return #entry ~= 12 and string.byte(entry, 13) ~= 123
end

-- the ids, as hex
local function ids_hex(ids)
  local h = {}
  for i = 1, #ids do h[i] = id_hex(ids[i]) end
  return h
end

-- A list written by a version before ids were bytes goes, with its kept
-- pages, and in link mode the posts' copies it names (feed:p:<hex>: no
-- list of this version names them), a thousand at a time as Lua unpacks
-- at most 8000 values.  The next read makes the list again.
local function drop_old(list, pages, embed)
  if not embed then
    local keys = {}
    for _, e in ipairs(redis.call('lrange', list, 0, -1)) do
      if #e == 24 and e ~= END_HEX then
        keys[#keys + 1] = key_post_json(e)
      end
    end
    for i = 1, #keys, 1000 do
      redis.call('unlink', unpack(keys, i, math.min(i + 999, #keys)))
    end
  end
  redis.call('del', list, pages)
end
