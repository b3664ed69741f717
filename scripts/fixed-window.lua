-- fixed-window: windows aligned to multiples of windowMs since the epoch.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, elapsed) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units spent `elapsed` ms ago (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- State: one string "idx:count" (window index, units consumed in that window).
-- A stored index other than the current one counts as zero, so a stale key
-- (the injected clock ran ahead of Redis TTLs) behaves exactly like an absent one.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX when admitted).
return function (key, limit, w, _, cost, now, mode, elapsed)

  local idx = idiv(now, w)
  local count = 0
  local stored = redis.call('GET', key)
  if stored then
    local sep = string.find(stored, ':', 1, true)
    if sep and tonumber(string.sub(stored, 1, sep - 1)) == idx then
      count = tonumber(string.sub(stored, sep + 1)) or 0
    end
  end

  local toEnd = (idx + 1) * w - now

  if mode == 2 then
    -- refund, only while the window it was spent in is still the current one
    if count == 0 or idiv(now - elapsed, w) ~= idx then return 0 end
    count = count - cost
    if count < 0 then count = 0 end
    redis.call('SET', key, string.format('%d:%d', idx, count), 'PX', toEnd)
    return 1
  end
  if mode == 3 then
    -- a charge goes to the current window (the one it was spent in, while that is current)
    count = count + cost
    if count > 2 * limit then count = 2 * limit end
    redis.call('SET', key, string.format('%d:%d', idx, count), 'PX', toEnd)
    return 1
  end
  local available = limit - count
  if available < 0 then available = 0 end

  if cost > limit then
    -- can never be admitted
    local reset = 0
    if count > 0 then reset = toEnd end
    return 0, available, reset, w, reset
  end
  if count + cost > limit then
    -- count > 0 here, so the quota is restored when the window ends
    return 0, available, toEnd, toEnd, toEnd
  end

  count = count + cost
  if mode == 0 then redis.call('SET', key, string.format('%d:%d', idx, count), 'PX', toEnd) end
  return 1, limit - count, toEnd, 0, toEnd
end
