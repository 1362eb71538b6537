-- Sliding log: the twin of SlidingLog.Decide in shared/algos/slidinglog.go.
-- KEYS[1] is a sorted set, one member per admitted unit: score = time (µs), member "time:seq".
-- The units recorded at a time t are "t:1".."t:c", all still there when more are recorded at t
-- (drops stop at now − window < t), so ZCOUNT t t gives the next seq.
local size, window = p1, p2

-- The time of the i-th oldest entry (0-based; -1: the newest).
local function at(i)
  return tonumber(redis.call('ZRANGE', KEYS[1], i, i, 'WITHSCORES')[2])
end

local cut = string.format('%d', now - window)
local len = redis.call('ZCARD', KEYS[1])
local old = redis.call('ZCOUNT', KEYS[1], '-inf', cut)
local live, n = len - old, cost
local newest, reset = nil, 0
if len > 0 then newest = at(-1) end
if live > 0 then reset = newest + window - now end
local remaining = math.max(0, size - live)
if partial and n > remaining then
  n = remaining
  if n == 0 then return finish({0, size, 0, reset, at(old + live - size) + window - now, 0, 0, reset}) end
end
if n > size then return finish({0, size, remaining, reset, -1, 0, 0, reset}) end
local wait, k = 0, live + n - size
if k > 0 then
  wait = at(old + k - 1) + window - now
  if wait > math.min(max_wait, window) then return finish({0, size, remaining, reset, wait, 0, 0, reset}) end
end
if n == 0 then return finish({1, size, remaining, reset, 0, wait, 0, reset}) end
local t = now + wait
if newest and not backdated then t = math.max(t, newest) end
reset = math.max(t, newest or t) + window - now
local r = {1, size, math.max(0, size - live - n), reset, 0, wait, n, reset}
if dry then return finish(r, nil, t) end -- the admission's reply, nothing recorded nor dropped
if old > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', cut) end
local score = string.format('%d', t)
local seq = redis.call('ZCOUNT', KEYS[1], score, score)
-- One ZADD per 1000 units: unpack's stack holds only a few thousand values.
local args = {}
for i = 1, n do
  args[#args + 1] = score
  args[#args + 1] = score .. ':' .. string.format('%d', seq + i)
  if #args == 2000 or i == n then
    redis.call('ZADD', KEYS[1], unpack(args))
    args = {}
  end
end
return finish(r, true, t)
