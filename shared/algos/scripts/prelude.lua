-- Diana: the part every algorithm script shares (see Script in shared/algos/algos.go).
-- KEYS[1] the identity's state, KEYS[2] its ban (only when ban > 0; both under one hash tag).
-- ARGV: now (µs; -1: Redis TIME), cost, max_wait, partial (0/1), ban (µs), limit, id,
-- release (0/1), then the algorithm's parameters from ARGV[9] on.
-- All numbers stay below 2^53, where Lua's doubles are exact integers.
local now = tonumber(ARGV[1])
local pad = 0
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  -- A caller-given time is for tests only: it is not Redis's clock, so keys must outlive the
  -- test instead of expiring on Redis's clock in the middle of it.
  pad = 3600000
end
local cost, max_wait = tonumber(ARGV[2]), tonumber(ARGV[3])
local partial, ban, limit = ARGV[4] == '1', tonumber(ARGV[5]), tonumber(ARGV[6])
local id, release = ARGV[7], ARGV[8] == '1'

-- Floor and ceiling division of integers; exact for operands below 2^53.
local function fdiv(a, b) return math.floor(a / b) end
local function cdiv(a, b) return math.floor((a + b - 1) / b) end
local function ms(us) return math.max(1, cdiv(us, 1000)) end
local function int(v) return string.format('%d', v) end

-- The words of a string state ("w0 w1 ..."), missing ones 0.
local function load_words()
  local s = redis.call('GET', KEYS[1])
  if not s then return {0, 0, 0, 0} end
  local a, b, c, d = string.match(s, '^(%-?%d+) ?(%-?%d*) ?(%-?%d*) ?(%-?%d*)$')
  return {tonumber(a) or 0, tonumber(b) or 0, tonumber(c) or 0, tonumber(d) or 0}
end

-- Each algorithm defines decide(), returning the reply
--   {allowed (1/0), limit, remaining, reset_after, retry_after, delay, granted, ttl}
-- and what to write: a table of words to store, true when it changed its sorted set itself,
-- or nil.
