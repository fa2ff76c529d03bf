--[[
  The user's follows changed (ngx_http_feed_timeline_cache_drop): the
  cache goes, and a rebuild that began before is not warmed.  The posts
  fanout queued for that rebuild go too: they were delivered for the
  follows of before, and a later rebuild would merge them (the rebuild
  reads them from MongoDB if they are still to be seen).

  Input:
    KEYS[1] timeline          feed:tl:{user}
    KEYS[2] follows_version   feed:tlv:{user}
    KEYS[3] pages             feed:tlp:{user}
    KEYS[4] pull              the pull authors followed, feed:tla:{user}
    KEYS[5] queue             posts delivered during a rebuild,
                              feed:tlq:{user}

    ARGV[1] ttl               seconds the follows version lives

  Output:
    1
]]

redis.call('del', KEYS[1], KEYS[3], KEYS[4], KEYS[5])
redis.call('incr', KEYS[2])
redis.call('expire', KEYS[2], ARGV[1])
return 1
