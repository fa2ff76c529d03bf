--[[
  Counts a user's unread posts (ngx_http_feed_timeline_cache_unread, for
  GET /users/{uid}/timeline/unread): the entries of the home timeline
  newer than the read marker, less the posts being deleted and those of
  authors the user filters out, pull authors' posts merged in
  (lib/unread.lua).  The keys and arguments are timeline_read.lua's, in
  the same places (the libraries it shares with it name them so), the
  page's unused; a missing list or pull authors' lists answer as its
  read does, and are rebuilt or loaded by the same code.

  Input:
    KEYS[1] timeline      feed:tl:{user}
    KEYS[2] lock          its rebuild lock, feed:lock:{user}
    KEYS[3] pages         feed:tlp:{user}, where the count is kept
    KEYS[4] version       the list's nonce, feed:tln:{user}
    KEYS[5] pull          the pull authors the user follows, feed:tla:{user}
    KEYS[6] filters       the authors the user does not see, feed:tlf:{user}
    KEYS[7] marker        the read marker's copy, feed:mk:{user}

    ARGV[1] limit         unused ('')
    ARGV[2] max_id        unused ('')
    ARGV[3] since_id      unused ('')
    ARGV[4] ttl           seconds a read keeps the list alive
    ARGV[5] mode          'e': embed mode, else link mode
    ARGV[6] have          unused ('')
    ARGV[7] pull_copy     the copy of the pull authors' lists, as a read's
    ARGV[8] vouched       unused ('')
    ARGV[9] deleting      the posts being deleted, as a read's
    ARGV[10] copy         its mark, as a read's
    ARGV[11] unseen       unused ('')
    ARGV[12] marker       '' the copy's; else as MongoDB has it (the copy
                          is not in Redis): '-' for no marker, or its id
    ARGV[13] tracked      unused ('')
    ARGV[14] fresh        unused ('')
    ARGV[15] known        unused ('')
    ARGV[16] polling      as a read's: a count polling for a rebuild
                          elsewhere gets the partial page it left, for
                          the reads that wait for the count in its worker

  Output:
    {0, locked}           MISSING: no timeline, as timeline_read.lua's
                          (and its {0, 3, page}: a partial page tells no
                          count, but the page reads waiting for it do)
    {5, author...}        PULL: these pull authors' lists are missing (or
                          the one found gone while counting)
    {6, unread}           UNREAD: "<n>", or "<n>+" when a list is trimmed
                          above the marker; false: the marker's copy is
                          not in Redis, ask again with ARGV[12]
]]

local MISSING, PULL, UNREAD = 0, 5, 6
-- @include keys
-- @include end
-- @include ids
-- @include deleted
-- @include pulled

local tl = KEYS[1]
local ver = redis.call('get', KEYS[4])
local mark, pull = ver and string.sub(ver, -1), {}
local deleting = deleting_any(ARGV[9], ARGV[10])
-- @include unread_kept
local embed, filtered = ARGV[5] == 'e', false
-- @include filtered
-- @include unread

-- a list of another run, or without its version, pull authors or
-- filters is made again, as timeline_read.lua does
local run = run_of(ARGV[10])
if ver and string.sub(ver, 1, #run) ~= run then
  mark = nil
end
if mark == 'P' then
  pull = redis.call('smembers', KEYS[5])
end
local nf = redis.call('hlen', KEYS[6])
if (mark ~= 'P' and mark ~= 'N') or (mark == 'P' and #pull == 0)
   or nf == 0
then
  redis.call('del', tl, KEYS[3])
  ver, pull = nil, {}
end
local head = redis.call('lindex', tl, 0)
if head and id_old(head) then
  -- written before ids were bytes: made again
  drop_old(tl, KEYS[3], embed)
  head = nil
end
if not head then
-- @include locked
  return {MISSING, locked(KEYS[2], ARGV[16] == '1')}
end
if #pull > 0 then
  local sig, missing = pulled(pull, ARGV[7])
  if not sig then return {PULL, unpack(missing)} end
  ver = ver .. '.' .. sig
end
filtered = nf > 1
-- a count is a read: the list lives on, an empty one only its own while
if head ~= END then redis.call('expire', tl, ARGV[4]) end

-- the count kept by a read or a count before, else counted from the
-- marker (kept when it is the copy's)
local c = ARGV[12] == '' and unread_kept(redis.call('hget', KEYS[3], 'u'),
                                         ver)
if c and c ~= '-' and c ~= '?' then return {UNREAD, c} end
local m = unread_marker(KEYS[7], ARGV[12])
if not m then return {UNREAD, false} end
local ids
c, ids = unread_count(m, pull)
if not c then return {PULL, ids} end
if ARGV[12] == '' and head ~= END then
  unread_keep(ver, m == '' and '-' or c, m ~= '' and ids or nil)
end
return {UNREAD, c}
