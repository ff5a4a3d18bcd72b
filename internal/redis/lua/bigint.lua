-- bigint.lua: exact non-negative integer arithmetic for budgetd's scripts.
--
-- Lua numbers are doubles, exact only below 2^53. Amounts and levels are
-- integers in units of 10^-12 (up to 10^27 units for a level of 10^15), and the
-- leak multiplies them by elapsed microseconds (up to ~2^51), so every amount is
-- kept as an array of base-10^7 limbs, least significant first. Every partial
-- result of every routine below stays under 2^53, so it is exact.
--
-- The routines are created on first use, by big(): a script call whose
-- amounts all fit fast.lua's pairs never needs them, and creating a Lua
-- function costs time on every call of a script that defines it.

-- fmt formats an exact integer-valued double (< 2^53) without exponent.
local function fmt(x)
  return string.format('%.0f', x)
end

local B -- the routines, once big() has created them

local function big()
  if B then return B end
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

  local function bn_zero(a) return #a == 1 and a[1] == 0 end

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

  local function bn_min(a, b)
    if bn_cmp(a, b) <= 0 then return a end
    return b
  end

  B = { bn = bn, bs = bs, bnum = bnum, bn_zero = bn_zero, bn_cmp = bn_cmp, bn_add = bn_add, bn_sub = bn_sub,
    bn_mul = bn_mul, bn_divsmall = bn_divsmall, bn_min = bn_min }
  return B
end
