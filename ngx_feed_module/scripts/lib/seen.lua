-- The posts a reader saw (POST /users/{uid}/seen), for reads with
-- ?unseen=1: a Bloom filter per generation in plain bit strings (Redis
-- has no Bloom module here).  feed:sn:{user} is a hash: g the current
-- generation (0 or 1), n the ids it took, m<g> and k<g> each generation's
-- bits and hashes, h<g> its hash scheme (each keeps the sizes and the
-- scheme it was made with: a change of feed_seen_capacity or
-- feed_seen_error takes effect at the next generation);
-- feed:snb<g>:{user} the bits.  An id's k offsets come from two hashes of
-- it by double hashing, (h1 + i * h2) mod m, and a call reads each
-- filter once for all its ids.  Included where a read needs it, past the
-- kept pages: what it defines costs every call that runs it.

-- Redis's Lua makes every call of a C function cost about as much as a
-- few dozen arithmetic operations, and every string it makes cost a pass
-- over its bytes (Redis's Lua hashes all of them): the tests below call
-- as few as they can, and make no string per id.
local sb = string.byte

-- The hash scheme of the generations made from now on.  A generation
-- without h<g> was made before schemes were recorded, with the SHA1 of
-- the id: it keeps being tested with it until it rotates out, so that a
-- post seen before an upgrade stays seen.
local SEEN_SCHEME = '2'

-- scheme 1: the two 26-bit halves of the first 52 bits of the id's SHA1
-- (a filter has fewer than 2^26 bits), once a call (an id may be tested
-- against both generations): about 1.3 µs an id, its cache included
local seen_s1, seen_s2 = {}, {}
local function seen_hash1(id)
  local a = seen_s1[id]
  if a then return a, seen_s2[id] end
  local v = tonumber(string.sub(redis.sha1hex(id), 1, 13), 16)
  a = v % 67108864
  seen_s1[id], seen_s2[id] = a, (v - a) / 67108864
  return a, seen_s2[id]
end

-- scheme 2: arithmetic on the id's 24 characters, read as four 48-bit
-- numbers by one C call: about 0.5 µs an id, less than a lookup in a
-- cache would save.  Ids are not random (seconds, millisecond and
-- sequence, then bytes constant per node), so each hash is a polynomial
-- of the four words mod a prime (the two in opposite orders), squared:
-- ids a counter step apart land apart.  P is no neighbour of a power of
-- two, or 256^4 mod P would be small and ids that differ in two digits
-- could meet (a false positive rate of 9% with the ids bench/seen.pl
-- makes); every product stays below 2^53, where Lua's numbers are exact.
-- t/seen.t measures the false positive rate with ids made as the module
-- makes them.
local SEEN_P, su = 61728413, struct.unpack
local function seen_hash2(id)
  local a, b, c, d = su('<I6I6I6I6', id)
  local P = SEEN_P
  local x = (((a % P * 40961 + b) % P * 30011 + c) % P * 50021 + d) % P
  local y = (((d % P * 12007 + c) % P * 61403 + b) % P * 27449 + a) % P
  return (x * x + y) % P, (y * y + x) % P
end

-- the bit of a byte value: v's bit 7 - b (the first bit is the highest)
local SEEN_MASK = {[0] = 128, 64, 32, 16, 8, 4, 2, 1}

-- Which of ids have their k bits, (h1 + i h2) mod m, set in the filter
-- key of m bits made with scheme: r[j] true for each of them (the caller's
-- table r, or a new one), nil for the others; 'SET': sets them.  A test
-- reads a filter of up to 64 KB whole (one GET, once a call) and stops at
-- an id's first bit clear, most often the first or the second.  The GET
-- of the default 12 KB costs Redis about 22 µs (its Lua hashes every
-- byte of a string it makes), and is still the cheapest way: a BITFIELD
-- GET costs about 1 µs a bit, and a page's 21 ids need about 45 of them.
-- Larger filters, and sets, are BITFIELD calls of at most 1500
-- operations (Lua unpacks at most 8000 values into one call).
local seen_filters = {}
local function seen_bits(key, ids, m, k, op, scheme, r)
  local hash = scheme == '2' and seen_hash2 or seen_hash1
  r = r or {}
  if op == 'SET' then seen_filters[key] = nil end
  if op == 'GET' and m <= 524288 then
    local s = seen_filters[key]
    if not s then
      s = redis.call('get', key) or ''
      seen_filters[key] = s
    end
    for j = 1, #ids do
      local h1, h2 = hash(ids[j])
      -- the offsets by addition, (off + step) mod m: no product, no mod
      local off, step = h1 % m, h2 % m
      if step == 0 then step = 1 end
      local x = k
      repeat
        local b = off % 8
        local mask = SEEN_MASK[b]
        if (sb(s, (off - b) / 8 + 1) or 0) % (mask + mask) < mask then
          break
        end
        off = off + step
        if off >= m then off = off - m end
        x = x - 1
      until x == 0
      if x == 0 then r[j] = true end
    end
    return r
  end
  local per = math.max(1, math.floor(1500 / k))
  for i = 1, #ids, per do
    local last, a = math.min(i + per - 1, #ids), {}
    for j = i, last do
      local h1, h2 = hash(ids[j])
      local off, step = h1 % m, h2 % m
      if step == 0 then step = 1 end
      for _ = 1, k do
        a[#a + 1] = op
        a[#a + 1] = 'u1'
        a[#a + 1] = off
        if op == 'SET' then a[#a + 1] = 1 end
        off = off + step
        if off >= m then off = off - m end
      end
    end
    local b = redis.call('bitfield', key, unpack(a))
    if op == 'GET' then
      for j = i, last do
        local all, o = true, (j - i) * k
        for x = 1, k do
          if b[o + x] == 0 then all = false break end
        end
        if all then r[j] = true end
      end
    end
  end
  return r
end

-- flags[i] true: ids[i] is in a live generation of the reader's filters
-- (seen: their feed:sn key), into the caller's table flags or a new one;
-- nothing when the reader has none.  The older generation is asked only
-- about the ids the current one lacks, and read only when it exists.
local seen_state = {}
local function seen_of(seen, ids, flags)
  flags = flags or {}
  if #ids == 0 then return flags end
  local f = seen_state[seen]
  if not f then
    f = redis.call('hmget', seen, 'g', 'm0', 'k0', 'm1', 'k1', 'h0', 'h1')
    seen_state[seen] = f
  end
  local g = tonumber(f[1])
  if not g then return flags end
  local user = key_seen_parts(seen)
  local m, k = tonumber(f[2 + 2 * g]), tonumber(f[3 + 2 * g])
  local cur = {}
  if m and k then
    cur = seen_bits(key_seen_bits(g, user), ids, m, k, 'GET', f[6 + g] or '1')
  end
  local o = 1 - g
  m, k = tonumber(f[2 + 2 * o]), tonumber(f[3 + 2 * o])
  local want, sub = {}, {}
  for i = 1, #ids do
    if cur[i] then
      flags[i] = true
    elseif m and k then
      want[#want + 1] = i
      sub[#sub + 1] = ids[i]
    end
  end
  if #sub > 0 then
    local r = seen_bits(key_seen_bits(o, user), sub, m, k, 'GET',
                        f[6 + o] or '1')
    for j = 1, #want do
      if r[j] then flags[want[j]] = true end
    end
  end
  return flags
end

-- a read with ?unseen=1 leaves out the posts the reader saw as it leaves
-- out deleted ones: dead[i] set for each of them
local function seen_drop(seen, dead, ids)
  seen_of(seen, ids, dead)
end
