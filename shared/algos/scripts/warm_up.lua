-- Token bucket with warm-up (Guava SmoothWarmingUp, cold factor 3): the twin of WarmUp.Decide
-- in shared/algos/warmup.go. State "nf frac hq hf": nextFree = nf + frac/r µs and the warmth
-- W − c = hq + hf/r µs (c the coldness, the time the stored permits took to store). Every span
-- is a pair of locals, µs and ticks (1/r µs), as in Go.
local r, p, w, cap = p1, p2, p3, p4

local function wait_at(nf, frac)
  if nf < now then return 0 end
  return nf - now + math.min(frac, 1)
end

local function ttl_at(nf, frac, hq, hf)
  local q, f = nf + hq, frac + hf
  if f >= r then q, f = q + 1, f - r end
  return math.max(0, q + math.min(f, 1) - now)
end

local nf, frac, hq, hf = w1, w2, w3, w4
local n = cost
local wait = wait_at(nf, frac)
local remaining = 0
if wait == 0 then remaining = 1 end
local ttl = ttl_at(nf, frac, hq, hf)
if partial and n > cap then n = cap end
if n > cap then return finish({0, 1, remaining, wait, -1, 0, 0, ttl}) end
if n == 0 then return finish({1, 1, remaining, wait, 0, 0, 0, ttl}) end
if wait > max_wait then return finish({0, 1, remaining, wait, wait, 0, 0, ttl}) end
if wait == 0 then
  -- Resync: the coldness grows by the idle time past nextFree, so the warmth falls, to 0 at least.
  local iq, if_ = now - nf, 0
  if frac > 0 then iq, if_ = iq - 1, r - frac end
  if iq > hq or (iq == hq and if_ >= hf) then
    hq, hf = 0, 0
  else
    hq, hf = hq - iq, hf - if_
    if hf < 0 then hq, hf = hq - 1, hf + r end
  end
  nf, frac = now, 0
end
local sq, sf = muldiv(n, p, r) -- n·S
local cq, cf = sq, sf          -- the cost
local uq, uf = w - 2 * hq, -2 * hf -- U = W − 2·warmth, if > 0
while uf < 0 do uq, uf = uq - 1, uf + r end
if uq > 0 or (uq == 0 and uf > 0) then
  local vq, vf = 2 * sq, 2 * sf -- V = min(U, 2·n·S)
  if vf >= r then vq, vf = vq + 1, vf - r end
  if uq < vq or (uq == vq and uf < vf) then vq, vf = uq, uf end
  local gq, gf = 2 * uq - vq, 2 * uf - vf -- 2U − V, rounded up to whole µs
  while gf < 0 do gq, gf = gq - 1, gf + r end
  while gf >= r do gq, gf = gq + 1, gf - r end
  if gf > 0 then gq = gq + 1 end
  -- The trapezoid V·(2U − V)/(2W), rounded up to a tick.
  local w2 = 2 * w
  local q1, r1 = muldiv(vq, gq, w2)
  local q2, r2 = muldiv(vf, gq, r)
  local m = r1 + q2
  local q3, r3 = muldiv(m % w2, r, w2)
  cq = cq + q1 + floor(m / w2)
  cf = cf + q3 + floor((r3 + r2 + w2 - 1) / w2)
  while cf >= r do cq, cf = cq + 1, cf - r end
end
-- Spend min(n·S, c) of the coldness: the warmth rises by as much, to W at most.
hq, hf = hq + sq, hf + sf
if hf >= r then hq, hf = hq + 1, hf - r end
if hq >= w then hq, hf = w, 0 end
nf, frac = nf + cq, frac + cf
if frac >= r then nf, frac = nf + 1, frac - r end
return finish({1, 1, 0, wait_at(nf, frac), 0, wait, n, ttl_at(nf, frac, hq, hf)}, string.format('%d %d %d %d', nf, frac, hq, hf))
