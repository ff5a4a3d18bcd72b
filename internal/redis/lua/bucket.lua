-- bucket.lua: the leaky-bucket rule of internal/bucket, in exact integers, and
-- the parts every operation of the Redis store shares. An entry script is
-- bigint.lua, fast.lua, this file, the file of its operation (fillup.lua, or
-- ops.lua for the others) and one "return op_x()" line, so every operation is
-- one atomic script call, and a script defines only the functions it may use.
--
-- Amounts are integers in units of 10^-12 stored as decimal strings; times are
-- integer microseconds since the Unix epoch (exact doubles, < 2^53).

local IDEM_MS = 86400000 + 3600000          -- idempotency records: 25h
local HIST_MS = 30 * 86400000                 -- history retention: 30 days
local HIST_US = 30 * 86400 * 1000000
local HIST_MAX = 10000                        -- entries per bucket
local SLACK_MS = 60000                        -- margin on every bucket TTL

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

-- idem_begin is the Idempotency-Key prologue of an operation whose record key
-- is KEYS[i]: that key (nil when the call has no key, ARGV[2] = '') and the
-- stored reply to return instead of running, if there is one.
local function idem_begin(i)
  if ARGV[2] == '' then return nil, nil end
  return KEYS[i], idem_get(KEYS[i], ARGV[2])
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
  if #st.holds == 0 then return '' end
  local t = {}
  for _, h in ipairs(st.holds) do t[#t + 1] = h.raw or (h.a .. ':' .. fmt(h.e)) end
  return table.concat(t, ',')
end

local function snap(c, st)
  return { l = vs(st.l), u = fmt(st.u), h = holds_str(st), lim = c.lim }
end
