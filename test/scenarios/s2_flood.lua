-- wrk script of S2: the noisy tenant's write flood, PATCH of one of its 10,000
-- entities at random (the tenant comes as an -H header: wrk.format with a
-- header table of its own would drop wrk.headers, so they are copied in).
local counter = 0
local headers = {}
function init(args)
  math.randomseed(os.time() + 7)
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Content-Type"] = "application/json"
end
request = function()
  counter = counter + 1
  local body = '{"level":{"type":"Property","value":' .. counter .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/urn:ngsi-ld:Noisy:" .. math.random(0, 9999) .. "/attrs",
                    headers, body)
end
