-- wrk: gubernator GetRateLimits, one hit spread uniformly over 100,000 keys
-- of a leaky bucket (algorithm 1) that never fills, through the HTTP gateway.
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/gub_rand.lua http://ADDR/v1/GetRateLimits
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  local k = math.random(1, 100000)
  return wrk.format(nil, nil, nil, '{"requests":[{"name":"bench","unique_key":"k' .. k .. '","hits":1,"limit":1000000000,"duration":60000,"algorithm":1}]}')
end
