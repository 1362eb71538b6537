-- Fixed window refund: the twin of FixedWindow.refund in shared/algos/refund.go.
-- cost units granted at p3 (µs) are taken back only while the stored window is the current one
-- and the window of p3.
local lim, window, at = p1, p2, p3

local ws, count = w1, w2
local cur = floor(now / window) * window
local back = 0
if count > 0 and ws == cur and floor(at / window) * window == cur and not dry then
  back = math.min(cost, count)
  count = count - back
end
local remaining, reset = lim, 0
if count > 0 and ws >= cur then
  remaining, reset = lim - count, ws + window - now
end
local r = {1, lim, remaining, reset, 0, 0, back, reset}
if back == 0 then return finish(r) end
return finish(r, string.format('%d %d', ws, count))
