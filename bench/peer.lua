-- The OpenResty-style peer of feed_timeline on a cache hit, written the
-- way an OpenResty user would: lua-resty-redis with keepalive, plain
-- commands pipelined, the logic in Lua.  The same Redis data (the module's
-- lists, post copies and deleted set), the same semantics (deleted posts
-- skipped, TTL refreshed, one more entry read to know whether a next page
-- exists), the same JSON bytes and headers.

local redis = require "nginx.redis"

-- ids in the lists are the ObjectId's 12 bytes; the API's are hex
local END = string.rep("\0", 12)

local function hex(id)
    return (id:gsub(".", function(c)
        return string.format("%02x", c:byte())
    end))
end

local uid = ngx.var.feed_uid
local limit = tonumber(ngx.var.arg_limit) or 20
local embed = ngx.var.feed_mode == "e"
local tl = "feed:tl:{" .. uid .. "}"

local red = redis:new()
red:set_timeout(1000)

if not red:connect("127.0.0.1", tonumber(ngx.var.feed_redis_port)) then
    return ngx.exit(503)
end

-- the head of the list, its TTL refreshed, and whether anything is deleted

red:init_pipeline()
red:lrange(tl, 0, limit)
red:expire(tl, ngx.var.feed_ttl)
red:zcard("feed:deleting")
local head = red:commit_pipeline()

local entries, deleting = head and head[1], head and head[3]

if type(entries) ~= "table" or #entries == 0 then
    red:set_keepalive(10000, 64)
    return ngx.exit(503)
end

local ids = {}
for i = 1, #entries do
    local id = entries[i]:sub(1, 12)
    if id == END then
        break
    end
    ids[#ids + 1] = id
end

-- the deleted ones, and the posts themselves in link mode

local dead, posts = {}, {}

if #ids > 0 and (deleting > 0 or not embed) then
    red:init_pipeline()
    if deleting > 0 then
        -- the deleted set holds hex ids
        local hexes = {}
        for i = 1, #ids do
            hexes[i] = hex(ids[i])
        end
        red:zmscore("feed:deleting", unpack(hexes))
    end
    if not embed then
        local keys = {}
        for i = 1, #ids do
            keys[i] = "feed:p:" .. ids[i]
        end
        red:mget(unpack(keys))
    end
    local res = red:commit_pipeline()
    if deleting > 0 then
        dead = res[1]
        posts = res[2] or {}
    else
        posts = res[1]
    end
end

red:set_keepalive(10000, 64)

local items, last, more = {}, nil, false

for i = 1, #ids do
    if dead[i] == nil or dead[i] == ngx.null then
        if #items == limit then
            more = true
            break
        end
        items[#items + 1] = embed and entries[i]:sub(13) or posts[i]
        last = ids[i]
    end
end

local next = "null"
if more then
    last = hex(last)
    next = '"' .. last .. '"'
    ngx.header["Link"] = "<" .. ngx.var.uri .. "?limit=" .. limit
                         .. "&max_id=" .. last .. '>; rel="next"'
end

local body = '{"items":[' .. table.concat(items, ",") .. '],"next":'
             .. next .. '}\n'

ngx.header["Content-Type"] = "application/json"
ngx.header["Content-Length"] = #body
ngx.print(body)
