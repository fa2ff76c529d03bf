-- The unread count kept in the kept pages' hash, field u, "<lv> <count>"
-- (lib/unread.lua), if it is for the list of version lv (with its pull
-- authors' lists' versions): the list keeps its version or the hash goes
-- (a push), and every change of the marker's copy drops the field
-- (scripts/marker_set.lua, marker_drop.lua).  The count "<n>" or "<n>+",
-- '-' for a user without a marker, '?' when its copy is not in Redis;
-- nil when not kept, or when a post it counted is being deleted (its
-- entries are still in lists: the posts counted are kept with it, ui, and
-- checked as a kept page's are).  Cheap: the hot path runs it.
local function unread_kept(u, lv)
  if not u or string.sub(u, 1, #lv + 1) ~= lv .. ' ' then return nil end
  local c = string.sub(u, #lv + 2)
  if deleting and c ~= '-' and c ~= '?' then
    local s, ids = redis.call('hget', KEYS[3], 'ui') or '*', {}
    if s == '*' then return nil end
    for i = 1, #s, 24 do ids[#ids + 1] = string.sub(s, i, i + 23) end
    if #ids > 0 then
      local d = deleted(ARGV[9], ids)
      for i = 1, #ids do if d[i] then return nil end end
    end
  end
  return c
end
