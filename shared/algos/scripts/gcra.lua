-- GCRA token bucket: the twin of GCRA.Decide in shared/algos/gcra.go.
-- State "tat frac": TAT = tat + frac/rate µs.
local rate, period, burst = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])

local function decide()
  local w = load_words()
  local tat, frac, n = w[1], w[2], cost
  if tat < now then tat, frac = now, 0 end
  local bp = burst * period
  local ahead = tat - now
  if ahead > fdiv(2251799813685248, rate) then
    local reset, retry = ahead + math.min(frac, 1), -1
    if n <= burst then retry = ahead - fdiv(bp, rate) + cdiv(math.max(n, 1) * period, rate) end
    return {0, burst, 0, reset, retry, 0, 0, reset}
  end
  local used = ahead * rate + frac
  local reset = cdiv(used, rate)
  local remaining = math.max(0, fdiv(bp - used, period))
  if partial and n > remaining then
    n = remaining
    if n == 0 then
      return {0, burst, remaining, reset, cdiv(used + period - bp, rate), 0, 0, reset}
    end
  end
  if n > burst then return {0, burst, remaining, reset, -1, 0, 0, reset} end
  local nxt = used + n * period
  local delay = 0
  if nxt > bp then
    local wait = cdiv(nxt - bp, rate)
    if wait > max_wait then return {0, burst, remaining, reset, wait, 0, 0, reset} end
    delay = wait
  end
  reset = cdiv(nxt, rate)
  local r = {1, burst, math.max(0, fdiv(bp - nxt, period)), reset, 0, delay, n, reset}
  if n == 0 then return r end
  return r, {now + fdiv(nxt, rate), nxt % rate}
end
