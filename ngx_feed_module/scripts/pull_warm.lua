--[[
  A pull author's recent-posts list made from MongoDB's newest posts
  (ngx_http_feed_pull_store_warm), when it is missing: after a Redis
  restart, after it expired, or when the author turns to pull.  When
  another worker made it meanwhile, it is left as it is.

  Input:
    KEYS[1] list              feed:pl:{author}, or on a cluster the copy
                              on one master, feed:pl{tag}:{author}
    KEYS[2] version           feed:pv:{author}, or feed:pv{tag}:{author}
    KEYS[3] deleting          feed:deleting, or its copy, feed:deleting{tag}

    ARGV[1] cap               feed_cache_size
    ARGV[2] ttl               the list lives twice this
    ARGV[3] nonce             the list's new version
    ARGV[4] channel           where the workers hear of new versions
    ARGV[5] complete          '1': the posts are the author's whole history
    ARGV[6] copy              the copy's mark for its node's run, '~<run>'
                              (lib/deleted.lua); '' on a single Redis
    ARGV[7...]                entries (id in hex, then JSON), newest
                              first: the list gets the id's 12 bytes
                              (lib/ids.lua)

  Output:
    1, or 0 when nothing could be made (every post was being deleted)
]]

-- @include keys
-- @include end
-- @include ids
-- @include deleted
-- @include pull_changed

local list, cap = KEYS[1], tonumber(ARGV[1])
if redis.call('exists', list) == 1 then
  -- made meanwhile by another load: the posts since are in it, each put
  -- there by its own fanout
  return 1
end
local ids, dead, entries = {}, {}, {}
for i = 7, #ARGV do ids[#ids + 1] = string.sub(ARGV[i], 1, 24) end
if deleting_any(KEYS[3], ARGV[6]) and #ids > 0 then
  dead = deleted(KEYS[3], ids)
end
for j = 1, #ids do
  if not dead[j] then
    entries[#entries + 1] = id_bin(ids[j]) .. string.sub(ARGV[6 + j], 25)
  end
end
if ARGV[5] == '1' then entries[#entries + 1] = END end
if #entries == 0 then return 0 end
for i = 1, #entries, 1000 do
  redis.call('rpush', list, unpack(entries, i, math.min(i + 999, #entries)))
end
redis.call('ltrim', list, 0, cap - 1)
pull_changed(KEYS[2], ARGV[2], ARGV[3], ARGV[4])
redis.call('expire', list, 2 * tonumber(ARGV[2]))
return 1
