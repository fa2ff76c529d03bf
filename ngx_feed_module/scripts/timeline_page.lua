--[[
  Keeps a first page as answered (ngx_http_feed_timeline_cache_page), with
  its version and its posts' ids, only if the list (and the lists of the
  pull authors merged into it) did not change since it was read: same
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

    ARGV[1] limit         the page's size, its field in pages
    ARGV[2] page          "version\nnext\nJSON"
    ARGV[3] ttl           seconds
    ARGV[4] version       the page's version
    ARGV[5] ids           of its posts, concatenated
    ARGV[6] pull_copy     the copy of the pull authors' lists the reads
                          merge, whose versions are feed:pv<copy>:{author}
                          (timeline_read.lua)

  Output:
    1
]]

-- @include keys
-- @include end
-- @include ids
-- @include pulled

local head = redis.call('lindex', KEYS[3], 0) or ''
-- a list written before ids were bytes is made again at the next read
if head == '' or id_old(head) then return 1 end
local nonce = redis.call('get', KEYS[2]) or '0'
local pull = {}
if string.sub(nonce, -1) == 'P' then
  pull = redis.call('smembers', KEYS[4])
end
if #pull > 0 then
  local sig = pulled(pull, ARGV[6])
  if not sig then return 1 end
  nonce = nonce .. '.' .. sig
end
local cur = nonce .. ':' .. id_hex(head) .. ':'
if string.sub(ARGV[4], 1, #cur) == cur
   and string.sub(head, 1, 12) ~= END
then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[2],
             'v' .. ARGV[1], ARGV[4], 'i' .. ARGV[1], ARGV[5])
  -- a list that takes new posts keeps its version (and its mark)
  redis.call('expire', KEYS[2], 2 * tonumber(ARGV[3]))
  redis.call('expire', KEYS[5], 2 * tonumber(ARGV[3]))
  redis.call('expire', KEYS[1], ARGV[3])
end
return 1
