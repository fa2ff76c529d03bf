--[[
  Deletes the fanout group's consumers that are gone, as the worker chose
  them from XINFO (ngx_http_feed_fanout_consumers.c), but only those that
  still have nothing pending, checked in the same step as the delete:
  what a dead worker held is claimed by a live one first.

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
