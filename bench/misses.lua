-- wrk: every request reads the timeline of a user never seen before, a
-- cache miss that waits on MongoDB.  The run's prefix of user names is
-- the script's argument (wrk ... -- PREFIX): wrk's random numbers repeat
-- from run to run.
local n = 0
local prefix = "cold"

init = function(args)
    prefix = "cold" .. (args[1] or "") .. "x"
end

request = function()
    n = n + 1
    return wrk.format("GET", "/users/" .. prefix .. n .. "/timeline")
end
