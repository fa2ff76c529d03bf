--[[
  Drops a user's read marker's copy (ngx_http_feed_markers_cache_drop),
  after a PUT whose copy Redis did not take, and the unread count kept
  with the timeline's first pages (feed:tlp:{<user>} field u, a key of
  the user's slot, named here, not sent), which was counted from it
  (lib/unread_kept.lua).  Deletes only: Redis takes them out of memory.

  Input:
    KEYS[1] marker            feed:mk:{<user>}

  Output:
    1
]]

-- @include keys

redis.call('del', KEYS[1])
redis.call('hdel', key_kept_pages(key_marker_parts(KEYS[1])), 'u')
return 1
