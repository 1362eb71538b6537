-- Token bucket settlement: the twin of GCRA.settle in shared/algos/settle.go.
-- cost is the actual cost, p4 the estimate reserved; TAT moves by (cost − p4)·T: later by a
-- debit, to at most τ + MaxSpan ahead of now (never lowered by one), earlier by a credit, to now
-- at the earliest. |cost − p4| counts at most as many whole buckets as MaxSpan holds.
local rate, period, burst, estimate = p1, p2, p3, p4
local maxspan = 315360000000000 -- algos.MaxSpan

local uq, ur = muldiv(burst, period, rate) -- τ = burst·T

local tat, frac = w1, w2
if tat < now then tat, frac = now, 0 end
local xq, xf = tat - now, frac -- TAT − now
local delta = math.min(cost, 1000000000000000) - estimate
local d = math.abs(delta)
local most, buckets = 1000000000000000, floor(maxspan / (uq + math.min(ur, 1)))
if buckets <= floor(most / burst) then most = burst * buckets end -- whole buckets in MaxSpan
d = math.min(d, most)
local mq, mf = muldiv(d, period, rate) -- d·T
local nq, nf = xq, xf
if delta > 0 then
  nq, nf = xq + mq, xf + mf
  if nf >= rate then nq, nf = nq + 1, nf - rate end
  local tq, tf = uq + maxspan, ur -- τ + MaxSpan
  if tq < nq or (tq == nq and tf < nf) then
    nq, nf = tq, tf
    if tq < xq or (tq == xq and tf < xf) then nq, nf = xq, xf end
  end
elseif delta < 0 then
  if mq < xq or (mq == xq and mf < xf) then
    nq, nf = xq - mq, xf - mf
    if nf < 0 then nq, nf = nq - 1, nf + rate end
  else
    nq, nf = 0, 0
  end
end
local remaining = 0
if nq < uq or (nq == uq and nf <= ur) then -- ⌊(τ − X)/T⌋
  local dq, df = uq - nq, ur - nf
  if df < 0 then dq, df = dq - 1, df + rate end
  local q, r = muldiv(dq, rate, period)
  remaining = q + floor((r + df) / period)
end
local reset = nq + math.min(nf, 1)
local r = {1, burst, remaining, reset, 0, 0, d, reset}
if nq == xq and nf == xf then return finish(r) end
if nf == 0 then return finish(r, string.format('%d', now + nq)) end
return finish(r, string.format('%d %d', now + nq, nf))
