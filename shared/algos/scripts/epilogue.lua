
-- Diana: the ban check and the write-back every algorithm script shares.
local banned = 0
if ban > 0 then banned = tonumber(redis.call('GET', KEYS[2]) or '0') end
local r
if banned > now and not release then
  local left = banned - now
  r = {0, limit, 0, left, left, 0, 0}
else
  local write
  r, write = decide()
  if write == true then
    redis.call('PEXPIRE', KEYS[1], ms(r[8]) + pad)
  elseif write then
    local f = ({'%d', '%d %d', '%d %d %d', '%d %d %d %d'})[#write]
    redis.call('SET', KEYS[1], string.format(f, unpack(write)), 'PX', ms(r[8]) + pad)
  end
  if ban > 0 and r[1] == 0 and cost > 0 and not release then
    redis.call('SET', KEYS[2], int(now + ban), 'PX', ms(ban) + pad)
    r[3] = 0
    r[4] = math.max(r[4], ban)
    if r[5] >= 0 then r[5] = math.max(r[5], ban) end
  end
  r[8] = nil
end
return r
