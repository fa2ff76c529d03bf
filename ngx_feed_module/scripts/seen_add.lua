--[[
  Adds the posts a reader saw to their Bloom filters (lib/seen.lua), all
  or none: one call for the whole request (ngx_http_feed_seen_add).  An id
  the current generation already holds is not added again, so that a
  client sending the same ids twice does not fill it.  When the current
  generation has taken capacity ids, the next one starts: the generation
  before it, older, is dropped, so that at most two live and memory stays
  at most twice one filter's.  A reader who sends nothing for ttl seconds
  loses the filters.

  Input:
    KEYS[1] seen          feed:sn:{user}

    ARGV[1] capacity      ids a generation takes, feed_seen_capacity
    ARGV[2] m             bits of a new generation
    ARGV[3] k             hashes of a new generation
    ARGV[4] ttl           seconds
    ARGV[5...] ids        the posts, 24 hex digits each

  Output:
    {generation, ids it holds}
]]

-- @include keys
-- @include seen

local seen, cap = KEYS[1], tonumber(ARGV[1])
local user = key_seen_parts(seen)
local s = redis.call('hmget', seen, 'g', 'n', 'm0', 'k0', 'm1', 'k1', 'h0',
                     'h1')
local g, n = tonumber(s[1]), tonumber(s[2]) or 0

-- a generation made with the sizes configured now, and the hash scheme of
-- this version (lib/seen.lua)
local function start(gen)
  redis.call('del', key_seen_bits(gen, user))
  redis.call('hset', seen, 'g', gen, 'n', 0, 'm' .. gen, ARGV[2],
             'k' .. gen, ARGV[3], 'h' .. gen, SEEN_SCHEME)
  s[3 + 2 * gen], s[4 + 2 * gen], s[7 + gen] = ARGV[2], ARGV[3], SEEN_SCHEME
end

if not g or not tonumber(s[3 + 2 * g]) then
  -- none yet, or a state lost in part (evicted): made again
  redis.call('del', seen, key_seen_bits(0, user), key_seen_bits(1, user))
  s = {}
  g, n = 0, 0
  start(0)
end

-- the request's ids once each, those the current generation lacks
local ids, once = {}, {}
for i = 5, #ARGV do
  if not once[ARGV[i]] then
    once[ARGV[i]] = true
    ids[#ids + 1] = ARGV[i]
  end
end

-- a generation's bits, hashes and hash scheme: one made before schemes
-- were recorded goes on with the SHA1 it was made with, until it rotates
-- out
local function gen_size(gen)
  return tonumber(s[3 + 2 * gen]), tonumber(s[4 + 2 * gen]),
         s[7 + gen] or '1'
end

-- an id the current generation holds (or seems to: a false positive,
-- seen from then on as long as that generation lives) is not taken
-- again; past a rotation within the call, the new generation takes all
-- the rest: an id tested against the older one would live a generation
-- less than it should.  A generation full when the call begins is not
-- asked at all, for the same reason: the first id starts the next one,
-- and an id it seemed to hold would go with it at the rotation after.
local m, k, h = gen_size(g)
local has = {}
if n < cap then
  has = seen_bits(key_seen_bits(g, user), ids, m, k, 'GET', h)
end
local add, rotated = {}, false
for i = 1, #ids do
  if rotated or not has[i] then
    -- at or past capacity: feed_seen_capacity may have been lowered
    -- since this generation began
    if n >= cap then
      seen_bits(key_seen_bits(g, user), add, m, k, 'SET', h)
      add, g, n, rotated = {}, 1 - g, 0, true
      start(g)
      m, k, h = gen_size(g)
    end
    add[#add + 1] = ids[i]
    n = n + 1
  end
end
seen_bits(key_seen_bits(g, user), add, m, k, 'SET', h)
redis.call('hset', seen, 'g', g, 'n', n)

for _, key in ipairs({seen, key_seen_bits(0, user),
                      key_seen_bits(1, user)}) do
  redis.call('expire', key, ARGV[4])
end
return {g, n}
