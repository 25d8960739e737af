-- wrk script: PATCH /entities/{id}/attrs (Update Attributes, 5.6.2) of one
-- of the first N entities, a new speed. Arguments: N (default 100000) and
-- the id prefix (default urn:ngsi-ld:Vehicle:; perf_run's patch_notify
-- passes urn:ngsi-ld:Tracker:, the type its subscription watches).
local counter = 0
function init(args)
  n = tonumber(args[1] or "100000")
  prefix = args[2] or "urn:ngsi-ld:Vehicle:"
  math.randomseed(os.time())
end
request = function()
  counter = counter + 1
  local id = prefix .. math.random(0, n - 1)
  local body = '{"speed":{"type":"Property","value":' .. (counter % 120) .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id .. "/attrs", {["Content-Type"] = "application/json"}, body)
end
