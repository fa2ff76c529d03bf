-- Puts an entry in its place, newest first: once (an entry already there
-- is left alone, so a redelivered post leaves one copy), within the cap,
-- and nowhere if it is older than the end of a trimmed list.  Returns 1
-- when it went in, 2 when it was there, 0 when it is too old.  The entry
-- begins with the id's 12 bytes (lib/ids.lua).
local function insert(tl, entry, cap)
  local id = string.sub(entry, 1, 12)
  local n = id_n(id)
  local pos = 0
  while true do
    local part = redis.call('lrange', tl, pos, pos + 63)
    if #part == 0 then return 0 end
    for i = 1, #part do
      local eid = string.sub(part[i], 1, 12)
      if eid == id then return 2 end
      if id_lt_n(eid, n) then
        if pos + i == 1 then
          redis.call('lpush', tl, entry)
        else
          redis.call('linsert', tl, 'BEFORE', part[i], entry)
        end
        redis.call('ltrim', tl, 0, cap - 1)
        return 1
      end
    end
    pos = pos + #part
  end
end
