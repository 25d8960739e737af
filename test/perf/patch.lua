-- wrk script: PATCH /entities/{id} (merge, 5.6.17) of one of the first N
-- Vehicles (N from the first script argument, default 100000), a new speed.
local counter = 0
function init(args)
  n = tonumber(args[1] or "100000")
  math.randomseed(os.time())
end
request = function()
  counter = counter + 1
  local id = "urn:ngsi-ld:Vehicle:" .. math.random(0, n - 1)
  local body = '{"speed":{"type":"Property","value":' .. (counter % 120) .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id, {["Content-Type"] = "application/json"}, body)
end
