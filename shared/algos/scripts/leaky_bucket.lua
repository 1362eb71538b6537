-- Leaky bucket (nginx limit_req): the twin of LeakyBucket.Decide in shared/algos/leakybucket.go.
-- State "tat frac": Z = tat + frac/rate µs, from which a request is decided as for a fresh key.
local rate, period = p1, p2
local burst, delay = p3, p4

local tat, frac = w1, w2
local n = cost
if tat < now then tat, frac = now, 0 end
local lim, cap, free = burst + 1, (burst + 1) * period, (delay + 1) * period
local ahead = tat - now
if ahead > floor(2251799813685248 / rate) then
  if partial then n = math.min(n, 1) end
  local reset, retry = ahead + math.min(frac, 1), -1
  if n <= lim then retry = ahead - floor((cap - n * period - frac) / rate) end
  return finish({0, lim, 0, reset, retry, 0, 0, reset})
end
local used = ahead * rate + frac
local reset = floor((used + rate - 1) / rate)
local remaining = math.max(0, floor((cap - used) / period))
if partial and n > remaining then
  n = remaining
  if n == 0 then
    return finish({0, lim, 0, reset, floor((used + period - cap + rate - 1) / rate), 0, 0, reset})
  end
end
if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
local nxt = used + n * period
if nxt > cap then return finish({0, lim, remaining, reset, floor((nxt - cap + rate - 1) / rate), 0, 0, reset}) end
local wait = 0
if n > 0 and nxt > free then wait = floor((nxt - free + rate - 1) / rate) end
reset = floor((nxt + rate - 1) / rate)
local r = {1, lim, floor((cap - nxt) / period), reset, 0, wait, n, reset}
if n == 0 then return finish(r) end
local tat2, frac2 = now + floor(nxt / rate), nxt % rate
if frac2 == 0 then return finish(r, string.format('%d', tat2)) end
return finish(r, string.format('%d %d', tat2, frac2))
