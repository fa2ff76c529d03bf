--[[
  Fills a cached follow count back after a miss (ngx_http_feed_counts_warm),
  only if no write came since the reader looked ("gen" unchanged); counts
  of an earlier redis-server ("rid") go.

  Input:
    KEYS[1] counts            feed:cnt:<user>

    ARGV[1] field             following or followers
    ARGV[2] value             the count
    ARGV[3] gen               as the reader saw it
    ARGV[4] ttl               seconds
    ARGV[5] run_id            this redis-server's

  Output:
    1, or 0 when a write came meanwhile
]]

local g = redis.call('hget', KEYS[1], 'gen') or ''
if g ~= ARGV[3] then return 0 end
if redis.call('hget', KEYS[1], 'rid') ~= ARGV[5] then
  redis.call('hdel', KEYS[1], 'following', 'followers')
end
redis.call('hset', KEYS[1], ARGV[1], ARGV[2], 'rid', ARGV[5])
redis.call('expire', KEYS[1], ARGV[4])
return 1
