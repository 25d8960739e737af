-- wrk script: POST /entityOperations/create (5.6.7) of 20 new Vehicles per
-- request (create.lua's entity, new ids every run and thread).
local counter = 0
local thread_id = 0
function setup(thread)
  thread:set("tid", thread_id)
  thread_id = thread_id + 1
end
function init(args)
  math.randomseed(os.time() * 1000 + tid)
  prefix = "urn:ngsi-ld:Vehicle:b" .. os.time() .. "-" .. tid .. "-" .. math.random(1, 1000000000) .. "-"
end
request = function()
  local parts = {}
  for k = 1, 20 do
    counter = counter + 1
    parts[k] = '{"id":"' .. prefix .. counter .. '","type":"Vehicle",' ..
      '"speed":{"type":"Property","value":' .. (counter % 120) .. ',"observedAt":"2024-01-01T00:00:00Z",' ..
      '"accuracy":{"type":"Property","value":0.5}},' ..
      '"location":{"type":"GeoProperty","value":{"type":"Point","coordinates":[-3.7,40.4]}},' ..
      '"isParked":{"type":"Relationship","object":"urn:ngsi-ld:Parking:1"},' ..
      '"brand":{"type":"Property","value":"Mercedes"}}'
  end
  return wrk.format("POST", "/ngsi-ld/v1/entityOperations/create", {["Content-Type"] = "application/json"},
                    "[" .. table.concat(parts, ",") .. "]")
end
