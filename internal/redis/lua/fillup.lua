-- fillup.lua: op_fillup, the Fillup of one or many buckets (see bucket.lua).

-- op_fillup: KEYS = bk1, hk1, ..., bkN, hkN [, idem]; ARGV = now, idem hash,
-- N, then per item a descriptor (DESC) and the cost.
--
-- The answer is a flat array, no JSON: 'ok', now, accepted ('1' or '0'),
-- then per item its level, updated time, holds (holds_str) and fits ('1' or
-- '0'). The limit each item was decided with is the one the caller passed.
-- Only a call with an idempotency key builds the JSON document its record
-- keeps (the same document as before the flat answer, limits included, so
-- any version replays any record); a replay answers 'replay' and that
-- document.
local function op_fillup()
  local n = tonumber(ARGV[3])
  local ik, replay = idem_begin(2 * n + 1)
  if replay then return replay end
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
  local out = { 'ok', fmt(now), accepted and '1' or '0' }
  for _, it in ipairs(items) do
    local c, st = it.c, it.st
    if accepted and not vzero(it.cost) then
      settle(c, st, now)
      st.l = vadd(st.l, it.cost)
      record(c, st, now, 'fillup', vs(it.cost), '')
      finish(c, st, now)
    end
    local k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4] = vs(st.l), fmt(st.u), holds_str(st), it.fits and '1' or '0'
  end
  if ik then
    local doc = { now = out[2], acc = accepted, items = {} }
    for i, it in ipairs(items) do
      local k = 4 * i
      doc.items[i] = { l = out[k], u = out[k + 1], h = out[k + 2], lim = it.c.lim, fits = it.fits }
    end
    idem_put(ik, ARGV[2], cjson.encode(doc))
  end
  return out
end
