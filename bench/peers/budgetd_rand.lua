-- wrk: budgetd Fillup (cost 1) spread uniformly over 100,000 buckets of the
-- limit "bench". The echo baseline serves the same path and body.
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/budgetd_rand.lua http://ADDR
wrk.method = "POST"
wrk.body   = '{"cost":"1"}'
wrk.headers["Content-Type"] = "application/json"
request = function()
  return wrk.format(nil, "/v1/limits/bench/buckets/k" .. math.random(1, 100000) .. "/fillup")
end
