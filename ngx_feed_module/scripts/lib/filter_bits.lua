-- The filter sets of users' timelines, feed:tlf:{user}: each author the
-- user does not see, with the reasons as a bit mask (u: unfollowed, known
-- to the cache only, until the list is made again); each post the user
-- hid, as the field '#' and its id (no user id has a '#'), reason 'h';
-- and the field '' from the timeline's warm on, so that a hash with no
-- author still says it was loaded (lib/filtered.lua reads them).
local FILTER_BITS = {b = 1, m = 2, B = 4, h = 8, u = 16}

-- the field of a filter: the author, or '#' and the hidden post's id
local function filter_field(kind, what)
  if kind == 'h' then return '#' .. what end
  return what
end
