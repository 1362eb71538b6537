-- Diana RLQS: the demand of the Envoy instances reporting for one bucket, the Lua twin of
-- merge in fleet.go (the two must stay the same arithmetic; a test replays random traces
-- through both).
-- KEYS[1]: the bucket's hash, one field per instance: "demand expires" (integers:
-- milli-requests a second, -1 while unknown; µs).
-- KEYS[2]: a sorted set of the same instances by expiry (µs), and KEYS[3] a hash of the
-- totals over KEYS[1]'s instances (sum: of the known demands; known, unknown: how many), so
-- that a report costs O(log n) and the expired instances, not a read of all n: every instance
-- reports every interval, and reading all of them on each report costs the fleet n² an
-- interval. KEYS[3] missing while KEYS[1] exists (written by an earlier version of the
-- script): the two are rebuilt from KEYS[1] once.
-- ARGV: now (µs; -1: Redis TIME), instance, demand (≥ 0; -1: unknown yet; -2: the instance
-- leaves), ttl (µs), max (instances a bucket holds at most).
-- Reply: {sum, known, unknown, full}: the live instances' summed known demand, how many have a
-- known demand and how many not yet, and 1 when the bucket was full and the instance new
-- (nothing recorded).
local now = tonumber(ARGV[1])
local pad = 0
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  pad = 3600000 -- a caller's clock (tests): keys outlive the test rather than Redis's clock
end
local me, demand, ttl, max = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local sum, known, unknown = 0, 0, 0
local function count(d, sign)
  if d < 0 then unknown = unknown + sign else sum, known = sum + sign * d, known + sign end
end
local function parse(v)
  local d, e = string.match(v, '^(%-?%d+) (%d+)$')
  return tonumber(d), tonumber(e)
end
local totals = redis.call('HMGET', KEYS[3], 'sum', 'known', 'unknown')
if totals[1] then
  sum, known, unknown = tonumber(totals[1]), tonumber(totals[2]), tonumber(totals[3])
else
  redis.call('DEL', KEYS[2])
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    local d, e = parse(all[i + 1])
    if d and e then
      count(d, 1)
      redis.call('ZADD', KEYS[2], e, all[i])
    else
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
-- The expired instances leave, but this one: its entry is replaced below.
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now))) do
  if k ~= me then
    local v = redis.call('HGET', KEYS[1], k)
    if v then
      count(parse(v), -1)
      redis.call('HDEL', KEYS[1], k)
    end
    redis.call('ZREM', KEYS[2], k)
  end
end
local old = redis.call('HGET', KEYS[1], me)
local full = 0
if old then
  count(parse(old), -1)
end
if demand == -2 then
  if old then
    redis.call('HDEL', KEYS[1], me)
    redis.call('ZREM', KEYS[2], me)
  end
elseif not old and known + unknown >= max then
  full = 1
else
  redis.call('HSET', KEYS[1], me, string.format('%d %d', demand, now + ttl))
  redis.call('ZADD', KEYS[2], string.format('%d', now + ttl), me)
  count(demand, 1)
end
if known + unknown > 0 then
  redis.call('HSET', KEYS[3], 'sum', string.format('%d', sum), 'known', known, 'unknown', unknown)
  local last = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2])
  local ms = math.floor((last - now + 999) / 1000) + pad
  for i = 1, 3 do
    redis.call('PEXPIRE', KEYS[i], ms)
  end
else
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
end
return {sum, known, unknown, full}
