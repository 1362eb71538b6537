-- Sliding window, Cloudflare's weighted two-window estimate: the twin of SlidingWindow.Decide in
-- shared/algos/slidingwindow.go. State "start cur prev".
local lim, window = tonumber(ARGV[9]), tonumber(ARGV[10])
local lw = lim * window

local function reset_after(cs, cur, prev)
  if cur > 0 then return cs + 2 * window - now end
  if prev > 0 then return cs + window - now end
  return 0
end

local function retry_after(cs, cur, prev, n)
  local k = lim - cur - n
  if k >= 0 then return cs + window - fdiv(k * window, prev) - now end
  return cs + 2 * window - fdiv((lim - n) * window, cur) - now
end

local function decide()
  local w = load_words()
  local cs, cur, prev, n = w[1], w[2], w[3], cost
  local start = fdiv(now, window) * window
  if start == cs + window then
    cs, cur, prev = start, 0, cur
  elseif start > cs or (cur == 0 and prev == 0) then
    cs, cur, prev = start, 0, 0
  end
  local used = prev * (window - math.max(0, now - cs)) + cur * window
  local remaining = fdiv(math.max(0, lw - used), window)
  local reset = reset_after(cs, cur, prev)
  if partial and n > remaining then
    n = remaining
    if n == 0 then
      return {0, lim, remaining, reset, retry_after(cs, cur, prev, 1), 0, 0, reset}
    end
  end
  if n > lim then return {0, lim, remaining, reset, -1, 0, 0, reset} end
  if used + n * window > lw then
    return {0, lim, remaining, reset, retry_after(cs, cur, prev, n), 0, 0, reset}
  end
  cur = cur + n
  used = used + n * window
  reset = reset_after(cs, cur, prev)
  local r = {1, lim, fdiv(lw - used, window), reset, 0, 0, n, reset}
  if n == 0 then return r end
  return r, {cs, cur, prev}
end
