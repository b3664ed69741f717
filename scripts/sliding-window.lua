-- sliding-window (counter): estimate = floor(prev * (W - elapsed) / W) + cur
-- The chunk returns function (key, limit, w, burst, cost, now, mode, elapsed) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units spent `elapsed` ms ago (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- State: one string "idx:cur:prev". When the window index has advanced by 1 the
-- stored cur becomes prev; by 2 or more both are zero (stale state == absent state).
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX when admitted).
-- The stored counts of the current (cur) and previous (prev) window; zero when stale or absent.
local function readCounts (key, idx)
  local cur, prev = 0, 0
  local stored = redis.call('GET', key)
  if stored then
    local a = string.find(stored, ':', 1, true)
    local b = a and string.find(stored, ':', a + 1, true)
    if b then
      local sidx = tonumber(string.sub(stored, 1, a - 1))
      local scur = tonumber(string.sub(stored, a + 1, b - 1)) or 0
      if sidx == idx then
        cur = scur
        prev = tonumber(string.sub(stored, b + 1)) or 0
      elseif sidx == idx - 1 then
        prev = scur
      end
    end
  end
  return cur, prev
end

-- ms from now until the estimate is 0 (quota fully restored)
local function resetMs (c, p, idx, w, now)
  local elapsed = now - idx * w
  if c > 0 then
    -- in the next window c is the previous count: floor(c * (W - e) / W) = 0 once e >= W - floor((W - 1) / c)
    return (idx + 1) * w + w - idiv(w - 1, c) - now
  end
  if p > 0 then
    local e = w - idiv(w - 1, p)
    if e > elapsed then return e - elapsed end
  end
  return 0
end

-- ms until a refused `cost` fits: earliest e (elapsed in this window) with floor(prev * (W - e) / W) <= limit - cost - cur
local function retryMs (cur, prev, limit, cost, w, elapsed)
  local retry = -1
  local room = limit - cost - cur
  if room >= 0 and prev > 0 then
    local e = w - idiv((room + 1) * w - 1, prev)
    if e <= elapsed then e = elapsed + 1 end
    if e < w then retry = e - elapsed end
  end
  if retry < 0 then
    -- next window: prev = cur, cur = 0; earliest e with floor(cur * (W - e) / W) <= limit - cost
    local e = 0
    if cur > 0 then
      e = w - idiv((limit - cost + 1) * w - 1, cur)
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

return function (key, limit, w, _, cost, now, mode, elapsedSince)

  local idx = idiv(now, w)
  local elapsed = now - idx * w
  local cur, prev = readCounts(key, idx)

  if mode == 2 then
    -- refund from the window it was spent in: the current one (cur) or the previous one (prev)
    local atIdx = idiv(now - elapsedSince, w)
    if atIdx == idx and cur > 0 then
      cur = cur - cost
      if cur < 0 then cur = 0 end
    elseif atIdx == idx - 1 and prev > 0 then
      prev = prev - cost
      if prev < 0 then prev = 0 end
    else
      return 0
    end
    redis.call('SET', key, string.format('%d:%d:%d', idx, cur, prev), 'PX', (idx + 2) * w - now)
    return 1
  end

  if mode == 3 then
    -- a charge goes to the current window (the one it was spent in, while that is current)
    cur = cur + cost
    if cur > 2 * limit then cur = 2 * limit end
    redis.call('SET', key, string.format('%d:%d:%d', idx, cur, prev), 'PX', (idx + 2) * w - now)
    return 1
  end

  local estimate = idiv(prev * (w - elapsed), w) + cur
  local available = limit - estimate
  if available < 0 then available = 0 end

  if cost > limit then
    return 0, available, resetMs(cur, prev, idx, w, now), w, nextMs(cur, prev, limit, available, w, elapsed)
  end
  if estimate + cost > limit then
    return 0, available, resetMs(cur, prev, idx, w, now), retryMs(cur, prev, limit, cost, w, elapsed), nextMs(cur, prev, limit, available, w, elapsed)
  end

  cur = cur + cost
  if mode == 0 then redis.call('SET', key, string.format('%d:%d:%d', idx, cur, prev), 'PX', (idx + 2) * w - now) end
  local remaining = limit - estimate - cost
  return 1, remaining, resetMs(cur, prev, idx, w, now), 0, nextMs(cur, prev, limit, remaining, w, elapsed)
end
