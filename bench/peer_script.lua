-- A Lua handler calling the module's own read script (same Redis work, the
-- same JSON bytes): shows how much of the difference is the nginx side
-- alone.  bench/peer.lua is the idiomatic OpenResty peer.

local redis = require "nginx.redis"

local uid = ngx.var.feed_uid
local limit = tonumber(ngx.var.arg_limit) or 20

local red = redis:new()
red:set_timeout(1000)

local ok = red:connect("127.0.0.1", tonumber(ngx.var.feed_redis_port))
if not ok then
    return ngx.exit(503)
end

-- the script that reads the page (the page kept, read again under its
-- version, or read and kept): one round trip, as the module does when it
-- has no copy of the page of its own (the last argument)

local res = red:evalsha(ngx.var.feed_read_sha, 7,
            "feed:tl:{" .. uid .. "}", "feed:lock:{" .. uid .. "}",
            "feed:tlp:{" .. uid .. "}",
            "feed:tln:{" .. uid .. "}", "feed:tla:{" .. uid .. "}",
            "feed:tlf:{" .. uid .. "}", "feed:mk:{" .. uid .. "}",
            limit, "", "", ngx.var.feed_ttl, ngx.var.feed_mode, "", "", "",
            "feed:deleting", "", "", "")

red:set_keepalive(10000, 64)

if type(res) ~= "table" then
    return ngx.exit(503)
end

local body, last, more

if res[1] == 1 or res[1] == 8 then
    local items = {}
    -- the posts' JSON follow the reply's first eleven elements
    for i = 12, #res do
        items[#items + 1] = res[i]
    end

    -- the last post's id as the list holds it, 12 bytes: in hex
    last = res[4]:gsub(".", function(c)
        return string.format("%02x", c:byte())
    end)
    more = res[2] == 1 and #items > 0
    body = '{"items":[' .. table.concat(items, ",") .. '],"next":'
           .. (more and ('"' .. last .. '"') or "null") .. '}\n'

else
    return ngx.exit(503)
end

if more then
    ngx.header["Link"] = "<" .. ngx.var.uri .. "?limit=" .. limit
                         .. "&max_id=" .. last .. '>; rel="next"'
end

ngx.header["Content-Type"] = "application/json"
ngx.header["Content-Length"] = #body
ngx.print(body)
