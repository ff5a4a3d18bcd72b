-- limits.lua: limit definitions. All limit keys share one hash slot ({prefix}).

local function clock(arg)
  if arg ~= nil and arg ~= '' then return arg end
  local t = redis.call('TIME')
  return string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end

local function def(key)
  local f = redis.call('HGETALL', key)
  local r = {}
  for i = 1, #f, 2 do r[f[i]] = f[i + 1] end
  return r
end

-- op_put: KEYS = def, idx, gen counter, gens; ARGV = now, name, capacity,
-- leak amount, per (µs), history ('1'/'0'). A new limit takes the next
-- generation; an existing one keeps its generation and creation time.
local function op_put()
  local now = clock(ARGV[1])
  local old = def(KEYS[1])
  local g, ct = old.g, old.ct
  if not g then
    g = tostring(redis.call('INCR', KEYS[3]))
    ct = now
    redis.call('ZADD', KEYS[2], 0, ARGV[2])
    redis.call('HSET', KEYS[4], g, ARGV[2])
  end
  redis.call('HSET', KEYS[1], 'c', ARGV[3], 'a', ARGV[4], 'p', ARGV[5], 'hi', ARGV[6], 'ct', ct, 'ut', now, 'g', g)
  redis.call('HINCRBY', KEYS[1], 'v', 1)
  local cur = def(KEYS[1])
  return { cjson.encode(cur), cjson.encode(old) }
end

-- op_delete: KEYS = def, idx, gens; ARGV = name. Returns the generation
-- deleted, or '' when there was no such limit.
local function op_delete()
  local g = redis.call('HGET', KEYS[1], 'g')
  if not g then return '' end
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], g)
  return g
end

-- op_list: KEYS = idx; ARGV = after, n, def key prefix. Reads only.
local function op_list()
  local min = '-'
  if ARGV[1] ~= '' then min = '(' .. ARGV[1] end
  local names = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, tonumber(ARGV[2]))
  local out = {}
  for i, n in ipairs(names) do
    local d = def(ARGV[3] .. n)
    d.name = n
    out[i] = cjson.encode(d)
  end
  return out
end
