-- wrk: budgetd Fillup (cost 1) spread uniformly over 100,000 buckets of the
-- limit "bench". The echo baseline serves the same path and body.
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/budgetd_rand.lua http://ADDR
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
wrk.body   = '{"cost":"1"}'
wrk.headers["Content-Type"] = "application/json"
request = function()
  return wrk.format(nil, "/v1/limits/bench/buckets/k" .. math.random(1, 100000) .. "/fillup")
end
