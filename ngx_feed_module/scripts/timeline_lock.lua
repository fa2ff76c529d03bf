--[[
  Takes the rebuild lock of a timeline (ngx_http_feed_timeline_cache_lock):
  one rebuild per user across workers and nodes.

  Input:
    KEYS[1] lock              feed:lock:{user}
    KEYS[2] follows_version   feed:tlv:{user}

    ARGV[1] token             the rebuild's own
    ARGV[2] ms                how long the lock holds

  Output:
    {1, follows_version}  the rebuild is ours (none runs; one that just
                          failed, or just answered a partial page, is
                          tried again: a read that did not wait for it
                          gets a page of its own, lib/locked.lua)
    {0}                   another one runs
]]

-- @include locked

if locked(KEYS[1]) ~= 1 then
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, redis.call('get', KEYS[2]) or ''}
end
return {0}
