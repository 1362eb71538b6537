-- Fixed window: the twin of FixedWindow.Decide in shared/algos/fixedwindow.go.
-- State "ws count": count units admitted in the window [ws, ws + window).
local lim, window = p1, p2

local ws, count = w1, w2
local n = cost
local start = floor(now / window) * window
if start > ws or count == 0 then ws, count = start, 0 end
local wait = math.max(0, ws - now)
local remaining, reset = math.max(0, lim - count), 0 -- count > lim after a settled debt
if count > 0 then reset = ws + window - now end
if partial and n > remaining then
  n = remaining
  if n == 0 then return finish({0, lim, remaining, reset, ws + window - now, 0, 0, reset}) end
end
if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
if count + n > lim then
  ws, count = ws + window, 0
  wait = ws - now
end
if wait > max_wait then return finish({0, lim, remaining, reset, wait, 0, 0, reset}) end
count = count + n
reset = 0
if count > 0 then reset = ws + window - now end
local r = {1, lim, lim - count, reset, 0, wait, n, reset}
if n == 0 then return finish(r) end
return finish(r, string.format('%d %d', ws, count))
