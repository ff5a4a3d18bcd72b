-- wrk: gubernator GetRateLimits, one hit spread uniformly over 100,000 keys
-- of a leaky bucket (algorithm 1) that never fills, through the HTTP gateway.
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/gub_rand.lua http://ADDR/v1/GetRateLimits
-- Each of wrk's threads has a Lua state of its own, seeded alike: without a
-- seed of its own each would draw the same keys in the same order, and the
-- calls would come in pairs on one key (docs/mysql.md "Benchmark").
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("id", threads)
end
function init(args)
  math.randomseed(os.time() + 7919 * id)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local k = math.random(1, 100000)
  return wrk.format(nil, nil, nil, '{"requests":[{"name":"bench","unique_key":"k' .. k .. '","hits":1,"limit":1000000000,"duration":60000,"algorithm":1}]}')
end
