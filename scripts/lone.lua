-- A lone decision's call: `lone` (one algorithm's function) on its spec's
-- numbers (ARGV[1], spec.lua), the cost ('1' read without strtod) and now,
-- replying as the batch script does: `now`, then the straight decision's two,
-- three or four values (batch.lua), or the error text alone.
--@requires KEYS ARGV lone blockSpec nowMs tonumber errorText emit
--@updates out
local spec, cost, now = blockSpec(ARGV[1]), ARGV[2], nowMs(ARGV[3])
local ok, a, r, reset, retry, nextMs = pcall(lone, KEYS[1], spec[2], spec[3], spec[4], cost == '1' and 1 or tonumber(cost), now, 0)
if not ok then return { now, errorText(a) } end
out[1] = now
out[emit(1, a, r, reset, retry, nextMs) + 1] = nil
return out
