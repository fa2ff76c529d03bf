-- The filter sets of users' timelines, feed:tlf:{user}: each author the
-- user does not see, with the reasons as a bit mask, and the field ''
-- from the timeline's warm on, so that a hash with no author still says
-- it was loaded (lib/filtered.lua reads them).
local FILTER_BITS = {b = 1, m = 2, B = 4}
