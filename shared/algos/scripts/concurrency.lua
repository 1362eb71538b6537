-- Concurrency limit: the twin of Concurrency.Decide in shared/algos/concurrency.go.
-- KEYS[1] is a sorted set with one member "id:k" per slot k = 1..cost of each lease, scored with
-- the lease's expiry (µs), so ZCARD counts the slots in flight. Numbers go to Redis formatted
-- with '%d': Lua would print a large number as %.14g and lose digits.
local max, lease_ttl = p1, p2

-- The latest expiry, or nil when nothing is in flight.
local function latest()
  local z = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  return tonumber(z[2])
end

-- Adds the slots of lease id with expiry e.
local function add(k, e)
  for i = 1, k do redis.call('ZADD', KEYS[1], string.format('%d', e), id .. ':' .. i) end
end

if dry then
  -- Decide as a take or a peek would, changing nothing: the expired slots (score <= now) stay in
  -- the set, uncounted, as dropping them here could change a later decision on a clock that has
  -- gone back. A dry release is not handled: stores never send one.
  local live = '(' .. string.format('%d', now)
  local used = redis.call('ZCOUNT', KEYS[1], live, '+inf')
  local last = nil
  if used > 0 then last = latest() end
  local reset = 0
  if last then reset = last - now end
  local r = {1, max, max - used, reset, 0, 0, 0, reset}
  if cost > max then
    r[1], r[5] = 0, -1
  elseif cost > 0 then
    -- A take replaces lease id if it is in flight: its slots, all scored old, count as free.
    local held, old = 0, tonumber(redis.call('ZSCORE', KEYS[1], id .. ':1'))
    if old and old > now then
      held = 1
      while redis.call('ZSCORE', KEYS[1], id .. ':' .. (held + 1)) do held = held + 1 end
    end
    local need = used - held + cost - max
    if need > 0 then
      -- The need-th earliest-expiring slot in flight, lease id's left out: if the need-th of
      -- all is scored old or later, lease id's slots come before it (or tie), so skip them.
      local e = tonumber(redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)[2])
      if held > 0 and e >= old then
        e = tonumber(redis.call('ZRANGEBYSCORE', KEYS[1], live, '+inf', 'WITHSCORES', 'LIMIT', need - 1 + held, 1)[2])
      end
      r[1], r[5] = 0, e - now
    else
      local e = math.max(now + lease_ttl, last or 0) - now
      r[3], r[4], r[7], r[8] = max - used + held - cost, e, cost, e
    end
  end
  return finish(r)
end

local changed = redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now)) > 0
local last = latest()
-- Take lease id out (held slots, expiry); a take puts it back if denied.
local held, old = 0, nil
if release or cost > 0 then
  old = redis.call('ZSCORE', KEYS[1], id .. ':1')
  while old and redis.call('ZREM', KEYS[1], id .. ':' .. (held + 1)) == 1 do held = held + 1 end
end
-- Taking out the last member deletes the key and its TTL: finish must set it again.
changed = changed or held > 0
local used = redis.call('ZCARD', KEYS[1])
local allowed, retry, granted = 1, 0, 0
if release then
  -- done: lease id is out
elseif cost > max then
  allowed, retry = 0, -1
elseif cost > 0 then
  local need = used + cost - max
  if need > 0 then
    allowed = 0
    retry = tonumber(redis.call('ZRANGE', KEYS[1], need - 1, need - 1, 'WITHSCORES')[2]) - now
  else
    add(cost, math.max(now + lease_ttl, last or 0))
    granted, changed = cost, true
  end
end
if held > 0 and not release and allowed == 0 then add(held, tonumber(old)) end
last = latest()
local reset = 0
if last then reset = last - now end
return finish({allowed, max, max - redis.call('ZCARD', KEYS[1]), reset, retry, 0, granted, reset}, changed)
