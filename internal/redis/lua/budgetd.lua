-- budgetd.lua: the Redis Functions library of budgetd's Redis store (loaded
-- once with FUNCTION LOAD; every operation is one FCALL). Go prepends the
-- library header and the constants (constants.go) and arith.lua, the exact
-- integer arithmetic, so every helper below is created once, at load.
--
-- Every key a function touches is in its KEYS. Every function names its
-- arguments at the top and answers in one shape (reply, below), parsed in one
-- place in Go (parseReply); a domain error is an answer whose first element
-- is an error code (E_*), never a Lua error.
--
-- Amounts are integers in units of 10^-12 stored as decimal strings; times are
-- integer microseconds since the Unix epoch (exact doubles, < 2^53).

-- clock returns now in µs and as a decimal string (what fmt(now) gives):
-- TIME's seconds and its microseconds padded to six digits.
local function clock(arg)
  if arg ~= '' then return tonumber(arg), arg end
  local t = redis.call('TIME')
  local s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  return tonumber(s), s
end

-- stale reports whether the limit definition dk (standalone only; nil in
-- Redis Cluster, where it lives in another slot) has another version than
-- the one the Go side decided with. Every function checks it before writing.
-- The version may be followed by '@lo:hi' (µs, each '' for unbounded): the
-- arguments hold only while lo <= now < hi, the span in which the override
-- Go resolved for the bucket (or none) applies (a raise's expires_at, one
-- more specific that expired). guard answers the version without it and
-- whether now is inside; outside, the function answers E_PERIOD_TABLE with
-- now, and Go resolves again at that clock. The span may be followed by
-- '|' T: the last instant (at or before lo) at which an override's expiry
-- changed the key's rule (Go's ledger.SettleExpiries); guard answers it as
-- a third value (nil for none), and switched checks the bucket against it.
local function guard(version, now)
  local at = string.find(version, '@', 1, true)
  if not at then return version, true end
  local lo, hi, sw = string.match(version, '^(%d*):(%d*)|?(%d*)$', at + 1)
  return string.sub(version, 1, at - 1), (lo == '' or now >= tonumber(lo)) and (hi == '' or now < tonumber(hi)),
    sw ~= '' and tonumber(sw) or nil
end

-- unswitched returns, for bucket bk last written before sw, the last
-- instant at which the end of a temporary override changed its rule
-- (guard), the answer E_SWITCH, bk and its level, time and window slots as
-- stored (nil otherwise): Lua does not apply an override's expiry; Go
-- settles the bucket through the expiries (ledger.TermsAt, which it writes
-- with switch_bucket, below) and calls again.
local function unswitched(bk, sw)
  if not sw then return nil end
  local f = redis.call('HMGET', bk, 'l', 'u', 'w')
  local u = tonumber(f[2] or '0')
  if u == 0 or u >= sw then return nil end
  return { E_SWITCH, bk, f[1] or '', f[2], f[3] or '' }
end

local function stale(dk, version)
  if not dk then return false end
  local v = redis.call('HMGET', dk, 'g', 'v')
  return (v[1] or '') .. ':' .. (v[2] or '') ~= version
end

-- Idempotency records: "<length of hash>:<hash><reply as JSON>" with a TTL.
-- idem_get returns the answer to give instead of running: the stored reply
-- ('replay' and its JSON), E_REUSED for another request hash, or nil.
local function idem_get(ik, ih)
  if not ik then return nil end
  local v = redis.call('GET', ik)
  if not v then return nil end
  local colon = string.find(v, ':', 1, true)
  local n = tonumber(string.sub(v, 1, colon - 1))
  if string.sub(v, colon + 1, colon + n) ~= ih then return { E_REUSED } end
  return { 'replay', string.sub(v, colon + n + 1) }
end

-- thresholds reads a limit's thresholds argument (bkt), which is the
-- limit's alone (the outbox of the bucket's slot is another argument), so
-- it is parsed once per library load and kept (a cache, as memo below,
-- emptied when it reaches TH_MAX entries): the digest sig
-- (ledger.ThresholdSig), the capacity (units), the limit's name, and per
-- threshold, in the limit's order, the level it is reached at (units) and
-- its label ("80%"); pk[i] is a percentage threshold's percentage in
-- hundredths (8000 for "80%"), false for an amount, so that grants move
-- its level (with_grants); min, the lowest level (fillup_lean, which
-- takes no bucket with grants: a use below it reaches none); and z, the
-- marks field of a bucket with none of them reached outside a period
-- (marks, below: "<sig>:0:0"), which fillup_lean compares and writes.
local TH_MAX, th_memo, th_n = 256, {}, 0
local function thresholds(arg)
  local t = th_memo[arg]
  if t then return t end
  local sig, cap, name, list = string.match(arg, '^([^;]*);([^;]*);([^;]*);(.*)$')
  t = { sig = sig, cap = cap, name = name, lv = {}, lab = {}, pk = {}, z = sig .. ':0:0' }
  for lv, lab in string.gmatch(list, '([^=,]+)=([^,]+)') do
    local i, pk = #t.lv + 1, false
    local ip, fp = string.match(lab, '^(%d+)%.?(%d*)%%$')
    if ip then pk = tonumber(ip) * 100 + tonumber(string.sub(fp .. '00', 1, 2)) end
    t.lv[i], t.lab[i], t.pk[i] = nv(lv), lab, pk
    if not t.min or vcmp(t.lv[i], t.min) < 0 then t.min = t.lv[i] end
  end
  if th_n >= TH_MAX then th_memo, th_n = {}, 0 end
  th_memo[arg], th_n = t, th_n + 1
  return t
end

-- bkt is one bucket of a call: its keys and its limit as the Go side passed
-- it (ceiling, leak amount and period divided by their gcd, history flag,
-- and the limit document, opaque here, that an idempotency record keeps).
-- The ceiling is the most level + held may reach by an accepted charge, as
-- the limit's mode sets it (ledger.Limit.Ceiling): the capacity for enforce,
-- capacity × (1 + grace) for soft, the largest level kept for shadow. It is
-- the only bound the functions admit against; the capacity itself, what a
-- decision reports, and the marks a mode sets are Go's. The ceiling may be
-- followed by '/' and k: a grant of g raises the ceiling by g × k / 10^4
-- (c.gk; soft: 10^4 + 100 × grace, shadow: 0); without it by g (enforce).
-- A periodic limit with rollover follows it with '~', its rollover max and
-- ':' and its capacity in force (units, without grants): c.rmax, c.rcap
-- (Rollover, below).
-- The history flag is '0' (no history), '1' (history) or '2' (history, and
-- denials are recorded too: c.deny), or, for a shadow limit that records
-- denials, '3:' and its capacity (units): c.deny, and c.shcap, against
-- which fits marks a charge enforce would deny (st.sh) for record.
-- A periodic limit passes 'P' as its leak amount and, as its leak period, a
-- table of consecutive period starts (µs, comma-separated) that budgetd
-- computed around its clock: Lua never computes a calendar. A window limit
-- passes 'W' and "length:precision" (µs): c.wl, c.wp.
-- th is the limit's thresholds ('' for none, then the functions do no more
-- than this one comparison): "<sig>;<capacity>;<limit name>;<level>=<label>,..."
-- (thresholds, above): c.th; ob is the outbox stream of the bucket's slot
-- and how long it keeps an entry (ms: the store's event retention),
-- "<stream>;<retention>" ('' without thresholds): c.ob, which notice
-- splits only when it appends an event.
local function bkt(bk, hk, ceil, ra, rp, hist, lim, th, ob)
  local gk, rmax, rcap
  local tilde = string.find(ceil, '~', 1, true)
  if tilde then
    rmax, rcap = string.match(string.sub(ceil, tilde + 1), '^(%d+):(%d+)$')
    rmax, rcap, ceil = nv(rmax), nv(rcap), string.sub(ceil, 1, tilde - 1)
  end
  local slash = string.find(ceil, '/', 1, true)
  if slash then ceil, gk = string.sub(ceil, 1, slash - 1), tonumber(string.sub(ceil, slash + 1)) end
  local c = { bk = bk, hk = hk, ceil = nv(ceil), gk = gk, hist = hist ~= '0', deny = hist == '2', lim = lim,
    rmax = rmax, rcap = rcap }
  if #hist > 1 then c.deny, c.shcap = true, nv(string.sub(hist, 3)) end
  if th ~= '' then c.th, c.ob = thresholds(th), ob end
  if ra == 'P' then c.starts = rp
  elseif ra == 'W' then
    local colon = string.find(rp, ':', 1, true)
    c.wl, c.wp = tonumber(string.sub(rp, 1, colon - 1)), tonumber(string.sub(rp, colon + 1))
  else c.lp = leak_params(ra, rp) end
  return c
end

-- Window buckets (bucket/window.go). A bucket keeps the sums of its
-- counting slots in one field, w = "P@i:s,i:s,...": the precision P (µs)
-- the slots were cut with, then per slot, oldest first, its index and its
-- sum in units; st.l stays their sum as of st.u. load puts the list (after
-- the '@') in st.ws, and the functions below work on that string at its
-- ends: a call parses only the slots that stopped counting (oldest first)
-- and those it charges or drains (newest first), and the rest is copied
-- whole as a string, never walked slot by slot. A bucket without the field
-- (written under another rule, switched by a PUT) or with slots cut with
-- another precision (a PUT raced with a write) reads as its level charged
-- in the slot of st.u, as package bucket reads a state without slots.

-- slot_of is the index of the slot of c that contains t (µs): floor(t / P),
-- exact in doubles as leak's quotient is.
local function slot_of(c, t) return (t - math.fmod(t, c.wp)) / c.wp end

-- expiry is the instant from which the charges of slot i no longer count.
local function expiry(c, i) return (i + 1) * c.wp + c.wl end

-- wslots returns the slot list of a window bucket whose field w is w (nil
-- when it has none): bucket.windowSlots.
local function wslots(c, st, w)
  if w then
    local at = string.find(w, '@', 1, true)
    if at and tonumber(string.sub(w, 1, at - 1)) == c.wp then return string.sub(w, at + 1) end
  end
  if vzero(st.l) or st.u == 0 then return '' end
  return fmt(slot_of(c, st.u)) .. ':' .. vs(st.l)
end

-- wcut returns the sum of the oldest slots of st that no longer count at
-- the later of now and st.u, and where the first one that counts starts in
-- st.ws (past its end when none does).
local function wcut(c, st, now)
  local ws, ne, pos, sum = st.ws, math.max(now, st.u), 1, pair(0, 0)
  while pos <= #ws do
    local _, e, i, v = string.find(ws, '^(%d+):(%d+)', pos)
    if expiry(c, tonumber(i)) > ne then break end
    sum, pos = vadd(sum, nv(v)), e + 2
  end
  return sum, pos
end

-- wlevel: bucket.windowLevel, the sum of the slots that still count.
local function wlevel(c, st, now) return vsub(st.l, (wcut(c, st, now))) end

-- wsettle: bucket.settledSlots and the level at now: drops the slots that
-- no longer count (before st.u moves).
local function wsettle(c, st, now)
  local gone, pos = wcut(c, st, now)
  st.ws, st.l = string.sub(st.ws, pos), vsub(st.l, gone)
end

-- wlast splits a non-empty slot list into the list before its newest slot
-- ('' for none), and the newest slot's index and sum (a string).
local function wlast(ws)
  local head, i, v = string.match(ws, '^(.*),(%d+):(%d+)$')
  if not head then head, i, v = '', string.match(ws, '^(%d+):(%d+)$') end
  return head, tonumber(i), v
end

-- charge_slot: bucket.chargeSlot after settle (st.u is then the later of
-- now and the last write): amount goes into the slot of st.u, or into the
-- newest slot when that is the same or newer.
local function charge_slot(c, st, amount)
  if not c.wp or vzero(amount) then return end
  local i = slot_of(c, st.u)
  if st.ws == '' then
    st.ws = fmt(i) .. ':' .. vs(amount)
    return
  end
  local head, li, lv = wlast(st.ws)
  if li < i then
    st.ws = st.ws .. ',' .. fmt(i) .. ':' .. vs(amount)
  else
    if head ~= '' then head = head .. ',' end
    st.ws = head .. fmt(li) .. ':' .. vs(vadd(nv(lv), amount))
  end
end

-- drain_slots: bucket.drainSlots, removing amount (at most their sum) from
-- the newest slots first and dropping the slots it empties. It walks the
-- list reversed, from its newest slot, as far as amount reaches.
local function drain_slots(st, amount)
  local ws = st.ws
  local n, rev, pos, keep = #ws, string.reverse(ws), 1, #ws
  while not vzero(amount) and pos <= n do
    local _, e, rv, ri = string.find(rev, '^(%d+):(%d+)', pos)
    local v, start = nv(string.reverse(rv)), n - e + 1 -- where the slot starts in ws
    if vcmp(amount, v) < 0 then
      st.ws = string.sub(ws, 1, start - 1) .. string.reverse(ri) .. ':' .. vs(vsub(v, amount))
      return
    end
    amount, keep, pos = vsub(amount, v), start - 2, e + 2 -- drop the slot and the comma before it
  end
  st.ws = string.sub(ws, 1, math.max(keep, 0))
end

-- in_period finds the period of a periodic bucket c that contains now in its
-- table: c.ps, c.pe = its start and end, and c.pp the start of the period
-- before. It reports false when now is outside the table, or, for a limit
-- with rollover (which needs c.pp), in its first period (the caller answers
-- E_PERIOD_TABLE with now, and budgetd calls again with a table around that
-- now, which starts a period before it).
local function in_period(c, now)
  local pp, prev
  for s in string.gmatch(c.starts, '[^,]+') do
    local t = tonumber(s)
    if t > now then
      if not prev or (c.rmax and not pp) then return false end
      c.pp, c.ps, c.pe = pp, prev, t
      return true
    end
    pp, prev = prev, t
  end
  return false
end

-- Rollover (ledger.CarryAt). A bucket of a limit with rollover keeps, from
-- its first write in a period on, the carry it receives in that period in
-- the field r = "unused:period" (unused in units, uncapped by max, a
-- multiple of 10^6: an amount; period the period's start, µs); a carry of
-- nothing is not kept. carry is the rule: the unused capacity of the
-- bucket as stored (st, before this call writes it) for the period that
-- contains now (c.ps): what it stored for this period when it was last
-- written in it (or later), else, last written in the period before, the
-- capacity in force (c.rcap) minus its level then, at least zero, else
-- (an untouched period) the whole capacity. A bucket never written
-- carries nothing (nil).
local function carry(c, st)
  if not c.rmax or st.u == 0 then return nil end
  if st.u >= c.ps then
    local u, p = string.match(st.r or '', '^(%d+):(%d+)$')
    if u and tonumber(p) == c.ps then return nv(u) end
    return pair(0, 0)
  end
  if st.u < c.pp then return c.rcap end
  if vcmp(st.l, c.rcap) >= 0 then return pair(0, 0) end
  local s = vs(vsub(c.rcap, st.l))
  -- at most AmountScale (6) fractional digits: a multiple of 10^6 units
  if #s <= 6 then return pair(0, 0) end
  return nv(string.sub(s, 1, #s - 6) .. '000000')
end

-- Grants (ledger.Grant) live in their bucket's hash, one field per grant:
-- G<id> = "amount:expires:created:seq" (amount in units, times in µs, seq
-- the order of grants made in one µs). A bucket without grants has no such
-- field, so it pays nothing for them (fillup_lean declines a hash with any
-- field but l, u and unreached threshold marks). A grant counts while now < expires; load sums the
-- grants that count into st.g (nil for none) and raises c's bounds by it
-- (with_grants); expired ones are dropped at the bucket's next write
-- (finish, keep), and every write keeps the hash at least until its last
-- grant expires (keep).

-- gscale is g × k / 10^4 for a sum of grants g (units: a multiple of 10^6,
-- since an amount has at most 6 fractional digits) and an integer k.
local function gscale(g, k)
  if k == 0 then return pair(0, 0) end
  local s = vs(g)
  return norm(bn_mul(bn(string.sub(s, 1, #s - 4)), bnum(k)))
end

-- with_grants adds the active grants g of a bucket to what its call admits
-- against, as ledger.Limit.WithGrants raises the capacity: the ceiling (by
-- g, or as the mode scales it: c.gk), a shadow limit's capacity for its
-- records, and the thresholds' capacity and percentage levels (a copy:
-- c.th is shared by the calls of the limit).
local function with_grants(c, g)
  c.ceil = vadd(c.ceil, c.gk and gscale(g, c.gk) or g)
  if c.shcap then c.shcap = vadd(c.shcap, g) end
  local t = c.th
  if t then
    local lv = {}
    for i, l in ipairs(t.lv) do lv[i] = t.pk[i] and vadd(l, gscale(g, t.pk[i])) or l end
    c.th = { sig = t.sig, cap = vs(vadd(nv(t.cap), g)), name = t.name, lv = lv, lab = t.lab, pk = t.pk }
  end
end

-- level_at: bucket.LevelAt. leaked = floor(amount × dt / per), in units.
local function level_at(c, st, now)
  if c.wp then return wlevel(c, st, now) end
  if c.starts then
    -- bucket.periodLevel: the stored level when written in this period
    -- or later, else zero; it does not leak.
    if vzero(st.l) or st.u == 0 or st.u < c.ps then return pair(0, 0) end
    return st.l
  end
  if vzero(st.l) or st.u == 0 or now <= st.u then return st.l end
  return leak(c.lp, st.l, now - st.u)
end

-- marks reads a bucket's threshold marks (notice) into st.ts (the sig of
-- the thresholds they were computed for), st.ta (bit i-1 set when
-- threshold i is reached) and st.tp (the start of the period they belong
-- to, µs; '0' for the other kinds). They live in one field of the bucket's
-- hash, t = "<ts>:<ta>:<tp>", so a fresh bucket's first write (fillup_lean)
-- stores one field more, not three, and compares one string. Versions
-- before this one kept them in three fields, ts, ta and tp: a bucket that
-- has them was last marked by such a version (this one drops them whenever
-- it writes t), so they win over t, and its next write here moves them
-- into t (st.old: notice).
local function marks(st)
  if st.old then st.ts, st.ta, st.tp = st.ots, st.ota, st.otp
  elseif st.tm then
    local ts, ta, tp = string.match(st.tm, '^([^:]*):(%d+):(%d+)$')
    st.ts, st.ta, st.tp = ts, tonumber(ta), tp
  end
end

-- load reads a bucket at now (f: its fields when the caller already read
-- them), with its grants and, for a limit with rollover, the carry it
-- receives (st.ru, carry) of which at most c.rmax raises c's bounds as a
-- grant does (ledger.Limit.WithRollover). c.put is the level and time Go
-- settled the bucket to through the ends of temporary overrides
-- (switch_bucket): the bucket reads as switched then, before its carry.
local function load(c, now, f)
  f = f or redis.call('HGETALL', c.bk)
  local st = { l = pair(0, 0), u = 0, n = 0, holds = {}, grants = {} }
  for i = 1, #f, 2 do
    local k, v = f[i], f[i + 1]
    if k == 'l' then st.l = nv(v)
    elseif k == 'u' then st.u = tonumber(v)
    elseif k == 'n' then st.n = tonumber(v)
    elseif k == 'w' then st.w = v
    elseif k == 't' then st.tm = v
    elseif k == 'ts' then st.ots, st.old = v, true
    elseif k == 'ta' then st.ota, st.old = tonumber(v), true
    elseif k == 'tp' then st.otp, st.old = v, true
    elseif k == 'r' then st.r = v
    elseif string.byte(k, 1) == 104 then -- 'h'
      local colon = string.find(v, ':', 1, true)
      st.holds[#st.holds + 1] = { id = string.sub(k, 2), a = string.sub(v, 1, colon - 1),
        e = tonumber(string.sub(v, colon + 1)), raw = v }
    elseif string.byte(k, 1) == 71 then -- 'G'
      local a, e, t0, q = string.match(v, '^(%d+):(%d+):(%d+):(%d+)$')
      e = tonumber(e)
      st.grants[#st.grants + 1] = { id = string.sub(k, 2), a = a, e = e, t = t0, q = tonumber(q) }
      if e > now then st.g = vadd(st.g or pair(0, 0), nv(a)) end
    end
  end
  marks(st)
  if c.put then st.l, st.u, st.switched = c.put.l, c.put.u, true end
  local raise = st.g
  if c.starts then
    st.ru = carry(c, st)
    if st.ru then
      local r = vmin(st.ru, c.rmax)
      if not vzero(r) then raise = vadd(raise or pair(0, 0), r) end
    end
  end
  if raise then with_grants(c, raise) end
  if c.wp then st.ws = wslots(c, st, not st.switched and st.w or nil) end
  return st
end

-- fits: bucket.CanAccept's accept test, against the mode's ceiling. It keeps the level at now in st.lv
-- for settle, which follows at the same now.
local function fits(c, st, now, cost)
  if vzero(cost) then return true end
  local used = level_at(c, st, now)
  st.lv = used
  if #st.holds > 0 then used = vadd(used, held_sum(st.holds, now)) end
  used = vadd(used, cost)
  if c.shcap then st.sh = vcmp(used, c.shcap) > 0 end
  return vcmp(used, c.ceil) <= 0
end

-- record adds a history entry "id|event|amount|hold[|meta]" at time t;
-- meta is the caller's JSON object ('' or nil for none). A fillup or
-- reserved entry that fits marked shadow-denied (st.sh) is written with
-- event 'fillup!' or 'reserved!' (parseEntry). It returns the
-- entry's id (the bucket's counter n), nil when the limit keeps no history.
local function record(c, st, t, ev, amount, rid, meta)
  if not c.hist then return nil end
  st.n = st.n + 1
  redis.call('HSET', c.bk, 'n', fmt(st.n))
  local e = string.format('%012.0f', st.n) .. '|' .. ev .. '|' .. amount .. '|' .. rid
  if meta and meta ~= '' then e = e .. '|' .. meta end
  redis.call('ZADD', c.hk, fmt(t), e)
  c.wrote_hist = true
  return fmt(st.n)
end

-- trim drops the history entries of c older than the retention at now and
-- those past the newest HIST_MAX.
local function trim(c, now)
  redis.call('ZREMRANGEBYSCORE', c.hk, '-inf', '(' .. fmt(now - HIST_MS * 1000))
  redis.call('ZREMRANGEBYRANK', c.hk, 0, -(HIST_MAX + 1))
end

-- deny records the denied entry of a call that bucket c could not take
-- (amount, the cost asked, and meta) when its limit keeps history and
-- records denials, and returns the entry's id (nil when none was written).
-- Only the history and the counter n that numbers it change: the level,
-- time, slots and holds stay as they were, so a bucket never written reads
-- as empty. Its hash (kept for n) and its history then live at least
-- HIST_MS from now, as finish keeps a bucket with history: a longer TTL, or
-- none, is left as it is; a key this call created gets HIST_MS, and so does
-- a hash without a TTL that holds nothing but n (a PUT drops the TTLs of
-- all buckets; a bucket never written keeps nothing that needs more).
local function deny(c, st, now, amount, meta)
  if not c.deny then return nil end
  local ttl = { redis.call('PTTL', c.bk), redis.call('PTTL', c.hk) }
  local bare = st.u == 0 and #st.holds == 0 and #st.grants == 0
  local id = record(c, st, now, 'denied', amount, '', meta)
  trim(c, now)
  for i, k in ipairs({ c.bk, c.hk }) do
    local t = ttl[i]
    if t == -2 or (t == -1 and bare) or (t >= 0 and t < HIST_MS) then redis.call('PEXPIRE', k, HIST_MS) end
  end
  return id
end

-- expire_holds drops the holds that expired by now from the bucket and
-- records them (time = expires_at); it reports whether there were any. A
-- hold record keeps state 'a': past its expiry it reads as expired (Go).
local function expire_holds(c, st, now)
  local kept, any = {}, false
  for _, h in ipairs(st.holds) do
    if h.e > now then
      kept[#kept + 1] = h
    else
      redis.call('HDEL', c.bk, 'h' .. h.id)
      record(c, st, h.e, 'expired', h.a, h.id)
      any = true
    end
  end
  st.holds = kept
  return any
end

-- settle: bucket.Settled plus the expiry records of memory's settle. A
-- stored time more than CLOCK_STEP_US ahead of now (a clock stepped back)
-- is taken as now, as ledger.ClockStep says, and reported (c.stepped).
local function settle(c, st, now)
  if c.wp then wsettle(c, st, now) else st.l = st.lv or level_at(c, st, now) end
  if st.u > now + CLOCK_STEP_US then c.stepped = true end
  if now > st.u or c.stepped then st.u = now end
  expire_holds(c, st, now)
end

-- unstep: a bucket that a denial leaves unwritten gets its stored time set
-- to now when it lies more than CLOCK_STEP_US ahead, so that a bucket denied
-- everything is not locked out until the clock catches up.
local function unstep(c, st, now)
  if st.u > now + CLOCK_STEP_US then
    c.stepped = true
    st.u = now
    redis.call('HSET', c.bk, 'u', fmt(now))
  end
end

-- used is level + held of st at now, as decisions count it (ledger.UsedAt).
local function used(c, st, now) return vadd(level_at(c, st, now), held_sum(st.holds, now)) end

-- before is what notice compares from: the use before a write, read only
-- when the limit has thresholds.
local function before(c, st, now) return c.th and used(c, st, now) end

-- notice is ledger.Cross for a write that took bucket c from use pre
-- (before) to its state st at now. It keeps the marks (above) in the
-- bucket's field t and appends one entry per event to the outbox
-- stream of the bucket's slot (c.ob), in the order of the thresholds: type
-- t ('c' crossed, 'r' recovered), time at, limit l, encoded key k, label
-- th, used u and capacity c (units), period start ps ('' unless periodic).
-- The stream's ids are Redis's clock (ms); an entry no sealer moved into
-- the global log within the retention is dropped (XADD MINID), so an
-- outbox nobody reads stays bounded as the log is. A limit without
-- thresholds drops the marks of an earlier list.
local function notice(c, st, now, pre)
  local th = c.th
  if not th then
    if st.ts or st.tm or st.old then
      redis.call('HDEL', c.bk, 't', 'ts', 'ta', 'tp')
      st.ts, st.ta, st.tp, st.tm, st.old = nil, nil, nil, nil, nil
    end
    return
  end
  local after = used(c, st, now)
  local period = c.ps and fmt(c.ps) or '0'
  local above = st.ta or 0
  if st.ts ~= th.sig then
    -- Marks of another list (or none) are first taken from the use before,
    -- without events, in whatever period they were kept.
    above = 0
    for i, lv in ipairs(th.lv) do
      if vcmp(pre, lv) >= 0 then above = bit.bor(above, 2 ^ (i - 1)) end
    end
  elseif (st.tp or '0') ~= period then
    -- Marks of an earlier period re-arm.
    above = 0
  end
  local ps, u, key, minid = '', nil, nil, nil
  if c.ps then ps = period end
  for i, lv in ipairs(th.lv) do
    local b = 2 ^ (i - 1)
    local reached, was = vcmp(after, lv) >= 0, bit.band(above, b) ~= 0
    if reached ~= was then
      if reached then above = bit.bor(above, b) else above = bit.band(above, bit.bnot(b)) end
      if not key then
        if not c.ek then c.ek, c.keep = string.match(c.ob, '^([^;]*);([^;]*)$') end
        u = vs(after)
        local _, e = string.find(c.bk, ':b:', 1, true)
        key = string.sub(c.bk, e + 1)
        local t = redis.call('TIME')
        minid = fmt(math.max(0, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(c.keep)))
      end
      redis.call('XADD', c.ek, 'MINID', '~', minid, '*', 't', reached and 'c' or 'r', 'at', fmt(now), 'l', th.name, 'k', key,
        'th', th.lab[i], 'u', u, 'c', th.cap, 'ps', ps)
      c.emitted = true
    end
  end
  if st.old or st.ts ~= th.sig or st.ta ~= above or st.tp ~= period then
    st.ts, st.ta, st.tp = th.sig, above, period
    st.tm = th.sig .. ':' .. above .. ':' .. period
    redis.call('HSET', c.bk, 't', st.tm)
    if st.old then
      redis.call('HDEL', c.bk, 'ts', 'ta', 'tp')
      st.old = nil
    end
  end
end

-- keep drops the grants of st that expired by now and sets the TTLs: a
-- bucket lives until it has leaked to zero, its last hold has expired and
-- its last grant has expired (plus a margin), and at least as long as its
-- history when the limit keeps one. A bucket not settled to now (a grant
-- or a revocation) gets a TTL computed from its stored level as if it were
-- now's, which is never shorter than the level needs.
local function keep(c, st, now)
  local us, live = 0, {}
  for _, g in ipairs(st.grants) do
    if g.e > now then
      live[#live + 1] = g
      if g.e - now > us then us = g.e - now end
    else
      redis.call('HDEL', c.bk, 'G' .. g.id)
    end
  end
  st.grants = live
  if c.wp then
    -- A window bucket lives until its newest slot stops counting.
    if st.ws ~= '' then
      local _, newest = wlast(st.ws)
      us = math.max(us, expiry(c, newest) - now)
    end
  elseif not vzero(st.l) and c.starts then
    -- the level is zero from the period's end on
    if c.pe - now > us then us = c.pe - now end
    -- Written ahead of the clock (a step back within CLOCK_STEP_US) in the
    -- next period: the level lasts to that period's end, at most twice this
    -- period's length away.
    if st.u >= c.pe then us = math.max(us, c.pe - now + 2 * (c.pe - c.ps)) end
  elseif not vzero(st.l) then
    local t = vnum(st.l) * c.lp.rp / c.lp.raf
    t = t * (1 + 1e-9) + 1
    if st.u > now then t = t + (st.u - now) end
    if t > us then us = t end
  end
  for _, h in ipairs(st.holds) do
    if h.e - now > us then us = h.e - now end
  end
  -- A bucket with a reached threshold lives until a write can notice its
  -- recovery: to the end of its period (the marks re-arm then), or, for
  -- the other kinds, without a TTL until a write clears the mark.
  -- A written bucket of a limit with rollover above zero passes rollover
  -- on into every next period, even untouched ones (ledger.Limit.PassesOn):
  -- it is kept without a TTL.
  if c.rmax and not vzero(c.rmax) and st.u ~= 0 then us = 1e300 end
  if st.ta and st.ta ~= 0 then
    if not c.starts then us = 1e300
    elseif st.tp == fmt(c.ps) and c.pe - now > us then us = c.pe - now end
  end
  local ms = math.ceil(us / 1000) + SLACK_MS
  if c.hist then
    if ms < HIST_MS then ms = HIST_MS end
    if c.wrote_hist then trim(c, now) end
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

-- finish writes level and time and sets the TTLs (keep).
local function finish(c, st, now)
  if c.wp and st.ws ~= '' then
    st.w = fmt(c.wp) .. '@' .. st.ws
    redis.call('HSET', c.bk, 'l', vs(st.l), 'u', fmt(st.u), 'w', st.w)
  else
    redis.call('HSET', c.bk, 'l', vs(st.l), 'u', fmt(st.u))
    if st.w then redis.call('HDEL', c.bk, 'w') end
    st.w = nil
  end
  -- The carry the bucket receives in the period it is now written in: its
  -- level in the period before is gone from here on.
  if st.ru and not vzero(st.ru) then
    st.r = vs(st.ru) .. ':' .. fmt(c.ps)
    redis.call('HSET', c.bk, 'r', st.r)
  elseif st.r then
    st.r = nil
    redis.call('HDEL', c.bk, 'r')
  end
  keep(c, st, now)
end

local function holds_str(st)
  if #st.holds == 0 then return '' end
  local t = {}
  for _, h in ipairs(st.holds) do t[#t + 1] = h.raw or (h.a .. ':' .. fmt(h.e)) end
  return table.concat(t, ',')
end

-- The fields of a hold record, in the order a reply carries them.
local HOLD = { 'id', 'lim', 'e', 'a', 's', 'c', 't0', 'te', 'tr' }

-- reply is the one answer shape of every bucket function:
--   { 'ok', now, x, the 9 HOLD fields of a hold record ('' when none),
--     then per bucket: level, updated, holds, limit }
-- A window bucket's holds are followed by ';' and its slots (the field w)
-- when it has any.
-- now is followed by '*' when the call appended threshold events to an
-- outbox stream (notice), so Go hints the sealer at the slot, and then by
-- '!' when a bucket's stored time was more than CLOCK_STEP_US
-- ahead of now and taken as now (settle, unstep), so Go logs and counts it.
-- x is what the operation decided (accepted '1'/'0', the amount drained, a
-- refusal, history entries). When the call wrote a history entry that it
-- names (an item's eid: fillup, denied, drain, reserved), x is followed by
-- ':' and, per bucket, that entry's id ('' for none), comma-separated. The
-- limit is '' in a fresh answer (the Go side knows the limit it passed) and
-- the limit document in an idempotency record, so a replay shows the limit
-- and the entry ids of the original call. A bucket's level is followed by
-- 'g' and the sum of its active grants (units) when it has any, then, for
-- a written bucket of a limit with rollover, by 'r', the carry it receives
-- (units, uncapped) and '@' the start of its period, so a replay repeats
-- them too. When ik is set the reply is also kept there for
-- ih.
local function reply(now, x, rk, items, ik, ih)
  local ids, named = {}, false
  for i, it in ipairs(items) do ids[i], named = it.eid or '', named or it.eid ~= nil end
  if named then x = x .. ':' .. table.concat(ids, ',') end
  local out = { 'ok', fmt(now), x }
  local h = rk and redis.call('HMGET', rk, unpack(HOLD)) or {}
  for i = 1, #HOLD do out[3 + i] = h[i] or '' end
  local emitted, stepped = '', ''
  for _, it in ipairs(items) do
    if it.c.emitted then emitted = '*' end
    if it.c.stepped then stepped = '!' end
  end
  out[2] = fmt(now) .. emitted .. stepped
  for _, it in ipairs(items) do
    local k = #out
    local hs = holds_str(it.st)
    if it.c.wp and it.st.ws ~= '' then hs = hs .. ';' .. fmt(it.c.wp) .. '@' .. it.st.ws end
    local l = vs(it.st.l)
    if it.st.g and not vzero(it.st.g) then l = l .. 'g' .. vs(it.st.g) end
    if it.st.ru then l = l .. 'r' .. vs(it.st.ru) .. '@' .. fmt(it.c.ps) end
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = l, fmt(it.st.u), hs, ''
  end
  if ik then
    local rec = { unpack(out) }
    for i, it in ipairs(items) do rec[3 + #HOLD + 4 * i] = it.c.lim end
    redis.call('SET', ik, #ih .. ':' .. ih .. cjson.encode(rec), 'PX', IDEM_MS)
  end
  return out
end

-- memo keeps what the arguments that repeat from call to call (a limit's
-- ceiling and leak rate, common costs) parse to, so the lean Fillup below
-- parses them once, not on every call. It lives as long as the library is
-- loaded (a cache: the values are the same either way, and nothing mutates
-- them) and is emptied when it reaches MEMO_MAX entries.
local MEMO_MAX, memo, memo_n = 1024, {}, 0
local function remember(k, v)
  if memo_n >= MEMO_MAX then memo, memo_n = {}, 0 end
  memo[k], memo_n = v, memo_n + 1
  return v
end
local function nv_memo(s) return memo[s] or remember(s, nv(s)) end
-- ceil_memo is a ceiling argument's ceiling (what precedes a '/', bkt).
local function ceil_memo(s) return memo[s] or remember(s, nv(string.match(s, '^%d+'))) end
local function lp_memo(ra, rp)
  local k = ra .. '/' .. rp
  return memo[k] or remember(k, leak_params(ra, rp))
end

-- fillup_lean is fillup for the commonest call, one leaky bucket without
-- history or idempotency key, while the bucket holds nothing but its level
-- and time (f, as read): the same rule as fillup, settle and finish below,
-- in plain Lua numbers. A level is H * 10^12 + L units in two locals, as a
-- pair of arith.lua, with the same bounds (H < 2^52), and the leak is
-- arith.lua's fast path; anything beyond them goes to the general path.
-- It returns nil for the general path to go on (also when the bucket has
-- other fields: holds, a history counter).
-- A limit with thresholds (th, as thresholds parsed it) takes it too while
-- nothing is reached, which is what notice would find and leave: the
-- bucket has no marks or marks of this list with none reached (its field
-- t is th.z: a leaky bucket has no period), and the level after the
-- charge (its use: it has no holds) is below th.min, the lowest threshold
-- level, so notice would compare and emit nothing. A bucket without marks
-- gets the ones notice writes then (th.z), in the same HSET. Anything else
-- (a crossing, a reached mark, marks of another list, marks in the fields
-- of an earlier version) is the general path's.
local function fillup_lean(bk, f, now, nows, ceil, ra, rp, cost, th)
  local ls, us, tm = '0', '0', nil
  for i = 1, #f, 2 do
    local k = f[i]
    if k == 'l' then ls = f[i + 1] elseif k == 'u' then us = f[i + 1]
    elseif th and k == 't' then tm = f[i + 1]
    else return nil end
  end
  if th then
    if tm and tm ~= th.z then return nil end
    if th.min.h == nil then return nil end
  end
  local cv, cp = nv_memo(cost), ceil_memo(ceil)
  if cv.h == nil or cp.h == nil then return nil end
  local stepped, x = false, '1'
  if cv.h == 0 and cv.l == 0 then
    -- Accepted, nothing written: the answer shows the bucket as stored.
  else
    -- nv
    local n, h, l = #ls, 0, 0
    if n <= 12 then l = tonumber(ls)
    elseif n <= 28 then h, l = tonumber(string.sub(ls, 1, n - 12)), tonumber(string.sub(ls, n - 11))
    else return nil end
    if h >= HMAX then return nil end
    local u, lp = tonumber(us), lp_memo(ra, rp)
    -- level_at (leak)
    if not ((h == 0 and l == 0) or u == 0 or now <= u) then
      if not lp.ran then return nil end
      local p = lp.ran * (now - u)
      if p >= LIM then return nil end
      local q = (p - math.fmod(p, lp.rp)) / lp.rp
      if q > 0 then
        local ql = math.fmod(q, E12)
        local qh = (q - ql) / E12
        if qh > h or (qh == h and ql >= l) then h, l = 0, 0
        else
          h, l = h - qh, l - ql
          if l < 0 then l = l + E12; h = h - 1 end
        end
      end
    end
    -- fits: vadd, vcmp
    h, l = h + cv.h, l + cv.l
    if l >= E12 then l = l - E12; h = h + 1 end
    if h < cp.h or (h == cp.h and l <= cp.l) then
      -- notice: a threshold reached is the general path's
      if th and (h > th.min.h or (h == th.min.h and l >= th.min.l)) then return nil end
      -- settle, add, finish
      if u > now + CLOCK_STEP_US then stepped = true end
      if now > u or stepped then u, us = now, nows end
      if h == 0 then ls = fmt(l) else ls = string.format('%d%012d', h, l) end
      if th and not tm then redis.call('HSET', bk, 'l', ls, 'u', us, 't', th.z)
      else redis.call('HSET', bk, 'l', ls, 'u', us) end
      local t = (h * E12 + l) * lp.rp / lp.raf
      t = t * (1 + 1e-9) + 1
      if u > now then t = t + (u - now) end
      local ms = math.ceil(t / 1000) + SLACK_MS
      if ms > 1e15 then redis.call('PERSIST', bk) else redis.call('PEXPIRE', bk, fmt(ms)) end
    else
      x = '0' -- unstep
      if u > now + CLOCK_STEP_US then
        stepped, us = true, nows
        redis.call('HSET', bk, 'u', us)
      end
    end
  end
  if stepped then nows = nows .. '!' end
  local out = { 'ok', nows, x, '', '', '', '', '', '', '', '', '', ls, us, '', '' } -- reply's shape
  return out
end

-- fillup: KEYS = bucket, history per item, then (standalone) each item's
-- limit definition, then, when ih ~= '', the idempotency record, which a
-- call of several items precedes with where an earlier version kept it.
-- ARGV = now, ih, check ('1': the definitions are in KEYS), n, then per
-- item 10 arguments: ceiling, leak amount, leak period, history flag,
-- version, limit document, thresholds, outbox, cost, meta ('' for none).
local function fillup(keys, args)
  local now_arg, ih, check = args[1], args[2], args[3] == '1'
  local n = args[4] == '1' and 1 or tonumber(args[4]) -- one item spares a strtod
  local ik = ih ~= '' and keys[#keys] or nil
  local rec = idem_get(ik, ih) or (ik and n > 1 and idem_get(keys[#keys - 1], ih))
  if rec then return rec end
  local now, nows = clock(now_arg)
  local items, accepted = {}, true
  for i = 1, n do
    local a = 4 + 10 * (i - 1)
    local ceil, ra, rp, hist, version, lim, th, ob, cost, meta = args[a + 1], args[a + 2], args[a + 3], args[a + 4],
      args[a + 5], args[a + 6], args[a + 7], args[a + 8], args[a + 9], args[a + 10]
    local v, inside, sw = guard(version, now)
    if not inside then return { E_PERIOD_TABLE, fmt(now) } end
    if check and stale(keys[2 * n + i], v) then return { E_STALE } end
    local un = unswitched(keys[2 * i - 1], sw)
    if un then return un end
    local f
    if n == 1 and not ik and ra ~= 'P' and ra ~= 'W' and hist == '0' then -- the usual call: fillup_lean
      f = redis.call('HGETALL', keys[1])
      local t = th ~= '' and thresholds(th) or nil
      local out = fillup_lean(keys[1], f, now, nows, ceil, ra, rp, cost, t)
      if out then return out end
    end
    local c = bkt(keys[2 * i - 1], keys[2 * i], ceil, ra, rp, hist, lim, th, ob)
    if c.starts and not in_period(c, now) then return { E_PERIOD_TABLE, fmt(now) } end
    local st = load(c, now, f)
    local cv = nv(cost)
    local ok = fits(c, st, now, cv)
    accepted = accepted and ok
    items[i] = { c = c, st = st, cost = cv, meta = meta, fits = ok }
  end
  if accepted then
    for _, it in ipairs(items) do
      if not vzero(it.cost) then
        local pre = before(it.c, it.st, now)
        settle(it.c, it.st, now)
        it.st.l = vadd(it.st.l, it.cost)
        charge_slot(it.c, it.st, it.cost)
        it.eid = record(it.c, it.st, now, it.st.sh and 'fillup!' or 'fillup', vs(it.cost), '', it.meta)
        notice(it.c, it.st, now, pre)
        finish(it.c, it.st, now)
      end
    end
  else
    -- Only the items whose own bucket could not take their cost record a
    -- denial.
    for _, it in ipairs(items) do
      unstep(it.c, it.st, now)
      if not it.fits then it.eid = deny(it.c, it.st, now, vs(it.cost), it.meta) end
    end
  end
  return reply(now, accepted and '1' or '0', nil, items, ik, ih)
end

-- one_bucket reads the arguments every single-bucket function starts with:
-- ARGV = now, ih, check, ceiling, leak amount, leak period, history flag,
-- version, limit document, thresholds, outbox, then the function's own from 12 on. KEYS = the
-- bucket at b, its history at b + 1, then (check) the definition, then (ih)
-- the idempotency record. It returns the bucket, now and the record key, or
-- the answer to give instead (a replay or an error code: E_SWITCH for a
-- bucket to switch first, unless put, switch_bucket's own call).
local function one_bucket(keys, args, b, put)
  local now_arg, ih, check = args[1], args[2], args[3] == '1'
  local ceil, ra, rp, hist, version, lim, th, ob = args[4], args[5], args[6], args[7], args[8], args[9], args[10],
    args[11]
  local ik = ih ~= '' and keys[#keys] or nil
  local rec = idem_get(ik, ih)
  if rec then return nil, nil, nil, rec end
  local now = clock(now_arg)
  local v, inside, sw = guard(version, now)
  if not inside then return nil, nil, nil, { E_PERIOD_TABLE, fmt(now) } end
  if check and stale(keys[b + 2], v) then return nil, nil, nil, { E_STALE } end
  local un = not put and unswitched(keys[b], sw)
  if un then return nil, nil, nil, un end
  local c = bkt(keys[b], keys[b + 1], ceil, ra, rp, hist, lim, th, ob)
  if c.starts and not in_period(c, now) then return nil, nil, nil, { E_PERIOD_TABLE, fmt(now) } end
  return c, now, ik
end

-- inspect: a bucket as stored (no writes).
local function inspect(keys, args)
  local c, now, _, early = one_bucket(keys, args, 1)
  if early then return early end
  return reply(now, '', nil, { { c = c, st = load(c, now) } })
end

-- settle_bucket is bucket.Switch: it settles a bucket to now under the
-- passed (old) rule and drops its window slots, so the level as of now
-- reads as one charge made now under any rule. A PUT that changes the rule
-- calls it on every bucket of the limit first.
local function settle_bucket(keys, args)
  local c, now, _, early = one_bucket(keys, args, 1)
  if early then return early end
  local st = load(c, now)
  if not (vzero(st.l) or st.u == 0 or (now <= st.u and not st.w)) then
    settle(c, st, now)
    if c.wp then st.ws = '' end
    finish(c, st, now)
  end
  return reply(now, '', nil, {})
end

-- switch_bucket writes what Go settled a bucket to through the ends of
-- temporary overrides that changed its rule since its last write
-- (ledger.TermsAt: ledger.SettleExpiries, bucket.Switch at each): ARGV[12]
-- = the stored time it settled from (µs), ARGV[13], ARGV[14] = the level
-- (units) and time (µs) it settled to. A bucket written since is left as
-- it is (x = '0': the caller calls again, and Go settles it again if it
-- still needs it); otherwise it is written as switched at that time (x =
-- '1'; load's c.put: a window bucket's level reads as one charge then),
-- with its carry and TTL under the terms passed, those of now.
local function switch_bucket(keys, args)
  local c, now, _, early = one_bucket(keys, args, 1, true)
  if early then return early end
  if (redis.call('HGET', c.bk, 'u') or '0') ~= args[12] then return reply(now, '0', nil, {}) end
  c.put = { l = nv(args[13]), u = tonumber(args[14]) }
  finish(c, load(c, now), now)
  return reply(now, '1', nil, {})
end

-- drain: ARGV[12] = amount, ARGV[13] = meta. x = the amount removed (and
-- the drain entry's id, see reply).
local function drain(keys, args)
  local c, now, ik, early = one_bucket(keys, args, 1)
  if early then return early end
  local amount = nv(args[12])
  local st = load(c, now)
  local removed, eid = pair(0, 0), nil
  -- A drain that can remove nothing (the level is zero now) is a no-op.
  if not vzero(amount) and not vzero(level_at(c, st, now)) then
    local pre = before(c, st, now)
    settle(c, st, now)
    removed = vmin(amount, st.l)
    st.l = vsub(st.l, removed)
    if c.wp then drain_slots(st, removed) end
    eid = record(c, st, now, 'drain', vs(removed), '', args[13])
    notice(c, st, now, pre)
    finish(c, st, now)
  end
  return reply(now, vs(removed), nil, { { c = c, st = st, eid = eid } }, ik, args[2])
end

-- reserve: KEYS = the new hold's record, then as in one_bucket; ARGV[12..]
-- = amount, ttl (µs), hold id, limit name, encoded bucket key, meta. x =
-- accepted ('1'/'0'), and the id of the reserved or denied entry (reply).
local function reserve(keys, args)
  local rk = keys[1]
  local c, now, ik, early = one_bucket(keys, args, 2)
  if early then return early end
  local amount, ttl, id, lname, ekey = nv(args[12]), tonumber(args[13]), args[14], args[15], args[16]
  local st = load(c, now)
  local active = 0
  for _, h in ipairs(st.holds) do if h.e > now then active = active + 1 end end
  if active >= MAX_HOLDS then return { E_TOO_MANY_HOLDS } end
  if not fits(c, st, now, amount) then
    unstep(c, st, now)
    local eid = deny(c, st, now, vs(amount), args[17])
    return reply(now, '0', nil, { { c = c, st = st, eid = eid } }, ik, args[2])
  end
  local pre = before(c, st, now)
  settle(c, st, now)
  local exp = now + ttl
  redis.call('HSET', rk, 'id', id, 'lim', lname, 'e', ekey, 'a', vs(amount), 's', 'a', 't0', fmt(now), 'te', fmt(exp))
  redis.call('PEXPIRE', rk, fmt(math.ceil(ttl / 1000) + HOLD_KEEP_MS + SLACK_MS))
  redis.call('HSET', c.bk, 'h' .. id, vs(amount) .. ':' .. fmt(exp))
  st.holds[#st.holds + 1] = { id = id, a = vs(amount), e = exp }
  local eid = record(c, st, now, st.sh and 'reserved!' or 'reserved', vs(amount), id, args[17])
  notice(c, st, now, pre)
  finish(c, st, now)
  return reply(now, '1', rk, { { c = c, st = st, eid = eid } }, ik, args[2])
end

local function drop_hold(c, st, id)
  redis.call('HDEL', c.bk, 'h' .. id)
  local kept = {}
  for _, x in ipairs(st.holds) do if x.id ~= id then kept[#kept + 1] = x end end
  st.holds = kept
end

-- resolve: KEYS = the hold record, its bucket, history (then definition and
-- idempotency record as in one_bucket); ARGV[12..] = mode ('c' commit, 'r'
-- release), amount ('' = the held amount), overrun ('1'), the encoded bucket
-- key the Go side read from the record, meta. x = the refusal ('' when none).
local function resolve(keys, args)
  local rk = keys[1]
  local c, now, ik, early = one_bucket(keys, args, 2)
  if early then return early end
  local mode, amount, overrun, ekey = args[12], args[13], args[14] == '1', args[15]
  local h = {}
  local f = redis.call('HGETALL', rk)
  for i = 1, #f, 2 do h[f[i]] = f[i + 1] end
  if not h.id or h.e ~= ekey then return { E_NOT_FOUND } end
  local st = load(c, now)
  local refusal = ''
  if h.s == 'e' or (h.s == 'a' and now >= tonumber(h.te)) then
    if expire_holds(c, st, now) then finish(c, st, now) end
    refusal = 'reservation_expired'
  elseif mode == 'c' then
    local charge = nv(h.a)
    if amount ~= '' then charge = nv(amount) end
    if h.s == 'c' then
      if vcmp(nv(h.c), charge) ~= 0 then refusal = 'reservation_closed' end
    elseif h.s == 'r' then
      refusal = 'reservation_closed'
    elseif vcmp(charge, nv(h.a)) > 0 and not overrun then
      refusal = 'exceeds_hold'
    else
      if vcmp(vadd(level_at(c, st, now), charge), nv(MAX_LEVEL)) > 0 then return { E_LEVEL_OVERFLOW } end
      local pre = before(c, st, now)
      settle(c, st, now)
      st.l = vadd(st.l, charge)
      charge_slot(c, st, charge)
      drop_hold(c, st, h.id)
      redis.call('HSET', rk, 's', 'c', 'c', vs(charge), 'tr', fmt(now))
      record(c, st, now, 'committed', vs(charge), h.id, args[16])
      notice(c, st, now, pre)
      finish(c, st, now)
    end
  elseif h.s == 'c' then
    refusal = 'reservation_closed'
  elseif h.s == 'a' then
    local pre = before(c, st, now)
    settle(c, st, now)
    drop_hold(c, st, h.id)
    redis.call('HSET', rk, 's', 'r', 'tr', fmt(now))
    record(c, st, now, 'released', h.a, h.id, args[16])
    notice(c, st, now, pre)
    finish(c, st, now)
  end
  return reply(now, refusal, rk, { { c = c, st = st } }, ik, args[2])
end

-- reservation: KEYS = the hold record; ARGV = now. No writes.
local function reservation(keys, args)
  if redis.call('EXISTS', keys[1]) == 0 then return { E_NOT_FOUND } end
  return reply(clock(args[1]), '', keys[1], {})
end

-- history: ARGV[12..] = cursor time ('' for the first page), cursor id, n.
-- Records due expiries, then lists up to n + 1 entries newest first by
-- (time, id) as x, one "time|id|event|amount|hold[|meta]" per line.
local function history(keys, args)
  local c, now, _, early = one_bucket(keys, args, 1)
  if early then return early end
  local ct, cid, n = args[12], args[13], tonumber(args[14])
  local st = load(c, now)
  if expire_holds(c, st, now) then finish(c, st, now) end
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
  return reply(now, table.concat(out, '\n'), nil, {})
end

-- grant_str is a grant as the grant functions answer it:
-- "id|amount|expires|created|seq".
local function grant_str(g)
  return g.id .. '|' .. g.a .. '|' .. fmt(g.e) .. '|' .. fmt(g.t) .. '|' .. fmt(g.q)
end

-- grant_add: ARGV[12..] = amount (units), expires (µs; '' for the end of
-- the current period of a periodic limit), room (units: the most the
-- bucket's active grants may sum to, ledger.MaxAmount minus the limit's
-- capacity), the new grant's id, meta. It refuses a grant that expires by
-- now or that would take the active grants past room with E_GRANT_INVALID,
-- now and the active grants (Go runs ledger.GrantExpiry with them for the
-- error); the checks that need no clock are Go's, before the call. x = the
-- grant (grant_str), and the granted entry's id (reply). The bucket is not
-- settled: a grant changes no level, only the bounds.
local function grant_add(keys, args)
  local c, now, ik, early = one_bucket(keys, args, 1)
  if early then return early end
  local amount, exp, room, id = args[12], args[13], args[14], args[15]
  local st = load(c, now)
  if exp == '' then exp = c.pe else exp = tonumber(exp) end
  local sum = vadd(st.g or pair(0, 0), nv(amount))
  if not exp or exp <= now or vcmp(sum, nv(room)) > 0 then
    return { E_GRANT_INVALID, fmt(now), vs(st.g or pair(0, 0)) }
  end
  local q = 0
  for _, g in ipairs(st.grants) do q = math.max(q, g.q) end
  local g = { id = id, a = amount, e = exp, t = now, q = q + 1 }
  redis.call('HSET', c.bk, 'G' .. id, amount .. ':' .. fmt(exp) .. ':' .. fmt(now) .. ':' .. fmt(g.q))
  st.grants[#st.grants + 1], st.g = g, sum
  expire_holds(c, st, now)
  local eid = record(c, st, now, 'granted', amount, id, args[16])
  keep(c, st, now)
  return reply(now, grant_str(g), nil, { { c = c, st = st, eid = eid } }, ik, args[2])
end

-- grant_revoke: ARGV[12..] = the grant's id, meta. It removes the grant
-- while it counts (E_GRANT_NOT_FOUND otherwise: unknown, revoked or
-- expired) and records a revoked entry. x = the grant (grant_str) and the
-- revoked entry's id (reply).
local function grant_revoke(keys, args)
  local c, now, ik, early = one_bucket(keys, args, 1)
  if early then return early end
  local id = args[12]
  local st = load(c, now)
  local found, kept = nil, {}
  for _, g in ipairs(st.grants) do
    if g.id == id and g.e > now then found = g else kept[#kept + 1] = g end
  end
  if not found then return { E_GRANT_NOT_FOUND } end
  redis.call('HDEL', c.bk, 'G' .. id)
  st.grants, st.g = kept, vsub(st.g, nv(found.a))
  expire_holds(c, st, now)
  local eid = record(c, st, now, 'revoked', found.a, id, args[13])
  keep(c, st, now)
  return reply(now, grant_str(found), nil, { { c = c, st = st, eid = eid } }, ik, args[2])
end

-- grant_list: the bucket's grants that count at now, one grant_str per
-- line, as x. No writes.
local function grant_list(keys, args)
  local c, now, _, early = one_bucket(keys, args, 1)
  if early then return early end
  local out = {}
  for _, g in ipairs(load(c, now).grants) do
    if g.e > now then out[#out + 1] = grant_str(g) end
  end
  return reply(now, table.concat(out, '\n'), nil, {})
end

-- limit_put: KEYS = definition, name index, generation counter, generation
-- → name; ARGV = now, name, capacity, leak amount, per (µs), history
-- ('1'/'0'), then a periodic limit's every, tz and start_day, then a window
-- limit's length and precision (µs) ('' for the other kinds; amount and
-- per are '' unless the limit leaks), then record_denials ('1'/'0'), then
-- the mode ('enforce', 'shadow', 'soft') and the grace (a percentage), then
-- the thresholds as the limit lists them, comma-separated ('' for none). The
-- functions never read mode and grace from here: Go passes each call the
-- mode's ceiling (bkt). A new limit takes the next generation; an existing
-- one keeps its generation and creation time.
-- Answers the definition before and after as flat field/value lists.
local function limit_put(keys, args)
  local dk, idx, genc, gens = keys[1], keys[2], keys[3], keys[4]
  local now_arg, name, cap, amount, per, hist = args[1], args[2], args[3], args[4], args[5], args[6]
  local every, tz, sday = args[7] or '', args[8] or '', args[9] or ''
  local wl, wp, rd = args[10] or '', args[11] or '', args[12] or '0'
  local mode, grace, th, ro = args[13] or 'enforce', args[14] or '0', args[15] or '', args[16] or ''
  local _, now = clock(now_arg)
  local old = redis.call('HGETALL', dk)
  local g, ct = redis.call('HGET', dk, 'g'), redis.call('HGET', dk, 'ct')
  if not g then
    g = tostring(redis.call('INCR', genc))
    ct = now
    redis.call('ZADD', idx, 0, name)
    redis.call('HSET', gens, g, name)
  end
  redis.call('HSET', dk, 'c', cap, 'a', amount, 'p', per, 'hi', hist, 'ct', ct, 'ut', now, 'g', g,
    'pe', every, 'pz', tz, 'pd', sday, 'wl', wl, 'wp', wp, 'rd', rd, 'm', mode, 'gr', grace, 'th', th, 'ro', ro)
  redis.call('HINCRBY', dk, 'v', 1)
  return { redis.call('HGETALL', dk), old }
end

-- limit_delete: KEYS = definition, name index, generation → name; ARGV =
-- name. Answers the generation deleted, or '' when there was no such limit.
local function limit_delete(keys, args)
  local dk, idx, gens = keys[1], keys[2], keys[3]
  local name = args[1]
  local g = redis.call('HGET', dk, 'g')
  if not g then return '' end
  redis.call('DEL', dk)
  redis.call('ZREM', idx, name)
  redis.call('HDEL', gens, g)
  if keys[4] then redis.call('UNLINK', keys[4], keys[5], keys[6]) end
  return g
end

-- Overrides (docs/redis.md "Overrides") live in the limit's slot: a hash
-- (pattern → "expires|created|updated|terms", times in µs, expires '' for
-- none, terms JSON that only Go reads) and a zset of the patterns for
-- listing in byte order. Every change bumps the definition's override
-- counter ov (Go reloads a limit's overrides when it moves) and its version
-- v (so a standalone bucket function answers stale and Go rereads).
-- ov_active reports whether a stored override applies at now.
local function ov_active(v, now)
  local e = string.match(v, '^(%d*)|')
  return e == '' or tonumber(e) > now
end

-- ov_changed bumps the counters and logs the change of pattern in the
-- stream ol (id "<ov>-1", at most about OV_LOG entries), from which Go
-- applies the changes since the counter it loaded at.
local function ov_changed(dk, ol, pattern)
  local ov = redis.call('HINCRBY', dk, 'ov', 1)
  redis.call('HINCRBY', dk, 'v', 1)
  redis.call('XADD', ol, 'MAXLEN', '~', OV_LOG, ov .. '-1', 'p', pattern)
end

-- override_put: KEYS = definition, overrides hash, patterns zset, log; ARGV =
-- now, the limit's "generation:version" Go validated against, pattern,
-- expires ('' for none), terms. Answers { stored value } or a code:
-- E_NOT_FOUND (no limit), E_STALE (the limit changed), E_OVERRIDE_EXPIRED
-- and now (expires is not after the store's clock).
local function override_put(keys, args)
  local dk, oh, oz = keys[1], keys[2], keys[3]
  local now_arg, version, pattern, exp, terms = args[1], args[2], args[3], args[4], args[5]
  local now = clock(now_arg)
  local v = redis.call('HMGET', dk, 'g', 'v')
  if not v[1] then return { E_NOT_FOUND } end
  if v[1] .. ':' .. (v[2] or '') ~= version then return { E_STALE } end
  if exp ~= '' and tonumber(exp) <= now then return { E_OVERRIDE_EXPIRED, fmt(now) } end
  local ct = fmt(now)
  local old = redis.call('HGET', oh, pattern)
  if old and ov_active(old, now) then ct = string.match(old, '^%d*|(%d+)|') end
  local val = exp .. '|' .. ct .. '|' .. fmt(now) .. '|' .. terms
  redis.call('HSET', oh, pattern, val)
  redis.call('ZADD', oz, 0, pattern)
  ov_changed(dk, keys[4], pattern)
  return { val }
end

-- override_delete: KEYS as override_put; ARGV = now, pattern. Removes an
-- override that applies at now; answers { removed value }, E_NOT_FOUND (no
-- limit) or E_OVERRIDE_NOT_FOUND (no such override, or expired).
local function override_delete(keys, args)
  local dk, oh, oz = keys[1], keys[2], keys[3]
  local now = clock(args[1])
  if not redis.call('HGET', dk, 'g') then return { E_NOT_FOUND } end
  local old = redis.call('HGET', oh, args[2])
  if not old or not ov_active(old, now) then return { E_OVERRIDE_NOT_FOUND } end
  redis.call('HDEL', oh, args[2])
  redis.call('ZREM', oz, args[2])
  ov_changed(dk, keys[4], args[2])
  return { old }
end

-- seal moves the events of one slot's outbox stream into the global log:
-- KEYS = the global log (a stream), the sealed ids (a hash, slot → id of
-- the last entry of that slot's stream already in the log); ARGV = how
-- long the log keeps events (ms), the slot, the sealed id the caller read
-- ('' for none), the id of the last entry it seals, the base of the
-- per-bucket indexes and how many ids each keeps, then per event the 8
-- values of an outbox entry (notice). Each bucket's index (base .. limit ..
-- ':' .. encoded key, a list in the {P} slot too) keeps the log ids of its
-- newest events, newest first, and lives as long as the log keeps them. Unless another sealer moved the
-- slot's sealed id since the caller read it (then it answers 0 and writes
-- nothing: the caller reads the stream again), it appends the events and
-- moves the sealed id in one step, so every event enters the log once. The
-- log is trimmed to the retention by its own ids (Redis's clock at
-- sealing). It answers the number of events appended.
local EV = { 't', 'at', 'l', 'k', 'th', 'u', 'c', 'ps' }
local function seal(keys, args)
  local log, cur = keys[1], keys[2]
  local keep, slot, seen, last, base, per = tonumber(args[1]), args[2], args[3], args[4], args[5], args[6]
  if (redis.call('HGET', cur, slot) or '') ~= seen then return 0 end
  local n, kv = 0, {}
  for a = 7, #args, 8 do
    for j = 1, 8 do kv[2 * j - 1], kv[2 * j] = EV[j], args[a + j - 1] end
    local id = redis.call('XADD', log, '*', unpack(kv))
    local bi = base .. kv[6] .. ':' .. kv[8] -- the event's limit and key
    redis.call('LPUSH', bi, id)
    redis.call('LTRIM', bi, 0, per - 1)
    redis.call('PEXPIRE', bi, keep)
    n = n + 1
  end
  redis.call('HSET', cur, slot, last)
  local t = redis.call('TIME')
  local minid = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - keep
  if minid > 0 then redis.call('XTRIM', log, 'MINID', fmt(minid)) end
  return n
end

local RO = { 'no-writes' }
redis.register_function('budgetd_fillup' .. V, fillup)
redis.register_function { function_name = 'budgetd_inspect' .. V, callback = inspect, flags = RO }
redis.register_function('budgetd_settle' .. V, settle_bucket)
redis.register_function('budgetd_switch' .. V, switch_bucket)
redis.register_function('budgetd_drain' .. V, drain)
redis.register_function('budgetd_reserve' .. V, reserve)
redis.register_function('budgetd_resolve' .. V, resolve)
redis.register_function { function_name = 'budgetd_reservation' .. V, callback = reservation, flags = RO }
redis.register_function('budgetd_history' .. V, history)
redis.register_function('budgetd_grant_add' .. V, grant_add)
redis.register_function('budgetd_grant_revoke' .. V, grant_revoke)
redis.register_function { function_name = 'budgetd_grant_list' .. V, callback = grant_list, flags = RO }
redis.register_function('budgetd_limit_put' .. V, limit_put)
redis.register_function('budgetd_limit_delete' .. V, limit_delete)
redis.register_function('budgetd_override_put' .. V, override_put)
redis.register_function('budgetd_override_delete' .. V, override_delete)
redis.register_function('budgetd_seal' .. V, seal)
