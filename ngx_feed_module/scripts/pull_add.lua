--[[
  A pull author's post into their recent-posts list
  (ngx_http_feed_pull_store_add), instead of into every follower's
  timeline: in its place, once, within the cap; a post deleted meanwhile
  goes nowhere.  A missing list is not made here: only MongoDB knows the
  posts before this one (pull_warm.lua).

  Input:
    KEYS[1] list              feed:pl:{author}, or on a cluster the copy
                              on one master, feed:pl{tag}:{author}
    KEYS[2] version           feed:pv:{author}, or feed:pv{tag}:{author}
    KEYS[3] deleting          feed:deleting, or its copy, feed:deleting{tag}

    ARGV[1] cap               feed_cache_size
    ARGV[2] ttl               the list lives twice this, from its last post
    ARGV[3] nonce             the list's new version
    ARGV[4] channel           where the workers hear of new versions
    ARGV[5] copy              the copy's mark for its node's run, '~<run>'
                              (lib/deleted.lua); '' on a single Redis
    ARGV[6] entry             the id in hex, then the JSON: the list gets
                              the id's 12 bytes (lib/ids.lua)

  Output:
    1 when it went in, 0 when it was there (or deleted, or older than the
    end of a trimmed list), -1 when there is no list
]]

-- @include keys
-- @include ids
-- @include insert
-- @include deleted
-- @include pull_changed

local head = redis.call('lindex', KEYS[1], 0)
if head and id_old(head) then
  -- written before ids were bytes: loaded again, as a missing one
  redis.call('del', KEYS[1])
  pull_forgotten(KEYS[1], ARGV[4])
  head = nil
end
if not head then
  return -1
end
deleting_any(KEYS[3], ARGV[5])
if redis.call('zscore', KEYS[3], string.sub(ARGV[6], 1, 24)) then
  return 0
end
local n = insert(KEYS[1], id_bin(ARGV[6]) .. string.sub(ARGV[6], 25),
                 tonumber(ARGV[1]))
if n == 1 then
  pull_changed(KEYS[2], ARGV[2], ARGV[3], ARGV[4])
  redis.call('expire', KEYS[1], 2 * tonumber(ARGV[2]))
  return 1
end
return 0
