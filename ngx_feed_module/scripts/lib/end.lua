-- The oldest possible id: the tail entry of a timeline that holds the
-- user's whole history; without it, the list was trimmed.
local END = '000000000000000000000000'
