--[[
  Fanout of one post to a batch of followers
  (ngx_http_feed_timeline_cache_deliver).  Delivers into the timelines
  that exist (inactive users get nothing: they are rebuilt on their next
  read), and queues it for those being rebuilt right now; a post deleted
  meanwhile goes nowhere (its delete may be fanned out at the same time).

  The common case is a post newer than the list's head: a push, and the
  kept pages go (a new head tells the page store they are stale, so the
  list's version stays).  The other keys of a follower are only needed
  when the list is missing or changes: their names are made here, from
  the user the timeline's key names (scripts/keys), not sent for each
  follower.

  The post that turns its author to pull (member) also adds the author to
  each follower's pull authors, and makes a rebuild in progress start over
  (even when the post itself was deleted meanwhile):
  once it is delivered to all, the author's next posts go to their own
  list only, and every cached follower merges it.

  The followers' timelines are arguments, not keys: on a Redis Cluster a
  batch is made of followers whose slots have one master, the one the
  first follower's timeline (the only key) routes the call to, and a
  script may reach keys of other slots of its node that it does not
  declare.  A slot that moved meanwhile fails the call ("non local key")
  after the timelines before it got the post: the entry stays pending and
  is delivered again, and a second delivery changes nothing.

  Input:
    KEYS[1] route             the first follower's timeline

    ARGV[1] entry             the id (hex), then the JSON in embed mode:
                              the lists get the id's 12 bytes
                              (lib/ids.lua)
    ARGV[2] cap               feed_cache_size
    ARGV[3] queue_ms          how long a queued entry waits for a rebuild
    ARGV[4] ttl               seconds
    ARGV[5] nonce             a new version for a list that changes
    ARGV[6] member            '', or the author, who turns to pull: each
                              follower adds them to their pull authors
    ARGV[7] deleting          the posts being deleted, feed:deleting (on
                              a cluster, its copy on the batch's node)
    ARGV[8] copy              the copy's mark for its node's run, '~<run>'
                              (lib/deleted.lua); '' on a single Redis
    ARGV[9] live              the live mark of the batch's node,
                              feed:live<copy>: while it is set, some worker
                              streams timelines, and the delivery is told
    ARGV[10] channel          where it is told, feed:tlc<copy>
    ARGV[11] json             the post's JSON in link mode ('' in embed
                              mode, where the entry has it)
    ARGV[12...]               the followers' timelines, feed:tl:{user}

  A follower's other keys: their kept pages feed:tlp:{user}, rebuild lock
  feed:lock:{user} and queue feed:tlq:{user}, list's nonce
  feed:tln:{user}, pull authors feed:tla:{user}, follows' version
  feed:tlv:{user}.

  Told, while the live mark is set: one message per batch on the
  channel, "<user> <user> ...\n<id><JSON>", the users whose timelines got
  the post (pushed, or inserted further down), so that their streams'
  readers send it without reading their timelines (the worker's
  ngx_http_feed_stream_push.c).  Without the mark, nothing is told, and a
  delivery costs what it did before streams.

  Output:
    how many timelines got it
]]

-- @include keys
-- @include ids
-- @include deleted
-- @include insert
-- @include changed

local cap, n = tonumber(ARGV[2]), 0
local id = string.sub(ARGV[1], 1, 24)
local bid = id_bin(id)
local entry, idn = bid .. string.sub(ARGV[1], 25), id_n(bid)
-- the post's seconds, which tell it from most heads at the cost of one
-- number read from each (lib/ids.lua compares all three only when equal)
local sec = idn[1]
local member = ARGV[6]
-- the users told, while the mark is set (one call per batch)
local live = redis.call('exists', ARGV[9]) == 1
local told = {}
if deleting_any(ARGV[7], ARGV[8]) and redis.call('zscore', ARGV[7], id)
then
  if member == '' then return 0 end
  entry = nil
end
for i = 12, #ARGV do
  local tl = ARGV[i]
  local user = key_timeline_parts(tl)
  local head = redis.call('lindex', tl, 0)
  if head and #head ~= 12 and string.byte(head, 13) ~= 123 then
    -- written before ids were bytes: made again at the next read
    drop_old(tl, key_kept_pages(user), ARGV[11] == '')
    head = nil
  end
  if head and member ~= '' and user ~= member then
    -- the author's own timeline gets their posts pushed: not merged; the
    -- version's mark says the user follows pull authors now
    local pull, v = key_pull_authors(user), key_timeline_nonce(user)
    local cur = redis.call('get', v)
    if cur and string.sub(cur, -1) == 'P'
       and redis.call('exists', pull) == 0
    then
      -- the set of pull authors was lost (expired, evicted): one made of
      -- this author alone would hide the others, the list is made again
      redis.call('del', tl, key_kept_pages(user))
      head = nil
    else
      if redis.call('sadd', pull, member) == 1 then
        -- workers answer their copies of pages for the set they were
        -- merged from (timeline_read.lua): those go with the set's change
        redis.call('del', key_kept_pages(user))
      end
      redis.call('expire', pull, 2 * tonumber(ARGV[4]))
      if cur and string.sub(cur, -1) ~= 'P' then
        redis.call('set', v, string.sub(cur, 1, -2) .. 'P', 'KEEPTTL')
      end
    end
  end
  if not head and member ~= ''
     and redis.call('exists', key_rebuild_lock(user)) == 1
  then
    -- a rebuild in progress may have asked for the pull authors before
    -- this one turned: it is not warmed, the next read rebuilds again
    local v = key_follows_version(user)
    redis.call('incr', v)
    redis.call('expire', v, ARGV[4])
  end
  if not entry then
    -- deleted meanwhile: the turn goes on, the post goes nowhere
  elseif head then
    local hsec = struct.unpack('>I4', head)
    if hsec < sec or (hsec == sec and id_lt_n(head, idn)) then
      if redis.call('lpush', tl, entry) > cap then
        redis.call('rpop', tl)
      end
      redis.call('del', key_kept_pages(user))
      n = n + 1
      if live then told[n] = user end
    elseif string.sub(head, 1, 12) ~= bid and insert(tl, entry, cap) == 1
    then
      changed(key_timeline_nonce(user), ARGV[4], ARGV[5], true)
      n = n + 1
      if live then told[n] = user end
    end
  else
    if redis.call('exists', key_rebuild_lock(user)) == 1 then
      local q = key_rebuild_queue(user)
      redis.call('rpush', q, entry)
      redis.call('pexpire', q, ARGV[3])
    end
  end
end
if live and n > 0 then
  local post = ARGV[11] == '' and ARGV[1] or id .. ARGV[11]
  redis.call('publish', ARGV[10], table.concat(told, ' ') .. '\n' .. post)
end
return n
