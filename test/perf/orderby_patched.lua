-- wrk script: an ordered page right after a write. Requests alternate: a PATCH
-- (merge, 5.6.17) of one of the first N Vehicles (N from the first script
-- argument, default 100000) with a new speed, then
-- GET /entities?type=Vehicle&orderBy=speed;desc&limit=20. Requests/s counts both.
local counter = 0
function init(args)
  n = tonumber(args[1] or "100000")
  math.randomseed(os.time())
end
request = function()
  counter = counter + 1
  if counter % 2 == 0 then
    return wrk.format("GET", "/ngsi-ld/v1/entities?type=Vehicle&orderBy=speed%3Bdesc&limit=20")
  end
  local id = "urn:ngsi-ld:Vehicle:" .. math.random(0, n - 1)
  local body = '{"speed":{"type":"Property","value":' .. (counter % 120) .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id, {["Content-Type"] = "application/json"}, body)
end
