-- wrk script: PATCH /entities/{id}/attrs of ONE entity (the first script
-- argument), a new speed each time (notify_bench.py's fan-out).
local counter = 0
function init(args)
  id = args[1]
end
request = function()
  counter = counter + 1
  local body = '{"speed":{"type":"Property","value":' .. counter .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id .. "/attrs", {["Content-Type"] = "application/json"}, body)
end
