-- gcra: generic cell rate algorithm. Emission interval I = W / limit ms, capacity burst:
--@requires call floor ceil format packNumbers unpackNumbers
-- a fresh key admits `burst` units at once, then one unit every I ms.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, chargedAt, reach, hold) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units charged at ms `chargedAt` (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- Exact integer arithmetic in units of 1/limit ms, relative to now: I = W units and
-- the tolerance window is burst * W units; after an overdraft (mode 3) the debt
-- reaches up to twice the tolerance, so 2 * burst * W stays below 2^53.
-- A block with `delay` (batch.lua delayFn) passes reach = its delay in ms: a request the
-- tolerance refuses but that fits within `reach` ms more is admitted with a wait (allowed 4,
-- its retryAfterMs the wait: its turn is now + wait) when `hold` is true; with `hold` false
-- (this instance holds no more requests) reach only bounds the stored debt, so reservations
-- of other instances survive. The debt then reaches 2 * cap + reach * limit; a refund (mode 2)
-- gives back only when chargedAt is the TAT its charge left, rounded up: it was the latest.
-- State: tatMs, frac packed as '<dd' (prelude.lua), the theoretical arrival time tatMs + frac / limit ms
-- (0 <= frac < limit). A TAT in the past is the same as no state.
-- Returns allowed (0, 1, or 4 for a reserved turn), remaining (a reserved turn's: the whole units
-- available now, before it, which a peek reports; after it none are), resetMs, retryAfterMs (the wait of a
-- reserved turn), nextMs (ms until remaining grows by one unit; 0 = full).
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

-- A refund (mode 2) or a charge without deciding (mode 3) on the debt d; returns 1 when it changed the state.
local function adjust (key, d, top, limit, w, cost, now, mode, chargedAt, reach)
  local nd
  if mode == 2 then
    -- refund: the theoretical arrival time moves back by cost emission intervals (never before now);
    -- with reservations, only the latest one's (a later turn must not be given to a second caller)
    if reach and now + ceil(d / limit) ~= chargedAt then return 0 end
    nd = d - cost * w
    if nd <= 0 then
      call('DEL', key)
      return 1
    end
  else
    -- charge without deciding: the debt may go beyond the tolerance, up to twice it (plus the reach)
    nd = d + cost * w
    if nd > top then nd = top end
  end
  local whole = floor(nd / limit)
  call('SET', key, packNumbers('<dd', now + whole, nd - whole * limit), 'PX', format('%d', ceil(nd / limit)))
  return 1
end

-- A reserved turn for the debt nd beyond the tolerance: nothing is left until (nd - cap) / limit ms from now;
-- `free`: the whole units available now, before it (fewer than its cost).
local function reserve (key, nd, cap, limit, w, now, mode, free)
  local whole = floor(nd / limit)
  local reset = ceil(nd / limit)
  if mode == 0 then call('SET', key, packNumbers('<dd', now + whole, nd - whole * limit), 'PX', format('%d', reset)) end
  return 4, free, reset, ceil((nd - cap) / limit), nextMs(nd, cap, limit, w)
end

return function (key, limit, w, burst, cost, now, mode, chargedAt, reach, hold)

  local cap = burst * w
  -- the reservations' reach in units; top: the most debt an overdraft on top of them reaches
  local dl = 0
  if reach then dl = reach * limit end
  local top = 2 * cap + dl
  -- d = max(0, TAT - now) in units of 1/limit ms
  local d = 0
  local stored = call('GET', key)
  if stored and #stored == 16 then
    local tatMs, frac = unpackNumbers('<dd', stored)
    if tatMs >= now then
      local dMs = tatMs - now
      -- a TAT further ahead than an overdrawn tolerance can reach (clock went backwards)
      -- counts as the most it can be: twice the tolerance (plus the reservations' reach)
      local maxMs = floor(top / limit) + 1
      if dMs > maxMs then dMs = maxMs end
      d = dMs * limit + frac
      if d > top then d = top end
    end
  end

  if mode >= 2 then return adjust(key, d, top, limit, w, cost, now, mode, chargedAt, reach) end

  if cost > burst then
    return 0, left(d, cap, w), ceil(d / limit), w, nextMs(d, cap, limit, w)
  end
  local nd = d + cost * w
  if nd > cap then
    if nd <= cap + dl and hold then return reserve(key, nd, cap, limit, w, now, mode, left(d, cap, w)) end
    -- refused: its retry is when it would be held for the whole reach (or, holding none, admitted now)
    if not hold then dl = 0 end
    return 0, left(d, cap, w), ceil(d / limit), ceil((nd - cap - dl) / limit), nextMs(d, cap, limit, w)
  end

  -- admitted: nextMs and left inline (the common path makes no Lua call); 0 < nd <= cap here
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
