-- The oldest possible id: the tail entry of a timeline that holds the
-- user's whole history; without it, the list was trimmed.  Twelve zero
-- bytes, as ids are in lists (lib/ids.lua).
local END = string.rep('\0', 12)
