-- sliding-window (counter): estimate = ceil(prev * (W - elapsed) / W) + cur, the previous
--@requires call floor ceil format packNumbers unpackNumbers
-- window's count weighted by the part of it still inside the trailing window, rounded up:
-- a request of `cost` is admitted iff cur + cost <= limit and
-- prev * (W - e) <= (limit - cur - cost) * W (e = elapsed in this window), so the weighted
-- estimate never exceeds the limit. Exact in doubles for every reachable state: the right
-- side is below limit * W < 2^53 (maxLimitFor); the left, one rounding of an exact
-- product, compares with it exactly (rounding is monotone and every integer up to 2^53 is
-- a double), and when it reaches 2^53 (an adjust overdraft, prev up to 2 * limit) the
-- estimate is at least limit, as it truly is. No bound on prev is needed for that (see
-- docs/algorithms.md). Instances before this rule floored the weighted count (admitting up
-- to one unit more at a boundary); during a rolling deploy they read and write the same
-- state, so the two rules only differ by that unit on the old instances' decisions.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, chargedAt) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units charged at ms `chargedAt` (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- State: idx, cur, prev packed as '<ddd' (prelude.lua). When the window index
-- has advanced by 1 the stored cur becomes prev; by 2 or more both are zero
-- (stale state == absent state). A write in the stored window keeps its TTL
-- (KEEPTTL: the state expires when the next window ends, which has not moved);
-- a SET with PX costs Redis more than the rest of the decision.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX, or SET KEEPTTL in the stored window, when admitted).

-- ms from now until the estimate is 0 (quota fully restored): a count weighs at least 1
-- until its window has wholly left the trailing window
local function resetMs (c, p, idx, w, now)
  if c > 0 then return (idx + 2) * w - now end
  if p > 0 then return (idx + 1) * w - now end
  return 0
end

-- ms until a refused `cost` fits: the earliest e (elapsed in this window) with
-- prev * (W - e) <= (limit - cost - cur) * W, else in the next window (prev = cur, cur = 0)
local function retryMs (cur, prev, limit, cost, w, elapsed)
  local room = limit - cost - cur
  if room >= 0 then
    -- refused now with room: prev > 0, and this e is after elapsed
    local e = w - floor(room * w / prev)
    if e < w then return e - elapsed end
  end
  -- next window: earliest e with cur * (W - e) <= (limit - cost) * W; e == W means the
  -- window after next, where everything is zero
  local e = 0
  if cur > 0 then
    e = w - floor((limit - cost) * w / cur)
    if e < 0 then e = 0 end
  end
  return w - elapsed + e
end

-- ms until `available` grows by one unit: when a request of available + 1 units would fit; 0 = full
local function nextMs (cur, prev, limit, available, w, elapsed)
  if available >= limit then return 0 end
  return retryMs(cur, prev, limit, available + 1, w, elapsed)
end

-- A refund (mode 2) from the window it was charged in (at ms chargedAt, the
-- script's own clock then), the current one (cur) or the previous one (prev):
-- the counts after it, or nil when nothing is given back.
local function refunded (idx, cur, prev, w, cost, chargedAt)
  local atIdx = floor(chargedAt / w)
  if atIdx == idx and cur > 0 then
    cur = cur - cost
    if cur < 0 then cur = 0 end
    return cur, prev
  elseif atIdx == idx - 1 and prev > 0 then
    prev = prev - cost
    if prev < 0 then prev = 0 end
    return cur, prev
  end
  return nil
end

return function (key, limit, w, _, cost, now, mode, chargedAt)

  local idx = floor(now / w)
  local elapsed = now - idx * w
  -- The stored counts of the current (cur) and previous (prev) window, zero when
  -- stale or absent, and whether the state was written in this window. Read, saved
  -- and resetMs computed here, not in helpers: the common path makes no Lua call.
  local cur, prev, current = 0, 0, false
  local stored = call('GET', key)
  if stored and #stored == 24 then
    local sidx, scur, sprev = unpackNumbers('<ddd', stored)
    if sidx == idx then
      cur, prev, current = scur, sprev, true
    elseif sidx == idx - 1 then
      prev = scur
    end
  end

  local remaining = 0
  if mode == 2 then
    cur, prev = refunded(idx, cur, prev, w, cost, chargedAt)
    if cur == nil then return 0 end
  elseif mode == 3 then
    -- a charge goes to the current window (the one it was spent in, while that is current)
    cur = cur + cost
    if cur > 2 * limit then cur = 2 * limit end
  else
    local estimate = ceil((prev * (w - elapsed)) / w) + cur
    local available = limit - estimate
    if available < 0 then available = 0 end
    if cost > limit then
      return 0, available, resetMs(cur, prev, idx, w, now), w, nextMs(cur, prev, limit, available, w, elapsed)
    end
    if estimate + cost > limit then
      return 0, available, resetMs(cur, prev, idx, w, now), retryMs(cur, prev, limit, cost, w, elapsed), nextMs(cur, prev, limit, available, w, elapsed)
    end
    -- admitted: cur > 0 and remaining < limit from here
    cur = cur + cost
    remaining = limit - estimate - cost
  end

  -- the one write: in the stored window its TTL stays, else it expires when the next window ends
  if mode ~= 1 then
    if current then
      call('SET', key, packNumbers('<ddd', idx, cur, prev), 'KEEPTTL')
    else
      call('SET', key, packNumbers('<ddd', idx, cur, prev), 'PX', format('%d', (idx + 2) * w - now))
    end
  end
  if mode >= 2 then return 1 end
  -- resetMs with c > 0 (see resetMs)
  return 1, remaining, (idx + 2) * w - now, 0, retryMs(cur, prev, limit, remaining + 1, w, elapsed)
end
