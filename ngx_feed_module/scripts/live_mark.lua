--[[
  A worker that streams timelines keeps its node's live mark set
  (ngx_http_feed_timeline_live.c): while it is, each delivery to
  timelines is published (timeline_deliver.lua), so that streams are sent
  what was delivered without reading it.  The mark's value is the era it
  was set in: a mark that lapsed (expired, evicted, flushed) and was set
  again has another one, and a worker that sees it change knows that
  deliveries went untold meanwhile.

  Input:
    KEYS[1] live              feed:live<copy>

    ARGV[1] era               a new era, if the mark is not set
    ARGV[2] ms                how long the mark lives

  Output:
    the mark's era
]]

local era = redis.call('get', KEYS[1])
if not era then
  era = ARGV[1]
  redis.call('set', KEYS[1], era, 'PX', ARGV[2])
else
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return era
