-- wrk script of S5-S7: GET of a path pattern (the first argument) in which
-- "%d" is replaced by a random number below the second argument.
function init(args)
  pattern = args[1]
  n = tonumber(args[2] or "1")
  math.randomseed(os.time())
end
request = function()
  return wrk.format("GET", (string.gsub(pattern, "%%d", tostring(math.random(0, n - 1)))))
end
