-- wrk script: PATCH /entities/{id}/attrs of ONE entity (the first script
-- argument), a new speed each time (notify_bench.py's fan-out,
-- offload_bench.py's write hand-off). The -H headers (a tenant) are kept:
-- wrk.format replaces wrk.headers with the table it is given.
local counter = 0
local headers = {}
function init(args)
  id = args[1]
  for k, v in pairs(wrk.headers) do headers[k] = v end
  headers["Content-Type"] = "application/json"
end
request = function()
  counter = counter + 1
  local body = '{"speed":{"type":"Property","value":' .. counter .. '}}'
  return wrk.format("PATCH", "/ngsi-ld/v1/entities/" .. id .. "/attrs", headers, body)
end
