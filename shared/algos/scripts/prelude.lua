-- Diana: what every algorithm script shares (see Script in shared/algos/algos.go). A script is
-- this, the algorithm's code as the function decide (see scripts.go) and a call of apply.
-- KEYS[1] the identity's state, KEYS[2] its ban (only when ban > 0; both under one hash tag).
-- ARGV[1]: MessagePack integers now (µs; -1: Redis TIME), cost, max_wait, flags (1 partial,
-- 2 release, 4 the state is a sorted set, 8 dry run, 16 backdated), ban (µs), limit, then the algorithm's
-- parameters p1..p4. One unpack costs Redis far less CPU than a tonumber (strtod) per argument.
-- ARGV[2]: the lease id (concurrency), when there is one.
-- A dry run replies what the same request would get and writes nothing: apply stores no state
-- and starts no ban, and the sorted-set scripts neither add nor drop members. A dry run is never
-- a release (stores refuse one): the release paths do not look at the flag.
-- Redis runs this on its one thread for every decision, so it is written for its CPU: the
-- functions are made once per script call, not once per decision (a closure and the locals it
-- captures cost Redis about as much as a GET), no tables but the reply.
-- All numbers stay below 2^53, where Lua's doubles are exact integers.
local floor = math.floor -- floor(a / b) is exact for integers below 2^53

-- Each algorithm's code is the body of a function decide(KEYS, now, cost, max_wait, partial,
-- release, dry, backdated, limit, p1, p2, p3, p4, w1, w2, w3, w4, s, id), and ends every path with
-- return finish(reply, write[, at]), where
--   reply = {allowed (1/0), limit, remaining, reset_after, retry_after, delay, granted, ttl}
--   write = the new string state, true when the code changed its sorted set itself, or nil
--   at = the time the units count at, which a refund of them names (default now; the sliding log
--        records them later).
local function finish(r, write, at) return r, write, at end

-- apply decides the request of KEYS and ARGV with decide. It stores the state with its TTL,
-- starts a ban on a denial, and returns the reply; on a dry run it only returns the reply, the same
-- as it would be without the flag. In a group decided together (mixed.lua), defer holds the
-- writes of a string state and of a ban back instead: key, value and ms appended to it, made once
-- the group's verdict is known. The reply to a partial request ends with an eighth value, the
-- time its units count at.
local function apply(decide, KEYS, ARGV)
  local now, cost, max_wait, flags, ban, limit, p1, p2, p3, p4 = cmsgpack.unpack(ARGV[1])
  local id = ARGV[2] or '0'
  local partial, release, dry, backdated = flags % 2 == 1, flags % 4 >= 2, flags % 16 >= 8 or dryrun, flags >= 16
  local pad = 0
  if now < 0 then
    if not clock then -- Redis's clock, read once per script call (a batch's decisions share it)
      local t = redis.call('TIME')
      clock = t[1] * 1000000 + t[2] -- Lua reads the strings as numbers
    end
    now = clock
  else
    -- A caller-given time is for tests only: it is not Redis's clock, so keys must outlive the
    -- test instead of expiring on Redis's clock in the middle of it.
    pad = 3600000
  end

  -- held: µs a ban still holds the identity (0: none). A held request is denied whatever the
  -- algorithm says; the algorithm still runs, as a dry run without a wait, to tell whether it
  -- would refuse the request after the ban too (see the end). A release goes through.
  local held = 0
  if ban > 0 and not release then
    local banned = tonumber(redis.call('GET', KEYS[2]) or '0')
    if banned > now then held, dry, max_wait = banned - now, true, 0 end
  end

  -- The first four words of a string state "w1 w2 ...", missing ones 0 (sorted-set states skip
  -- this), as State.W holds them. A state of more words (Script.Words) is read from s by its
  -- script.
  local w1, w2, w3, w4 = 0, 0, 0, 0
  local s = nil
  if flags % 8 < 4 then
    s = redis.call('GET', KEYS[1])
    if s then
      w1 = tonumber(s) -- one word: the common case, and the cheapest
      if not w1 then
        local a, b, c, d = string.match(s, '^(%-?%d+) ?(%-?%d*) ?(%-?%d*) ?(%-?%d*)')
        w1, w2, w3, w4 = tonumber(a) or 0, tonumber(b) or 0, tonumber(c) or 0, tonumber(d) or 0
      end
    end
  end

  local r, write, at = decide(KEYS, now, cost, max_wait, partial, release, dry, backdated, limit, p1, p2, p3, p4, w1, w2, w3, w4, s, id)
  if write and not dry then
    local px = math.max(1, floor((r[8] + 999) / 1000)) + pad
    if write == true then
      redis.call('PEXPIRE', KEYS[1], px)
    elseif defer then
      local n = #defer
      defer[n + 1], defer[n + 2], defer[n + 3] = KEYS[1], write, px
    else
      redis.call('SET', KEYS[1], write, 'PX', px)
    end
  end
  if ban > 0 and held == 0 and r[1] == 0 and cost > 0 and not release then
    if defer and not dry then
      local n = #defer
      defer[n + 1], defer[n + 2], defer[n + 3] = KEYS[2], string.format('%d', now + ban), floor((ban + 999) / 1000) + pad
    elseif not dry then
      redis.call('SET', KEYS[2], string.format('%d', now + ban), 'PX', floor((ban + 999) / 1000) + pad)
    end
    r[3] = 0
    r[4] = math.max(r[4], ban)
    if r[5] >= 0 then r[5] = math.max(r[5], ban) end
  end
  if partial then r[8] = at or now else r[8] = nil end
  if held == 0 then
    -- The usual answer, the whole cost admitted at once, in two numbers, {remaining,
    -- reset_after}: the others go without saying (allowed, the limit argument, no retry, no
    -- delay, the cost granted), and Redis formats each number of a reply, at about 1,000
    -- instructions a number.
    if r[1] == 1 and r[5] == 0 and r[6] == 0 and r[7] == cost and not partial then return {r[3], r[4]} end
    return r
  end

  -- The twin of Ban.Decide in shared/algos/ban.go. During a ban the request is denied, and its
  -- Retry-After is the real wait: the ban's end, or later if the algorithm would still refuse
  -- the request then (its state does not change meanwhile). ResetAfter is of the state as it
  -- is: a peek's, when the request would pass.
  local retry = held
  if r[1] == 1 and r[7] > 0 then
    r = decide(KEYS, now, 0, max_wait, partial, release, dry, backdated, limit, p1, p2, p3, p4, w1, w2, w3, w4, s, id)
  elseif r[1] == 0 then
    if r[5] < 0 then retry = -1 else retry = math.max(held, r[5]) end
  end
  return {0, limit, 0, math.max(held, r[4]), retry, 0, 0}
end
