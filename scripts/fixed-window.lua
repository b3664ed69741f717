-- fixed-window: windows aligned to multiples of windowMs since the epoch.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, elapsed) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units spent `elapsed` ms ago (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- State: idx, count (window index, units consumed in that window) packed as
-- '<dd' (prelude.lua). A stored index other than the current one counts as
-- zero, so a stale key (the injected clock ran ahead of Redis TTLs) behaves
-- exactly like an absent one. A write in the stored window keeps its TTL
-- (KEEPTTL: the window's end has not moved); a SET with PX costs Redis more
-- than the rest of the decision.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX, or SET KEEPTTL in the stored window, when admitted).
-- A calendar period's block passes `start` (batch.lua periodFn): the window is
-- [start, start + w) and its index the start, so every instance names it alike.
-- The state under key: in the stored window its TTL stays, else it expires at the window's end.
local function save (key, idx, count, current, toEnd)
  if current then
    call('SET', key, packNumbers('<dd', idx, count), 'KEEPTTL')
  else
    call('SET', key, packNumbers('<dd', idx, count), 'PX', format('%d', toEnd))
  end
end

return function (key, limit, w, _, cost, now, mode, elapsed, start)

  local idx = start or floor(now / w)
  local from = start or idx * w
  local count = 0
  local current = false
  local stored = call('GET', key)
  if stored and #stored == 16 then
    local sidx, scount = unpackNumbers('<dd', stored)
    if sidx == idx then count, current = scount, true end
  end

  local toEnd = from + w - now

  if mode == 2 then
    -- refund, only while the window it was spent in is still the current one
    if count == 0 or now - elapsed < from then return 0 end
    count = count - cost
    if count < 0 then count = 0 end
    save(key, idx, count, current, toEnd)
    return 1
  end
  if mode == 3 then
    -- a charge goes to the current window (the one it was spent in, while that is current)
    count = count + cost
    if count > 2 * limit then count = 2 * limit end
    save(key, idx, count, current, toEnd)
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
  if mode == 0 then save(key, idx, count, current, toEnd) end
  return 1, limit - count, toEnd, 0, toEnd
end
