-- Fixed window settlement: the twin of FixedWindow.settle in shared/algos/settle.go.
-- cost is the actual cost, p3 the estimate reserved, p4 the µs since admission: a debit adds to
-- the current window's count (to at most 10^15); a credit comes off it only while the window is
-- the one of the admission, now − p4.
local lim, window, estimate, age = p1, p2, p3, p4
local maxcount = 1000000000000000 -- algos.MaxCount

local ws, count = w1, w2
local start = floor(now / window) * window
if start > ws or count == 0 then ws, count = start, 0 end
local delta = math.min(cost, maxcount) - estimate
local moved = 0
if delta > 0 then
  moved = math.min(delta, maxcount - count)
  count = count + moved
elseif delta < 0 and ws == start and floor((now - age) / window) * window == ws then
  moved = math.min(-delta, count)
  count = count - moved
end
local reset = 0
if count > 0 then reset = ws + window - now end
local r = {1, lim, math.max(0, lim - count), reset, 0, 0, moved, reset}
if moved == 0 then return finish(r) end
return finish(r, string.format('%d %d', ws, count))
