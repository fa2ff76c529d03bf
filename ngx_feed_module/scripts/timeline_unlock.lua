--[[
  Releases a rebuild lock (ngx_http_feed_timeline_cache_unlock).  Only a
  lock that is still ours goes (or says how our rebuild ended): one that
  expired meanwhile may be another rebuild's now.  What it says is for
  the reads that polled for the rebuild (lib/locked.lua), which would
  each rebuild in turn otherwise; a read that did not takes the lock.

  Input:
    KEYS[1] lock          feed:lock:{user}

    ARGV[1] token         the rebuild's own
    ARGV[2] ending        '': the lock goes; 'failed': it says so;
                          'partial': it holds the partial page answered
    ARGV[3] ms            how long it says 'failed' or holds the page
    ARGV[4] limit         of a partial page: the posts the rebuild asked
                          the fallback for
    ARGV[5] filters       of a partial page: the filters it applied, as
                          timeline_warm.lua's ARGV[11]
    ARGV[6] page          of a partial page: the fallback's answer, its
                          JSON compact

  Output:
    1
]]

-- @include locked

-- Redis out of memory refuses the SET (a DEL it allows): the lock goes
-- then, so that the next reads rebuild rather than wait for a rebuild
-- that is over until the lock expires (feed_cache_lock_timeout)
if redis.call('get', KEYS[1]) == ARGV[1] then
  local said
  if ARGV[2] == 'failed' then
    said = redis.pcall('set', KEYS[1], LOCK_FAILED, 'PX', ARGV[3])
  elseif ARGV[2] == 'partial' then
    said = redis.pcall('set', KEYS[1], LOCK_PARTIAL .. ARGV[4] .. '\n'
                                       .. ARGV[5] .. '\n' .. ARGV[6],
                       'PX', ARGV[3])
  end
  if not said or said.err then
    redis.call('del', KEYS[1])
  end
end
return 1
