--[[
  The user's follows changed (ngx_http_feed_timeline_cache_drop): the
  cache goes, and a rebuild that began before is not warmed.

  Input:
    KEYS[1] timeline          feed:tl:{user}
    KEYS[2] follows_version   feed:tlv:{user}
    KEYS[3] pages             feed:tlp:{user}
    KEYS[4] pull              the pull authors followed, feed:tla:{user}

    ARGV[1] ttl               seconds the follows version lives

  Output:
    1
]]

redis.call('del', KEYS[1], KEYS[3], KEYS[4])
redis.call('incr', KEYS[2])
redis.call('expire', KEYS[2], ARGV[1])
return 1
