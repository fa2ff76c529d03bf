--[[
  Keeps what tells a first page as answered (ngx_http_feed_timeline_cache_page)
  is current, not its bytes, which the workers' copies hold: its version,
  its span (how many of the list's first entries it was made of, skipped
  ones included), the ids of the entries of the span it skipped that are
  being deleted (s), and of the posts it merged from pull authors' lists
  (p), as bytes (lib/ids.lua), so that a read checks the posts it shows
  against the posts being deleted (timeline_read.lua); only if the list (and
  the lists of the pull authors merged into it) did not change since it
  was read: same
  nonce, same head (a delivery of a newer post, the common change, only
  moves the head), and not for an empty timeline (it lives
  feed_cache_empty_ttl, a kept page would outlive it).  The version is
  "nonce:head:token", the token new at each store: two pages made from one
  list can still differ (a post deleted in between), and workers tell
  their copies apart by it.

  Input:
    KEYS[1] pages         feed:tlp:{user}
    KEYS[2] version       the list's nonce, feed:tln:{user}
    KEYS[3] timeline      feed:tl:{user}
    KEYS[4] pull          the pull authors followed, feed:tla:{user}
    KEYS[5] filters       the authors the user does not see, feed:tlf:{user},
                          which lives as long as the version

    ARGV[1] limit         the page's size, in its fields' names in pages
    ARGV[2] ttl           seconds
    ARGV[3] version       the page's version
    ARGV[4] ids           of its posts, in hex, concatenated
    ARGV[5] pull_copy     the copy of the pull authors' lists the reads
                          merge, whose versions are feed:pv<copy>:{author}
                          (timeline_read.lua)
    ARGV[6] deleting      the posts being deleted, feed:deleting (on a
                          cluster, its copy on the user's node)
    ARGV[7] copy          the copy's mark for its node's run, '~<run>'
                          (lib/deleted.lua); '' on a single Redis

  Output:
    1
]]

-- @include keys
-- @include end
-- @include ids
-- @include deleted
-- @include pulled

-- The page's span in the list, the ids of the entries of the span not on
-- the page that are being deleted, and those of its posts not found there
-- (merged from pull authors' lists), as bytes.  The list is newest first:
-- the walk stops at its first entry older than the page's oldest post.
local function span(list, ids)
  local want, left = {}, 0
  for i = 1, #ids, 24 do
    want[id_bin(string.sub(ids, i, i + 23))] = true
    left = left + 1
  end
  if left == 0 then return 0, '', '' end
  local oldest = id_n(id_bin(string.sub(ids, -24)))
  local n, pos, stop, other = 0, 0, false, {}
  while left > 0 and not stop do
    local part = redis.call('lrange', list, pos, pos + 63)
    for i = 1, #part do
      local id = string.sub(part[i], 1, 12)
      if want[id] then
        want[id], left, n = nil, left - 1, pos + i
      elseif id == END or id_lt_n(id, oldest) then
        stop = true break
      else
        other[#other + 1] = id
      end
    end
    if #part < 64 then break end
    pos = pos + #part
  end
  -- the span ends at the page's last post found: entries past it are not
  -- in it
  local skipped = {}
  if #other > 0 and deleting_any(ARGV[6], ARGV[7]) then
    local d = deleted(ARGV[6], ids_hex(other))
    for i = 1, #other do
      if d[i] then skipped[#skipped + 1] = other[i] end
    end
  end
  local pulled = {}
  for i = 1, #ids, 24 do
    local id = id_bin(string.sub(ids, i, i + 23))
    if want[id] then pulled[#pulled + 1] = id end
  end
  return n, table.concat(skipped), table.concat(pulled)
end

local head = redis.call('lindex', KEYS[3], 0) or ''
-- a list written before ids were bytes is made again at the next read
if head == '' or id_old(head) then return 1 end
local nonce = redis.call('get', KEYS[2]) or '0'
local pull = {}
if string.sub(nonce, -1) == 'P' then
  pull = redis.call('smembers', KEYS[4])
end
if #pull > 0 then
  local sig = pulled(pull, ARGV[5])
  if not sig then return 1 end
  nonce = nonce .. '.' .. sig
end
local cur = nonce .. ':' .. id_hex(head) .. ':'
if string.sub(ARGV[3], 1, #cur) == cur
   and string.sub(head, 1, 12) ~= END
then
  local n, skipped, p = span(KEYS[3], ARGV[4])
  -- the version without the list's, which reads know (timeline_read.lua)
  redis.call('hset', KEYS[1],
             'v' .. ARGV[1], string.sub(ARGV[3], #nonce + 2),
             'n' .. ARGV[1], n, 's' .. ARGV[1], skipped, 'p' .. ARGV[1], p)
  -- a list that takes new posts keeps its version (and its mark)
  redis.call('expire', KEYS[2], 2 * tonumber(ARGV[2]))
  redis.call('expire', KEYS[5], 2 * tonumber(ARGV[2]))
  redis.call('expire', KEYS[1], ARGV[2])
end
return 1
