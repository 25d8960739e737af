-- wrk script of S2: GET one of the quiet tenant's 100 entities (the tenant
-- comes as an -H header).
function init(args)
  math.randomseed(os.time())
end
request = function()
  return wrk.format("GET", "/ngsi-ld/v1/entities/urn:ngsi-ld:Quiet:" .. math.random(0, 99))
end
