-- The batch driver per call, first part (batch.lua's header has the layout):
-- the call's clock and its block specs. In a script it follows batch.lua; a
-- library runs it as the start of its batch function, where KEYS and ARGV are
-- the function's arguments (a script reads them as locals the builder declares:
-- a global's read is a table lookup, and the loop reads them per decision).
--@requires KEYS ARGV nowMs tonumber format byte blockSpec algorithm delayFn queueFn periodFn SPEC_STRIDE
--@updates specOf numbered sFn sLimit sWindow sBurst sShadow sPenalty
--@provides now specs

local now = nowMs(ARGV[1])

local specs = tonumber(ARGV[2])
for s = numbered + 1, specs do specOf[format('%d', s)] = s end
if specs > numbered then numbered = specs end
for s = 1, specs do
  local b = 3 + (s - 1) * SPEC_STRIDE
  local spec = blockSpec(ARGV[b])
  sFn[s], sLimit[s], sWindow[s], sBurst[s], sShadow[s], sPenalty[s] = algorithm(spec[1]), spec[2], spec[3], spec[4], spec[5], spec[6]
  local tail = ARGV[b + 1]
  if tail ~= '' then
    -- 'd' or 'n' (100, 110): a delay; 'w' or 'o' (119, 111): a slot's wait; else a period's boundaries
    local first = byte(tail)
    if first == 100 or first == 110 then sFn[s] = delayFn(sFn[s], tail)
    elseif first == 119 or first == 111 then sFn[s] = queueFn(sFn[s], tail)
    else sFn[s], sWindow[s] = periodFn(sFn[s], tail, now) end
  end
end
