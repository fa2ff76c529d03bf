--[[
  A follow changed the user's counts (ngx_http_feed_counts_invalidate):
  they go, and "gen" moves so that no reader puts an older count back.

  Input:
    KEYS[1] counts            feed:cnt:<user>

    ARGV[1] ttl               seconds

  Output:
    1
]]

redis.call('hincrby', KEYS[1], 'gen', 1)
redis.call('hdel', KEYS[1], 'following', 'followers')
redis.call('expire', KEYS[1], ARGV[1])
return 1
