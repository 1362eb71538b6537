-- Token bucket (GCRA): the twin of GCRA.Decide in shared/algos/gcra.go.
-- State "tat frac": TAT = tat + frac/rate µs. Every span (TAT − now, T, τ, ...) is a pair of
-- locals, µs and a fraction over rate, as in Go.
local rate, period, burst = p1, p2, p3

local tq, tr = floor(period / rate), period % rate -- T = period/rate
local uq, ur = muldiv(burst, period, rate)         -- τ = burst·T

local tat, frac = w1, w2
local n = cost
if tat < now then tat, frac = now, 0 end
local xq, xf = tat - now, frac -- TAT − now
local reset = xq + math.min(xf, 1)
local remaining = 0
if xq < uq or (xq == uq and xf <= ur) then -- ⌊(τ − X)/T⌋
  local dq, df = uq - xq, ur - xf
  if df < 0 then dq, df = dq - 1, df + rate end
  local q, r = muldiv(dq, rate, period)
  remaining = q + floor((r + df) / period)
end
if partial and n > remaining then
  n = remaining
  if n == 0 then -- until one unit fits: ⌈X + T − τ⌉
    local aq, af = xq + tq, xf + tr
    if af >= rate then aq, af = aq + 1, af - rate end
    local retry = aq - uq
    if af > ur then retry = retry + 1 end
    return finish({0, burst, 0, reset, retry, 0, 0, reset})
  end
end
if n > burst then return finish({0, burst, remaining, reset, -1, 0, 0, reset}) end
local nq, nf = muldiv(n, period, rate) -- TAT' − now = X + n·T
nq, nf = xq + nq, xf + nf
if nf >= rate then nq, nf = nq + 1, nf - rate end
local delay, left = 0, 0
if nq > uq or (nq == uq and nf > ur) then
  local wait = nq - uq
  if nf > ur then wait = wait + 1 end
  if wait > max_wait then return finish({0, burst, remaining, reset, wait, 0, 0, reset}) end
  delay = wait
else
  local dq, df = uq - nq, ur - nf
  if df < 0 then dq, df = dq - 1, df + rate end
  local q, r = muldiv(dq, rate, period)
  left = q + floor((r + df) / period)
end
reset = nq + math.min(nf, 1)
local r = {1, burst, left, reset, 0, delay, n, reset}
if n == 0 then return finish(r) end
if nf == 0 then return finish(r, string.format('%d', now + nq)) end
return finish(r, string.format('%d %d', now + nq, nf))
