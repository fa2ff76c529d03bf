--[[
  Which of the ids a reader saw (lib/seen.lua): the posts a page made
  from the fallback (past the end of a trimmed cache, a rebuild that
  could not be cached) leaves out for a read with ?unseen=1, all checked
  in one call (ngx_http_feed_seen_check).

  Input:
    KEYS[1] seen          feed:sn:{user}

    ARGV[1...] ids        the posts, 24 hex digits each

  Output:
    a string of one character per id: '1' seen, '0' not
]]

-- @include keys
-- @include seen

local flags = seen_of(KEYS[1], ARGV)
local out = {}
for i = 1, #ARGV do out[i] = flags[i] and '1' or '0' end
return table.concat(out)
