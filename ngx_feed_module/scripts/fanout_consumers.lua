--[[
  Deletes the consumers of workers that are gone
  (ngx_http_feed_fanout_consumers_clean), but only those with no pending
  entries: an entry still pending is claimed by a live consumer first.

  Input:
    KEYS[1] stream            feed:posts

    ARGV[1] group             the fanout's consumer group
    ARGV[2...]                the consumers that are gone

  Output:
    how many went
]]

local idle, n = {}, 0
for _, c in ipairs(redis.call('xinfo', 'consumers', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f.pending == 0 then idle[f.name] = true end
end
for i = 2, #ARGV do
  if idle[ARGV[i]] then
    redis.call('xgroup', 'delconsumer', KEYS[1], ARGV[1], ARGV[i])
    n = n + 1
  end
end
return n
