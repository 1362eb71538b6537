-- muldiv(a, b, c) = floor(a*b/c), a*b mod c, exactly, for a, b, c and the quotient below 2^50:
-- the twin of mulDiv in shared/algos/wide.go, prepended to the scripts that use it. A double
-- holds the product exactly only below 2^53; past that the quotient is estimated (off by at most
-- one) and the exact remainder is computed from 25-bit halves, whose products and partial sums
-- all stay below 2^53.
local function muldiv(a, b, c)
  local p = a * b
  local q = floor(p / c)
  if p < 9007199254740992 then return q, p - q * c end
  local h = 33554432
  local a1, b1, q1, c1 = floor(a / h), floor(b / h), floor(q / h), floor(c / h)
  local a0, b0, q0, c0 = a - a1 * h, b - b1 * h, q - q1 * h, c - c1 * h
  local r = ((a1 * b1 - q1 * c1) * h + a1 * b0 + a0 * b1 - q1 * c0 - q0 * c1) * h + a0 * b0 - q0 * c0
  if r < 0 then return q - 1, r + c end
  if r >= c then return q + 1, r - c end
  return q, r
end

