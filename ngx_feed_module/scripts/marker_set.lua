--[[
  Caches a user's read marker (ngx_http_feed_markers_cache_set) unless the
  cache already holds the same version or a newer one: versions come from
  MongoDB and only grow, so a copy read before a later PUT, or a PUT's
  copy that arrives after a later one's, never replaces a newer marker.
  Version 0 is a user without a marker (json and last_read_id ''), as an
  unread count found in MongoDB (docs/timeline.md#unread-counts): a GET
  reads MongoDB for it, and the first PUT's copy replaces it.

  Input:
    KEYS[1] marker            feed:mk:{<user>}

    ARGV[1] version           the marker's, from MongoDB
    ARGV[2] json              the answer of a GET, as it is sent
    ARGV[3] ttl               seconds
    ARGV[4] last_read_id      the marker's, read by the unread counts
                              (lib/unread.lua)

  The unread count kept with the timeline's first pages, feed:tlp:{<user>}
  field u, is dropped with the copy it was counted from; a key of the
  user's slot, named here, not sent.

  Output:
    1 when cached, 0 when the cache holds that version or a newer one
]]

-- @include keys

local v = tonumber(redis.call('hget', KEYS[1], 'v'))
if v and v >= tonumber(ARGV[1]) then return 0 end
redis.call('hset', KEYS[1], 'v', ARGV[1], 'j', ARGV[2], 'l', ARGV[4])
redis.call('expire', KEYS[1], ARGV[3])
-- the unread count kept with the timeline's kept pages was counted from
-- the copy before (lib/unread_kept.lua): the next read counts again
redis.call('hdel', key_kept_pages(key_marker_parts(KEYS[1])), 'u')
return 1
