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

-- a first page kept as answered, then the script that says whether it is
-- current (or reads the page): one round trip, as the module does when it
-- has no copy of the page of its own (the last argument)

local tlp = "feed:tlp:{" .. uid .. "}"

red:init_pipeline()
red:hget(tlp, limit)
red:evalsha(ngx.var.feed_read_sha, 7,
            "feed:tl:{" .. uid .. "}", "feed:lock:{" .. uid .. "}", tlp,
            "feed:tln:{" .. uid .. "}", "feed:tla:{" .. uid .. "}",
            "feed:tlf:{" .. uid .. "}", "feed:mk:{" .. uid .. "}",
            limit, "", "", ngx.var.feed_ttl, ngx.var.feed_mode, "", "", "",
            "feed:deleting", "", "", "")
local both = red:commit_pipeline()

red:set_keepalive(10000, 64)

local kept, res = both and both[1], both and both[2]

if type(res) ~= "table" then
    return ngx.exit(503)
end

local body, last, more

if res[1] == 3 and type(kept) == "string" then
    -- "version\nnext\nJSON", current if its version is the script's
    local a = kept:find("\n", 1, true)
    local b = kept:find("\n", a + 1, true)
    if kept:sub(1, a - 1) ~= res[2] then
        return ngx.exit(503)
    end
    last = kept:sub(a + 1, b - 1)
    more = #last == 24
    body = kept:sub(b + 1)

elseif res[1] == 1 then
    local items = {}
    -- the posts' JSON follow the reply's first eleven elements
    for i = 12, #res do
        items[#items + 1] = res[i]
    end

    last = res[4]
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
