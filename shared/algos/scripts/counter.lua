-- Counter: the twin of Counter.Decide in shared/algos/counter.go, a whole decision without
-- prelude.lua and epilogue.lua (see scripts.go): a counter never bans, waits or holds a lease,
-- so in the common case it costs Redis one HINCRBY.
-- KEYS[1] the state: a hash of one field, the index of a window, holding its count.
-- ARGV[1] as prelude.lua reads it; p1 is the window (µs). ARGV[2] is not read.
local now, cost, _, flags, ban, _, window = cmsgpack.unpack(ARGV[1])
if ban > 0 then return redis.error_reply('counter: a counter cannot ban') end
local pad = 0
if now < 0 then
  if not clock then
    local t = redis.call('TIME')
    clock = t[1] * 1000000 + t[2]
  end
  now = clock
else
  pad = 3600000 -- a caller-given time, as in prelude.lua
end
local partial, dry = flags % 2 == 1, flags % 16 >= 8 or dryrun -- dryrun: see Mixed
local most = 1000000000000000 -- MaxCount
local idx = math.floor(now / window) -- the window the units count in, by its index
local n, count = cost, 0
local key = KEYS[1]
if n > 0 and not dry then
  -- Redis formats each number given to redis.call, at a cost near the HINCRBY's own; a call's
  -- decisions mostly share their window and cost, so each is formatted once per call.
  decimals = decimals or {}
  local field, by = decimals[idx], decimals[n]
  if not field then field = string.format('%d', idx); decimals[idx] = field end
  if not by then by = string.format('%d', n); decimals[n] = by end
  local v = redis.call('HINCRBY', key, field, by)
  count = v - n
  if count == 0 then -- a new window: drop an older one, or count in a stored one ahead
    if redis.call('HLEN', key) > 1 then
      for _, f in ipairs(redis.call('HKEYS', key)) do
        local other = tonumber(f)
        if other > idx then
          redis.call('HDEL', key, idx)
          idx = other
          v = redis.call('HINCRBY', key, idx, n)
          count = v - n
          break
        elseif other < idx then
          redis.call('HDEL', key, f)
        end
      end
    end
    if count == 0 then
      redis.call('PEXPIRE', key, math.floor(((idx + 1) * window - now + 999) / 1000) + pad)
    end
  end
  if v > most then -- give back what does not fit
    local take = 0
    if partial then take = most - count end
    if count == 0 and take == 0 then redis.call('HDEL', key, idx) else redis.call('HINCRBY', key, idx, take - n) end
    n = take
  end
else -- a peek: the stored window, if it is the current one or lies ahead
  local h = redis.call('HGETALL', key)
  if h[1] and tonumber(h[1]) >= idx then idx, count = tonumber(h[1]), tonumber(h[2]) end
  if count + n > most then
    if partial then n = most - count else n = 0 end
  end
end
local reset = (idx + 1) * window - now
local r
if n == 0 and cost > 0 then
  if count == 0 then r = {0, most, most, 0, reset, 0, 0} else r = {0, most, most - count, reset, reset, 0, 0} end
elseif count + n == 0 then
  r = {1, most, most, 0, 0, 0, 0}
elseif partial then
  r = {1, most, most - count - n, reset, 0, 0, n}
else
  r = {most - count - n, reset} -- the usual answer in two numbers, as prelude.lua's apply gives it
end
if partial then r[8] = now end
return r
