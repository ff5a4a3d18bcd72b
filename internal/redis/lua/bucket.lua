-- bucket.lua: the leaky-bucket rule of internal/bucket, in exact integers, and
-- the operations of the Redis store. Each entry script is this file plus one
-- "return op_x()" line, so every operation is one atomic script call.
--
-- Amounts are integers in units of 10^-12 stored as decimal strings; times are
-- integer microseconds since the Unix epoch (exact doubles, < 2^53).

local IDEM_MS = 86400000 + 3600000          -- idempotency records: 25h
local HIST_MS = 30 * 86400000                 -- history retention: 30 days
local HIST_US = 30 * 86400 * 1000000
local HIST_MAX = 10000                        -- entries per bucket
local SLACK_MS = 60000                        -- margin on every bucket TTL
local MAX_HOLDS = 1000
local MAX_LEVEL = { h = 1000000000000000, l = 0 } -- 10^15 in 10^-12 units (a pair, fast.lua)

local function clock(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Idempotency records: "<length of hash>:<hash><outcome JSON>" with a TTL.
local function idem_get(ik, ih)
  local v = redis.call('GET', ik)
  if not v then return nil end
  local colon = string.find(v, ':', 1, true)
  local n = tonumber(string.sub(v, 1, colon - 1))
  if string.sub(v, colon + 1, colon + n) ~= ih then return { 'err', 'reused' } end
  return { 'replay', string.sub(v, colon + n + 1) }
end

local function idem_put(ik, ih, body)
  if ik then redis.call('SET', ik, #ih .. ':' .. ih .. body, 'PX', IDEM_MS) end
end

-- desc reads a bucket descriptor of 8 ARGV from index i: the hold record key
-- base, capacity, leak amount (units) and leak period (µs) divided by their
-- greatest common divisor (leak_params in fast.lua), history flag, the
-- limit document (opaque JSON for the Go side), the limit's definition key
-- ('' in Redis Cluster, where it lives in another slot) and the version
-- "generation:v" the Go side decided with. A definition that changed since
-- raises BUDGETD_STALE_LIMIT: every op calls desc before it writes anything,
-- so the error leaves nothing half done and the Go side rereads the limit.
local DESC = 8
local function desc(bk, hk, i)
  local dk = ARGV[i + 6]
  if dk ~= '' then
    local v = redis.call('HMGET', dk, 'g', 'v')
    if (v[1] or '') .. ':' .. (v[2] or '') ~= ARGV[i + 7] then error('BUDGETD_STALE_LIMIT') end
  end
  return {
    bk = bk, hk = hk,
    rbase = ARGV[i],
    cap = nv(ARGV[i + 1]),
    lp = leak_params(ARGV[i + 2], ARGV[i + 3]),
    hist = ARGV[i + 4] == '1',
    lim = ARGV[i + 5],
  }
end

local function load(c)
  local f = redis.call('HGETALL', c.bk)
  local st = { l = pair(0, 0), u = 0, n = 0, holds = {} }
  for i = 1, #f, 2 do
    local k, v = f[i], f[i + 1]
    if k == 'l' then st.l = nv(v)
    elseif k == 'u' then st.u = tonumber(v)
    elseif k == 'n' then st.n = tonumber(v)
    elseif string.byte(k, 1) == 104 then -- 'h'
      local colon = string.find(v, ':', 1, true)
      st.holds[#st.holds + 1] = { id = string.sub(k, 2), a = string.sub(v, 1, colon - 1),
        e = tonumber(string.sub(v, colon + 1)), raw = v }
    end
  end
  return st
end

-- level_at: bucket.LevelAt. leaked = floor(amount × dt / per), in units.
local function level_at(c, st, now)
  if vzero(st.l) or st.u == 0 then return st.l end
  local dt = now - st.u
  if dt <= 0 then return st.l end
  return leak(c.lp, st.l, dt)
end

-- held_at sums the active holds. A hold amount is an input (at most 10^12),
-- so up to 1000 of them sum to at most 10^15 and stay a pair (fast.lua).
local function held_at(st, now)
  local sum = pair(0, 0)
  for _, h in ipairs(st.holds) do
    if h.e > now and h.a ~= '0' then sum = vadd(sum, nv(h.a)) end
  end
  return sum
end

local function active_count(st, now)
  local n = 0
  for _, h in ipairs(st.holds) do if h.e > now then n = n + 1 end end
  return n
end

-- fits: bucket.CanAccept's accept test.
local function fits(c, st, now, cost)
  if vzero(cost) then return true end
  local used = level_at(c, st, now)
  if #st.holds > 0 then used = vadd(used, held_at(st, now)) end
  return vcmp(vadd(used, cost), c.cap) <= 0
end

local function record(c, st, t, ev, amount, rid)
  if not c.hist then return end
  st.n = st.n + 1
  redis.call('HSET', c.bk, 'n', fmt(st.n))
  redis.call('ZADD', c.hk, fmt(t), string.format('%012.0f', st.n) .. '|' .. ev .. '|' .. amount .. '|' .. rid)
  c.wrote_hist = true
end

-- expire_holds records the holds that expired by now (time = expires_at).
local function expire_holds(c, st, now)
  local kept = {}
  for _, h in ipairs(st.holds) do
    if h.e > now then
      kept[#kept + 1] = h
    else
      redis.call('HDEL', c.bk, 'h' .. h.id)
      local rk = c.rbase .. h.id
      if redis.call('EXISTS', rk) == 1 then
        redis.call('HSET', rk, 's', 'e', 'tr', fmt(h.e))
      end
      record(c, st, h.e, 'expired', h.a, h.id)
      c.touched = true
    end
  end
  st.holds = kept
end

-- settle: bucket.Settled plus the expiry records of memory's settle.
local function settle(c, st, now)
  st.l = level_at(c, st, now)
  if now > st.u then st.u = now end
  expire_holds(c, st, now)
end

-- finish writes level and time and sets the TTLs: a bucket lives until it has
-- leaked to zero and its last hold has expired (plus a margin), and at least
-- as long as its history when the limit keeps one.
local function finish(c, st, now)
  redis.call('HSET', c.bk, 'l', vs(st.l), 'u', fmt(st.u))
  local us = 0
  if not vzero(st.l) then
    us = vnum(st.l) * c.lp.rp / c.lp.raf
    us = us * (1 + 1e-9) + 1
    if st.u > now then us = us + (st.u - now) end
  end
  for _, h in ipairs(st.holds) do
    if h.e - now > us then us = h.e - now end
  end
  local ms = math.ceil(us / 1000) + SLACK_MS
  if c.hist then
    if ms < HIST_MS then ms = HIST_MS end
    if c.wrote_hist then
      redis.call('ZREMRANGEBYSCORE', c.hk, '-inf', '(' .. fmt(now - HIST_US))
      redis.call('ZREMRANGEBYRANK', c.hk, 0, -(HIST_MAX + 1))
    end
  end
  -- The history lives exactly as long as the bucket that numbers its
  -- entries (also when the limit stopped keeping history: its old entries
  -- then go with the bucket). A bucket whose counter n is 0 has never
  -- recorded an entry, so it has no history key to touch.
  local hk = st.n > 0 or c.hist
  if ms > 1e15 then
    redis.call('PERSIST', c.bk)
    if hk then redis.call('PERSIST', c.hk) end
  else
    redis.call('PEXPIRE', c.bk, fmt(ms))
    if hk then redis.call('PEXPIRE', c.hk, fmt(ms)) end
  end
end

local function holds_str(st)
  local t = {}
  for _, h in ipairs(st.holds) do t[#t + 1] = h.raw or (h.a .. ':' .. fmt(h.e)) end
  return table.concat(t, ',')
end

local function snap(c, st)
  return { l = vs(st.l), u = fmt(st.u), h = holds_str(st), lim = c.lim }
end

local function hold_doc(rk)
  local f = redis.call('HGETALL', rk)
  local r = {}
  for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
  return r
end

-- op_fillup: KEYS = bk1, hk1, ..., bkN, hkN [, idem]; ARGV = now, idem hash,
-- N, then per item a descriptor (DESC) and the cost.
local function op_fillup()
  local n = tonumber(ARGV[3])
  local ik
  if ARGV[2] ~= '' then
    ik = KEYS[2 * n + 1]
    local r = idem_get(ik, ARGV[2])
    if r then return r end
  end
  local now = clock(ARGV[1])
  local items, accepted = {}, true
  for i = 1, n do
    local base = 4 + (i - 1) * (DESC + 1)
    local c = desc(KEYS[2 * i - 1], KEYS[2 * i], base)
    local cost = nv(ARGV[base + DESC])
    local st = load(c)
    local ok = fits(c, st, now, cost)
    accepted = accepted and ok
    items[i] = { c = c, st = st, cost = cost, fits = ok }
  end
  local out = { now = fmt(now), acc = accepted, items = {} }
  for i, it in ipairs(items) do
    local c, st = it.c, it.st
    if accepted and not vzero(it.cost) then
      settle(c, st, now)
      st.l = vadd(st.l, it.cost)
      record(c, st, now, 'fillup', vs(it.cost), '')
      finish(c, st, now)
    end
    local s = snap(c, st)
    s.fits = it.fits
    out.items[i] = s
  end
  local body = cjson.encode(out)
  idem_put(ik, ARGV[2], body)
  return { 'ok', body }
end

-- op_inspect: KEYS = bk; ARGV = now, descriptor. Reads only.
local function op_inspect()
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], nil, 2)
  local st = load(c)
  local s = snap(c, st)
  s.now = fmt(now)
  return { 'ok', cjson.encode(s) }
end

-- op_drain: KEYS = bk, hk [, idem]; ARGV = now, idem hash, descriptor, amount.
local function op_drain()
  local ik
  if ARGV[2] ~= '' then
    ik = KEYS[3]
    local r = idem_get(ik, ARGV[2])
    if r then return r end
  end
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], KEYS[2], 3)
  local amount = nv(ARGV[3 + DESC])
  local st = load(c)
  local removed = pair(0, 0)
  if not vzero(amount) then
    settle(c, st, now)
    removed = vmin(amount, st.l)
    st.l = vsub(st.l, removed)
    record(c, st, now, 'drain', vs(removed), '')
    finish(c, st, now)
  end
  local out = snap(c, st)
  out.now = fmt(now)
  out.removed = vs(removed)
  local body = cjson.encode(out)
  idem_put(ik, ARGV[2], body)
  return { 'ok', body }
end

-- op_reserve: KEYS = bk, hk [, idem]; ARGV = now, idem hash, descriptor,
-- amount, ttl (µs), hold id, limit name, encoded bucket key.
local function op_reserve()
  local ik
  if ARGV[2] ~= '' then
    ik = KEYS[3]
    local r = idem_get(ik, ARGV[2])
    if r then return r end
  end
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], KEYS[2], 3)
  local amount = nv(ARGV[3 + DESC])
  local ttl, id = tonumber(ARGV[4 + DESC]), ARGV[5 + DESC]
  local st = load(c)
  if active_count(st, now) >= MAX_HOLDS then return { 'err', 'too_many_holds' } end
  local out = { now = fmt(now), acc = false }
  if fits(c, st, now, amount) then
    settle(c, st, now)
    local exp = now + ttl
    local rk = c.rbase .. id
    redis.call('HSET', rk, 'id', id, 'lim', ARGV[6 + DESC], 'e', ARGV[7 + DESC], 'a', vs(amount), 's', 'a',
      't0', fmt(now), 'te', fmt(exp))
    redis.call('PEXPIRE', rk, fmt(math.ceil(ttl / 1000) + 86400000 + SLACK_MS))
    redis.call('HSET', c.bk, 'h' .. id, vs(amount) .. ':' .. fmt(exp))
    st.holds[#st.holds + 1] = { id = id, a = vs(amount), e = exp }
    record(c, st, now, 'reserved', vs(amount), id)
    finish(c, st, now)
    out.acc = true
    out.res = hold_doc(rk)
  end
  out.b = snap(c, st)
  local body = cjson.encode(out)
  idem_put(ik, ARGV[2], body)
  return { 'ok', body }
end

-- op_resolve: KEYS = hold record [, idem]; ARGV = now, idem hash, mode ('c'
-- commit, 'r' release), amount ('' = the held amount), overrun ('1'), key base
-- of the limit's generation, then the descriptor (DESC).
local function op_resolve()
  local rk = KEYS[1]
  local ik
  if ARGV[2] ~= '' then
    ik = KEYS[2]
    local r = idem_get(ik, ARGV[2])
    if r then return r end
  end
  local h = hold_doc(rk)
  if not h.id then return { 'err', 'not_found' } end
  local now = clock(ARGV[1])
  local base = ARGV[6]
  local c = desc(base .. ':b:' .. h.e, base .. ':x:' .. h.e, 7)
  local st = load(c)
  local refusal = ''
  local te = tonumber(h.te)
  local mode = ARGV[3]
  local function drop_hold()
    redis.call('HDEL', c.bk, 'h' .. h.id)
    local kept = {}
    for _, x in ipairs(st.holds) do if x.id ~= h.id then kept[#kept + 1] = x end end
    st.holds = kept
  end
  if h.s == 'e' or (h.s == 'a' and now >= te) then
    c.touched = false
    expire_holds(c, st, now)
    if c.touched then finish(c, st, now) end
    refusal = 'reservation_expired'
  elseif mode == 'c' then
    local charge = nv(h.a)
    if ARGV[4] ~= '' then charge = nv(ARGV[4]) end
    if h.s == 'c' then
      if vcmp(nv(h.c), charge) ~= 0 then refusal = 'reservation_closed' end
    elseif h.s == 'r' then
      refusal = 'reservation_closed'
    elseif vcmp(charge, nv(h.a)) > 0 and ARGV[5] ~= '1' then
      refusal = 'exceeds_hold'
    else
      local lvl = vadd(level_at(c, st, now), charge)
      if vcmp(lvl, MAX_LEVEL) > 0 then return { 'err', 'level_overflow' } end
      settle(c, st, now)
      st.l = vadd(st.l, charge)
      drop_hold()
      redis.call('HSET', rk, 's', 'c', 'c', vs(charge), 'tr', fmt(now))
      record(c, st, now, 'committed', vs(charge), h.id)
      finish(c, st, now)
    end
  else
    if h.s == 'c' then
      refusal = 'reservation_closed'
    elseif h.s == 'a' then
      settle(c, st, now)
      drop_hold()
      redis.call('HSET', rk, 's', 'r', 'tr', fmt(now))
      record(c, st, now, 'released', h.a, h.id)
      finish(c, st, now)
    end
  end
  local out = { now = fmt(now), refusal = refusal, res = hold_doc(rk), b = snap(c, st) }
  local body = cjson.encode(out)
  idem_put(ik, ARGV[2], body)
  return { 'ok', body }
end

-- op_reservation: KEYS = hold record; ARGV = now. Reads only.
local function op_reservation()
  local now = clock(ARGV[1])
  local h = hold_doc(KEYS[1])
  if not h.id then return { 'err', 'not_found' } end
  return { 'ok', cjson.encode({ now = fmt(now), res = h }) }
end

-- op_history: KEYS = bk, hk; ARGV = now, descriptor, cursor time ('' for
-- the first page), cursor id, n. Records due expiries, then lists newest
-- first by (time, id).
local function op_history()
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], KEYS[2], 2)
  local st = load(c)
  c.touched = false
  expire_holds(c, st, now)
  if c.touched then finish(c, st, now) end
  local ct, cid, n = ARGV[2 + DESC], ARGV[3 + DESC], tonumber(ARGV[4 + DESC])
  local out = {}
  if ct ~= '' then
    local same = redis.call('ZRANGEBYSCORE', c.hk, ct, ct)
    local pad = string.format('%012.0f', tonumber(cid))
    for i = #same, 1, -1 do
      if string.sub(same[i], 1, 12) < pad and #out <= n then out[#out + 1] = ct .. '|' .. same[i] end
    end
  end
  if #out <= n then
    local max = '+inf'
    if ct ~= '' then max = '(' .. ct end
    local rest = redis.call('ZREVRANGEBYSCORE', c.hk, max, '-inf', 'WITHSCORES', 'LIMIT', 0, n + 1 - #out)
    for i = 1, #rest, 2 do
      out[#out + 1] = fmt(tonumber(rest[i + 1])) .. '|' .. rest[i]
    end
  end
  return { 'ok', cjson.encode({ now = fmt(now), e = table.concat(out, '\n') }) }
end
