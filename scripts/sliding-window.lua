-- sliding-window (counter): estimate = floor(prev * (W - elapsed) / W) + cur
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

-- ms from now until the estimate is 0 (quota fully restored)
local function resetMs (c, p, idx, w, now)
  local elapsed = now - idx * w
  if c > 0 then
    -- in the next window c is the previous count: floor(c * (W - e) / W) = 0 once e >= W - floor((W - 1) / c)
    return (idx + 1) * w + w - floor((w - 1) / c) - now
  end
  if p > 0 then
    local e = w - floor((w - 1) / p)
    if e > elapsed then return e - elapsed end
  end
  return 0
end

-- ms until a refused `cost` fits: earliest e (elapsed in this window) with floor(prev * (W - e) / W) <= limit - cost - cur
local function retryMs (cur, prev, limit, cost, w, elapsed)
  local retry = -1
  local room = limit - cost - cur
  if room >= 0 and prev > 0 then
    local e = w - floor(((room + 1) * w - 1) / prev)
    if e <= elapsed then e = elapsed + 1 end
    if e < w then retry = e - elapsed end
  end
  if retry < 0 then
    -- next window: prev = cur, cur = 0; earliest e with floor(cur * (W - e) / W) <= limit - cost
    local e = 0
    if cur > 0 then
      e = w - floor(((limit - cost + 1) * w - 1) / cur)
      if e < 0 then e = 0 end
    end
    -- e == W means the window after next, where everything is zero
    retry = w - elapsed + e
  end
  return retry
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
  -- and resetMs computed here, not in helpers: four Lua calls on the admitted path
  -- cost about 2,000 instructions a decision (benchmarks/instructions.ts).
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
    local estimate = floor((prev * (w - elapsed)) / w) + cur
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
  -- resetMs with c > 0: in the next window cur is the previous count (see resetMs)
  return 1, remaining, (idx + 2) * w - floor((w - 1) / cur) - now, 0, retryMs(cur, prev, limit, remaining + 1, w, elapsed)
end
