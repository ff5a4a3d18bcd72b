-- wrk: gubernator GetRateLimits, one hit on one hot key of a leaky bucket
-- (algorithm 1) that never fills, through the HTTP gateway.
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/gub_hot.lua http://ADDR/v1/GetRateLimits
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"requests":[{"name":"bench","unique_key":"hot","hits":1,"limit":1000000000,"duration":60000,"algorithm":1}]}'
