-- wrk script: an ordered page right after a write. Requests alternate: patch.lua's
-- PATCH of one of the first N Vehicles (N from the first script argument), then
-- GET /entities?type=Vehicle&orderBy=speed;desc&limit=20. Requests/s counts both.
dofile(debug.getinfo(1, "S").source:match("^@?(.*/)") .. "patch.lua")
local patch = request
local turn = 0
request = function()
  turn = turn + 1
  if turn % 2 == 0 then
    return wrk.format("GET", "/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20")
  end
  return patch()
end
