-- Leaky bucket (nginx limit_req): the twin of LeakyBucket.Decide in shared/algos/leakybucket.go.
-- State "tat frac": Z = tat + frac/rate µs, from which a request is decided as for a fresh key.
-- Every span (Z − now, T, C, F) is a pair of locals, µs and a fraction over rate, as in Go.
local rate, period = p1, p2
local burst, delay = p3, p4

local lim = burst + 1
local tq, tr = floor(period / rate), period % rate -- T = period/rate
local cq, cr = muldiv(lim, period, rate)           -- C = (burst+1)·T
local fq, fr = muldiv(delay + 1, period, rate)     -- F = (delay+1)·T

local tat, frac = w1, w2
local n = cost
if tat < now then tat, frac = now, 0 end
local xq, xf = tat - now, frac -- Z − now
local reset = xq + math.min(xf, 1)
local remaining = 0
if xq < cq or (xq == cq and xf <= cr) then -- ⌊(C − X)/T⌋
  local dq, df = cq - xq, cr - xf
  if df < 0 then dq, df = dq - 1, df + rate end
  local q, r = muldiv(dq, rate, period)
  remaining = q + floor((r + df) / period)
end
if partial and n > remaining then
  n = remaining
  if n == 0 then -- until one unit fits: ⌈X + T − C⌉
    local aq, af = xq + tq, xf + tr
    if af >= rate then aq, af = aq + 1, af - rate end
    local retry = aq - cq
    if af > cr then retry = retry + 1 end
    return finish({0, lim, 0, reset, retry, 0, 0, reset})
  end
end
if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
local nq, nf = muldiv(n, period, rate) -- Z' − now = X + n·T
nq, nf = xq + nq, xf + nf
if nf >= rate then nq, nf = nq + 1, nf - rate end
if nq > cq or (nq == cq and nf > cr) then
  local retry = nq - cq
  if nf > cr then retry = retry + 1 end
  return finish({0, lim, remaining, reset, retry, 0, 0, reset})
end
local wait = 0
if n > 0 and (nq > fq or (nq == fq and nf > fr)) then
  wait = nq - fq
  if nf > fr then wait = wait + 1 end
end
local dq, df = cq - nq, cr - nf
if df < 0 then dq, df = dq - 1, df + rate end
local lq, lr = muldiv(dq, rate, period)
reset = nq + math.min(nf, 1)
local r = {1, lim, lq + floor((lr + df) / period), reset, 0, wait, n, reset}
if n == 0 then return finish(r) end
if nf == 0 then return finish(r, string.format('%d', now + nq)) end
return finish(r, string.format('%d %d', now + nq, nf))
