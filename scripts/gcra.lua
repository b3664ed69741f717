-- gcra: generic cell rate algorithm. Emission interval I = W / limit ms, capacity burst:
--@requires call floor ceil format packNumbers unpackNumbers
-- a fresh key admits `burst` units at once, then one unit every I ms.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, chargedAt) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units charged at ms `chargedAt` (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- Exact integer arithmetic in units of 1/limit ms, relative to now: I = W units and
-- the tolerance window is burst * W units; after an overdraft (mode 3) the debt
-- reaches up to twice the tolerance, so 2 * burst * W stays below 2^53.
-- State: tatMs, frac packed as '<dd' (prelude.lua), the theoretical arrival time tatMs + frac / limit ms
-- (0 <= frac < limit). A TAT in the past is the same as no state.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX when admitted).
-- whole units left under the tolerance: 0 while the debt is beyond it (an overdraft)
local function left (debt, cap, w)
  if debt >= cap then return 0 end
  return floor((cap - debt) / w)
end

-- ms until the debt d leaves room for one more whole unit; 0 = no debt (full)
local function nextMs (debt, cap, limit, w)
  if debt <= 0 then return 0 end
  return ceil((debt - (cap - (left(debt, cap, w) + 1) * w)) / limit)
end

return function (key, limit, w, burst, cost, now, mode)

  local cap = burst * w
  -- d = max(0, TAT - now) in units of 1/limit ms
  local d = 0
  local stored = call('GET', key)
  if stored and #stored == 16 then
    local tatMs, frac = unpackNumbers('<dd', stored)
    if tatMs >= now then
      local dMs = tatMs - now
      -- a TAT further ahead than an overdrawn tolerance can reach (clock went backwards)
      -- counts as the most it can be: twice the tolerance
      local maxMs = floor((2 * cap) / limit) + 1
      if dMs > maxMs then dMs = maxMs end
      d = dMs * limit + frac
      if d > 2 * cap then d = 2 * cap end
    end
  end

  if mode == 2 then
    -- refund: the theoretical arrival time moves back by cost emission intervals (never before now)
    local rd = d - cost * w
    if rd <= 0 then
      call('DEL', key)
      return 1
    end
    local rwhole = floor(rd / limit)
    call('SET', key, packNumbers('<dd', now + rwhole, rd - rwhole * limit), 'PX', format('%d', ceil(rd / limit)))
    return 1
  end

  if mode == 3 then
    -- charge without deciding: the debt may go beyond the tolerance, up to twice it
    local cd = d + cost * w
    if cd > 2 * cap then cd = 2 * cap end
    local cwhole = floor(cd / limit)
    call('SET', key, packNumbers('<dd', now + cwhole, cd - cwhole * limit), 'PX', format('%d', ceil(cd / limit)))
    return 1
  end

  if cost > burst then
    return 0, left(d, cap, w), ceil(d / limit), w, nextMs(d, cap, limit, w)
  end
  local nd = d + cost * w
  if nd > cap then
    return 0, left(d, cap, w), ceil(d / limit), ceil((nd - cap) / limit), nextMs(d, cap, limit, w)
  end

  -- admitted: nextMs and left inline (docs/performance.md, round 7); 0 < nd <= cap here
  --@inline left nextMs: the helpers' form (--|), held equal to the code down to --@end by test/internals/inlined.test.ts
  --| local whole = floor(nd / limit)
  --| if mode == 0 then call('SET', key, packNumbers('<dd', now + whole, nd - whole * limit), 'PX', format('%d', ceil(nd / limit))) end
  --| return 1, left(nd, cap, w), ceil(nd / limit), 0, nextMs(nd, cap, limit, w)
  local whole = floor(nd / limit)
  local reset = ceil(nd / limit)
  local units = floor((cap - nd) / w)
  if mode == 0 then call('SET', key, packNumbers('<dd', now + whole, nd - whole * limit), 'PX', format('%d', reset)) end
  return 1, units, reset, 0, ceil((nd - (cap - (units + 1) * w)) / limit)
  --@end
end
