-- What a rebuild lock, feed:lock:{user}, says (timeline_lock.lua,
-- timeline_unlock.lua): a rebuild's token while it runs; 'failed' for a
-- moment after it failed; LOCK_PARTIAL and "<limit>\n<filters>\n<JSON>"
-- for a moment after it answered a partial page, which the reads that
-- polled for it answer too.  locked(): 0 no lock, 1 a rebuild runs, 2 it
-- failed, 3 its page was partial, and then that page when asked for (a
-- read that polls: no other read carries it).  Its first bytes only are
-- read otherwise: a page is tens of kB.
local LOCK_FAILED, LOCK_PARTIAL = 'failed', 'partial\n'
local function locked(lock, page)
  local l = redis.call('getrange', lock, 0, #LOCK_PARTIAL - 1)
  if l == '' then return 0 end
  if l == LOCK_FAILED then return 2 end
  if l ~= LOCK_PARTIAL then return 1 end
  if not page then return 3 end
  return 3, string.sub(redis.call('get', lock), #LOCK_PARTIAL + 1)
end
