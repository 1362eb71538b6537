-- Sliding window settlement: the twin of SlidingWindow.settle in shared/algos/settle.go.
-- cost is the actual cost, p3 the estimate reserved, p4 the µs since admission: a debit adds to
-- the current window's count (to at most 10^15); a credit comes off the count of the admission's
-- window (now − p4), the current or the previous one.
local lim, window, estimate, age = p1, p2, p3, p4
local maxcount = 1000000000000000 -- algos.MaxCount

local cs, cur, prev = w1, w2, w3
local start = floor(now / window) * window
if start == cs + window then
  cs, cur, prev = start, 0, cur
elseif start > cs or (cur == 0 and prev == 0) then
  cs, cur, prev = start, 0, 0
end
local delta = math.min(cost, maxcount) - estimate
local aw = floor((now - age) / window) * window
local moved = 0
if delta > 0 then
  moved = math.min(delta, maxcount - cur)
  cur = cur + moved
elseif delta < 0 and cs == start and aw == cs then
  moved = math.min(-delta, cur)
  cur = cur - moved
elseif delta < 0 and cs == start and aw == cs - window then
  moved = math.min(-delta, prev)
  prev = prev - moved
end
local q, r = muldiv(prev, window - math.max(0, now - cs), window)
if r > 0 then q = q + 1 end
local used = cur + q
local reset = 0
if cur > 0 then reset = cs + 2 * window - now elseif prev > 0 then reset = cs + window - now end
local reply = {1, lim, math.max(0, lim - used), reset, 0, 0, moved, reset}
if moved == 0 then return finish(reply) end
return finish(reply, string.format('%d %d %d', cs, cur, prev))
