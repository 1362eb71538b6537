end

-- The twin of Ban.Decide in shared/algos/ban.go. Without a ban holding, the reply is the
-- algorithm's. During a ban the request is denied, and its Retry-After is the real wait: the
-- ban's end, or later if the algorithm would still refuse the request then (its state does not
-- change meanwhile). ResetAfter is of the state as it is: a peek's, when the request would pass.
if held == 0 then return decide(cost) end
local d, retry = decide(cost), held
if d[1] == 1 and d[7] > 0 then
  d = decide(0)
elseif d[1] == 0 then
  if d[5] < 0 then retry = -1 else retry = math.max(held, d[5]) end
end
return {0, limit, 0, math.max(held, d[4]), retry, 0, 0}
