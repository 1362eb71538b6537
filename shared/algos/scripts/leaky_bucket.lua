-- Leaky bucket (nginx limit_req): the twin of LeakyBucket.Decide in shared/algos/leakybucket.go.
-- State "tat frac": Z = tat + frac/rate µs, from which a request is decided as for a fresh key.
local rate, period = tonumber(ARGV[9]), tonumber(ARGV[10])
local burst, delay = tonumber(ARGV[11]), tonumber(ARGV[12])

local function decide()
  local w = load_words()
  local tat, frac, n = w[1], w[2], cost
  if tat < now then tat, frac = now, 0 end
  local lim, cap, free = burst + 1, (burst + 1) * period, (delay + 1) * period
  local ahead = tat - now
  if ahead > fdiv(2251799813685248, rate) then
    if partial then n = math.min(n, 1) end
    local reset, retry = ahead + math.min(frac, 1), -1
    if n <= lim then retry = ahead - fdiv(cap - n * period - frac, rate) end
    return {0, lim, 0, reset, retry, 0, 0, reset}
  end
  local used = ahead * rate + frac
  local reset = cdiv(used, rate)
  local remaining = math.max(0, fdiv(cap - used, period))
  if partial and n > remaining then
    n = remaining
    if n == 0 then
      return {0, lim, 0, reset, cdiv(used + period - cap, rate), 0, 0, reset}
    end
  end
  if n > lim then return {0, lim, remaining, reset, -1, 0, 0, reset} end
  local nxt = used + n * period
  if nxt > cap then return {0, lim, remaining, reset, cdiv(nxt - cap, rate), 0, 0, reset} end
  local wait = 0
  if n > 0 and nxt > free then wait = cdiv(nxt - free, rate) end
  reset = cdiv(nxt, rate)
  local r = {1, lim, fdiv(cap - nxt, period), reset, 0, wait, n, reset}
  if n == 0 then return r end
  return r, {now + fdiv(nxt, rate), nxt % rate}
end
