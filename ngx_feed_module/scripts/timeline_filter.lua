--[[
  A read filter of a user changed (ngx_http_feed_timeline_cache_filter):
  the author gains or loses reasons to be hidden from the user's timeline
  (lib/filtered.lua), and is hidden while any reason remains; or a post
  the user hid is hidden, or shown again.  An unfollow is the reason 'u',
  kept in the cache only: the list made again has none of the author's
  posts.  It moves the versions even when the bit was set already: a
  follow since (which drops the list but not the hash) left it there, and
  a rebuild that began after that follow must not be cached.
  The kept pages and workers' copies were made with the old filters: the
  list's version moves.  A rebuild that began before loaded the old
  filters from MongoDB: the follows version moves too, so it is answered
  but not cached.  When the hash is not there, the next rebuild loads the
  filters from MongoDB, where the change already is.

  Input:
    KEYS[1] filters           feed:tlf:{user}
    KEYS[2] follows_version   feed:tlv:{user}
    KEYS[3] pages             feed:tlp:{user}
    KEYS[4] version           the list's nonce, feed:tln:{user}
    KEYS[5] queue             posts delivered during a rebuild,
                              feed:tlq:{user}: dropped by an unfollow, as
                              timeline_drop.lua does (the next rebuild
                              reads MongoDB without the author)

    ARGV[1] author            whose posts, or the post's id for kind 'h'
    ARGV[2] kind              'b' blocked, 'm' muted, 'B' blocked the user,
                              'u' unfollowed, 'h' the user hid the post; or
                              two of the first four, changed together
    ARGV[3] add               '1' to add the reason, '0' to take it back
    ARGV[4] ttl               seconds the follows version lives
    ARGV[5] nonce             the list's new version

  Output:
    1, or 0 when the filters were already so
]]

-- @include filter_bits
-- @include changed

local f, bitv = KEYS[1], 0
for k in string.gmatch(ARGV[2], '.') do
  local b = FILTER_BITS[k]
  if not b or (k == 'h' and #ARGV[2] > 1) then
    return redis.error_reply('unknown filter kind')
  end
  bitv = bit.bor(bitv, b)
end
if bitv == 0 then return redis.error_reply('unknown filter kind') end
local unfollow = bit.band(bitv, FILTER_BITS.u) ~= 0
local field = filter_field(ARGV[2], ARGV[1])
if redis.call('exists', f) == 1 then
  local old = tonumber(redis.call('hget', f, field) or '0')
  local new = ARGV[3] == '1' and bit.bor(old, bitv)
              or bit.band(old, bit.bnot(bitv))
  -- the same filters (a PUT or DELETE repeated): nothing is stale
  if new == old and not unfollow then return 0 end
  if new == 0 then
    redis.call('hdel', f, field)
  else
    redis.call('hset', f, field, new)
  end
end
redis.call('incr', KEYS[2])
redis.call('expire', KEYS[2], ARGV[4])
if redis.call('exists', KEYS[4]) == 1 then
  changed(KEYS[4], ARGV[4], ARGV[5])
  redis.call('expire', f, 2 * tonumber(ARGV[4]))
end
redis.call('del', KEYS[3])
if unfollow then redis.call('del', KEYS[5]) end
return 1
