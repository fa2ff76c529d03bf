--[[
  Creates a timeline in one step (ngx_http_feed_timeline_cache_warm),
  unless someone else did already or the user's follows changed since the
  rebuild began (the follows version moved: 0 is returned), then puts in
  the posts fanout queued meanwhile, and releases the rebuild lock if it
  is still ours.

  Input:
    KEYS[1] timeline          feed:tl:{user}
    KEYS[2] lock              feed:lock:{user}
    KEYS[3] follows_version   feed:tlv:{user}
    KEYS[4] queue             posts delivered meanwhile, feed:tlq:{user}
    KEYS[5] version           the list's nonce, feed:tln:{user}
    KEYS[6] pull              the pull authors followed, feed:tla:{user}
                              (the version's mark says whether there are)
    KEYS[7] filters           the authors the user does not see,
                              feed:tlf:{user} (lib/filtered.lua)

    ARGV[1] ttl               seconds
    ARGV[2] cap               feed_cache_size
    ARGV[3] mode              'e': the JSON goes in the entry, else in
                              the post's key (link mode), feed:p:<id>
    ARGV[4] complete          '1': the posts are the user's whole history
    ARGV[5] follows_version   as the lock found it
    ARGV[6] nonce             the list's new version
    ARGV[7] token             the rebuild's lock token
    ARGV[8] pull              the pull authors the user follows, as the
                              rebuild found them before asking for the
                              posts, separated by spaces
    ARGV[9] deleting          the posts being deleted, feed:deleting (on
                              a cluster, its copy on the user's node)
    ARGV[10] copy             the copy's mark for its node's run, '~<run>'
                              (lib/deleted.lua); '' on a single Redis
    ARGV[11] filters          as the rebuild found them before asking for
                              the posts: "<kind><author>" separated by
                              spaces, kind b, m or B, and "h<post id>"
                              for a hidden post (lib/filtered.lua)
    ARGV[12...]               id, JSON pairs, newest first: the ids in
                              hex, the list gets their 12 bytes
                              (lib/ids.lua)

  Output:
    1, or 0 when the follows changed
]]

-- @include keys
-- @include end
-- @include ids
-- @include deleted
-- @include insert
-- @include changed
-- @include filter_bits

local tl, cap = KEYS[1], tonumber(ARGV[2])
local function unlock()
  if redis.call('get', KEYS[2]) == ARGV[7] then
    redis.call('del', KEYS[2])
  end
end
if (redis.call('get', KEYS[3]) or '') ~= ARGV[5] then
  -- the follows changed: what fanout queued for this rebuild was for the
  -- follows of before, and the next rebuild must not merge it
  unlock()
  redis.call('del', KEYS[4])
  return 0
end
if redis.call('exists', tl) == 0 then
  local ids, entries, dead = {}, {}, {}
  for i = 12, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
  if #ids > 0 and deleting_any(ARGV[9], ARGV[10]) then
    dead = deleted(ARGV[9], ids)
  end
  for j = 1, #ids do
    local i = 10 + 2 * j
    if not dead[j] then
      local bid = id_bin(ARGV[i])
      if ARGV[3] == 'e' then
        entries[#entries + 1] = bid .. ARGV[i + 1]
      else
        entries[#entries + 1] = bid
        redis.call('set', key_post_json(bid), ARGV[i + 1],
                   'EX', 2 * tonumber(ARGV[1]))
      end
    end
  end
  if ARGV[4] == '1' then
    entries[#entries + 1] = END
  end
  for i = 1, #entries, 1000 do
    redis.call('rpush', tl,
               unpack(entries, i, math.min(i + 999, #entries)))
  end
  redis.call('del', KEYS[6])
  for a in string.gmatch(ARGV[8], '%S+') do
    redis.call('sadd', KEYS[6], a)
  end
  if #entries > 0 then
    redis.call('ltrim', tl, 0, cap - 1)
    for _, e in ipairs(redis.call('lrange', KEYS[4], 0, -1)) do
      -- queued by a version before ids were bytes
      if id_old(e) then
        e = id_bin(string.sub(e, 1, 24)) .. string.sub(e, 25)
      end
      insert(tl, e, cap)
    end
    redis.call('expire', tl, ARGV[1])
    redis.call('set', KEYS[5], run_of(ARGV[10]) .. ARGV[6]
                               .. (ARGV[8] == '' and 'N' or 'P'),
               'EX', 2 * tonumber(ARGV[1]))
  end
  redis.call('expire', KEYS[6], 2 * tonumber(ARGV[1]))
  local masks = {}
  for k, a in string.gmatch(ARGV[11], '(%S)(%S+)') do
    a = filter_field(k, a)
    masks[a] = bit.bor(masks[a] or 0, FILTER_BITS[k] or 0)
  end
  local fields = {'', 1}
  for a, m in pairs(masks) do
    if m ~= 0 then fields[#fields + 1] = a fields[#fields + 1] = m end
  end
  redis.call('del', KEYS[7])
  for i = 1, #fields, 1000 do
    redis.call('hset', KEYS[7],
               unpack(fields, i, math.min(i + 999, #fields)))
  end
  redis.call('expire', KEYS[7], 2 * tonumber(ARGV[1]))
end
unlock()
redis.call('del', KEYS[4])
return 1
