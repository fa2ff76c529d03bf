-- The posts a reader saw (POST /users/{uid}/seen), for reads with
-- ?unseen=1: a Bloom filter per generation in plain bit strings (Redis
-- has no Bloom module here).  feed:sn:{user} is a hash: g the current
-- generation (0 or 1), n the ids it took, m<g> and k<g> each generation's
-- bits and hashes (each keeps the sizes it was made with: a change of
-- feed_seen_capacity or feed_seen_error takes effect at the next
-- generation); feed:snb<g>:{user} the bits.  An id's k offsets come from
-- its SHA1 by double hashing, (h1 + i * h2) mod m, and a call asks each
-- filter once for all its ids with BITFIELD.  Included where a read needs
-- it, past the kept pages: what it defines costs every call that runs it.

-- the two 32-bit halves of the head of an id's SHA1, once a call
local seen_hashes = {}
local function seen_hash(id)
  local h = seen_hashes[id]
  if not h then
    local s = redis.sha1hex(id)
    h = {tonumber(string.sub(s, 1, 8), 16), tonumber(string.sub(s, 9, 16), 16)}
    seen_hashes[id] = h
  end
  return h
end

-- BITFIELD <op> u1 of every offset of each id in the filter key (m bits,
-- k hashes), at most 1500 operations a call (Lua unpacks at most 8000
-- values into one); op 'GET' answers, for each id, whether all its bits
-- are set; 'SET' sets them
local function seen_bits(key, ids, m, k, op)
  local per, r = math.max(1, math.floor(1500 / k)), {}
  for i = 1, #ids, per do
    local last, a = math.min(i + per - 1, #ids), {}
    for j = i, last do
      local h = seen_hash(ids[j])
      local h2 = h[2] % m == 0 and h[2] + 1 or h[2]
      for x = 0, k - 1 do
        a[#a + 1] = op
        a[#a + 1] = 'u1'
        a[#a + 1] = (h[1] + x * h2) % m
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
-- their feed:sn key); nothing when the reader has none
local function seen_of(seen, ids)
  local flags = {}
  if #ids == 0 then return flags end
  local f = redis.call('hmget', seen, 'm0', 'k0', 'm1', 'k1')
  local user = key_seen_parts(seen)
  for g = 0, 1 do
    local m, k = tonumber(f[2 * g + 1]), tonumber(f[2 * g + 2])
    local want, sub = {}, {}
    for i = 1, #ids do
      if not flags[i] then
        want[#want + 1] = i
        sub[#sub + 1] = ids[i]
      end
    end
    if m and k and #sub > 0 then
      local r = seen_bits(key_seen_bits(g, user), sub, m, k, 'GET')
      for j = 1, #want do
        if r[j] then flags[want[j]] = true end
      end
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
