-- Sliding window, Cloudflare's weighted two-window estimate: the twin of SlidingWindow.Decide in
-- shared/algos/slidingwindow.go. State "start cur prev".
local lim, window = p1, p2

local function reset_after(cs, cur, prev)
  if cur > 0 then return cs + 2 * window - now end
  if prev > 0 then return cs + window - now end
  return 0
end

local function retry_after(cs, cur, prev, n)
  local k = lim - cur - n
  if k >= 0 then return cs + window - muldiv(k, window, prev) - now end
  return cs + 2 * window - muldiv(lim - n, window, cur) - now
end

local cs, cur, prev = w1, w2, w3
local n = cost
local start = floor(now / window) * window
if start == cs + window then
  cs, cur, prev = start, 0, cur
elseif start > cs or (cur == 0 and prev == 0) then
  cs, cur, prev = start, 0, 0
end
local q, r = muldiv(prev, window - math.max(0, now - cs), window)
if r > 0 then q = q + 1 end
local used = cur + q
local remaining = math.max(0, lim - used)
local reset = reset_after(cs, cur, prev)
if partial and n > remaining then
  n = remaining
  if n == 0 then
    return finish({0, lim, remaining, reset, retry_after(cs, cur, prev, 1), 0, 0, reset})
  end
end
if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
if used + n > lim then
  return finish({0, lim, remaining, reset, retry_after(cs, cur, prev, n), 0, 0, reset})
end
cur = cur + n
reset = reset_after(cs, cur, prev)
local r = {1, lim, lim - used - n, reset, 0, 0, n, reset}
if n == 0 then return finish(r) end
return finish(r, string.format('%d %d %d', cs, cur, prev))
