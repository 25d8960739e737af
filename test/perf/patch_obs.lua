-- wrk script: PATCH /entities/{id}/attrs (5.6.2) of one of the first N
-- Vehicles (N from the first script argument), a new speed with observedAt:
-- what a sensor stream sends, and what history records.
local counter = 0
function init(args)
  n = tonumber(args[1] or "10000")
  math.randomseed(os.time())
end
request = function()
  counter = counter + 1
  local id = "urn:ngsi-ld:Vehicle:" .. math.random(0, n - 1)
  local t = os.date("!%Y-%m-%dT%H:%M:%S", 1577836800 + counter) .. "Z"
  local body = '{"speed":{"type":"Property","value":' .. (counter % 120) .. ',"observedAt":"' .. t .. '"}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id .. "/attrs", {["Content-Type"] = "application/json"}, body)
end
