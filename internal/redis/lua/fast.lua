-- fast.lua: the scripts' amounts, exact, in plain Lua numbers where they fit
-- and in the big integers of bigint.lua where they do not.
--
-- A value is either a pair { h = H, l = L } meaning H * 10^12 + L units, with
-- integers 0 <= L < 10^12 and 0 <= H < 2^52, or a bigint (an array of limbs).
-- Every amount budgetd stores fits a pair: a level is at most 10^15 (H <= 10^15),
-- an input amount at most 10^12, a sum of 1000 holds at most 10^15. The bound
-- H < 2^52 makes a sum of two pairs exact: H1 + H2 + 1 < 2^53, L1 + L2 < 2^53.
-- A result outside that bound, and any value parsed outside it, is a bigint,
-- and an operation with a bigint operand runs in bigint.lua: the fast path
-- never rounds, it only declines.
local E12 = 1000000000000                 -- 10^12
local HMAX = 4503599627370496             -- 2^52, the bound on H
local LIM = 9007199254740992              -- 2^53: integers below it are exact

local function pair(h, l) return { h = h, l = l } end

-- nv parses a non-negative decimal integer string (no sign, no exponent).
-- The low 12 digits are below 10^12 and H is taken only when tonumber gives
-- less than 2^52: rounding is monotone, so a result below 2^52 means the
-- digits were below 2^52 and were converted exactly.
local function nv(s)
  local n = #s
  if n <= 12 then return pair(0, tonumber(s)) end
  if n <= 28 then
    local h = tonumber(string.sub(s, 1, n - 12))
    if h < HMAX then return pair(h, tonumber(string.sub(s, n - 11))) end
  end
  return big().bn(s)
end

-- vs formats a value as a decimal string.
local function vs(a)
  if a.h == nil then return big().bs(a) end
  if a.h == 0 then return fmt(a.l) end
  return fmt(a.h) .. string.format('%012.0f', a.l)
end

local function vbig(a)
  if a.h == nil then return a end
  return big().bn(vs(a))
end

-- norm turns a bigint result back into a pair when it fits.
local function norm(a) return nv(big().bs(a)) end

local function vzero(a)
  if a.h == nil then return big().bn_zero(a) end
  return a.h == 0 and a.l == 0
end

local function vcmp(a, b)
  if a.h == nil or b.h == nil then return big().bn_cmp(vbig(a), vbig(b)) end
  if a.h ~= b.h then return (a.h < b.h) and -1 or 1 end
  if a.l ~= b.l then return (a.l < b.l) and -1 or 1 end
  return 0
end

local function vadd(a, b)
  if a.h ~= nil and b.h ~= nil then
    local l, h = a.l + b.l, a.h + b.h
    if l >= E12 then l = l - E12; h = h + 1 end
    if h < HMAX then return pair(h, l) end
  end
  return big().bn_add(vbig(a), vbig(b))
end

-- vsub returns a - b for a >= b.
local function vsub(a, b)
  if a.h ~= nil and b.h ~= nil then
    local l, h = a.l - b.l, a.h - b.h
    if l < 0 then l = l + E12; h = h - 1 end
    return pair(h, l)
  end
  return norm(big().bn_sub(vbig(a), vbig(b)))
end

local function vmin(a, b)
  if vcmp(a, b) <= 0 then return a end
  return b
end

-- vnum is a value as a double, rounded: only for TTL estimates.
local function vnum(a)
  if a.h == nil then return tonumber(big().bs(a)) end
  return a.h * E12 + a.l
end

-- leak_params: the leak amount ra (units) and period rp (µs), already divided
-- by their greatest common divisor on the Go side: floor(A*dt/P) equals
-- floor(ra*dt/rp) since A/P = ra/rp. rp <= P <= 9*10^14 (bn_divsmall's bound).
-- ran is ra as a Lua number when it has at most 15 digits (< 10^15 < 2^53,
-- exact), else nil. ras, the decimal string, is for the big-integer fallback.
local function leak_params(ras, rps)
  local p = { ras = ras, rp = tonumber(rps), raf = tonumber(ras) }
  if #ras <= 15 then p.ran = p.raf end
  return p
end

-- leak: max(0, level - floor(ra*dt/rp)) for dt > 0, which is bucket.LevelAt.
--
-- Fast path, all in Lua numbers: ra and dt are integers below 2^53. A
-- product of doubles is the exact product rounded, and rounding is monotone
-- with 2^53 representable, so p = ra*dt < 2^53 holds exactly when the true
-- product is below 2^53, and then p is that product. For 0 < p < 2^53 and
-- 0 < rp < 2^53, math.fmod (C fmod) is exact, p - fmod(p, rp) is an exact
-- multiple of rp below 2^53, and dividing it by rp gives the exact quotient:
-- the leak floor(p / rp), < 2^53, split into a pair the same way by 10^12.
-- When p >= 2^53 the bucket is empty if level*rp < 2^53 (then
-- ra*dt >= 2^53 > level*rp, so floor(ra*dt/rp) >= level), checked the same
-- way. Anything else runs the big-integer long division.
local function leak(lp, level, dt)
  if level.h ~= nil and lp.ran ~= nil then
    local p = lp.ran * dt
    if p < LIM then
      local q = (p - math.fmod(p, lp.rp)) / lp.rp
      local ql = math.fmod(q, E12)
      local lk = pair((q - ql) / E12, ql)
      if vcmp(lk, level) >= 0 then return pair(0, 0) end
      return vsub(level, lk)
    end
    local ln = level.h * E12
    if ln < LIM then
      ln = ln + level.l
      if ln < LIM and ln * lp.rp < LIM then return pair(0, 0) end
    end
  end
  local B = big()
  local lk = B.bn_divsmall(B.bn_mul(B.bn(lp.ras), B.bnum(dt)), lp.rp)
  local lb = vbig(level)
  if B.bn_cmp(lk, lb) >= 0 then return pair(0, 0) end
  return norm(B.bn_sub(lb, lk))
end
