-- The posts a reader saw (POST /users/{uid}/seen), for reads with
-- ?unseen=1: a Bloom filter per generation in plain bit strings (Redis
-- has no Bloom module here).  feed:sn:{user} is a hash: g the current
-- generation (0 or 1), n the ids it took, m<g> and k<g> each generation's
-- bits and hashes (each keeps the sizes it was made with: a change of
-- feed_seen_capacity or feed_seen_error takes effect at the next
-- generation); feed:snb<g>:{user} the bits.  An id's k offsets come from
-- its SHA1 by double hashing, (h1 + i * h2) mod m, and a call reads each
-- filter once for all its ids.  Included where a read needs it, past the
-- kept pages: what it defines costs every call that runs it.

-- Redis's Lua makes every call of a C function cost about as much as a
-- few dozen arithmetic operations: the tests below call as few as they
-- can (a bit is tested by arithmetic, not by the bit library).
local sb, SEEN_MASK = string.byte, {[0] = 128, 64, 32, 16, 8, 4, 2, 1}

-- an id's two hashes, the two 26-bit halves of the first 52 bits of its
-- SHA1 (a filter has fewer than 2^26 bits), once a call
local seen_h1, seen_h2 = {}, {}
local function seen_hash(id)
  local a = seen_h1[id]
  if a then return a, seen_h2[id] end
  local v = tonumber(string.sub(redis.sha1hex(id), 1, 13), 16)
  a = v % 67108864
  seen_h1[id], seen_h2[id] = a, (v - a) / 67108864
  return a, seen_h2[id]
end

-- Whether each of ids has its k bits, (h1 + i h2) mod m, set in the filter
-- key of m bits; 'SET': sets them.  A test reads a filter of up to 64 KB
-- whole (one GET: 12 KB at the default sizes; once a call, for a read
-- that goes on past posts seen) and stops at an id's first bit clear, most
-- often the first or the second: a BITFIELD GET of every bit costs Redis
-- more than the GET of the whole filter.  Larger filters, and sets, are
-- BITFIELD calls of at most 1500 operations (Lua unpacks at most 8000
-- values into one call).
local seen_filters = {}
local function seen_bits(key, ids, m, k, op)
  local r = {}
  if op == 'SET' then seen_filters[key] = nil end
  if op == 'GET' and m <= 524288 then
    local s = seen_filters[key]
    if not s then
      s = redis.call('get', key) or ''
      seen_filters[key] = s
    end
    for j = 1, #ids do
      local h1, h2 = seen_hash(ids[j])
      if h2 % m == 0 then h2 = h2 + 1 end
      local all = true
      for x = 0, k - 1 do
        local off = (h1 + x * h2) % m
        local b = off % 8
        local mask = SEEN_MASK[b]
        if (sb(s, (off - b) / 8 + 1) or 0) % (mask + mask) < mask then
          all = false
          break
        end
      end
      r[j] = all
    end
    return r
  end
  local per = math.max(1, math.floor(1500 / k))
  for i = 1, #ids, per do
    local last, a = math.min(i + per - 1, #ids), {}
    for j = i, last do
      local h1, h2 = seen_hash(ids[j])
      if h2 % m == 0 then h2 = h2 + 1 end
      for x = 0, k - 1 do
        a[#a + 1] = op
        a[#a + 1] = 'u1'
        a[#a + 1] = (h1 + x * h2) % m
        if op == 'SET' then a[#a + 1] = 1 end
      end
    end
    local b = redis.call('bitfield', key, unpack(a))
    if op == 'GET' then
      for j = i, last do
        local all, o = true, (j - i) * k
        for x = 1, k do
          if b[o + x] == 0 then all = false break end
        end
        r[j] = all
      end
    end
  end
  return r
end

-- flags[i]: ids[i] is in a live generation of the reader's filters (seen:
-- their feed:sn key); nothing when the reader has none.  The older
-- generation is asked only about the ids the current one lacks.
local seen_state = {}
local function seen_of(seen, ids)
  local flags = {}
  if #ids == 0 then return flags end
  local f = seen_state[seen]
  if not f then
    f = redis.call('hmget', seen, 'g', 'm0', 'k0', 'm1', 'k1')
    seen_state[seen] = f
  end
  local g = tonumber(f[1])
  if not g then return flags end
  local user = key_seen_parts(seen)
  local want, sub = {}, ids
  for i = 1, #ids do want[i] = i end
  for _, gen in ipairs({g, 1 - g}) do
    local m, k = tonumber(f[2 + 2 * gen]), tonumber(f[3 + 2 * gen])
    if m and k and #sub > 0 then
      local r = seen_bits(key_seen_bits(gen, user), sub, m, k, 'GET')
      local w2, s2 = {}, {}
      for j = 1, #want do
        if r[j] then
          flags[want[j]] = true
        else
          w2[#w2 + 1] = want[j]
          s2[#s2 + 1] = sub[j]
        end
      end
      want, sub = w2, s2
    end
  end
  return flags
end

-- a read with ?unseen=1 leaves out the posts the reader saw as it leaves
-- out deleted ones: dead[i] set for each of them
local function seen_drop(seen, dead, ids)
  local flags = seen_of(seen, ids)
  for i = 1, #ids do
    if flags[i] then dead[i] = true end
  end
end
