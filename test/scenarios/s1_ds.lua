-- wrk script of S1: each wrk thread updates its own datasetId instance of the
-- attribute speed (PATCH /entities/{id}/attrs), on ONE entity (args: hot) or
-- on one of 1000 entities at random (args: spread).
local threads_made = 0
function setup(thread)
  thread:set("k", threads_made)
  threads_made = threads_made + 1
end
function init(args)
  mode = args[1] or "hot"
  counter = 0
  math.randomseed(os.time() + k)
end
request = function()
  counter = counter + 1
  local e = "urn:ngsi-ld:Hot:0"
  if mode == "spread" then e = "urn:ngsi-ld:Hot:" .. math.random(0, 999) end
  local body = '{"speed":{"type":"Property","value":' .. counter .. ',"datasetId":"urn:ngsi-ld:dataset:w' .. k .. '"}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. e .. "/attrs", {["Content-Type"] = "application/json"}, body)
end
