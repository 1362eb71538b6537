-- Sliding log refund: the twin of SlidingLog.refund in shared/algos/refund.go.
-- Removes up to cost of the members recorded at p3 (µs), the newest first: the members of one
-- time stay "t:1".."t:c", as sliding_log.lua numbers them.
local size, window, at = p1, p2, p3

local score = string.format('%d', at)
local c = redis.call('ZCOUNT', KEYS[1], score, score)
local back = math.min(cost, c)
if dry then back = 0 end
if back > 0 then
  -- One ZREM per 1000 members: unpack's stack holds only a few thousand values.
  local m = {}
  for i = c - back + 1, c do
    m[#m + 1] = score .. ':' .. string.format('%d', i)
    if #m == 1000 or i == c then
      redis.call('ZREM', KEYS[1], unpack(m))
      m = {}
    end
  end
end
local len = redis.call('ZCARD', KEYS[1])
local old = redis.call('ZCOUNT', KEYS[1], '-inf', string.format('%d', now - window))
local live, reset = len - old, 0
if live > 0 then
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2]
  reset = tonumber(newest) + window - now
end
return finish({1, size, math.max(0, size - live), reset, 0, 0, back, reset})
