-- wrk script: POST /entities with a new id per request (Vehicle shape); with
-- a first script argument N > 0, POST /entityOperations/create (5.6.7) of N
-- new Vehicles per request instead (perf_run's batch_create: N = 20). With a
-- second argument "spread", each Vehicle's location is a random point of
-- [10, 12] x [45, 47] instead of the same one (create_stall.py).
local counter = 0
local thread_id = 0
function setup(thread)
  thread:set("tid", thread_id)
  thread_id = thread_id + 1
end
function init(args)
  -- a prefix new to every run (several runs share one broker): time + thread
  math.randomseed(os.time() * 1000 + tid)
  prefix = "urn:ngsi-ld:Vehicle:w" .. os.time() .. "-" .. tid .. "-" .. math.random(1, 1000000000) .. "-"
  batch = tonumber(args[1] or "0")
  spread = args[2] == "spread"
end
local function location()
  if not spread then return "[-3.7,40.4]" end
  return string.format("[%.6f,%.6f]", 10 + 2 * math.random(), 45 + 2 * math.random())
end
local function vehicle()
  counter = counter + 1
  return '{"id":"' .. prefix .. counter .. '","type":"Vehicle",' ..
    '"speed":{"type":"Property","value":' .. (counter % 120) .. ',"observedAt":"2024-01-01T00:00:00Z",' ..
    '"accuracy":{"type":"Property","value":0.5}},' ..
    '"location":{"type":"GeoProperty","value":{"type":"Point","coordinates":' .. location() .. '}},' ..
    '"isParked":{"type":"Relationship","object":"urn:ngsi-ld:Parking:1"},' ..
    '"brand":{"type":"Property","value":"Mercedes"}}'
end
request = function()
  if batch > 0 then
    local parts = {}
    for k = 1, batch do parts[k] = vehicle() end
    return wrk.format("POST", "/ngsi-ld/v1/entityOperations/create", {["Content-Type"] = "application/json"},
                      "[" .. table.concat(parts, ",") .. "]")
  end
  return wrk.format("POST", "/ngsi-ld/v1/entities", {["Content-Type"] = "application/json"}, vehicle())
end
