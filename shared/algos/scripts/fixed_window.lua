-- Fixed window: the twin of FixedWindow.Decide in shared/algos/fixedwindow.go.
-- State "ws count": count units admitted in the window [ws, ws + window).
local lim, window = tonumber(ARGV[9]), tonumber(ARGV[10])

local function decide()
  local w = load_words()
  local ws, count, n = w[1], w[2], cost
  local start = fdiv(now, window) * window
  if start > ws or count == 0 then ws, count = start, 0 end
  local wait = math.max(0, ws - now)
  local remaining, reset = lim - count, 0
  if count > 0 then reset = ws + window - now end
  if partial and n > remaining then
    n = remaining
    if n == 0 then return {0, lim, remaining, reset, ws + window - now, 0, 0, reset} end
  end
  if n > lim then return {0, lim, remaining, reset, -1, 0, 0, reset} end
  if count + n > lim then
    ws, count = ws + window, 0
    wait = ws - now
  end
  if wait > max_wait then return {0, lim, remaining, reset, wait, 0, 0, reset} end
  count = count + n
  reset = 0
  if count > 0 then reset = ws + window - now end
  local r = {1, lim, lim - count, reset, 0, wait, n, reset}
  if n == 0 then return r end
  return r, {ws, count}
end
