-- Sliding window: the twin of SlidingWindow.Decide in shared/algos/slidingwindow.go (Cloudflare's
-- weighted two-window estimate, state "start cur prev") and, given a third argument N (SlidingWindowSub's), of
-- SlidingWindowSub.Decide in shared/algos/slidingwindowsub.go (N sub-windows, state
-- "start c0 c1 ... cN": the first µs of the current sub-window k, then the counts of sub-windows
-- k, k-1, ..., k-N, read from the string s since they may be more than the prelude's four words).
local lim, window = p1, p2
if p3 then
  local subs = p3
  local c, ks = {}, 0
  if s then
    local i = -1
    for word in string.gmatch(s, '%-?%d+') do
      if i < 0 then ks = tonumber(word) else c[i] = tonumber(word) end
      i = i + 1
    end
    -- the stored first µs of the current sub-window, as an index
    local a = floor(ks / window)
    ks = a * subs + muldiv(ks - a * window, subs, window)
  end
  local empty = true
  for i = 0, subs do
    c[i] = c[i] or 0
    if c[i] ~= 0 then empty = false end
  end

  -- The first µs whose elapsed part in sub-window m is at least x: ceil((m*window + x)/subs).
  local function start(m, x)
    local a = floor(m / subs)
    local q, r = muldiv(m - a * subs, window, subs)
    return a * window + q + floor((r + x + subs - 1) / subs)
  end

  local function reset_after()
    for i = 0, subs do
      if c[i] > 0 then return start(ks - i + subs + 1, 0) - now end
    end
    return 0
  end

  local function retry_after(n)
    local full = 0
    for i = 0, subs - 1 do full = full + c[i] end
    for j = 0, subs do
      local k = lim - n - full
      if k >= 0 then
        local x, old = 0, c[subs - j]
        if old > k then x = window - muldiv(k, window, old) end
        if x < window then return start(ks + j, x) - now end
      end
      if j < subs then full = full - c[subs - 1 - j] end
    end
    return start(ks + subs + 1, 0) - now
  end

  local a = floor(now / window)
  local q, e = muldiv(now - a * window, subs, window)
  local k = a * subs + q
  if empty then
    ks = k
  elseif k > ks then
    local d = math.min(k - ks, subs + 1)
    for i = subs, 0, -1 do
      if i >= d then c[i] = c[i - d] else c[i] = 0 end
    end
    ks = k
  elseif k < ks then
    e = 0
  end
  local w, rw = muldiv(c[subs], window - e, window)
  if rw > 0 then w = w + 1 end
  local used = w
  for i = 0, subs - 1 do used = used + c[i] end
  local n = cost
  local remaining = math.max(0, lim - used)
  local reset = reset_after()
  if partial and n > remaining then
    n = remaining
    if n == 0 then return finish({0, lim, remaining, reset, retry_after(1), 0, 0, reset}) end
  end
  if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
  if used + n > lim then return finish({0, lim, remaining, reset, retry_after(n), 0, 0, reset}) end
  c[0] = c[0] + n
  reset = reset_after()
  local r = {1, lim, lim - used - n, reset, 0, 0, n, reset}
  if n == 0 then return finish(r) end
  local words = {string.format('%d', start(ks, 0))}
  for i = 0, subs do words[#words + 1] = string.format('%d', c[i]) end
  return finish(r, table.concat(words, ' '))
end

local function reset_after(cs, cur, prev)
  if cur > 0 then return cs + 2 * window - now end
  if prev > 0 then return cs + window - now end
  return 0
end

local function retry_after(cs, cur, prev, n)
  local k = lim - cur - n
  if k >= 0 then return cs + window - muldiv(k, window, prev) - now end
  return cs + 2 * window - muldiv(lim - n, window, cur) - now
end

local cs, cur, prev = w1, w2, w3
local n = cost
local start = floor(now / window) * window
if start == cs + window then
  cs, cur, prev = start, 0, cur
elseif start > cs or (cur == 0 and prev == 0) then
  cs, cur, prev = start, 0, 0
end
local q, r = muldiv(prev, window - math.max(0, now - cs), window)
if r > 0 then q = q + 1 end
local used = cur + q
local remaining = math.max(0, lim - used)
local reset = reset_after(cs, cur, prev)
if partial and n > remaining then
  n = remaining
  if n == 0 then
    return finish({0, lim, remaining, reset, retry_after(cs, cur, prev, 1), 0, 0, reset})
  end
end
if n > lim then return finish({0, lim, remaining, reset, -1, 0, 0, reset}) end
if used + n > lim then
  return finish({0, lim, remaining, reset, retry_after(cs, cur, prev, n), 0, 0, reset})
end
cur = cur + n
reset = reset_after(cs, cur, prev)
local r = {1, lim, lim - used - n, reset, 0, 0, n, reset}
if n == 0 then return finish(r) end
return finish(r, string.format('%d %d %d', cs, cur, prev))
