-- wrk: every request reads the timeline of a user never seen before, a
-- cache miss that waits on MongoDB.
local n = 0
local prefix = "cold" .. math.random(1, 1000000000) .. "x"

request = function()
    n = n + 1
    return wrk.format("GET", "/users/" .. prefix .. n .. "/timeline")
end
