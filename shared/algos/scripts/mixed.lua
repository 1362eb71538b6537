-- Diana: the loop of the mixed script (see Mixed in scripts.go), after prelude.lua, get(a) and
-- wholes.
-- ARGV[1] is the layout: per group n*4 + together*2 + denied, then per decision
-- alg*8 + direct*4 + ban*2 + shadow. The decisions' KEYS and ARGV follow in order.
local layout = {cmsgpack.unpack(ARGV[1])}
local out, keys, argv = {}, {}, {} -- one decision's KEYS and ARGV, the same tables for each
local li, ki, ai, o = 1, 0, 1, 0 -- the next layout entry; the KEYS and ARGV read; the replies
local code, kat, aat = {}, {}, {} -- a group's decisions: layout code, KEYS and ARGV before each

-- run makes decision j of a group decided together, from its KEYS and ARGV, and returns its
-- reply, or {err = message} if it failed.
local function run(j)
  local a, k, v = floor(code[j] / 8), kat[j], aat[j]
  keys[1], argv[1] = KEYS[k + 1], ARGV[v + 1]
  if not wholes[a] then keys[2], argv[2] = KEYS[k + 2], ARGV[v + 2] end
  local ok, r
  if wholes[a] then ok, r = pcall(get(a), keys, argv) else ok, r = pcall(apply, get(a), keys, argv) end
  if not ok then
    if type(r) == 'table' then r = r.err end -- redis.call's errors are tables
    r = {err = tostring(r)}
  end
  return r
end

-- denied reports whether r is a denial; an admission of the whole cost is two numbers (see apply).
local function denied(r) return r[3] ~= nil and r[1] == 0 end

-- set makes the writes held back in w (key, value, ms: three entries per write).
local function set(w)
  for i = 1, #w, 3 do redis.call('SET', w[i], w[i + 1], 'PX', w[i + 2]) end
end

while layout[li] do
  local g = layout[li]
  local n = floor(g / 4)
  if g % 4 < 2 then -- independent decisions, each as its own script would make it
    for j = 1, n do
      local a = floor(layout[li + j] / 8)
      local f = fns[a] or get(a)
      local ok, r
      keys[1], argv[1] = KEYS[ki + 1], ARGV[ai + 1]
      if wholes[a] then
        ki, ai = ki + 1, ai + 1
        ok, r = pcall(f, keys, argv)
      else
        keys[2], argv[2] = KEYS[ki + 2], ARGV[ai + 2]
        ki, ai = ki + 2, ai + 2
        ok, r = pcall(apply, f, keys, argv)
      end
      if not ok then
        if type(r) == 'table' then r = r.err end -- redis.call's errors are tables
        r = {err = tostring(r)}
      end
      out[o + j] = r
    end
    li = li + n + 1
  else -- one request's limits, all or nothing (algos.Together)
    for j = 1, n do
      local c = layout[li + j]
      code[j], kat[j], aat[j] = c, ki, ai
      if wholes[floor(c / 8)] then ki, ai = ki + 1, ai + 1 else ki, ai = ki + 2, ai + 2 end
    end
    li = li + n + 1
    local admit, failed = g % 2 == 0, nil
    local held, kept = {}, {} -- the writes held back; those made even if the request is refused
    for j = 1, n do
      local direct = floor(code[j] / 4) % 2 == 1
      local from = #held
      if direct then dryrun = true else defer = held end
      local r = run(j)
      dryrun, defer = nil, nil
      if r.err then
        failed = r
        break
      end
      out[o + j] = r
      if code[j] % 2 == 0 and denied(r) then -- a denial, not a shadow's: its ban starts anyway
        admit = false
        local to = #held
        for i = from + 1, to do
          kept[#kept + 1] = held[i]
          held[i] = nil
        end
      end
    end
    if failed then
      for j = 1, n do out[o + j] = failed end
    else
      if admit then set(held) end
      set(kept)
      for j = 1, n do
        local c = code[j]
        -- A direct decision is made again, for real: when the request is admitted, or when it
        -- is a denial, not a shadow's, that starts a ban.
        if floor(c / 4) % 2 == 1 and (admit or c % 4 == 2 and denied(out[o + j])) then
          out[o + j] = run(j)
        end
      end
    end
  end
  o = o + n
end
return cmsgpack.pack(out)
