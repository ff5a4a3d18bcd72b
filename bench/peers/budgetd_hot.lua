-- wrk: budgetd Fillup (cost 1) on one hot bucket of the limit "bench".
-- scripts/bench-peers: wrk -t2 -c64 -d8s --latency -s bench/peers/budgetd_hot.lua http://ADDR
wrk.method = "POST"
wrk.path   = "/v1/limits/bench/buckets/hot/fillup"
wrk.body   = '{"cost":"1"}'
wrk.headers["Content-Type"] = "application/json"
