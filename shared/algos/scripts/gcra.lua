-- GCRA token bucket: the twin of GCRA.Decide in shared/algos/gcra.go.
-- State "tat frac": TAT = tat + frac/rate µs.
local rate, period, burst = p1, p2, p3

local tat, frac = w1, w2
local n = cost
if tat < now then tat, frac = now, 0 end
local bp = burst * period
local ahead = tat - now
if ahead > floor(2251799813685248 / rate) then
  local reset, retry = ahead + math.min(frac, 1), -1
  if n <= burst then retry = ahead - floor(bp / rate) + floor((math.max(n, 1) * period + rate - 1) / rate) end
  return finish({0, burst, 0, reset, retry, 0, 0, reset})
end
local used = ahead * rate + frac
local reset = floor((used + rate - 1) / rate)
local remaining = math.max(0, floor((bp - used) / period))
if partial and n > remaining then
  n = remaining
  if n == 0 then
    return finish({0, burst, remaining, reset, floor((used + period - bp + rate - 1) / rate), 0, 0, reset})
  end
end
if n > burst then return finish({0, burst, remaining, reset, -1, 0, 0, reset}) end
local nxt = used + n * period
local delay = 0
if nxt > bp then
  local wait = floor((nxt - bp + rate - 1) / rate)
  if wait > max_wait then return finish({0, burst, remaining, reset, wait, 0, 0, reset}) end
  delay = wait
end
reset = floor((nxt + rate - 1) / rate)
local r = {1, burst, math.max(0, floor((bp - nxt) / period)), reset, 0, delay, n, reset}
if n == 0 then return finish(r) end
local tat2, frac2 = now + floor(nxt / rate), nxt % rate
if frac2 == 0 then return finish(r, string.format('%d', tat2)) end
return finish(r, string.format('%d %d', tat2, frac2))
