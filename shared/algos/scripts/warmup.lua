-- Token bucket with warm-up (Guava SmoothWarmingUp, cold factor 3): the twin of WarmUp.Decide
-- in shared/algos/warmup.go. State "nf frac deficit": nextFree = nf + frac/r µs, stored permits
-- = (r·W − deficit)/p, in ticks of 1/r µs.
local r, p, w = p1, p2, p3
local d = w * r
local lim = floor(d / p)

-- ceil(x*y/m) for x < 2^49, y <= m <= 2^45, 7 bits of x at a time: every step stays below 2^53.
local function muldiv(x, y, m)
  local q, s = 0, 0
  for sh = 42, 0, -7 do
    local t = s * 128 + floor(x / (2 ^ sh)) % 128 * y
    q, s = q * 128 + floor(t / m), t % m
  end
  return q + math.min(s, 1)
end

local function wait_at(nf, frac)
  if nf < now then return 0 end
  return nf - now + math.min(frac, 1)
end

local function ttl_at(nf, frac, deficit)
  return math.max(0, nf - now + floor((frac + deficit + r - 1) / r))
end

local nf, frac, deficit = w1, w2, w3
local n = cost
local wait = wait_at(nf, frac)
local remaining = 0
if wait == 0 then remaining = lim end
local ttl = ttl_at(nf, frac, deficit)
if partial and n > lim then n = lim end
if n > lim then return finish({0, lim, remaining, wait, -1, 0, 0, ttl}) end
if n == 0 then return finish({1, lim, remaining, wait, 0, 0, 0, ttl}) end
if wait > max_wait then return finish({0, lim, remaining, wait, wait, 0, 0, ttl}) end
if wait == 0 then
  if now - nf > w then
    deficit = 0
  else
    deficit = math.max(0, deficit - ((now - nf) * r - frac))
  end
  nf, frac = now, 0
end
local stable = n * p
local t = frac + stable
local a = d - 2 * deficit
if a > 0 then
  local q = math.min(a, 2 * stable)
  t = t + muldiv(q, 2 * a - q, 2 * d)
end
deficit = deficit + math.min(stable, d - deficit)
nf, frac = nf + floor(t / r), t % r
return finish({1, lim, 0, wait_at(nf, frac), 0, wait, n, ttl_at(nf, frac, deficit)}, string.format('%d %d %d', nf, frac, deficit))
