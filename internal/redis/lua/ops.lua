-- ops.lua: the operations other than Fillup (see bucket.lua).

local MAX_HOLDS = 1000
local MAX_LEVEL = { h = 1000000000000000, l = 0 } -- 10^15 in 10^-12 units (a pair, fast.lua)

local function active_count(st, now)
  local n = 0
  for _, h in ipairs(st.holds) do if h.e > now then n = n + 1 end end
  return n
end

local function hold_doc(rk)
  local f = redis.call('HGETALL', rk)
  local r = {}
  for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
  return r
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

-- op_settle: KEYS = bk, hk; ARGV = now, descriptor. Settles a bucket to now
-- at the descriptor's leak rate (a PUT that changes the rate calls it on every
-- bucket of the limit first, so the old rate applies up to the change).
local function op_settle()
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], KEYS[2], 2)
  local st = load(c)
  if vzero(st.l) or st.u == 0 or now <= st.u then return { 'ok', '' } end
  settle(c, st, now)
  finish(c, st, now)
  return { 'ok', '' }
end

-- op_drain: KEYS = bk, hk [, idem]; ARGV = now, idem hash, descriptor, amount.
local function op_drain()
  local ik, replay = idem_begin(3)
  if replay then return replay end
  local now = clock(ARGV[1])
  local c = desc(KEYS[1], KEYS[2], 3)
  local amount = nv(ARGV[3 + DESC])
  local st = load(c)
  local removed = pair(0, 0)
  -- A drain that can remove nothing (the level is zero now) is a no-op.
  if not vzero(amount) and not vzero(level_at(c, st, now)) then
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
  local ik, replay = idem_begin(3)
  if replay then return replay end
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
  local ik, replay = idem_begin(2)
  if replay then return replay end
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
