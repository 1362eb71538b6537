-- Diana RLQS: the demand of the Envoy instances reporting for one bucket, the Lua twin of
-- merge in fleet.go (the two must stay the same arithmetic; a test replays random traces
-- through both).
-- KEYS[1]: the bucket's hash, one field per instance: "demand expires" (integers:
-- milli-requests a second, -1 while unknown; µs).
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
local all = redis.call('HGETALL', KEYS[1])
local sum, known, unknown, last, mine = 0, 0, 0, 0, false
local function count(d)
  if d < 0 then unknown = unknown + 1 else sum, known = sum + d, known + 1 end
end
for i = 1, #all, 2 do
  local d, e = string.match(all[i + 1], '^(%-?%d+) (%d+)$')
  d, e = tonumber(d), tonumber(e)
  if all[i] == me then
    mine = true
  elseif e and e > now then
    count(d)
    if e > last then last = e end
  else
    redis.call('HDEL', KEYS[1], all[i])
  end
end
if demand == -2 then
  if mine then redis.call('HDEL', KEYS[1], me) end
elseif not mine and known + unknown >= max then
  return {sum, known, unknown, 1}
else
  redis.call('HSET', KEYS[1], me, string.format('%d %d', demand, now + ttl))
  count(demand)
  if now + ttl > last then last = now + ttl end
end
if known + unknown > 0 then
  redis.call('PEXPIRE', KEYS[1], math.floor((last - now + 999) / 1000) + pad)
end
return {sum, known, unknown, 0}
