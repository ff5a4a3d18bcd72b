-- arith.lua: exact non-negative integer arithmetic for budgetd's Redis functions.
--
-- Lua numbers are doubles, exact only below 2^53. Amounts and levels are
-- integers in units of 10^-12 (up to 10^27 units for a level of 10^15), and the
-- leak multiplies them by elapsed microseconds (up to ~2^51), so every amount is
-- kept as an array of base-10^7 limbs, least significant first. Every partial
-- result of every routine below stays under 2^53, so it is exact.

-- fmt formats an exact integer-valued double (< 2^53) without exponent.
-- Lua 5.1's %d converts to a C long (64 bits here), which holds such a
-- double exactly, and is about twice as fast as %.0f.
local function fmt(x)
  return string.format('%d', x)
end

local BASE, BD = 10000000, 7

local function bn_trim(a)
  while #a > 1 and a[#a] == 0 do a[#a] = nil end
  return a
end

-- bn parses a non-negative decimal integer string.
local function bn(s)
  local a, i = {}, #s
  while i >= 1 do
    local j = i - BD + 1
    if j < 1 then j = 1 end
    a[#a + 1] = tonumber(string.sub(s, j, i))
    i = j - 1
  end
  if #a == 0 then a[1] = 0 end
  return bn_trim(a)
end

-- bnum converts an exact non-negative integer double (< 2^53).
local function bnum(x)
  return bn(fmt(x))
end

-- bs formats a bigint as a decimal string.
local function bs(a)
  local t = { string.format('%d', a[#a]) }
  for i = #a - 1, 1, -1 do t[#t + 1] = string.format('%07d', a[i]) end
  return table.concat(t)
end

local function bn_cmp(a, b)
  if #a ~= #b then return (#a < #b) and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return (a[i] < b[i]) and -1 or 1 end
  end
  return 0
end

local function bn_add(a, b)
  local r, c = {}, 0
  local n = #a
  if #b > n then n = #b end
  for i = 1, n do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= BASE then r[i] = s - BASE; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 then r[n + 1] = c end
  return r
end

-- bn_sub returns a - b for a >= b.
local function bn_sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then r[i] = s + BASE; c = 1 else r[i] = s; c = 0 end
  end
  return bn_trim(r)
end

-- bn_mul: schoolbook product. A partial sum is < 10^7 + 10^14 + 10^8 < 2^53.
local function bn_mul(a, b)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local ai, c = a[i], 0
    if ai ~= 0 then
      for j = 1, #b do
        local t = r[i + j - 1] + ai * b[j] + c
        c = math.floor(t / BASE)
        r[i + j - 1] = t - c * BASE
      end
      local k = i + #b
      while c > 0 do
        local t = r[k] + c
        c = math.floor(t / BASE)
        r[k] = t - c * BASE
        k = k + 1
      end
    end
  end
  return bn_trim(r)
end

-- bn_divsmall returns floor(a / d) and a mod d for an integer 1 <= d <= 9*10^14.
-- It is long division in chunks of k decimal digits, k as large as keeps
-- d * 10^k <= 9*10^15 < 2^53 (k = 1 for the longest periods, 7 or more for
-- periods up to 15 minutes): the running remainder times 10^k plus a chunk stays
-- below 2^53, so it is exact, and each quotient chunk from the floating division
-- is corrected by integer comparisons, so it is exact too.
local function bn_divsmall(a, d)
  local k, p = 1, 10
  while k < 15 and d * p * 10 <= 9e15 do k = k + 1; p = p * 10 end
  local s = bs(a)
  local pad = (k - #s % k) % k
  if pad > 0 then s = string.rep('0', pad) .. s end
  local q, r = {}, 0
  local qf = '%0' .. k .. 'd'
  for i = 1, #s, k do
    r = r * p + tonumber(string.sub(s, i, i + k - 1))
    local x = math.floor(r / d)
    while x * d > r do x = x - 1 end
    while r - x * d >= d do x = x + 1 end
    r = r - x * d
    q[#q + 1] = string.format(qf, x)
  end
  return bn(table.concat(q)), r
end

-- Values: the functions' amounts, exact, in plain Lua numbers where they fit
-- and in the big integers above where they do not.
--
-- A value is either a pair { h = H, l = L } meaning H * 10^12 + L units, with
-- integers 0 <= L < 10^12 and 0 <= H < 2^52, or a bigint (an array of limbs).
-- Every amount budgetd stores fits a pair: a level is at most 10^15 (H <= 10^15),
-- an input amount at most 10^12, a sum of 1000 holds at most 10^15. The bound
-- H < 2^52 makes a sum of two pairs exact: H1 + H2 + 1 < 2^53, L1 + L2 < 2^53.
-- A result outside that bound, and any value parsed outside it, is a bigint,
-- and an operation with a bigint operand runs in the routines above: the fast path
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
  return bn(s)
end

-- vs formats a value as a decimal string.
local function vs(a)
  if a.h == nil then return bs(a) end
  if a.h == 0 then return fmt(a.l) end
  return string.format('%d%012d', a.h, a.l)
end

local function vbig(a)
  if a.h == nil then return a end
  return bn(vs(a))
end

-- norm turns a bigint result back into a pair when it fits.
local function norm(a) return nv(bs(a)) end

local function vzero(a)
  if a.h == nil then return #a == 1 and a[1] == 0 end
  return a.h == 0 and a.l == 0
end

local function vcmp(a, b)
  if a.h == nil or b.h == nil then return bn_cmp(vbig(a), vbig(b)) end
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
  return bn_add(vbig(a), vbig(b))
end

-- vsub returns a - b for a >= b.
local function vsub(a, b)
  if a.h ~= nil and b.h ~= nil then
    local l, h = a.l - b.l, a.h - b.h
    if l < 0 then l = l + E12; h = h - 1 end
    return pair(h, l)
  end
  return norm(bn_sub(vbig(a), vbig(b)))
end

local function vmin(a, b)
  if vcmp(a, b) <= 0 then return a end
  return b
end

-- vnum is a value as a double, rounded: only for TTL estimates.
local function vnum(a)
  if a.h == nil then return tonumber(bs(a)) end
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
      if q == 0 then return level end -- nothing leaked yet (a hot bucket)
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
  local lk = bn_divsmall(bn_mul(bn(lp.ras), bnum(dt)), lp.rp)
  local lb = vbig(level)
  if bn_cmp(lk, lb) >= 0 then return pair(0, 0) end
  return norm(bn_sub(lb, lk))
end

-- held_sum sums the holds active at now. A hold amount is an input (at most
-- 10^12), so up to 1000 of them sum to at most 10^15 and stay a pair.
local function held_sum(holds, now)
  local sum = pair(0, 0)
  for _, h in ipairs(holds) do
    if h.e > now and h.a ~= '0' then sum = vadd(sum, nv(h.a)) end
  end
  return sum
end
