-- wrk script of S2: the noisy tenant's write flood, PATCH of one of its 10,000
-- entities at random (the tenant comes as an -H header).
local counter = 0
function init(args)
  math.randomseed(os.time() + 7)
end
request = function()
  counter = counter + 1
  local body = '{"level":{"type":"Property","value":' .. counter .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:Noisy:" .. math.random(0, 9999) .. "/attrs",
                    {["Content-Type"] = "application/json"}, body)
end
