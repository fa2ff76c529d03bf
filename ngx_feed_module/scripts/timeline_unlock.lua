--[[
  Releases a rebuild lock (ngx_http_feed_timeline_cache_unlock).  Only a
  lock that is still ours goes (or says that our rebuild failed): one that
  expired meanwhile may be another rebuild's now.

  Input:
    KEYS[1] lock          feed:lock:{user}

    ARGV[1] token         the rebuild's own
    ARGV[2] failed        '1': the lock says 'failed' for a second

  Output:
    1
]]

if redis.call('get', KEYS[1]) == ARGV[1] then
  if ARGV[2] == '1' then
    redis.call('set', KEYS[1], 'failed', 'PX', 1000)
  else
    redis.call('del', KEYS[1])
  end
end
return 1
