-- token-bucket: capacity = burst, refill = limit per windowMs, a new bucket is full.
--@requires call floor ceil format packNumbers unpackNumbers
-- The chunk returns function (key, limit, w, burst, cost, now, mode, chargedAt, reach, hold) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units charged at ms `chargedAt` (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- Exact integer arithmetic: tokens are scaled by windowMs (one token = W units,
-- capacity = burst * W) and the bucket gains `limit` units per ms. Tokens go down
-- to -capacity after an overdraft (mode 3), so 2 * capacity stays below 2^53.
-- A block with `delay` (batch.lua delayFn) passes reach = its delay in ms: a request the
-- bucket cannot serve now but can within `reach` ms is admitted with a wait (allowed 4, its
-- retryAfterMs the wait) when `hold` is true, taking the level below empty, down to
-- -(limit * reach) units; with `hold` false reach only bounds the stored level. An
-- overdraft (mode 3) then reaches -(capacity + limit * reach).
-- State: scaledTokens, ts (tokens as of ms ts) packed as '<dd' (prelude.lua). A full bucket is not stored:
-- the TTL is the time until the bucket is full again, so absent == full == stale.
-- Returns allowed (0, 1, or 4 for a reserved turn), remaining (a reserved turn's: the whole tokens
-- available now, before it, which a peek reports; after it none are), resetMs, retryAfterMs (the wait of a
-- reserved turn), nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX when admitted).

-- ms until the bucket is full again (t tokens, counted `lag` ms from now); 0 = full
local function resetMs (t, cap, limit, lag)
  if t >= cap then return 0 end
  return lag + ceil((cap - t) / limit)
end

-- whole tokens in the bucket: 0 while it is overdrawn
local function whole (t, w)
  if t <= 0 then return 0 end
  return floor(t / w)
end

-- ms until the bucket holds one more whole token; 0 = full
local function nextMs (t, cap, limit, w, lag)
  if t >= cap then return 0 end
  return lag + ceil(((whole(t, w) + 1) * w - t) / limit)
end

-- A refund (mode 2: the tokens go back into the bucket as it is now, up to its
-- capacity) or a charge without deciding (mode 3: the bucket may go below
-- empty, down to -capacity); returns 1.
local function adjust (key, tokens, base, cap, floorAt, limit, lag, w, cost, mode)
  if mode == 2 then
    tokens = tokens + cost * w
    if tokens >= cap then
      call('DEL', key)
      return 1
    end
  else
    tokens = tokens - cost * w
    if tokens < floorAt then tokens = floorAt end
  end
  call('SET', key, packNumbers('<dd', tokens, base), 'PX', format('%d', resetMs(tokens, cap, limit, lag)))
  return 1
end

-- A reserved turn at the level `left` below empty: nothing is left until it is back at zero;
-- `free`: the whole tokens available now, before it (fewer than its cost).
local function reserve (key, left, base, cap, limit, w, lag, mode, free)
  local reset = resetMs(left, cap, limit, lag)
  if mode == 0 then call('SET', key, packNumbers('<dd', left, base), 'PX', format('%d', reset)) end
  return 4, free, reset, lag + ceil(-left / limit), nextMs(left, cap, limit, w, lag)
end

return function (key, limit, w, burst, cost, now, mode, _chargedAt, reach, hold)

  -- The scaled tokens in the bucket now (below zero after an overdraft), and base:
  -- the ms they are counted at (later than now only if the clock went backwards).
  -- Read here, not in a helper: the common path makes no Lua call.
  local cap = burst * w
  -- the reservations' reach in units: the level may go down to -dl, an overdraft to floorAt
  local dl = 0
  if reach then dl = reach * limit end
  local floorAt = -cap - dl
  local tokens, base = cap, now
  local stored = call('GET', key)
  if stored and #stored == 16 then
    local st, ts = unpackNumbers('<dd', stored)
    if st > cap then st = cap end
    -- an overdraft is kept, down to one capacity below empty (below the reservations)
    if st < floorAt then st = floorAt end
    local elapsed = now - ts
    if elapsed < 0 then
      elapsed = 0
      base = ts
    end
    -- beyond this the bucket is full anyway; keeps elapsed * limit below 2^53
    local maxElapsed = floor((2 * cap + dl) / limit) + 1
    if elapsed > maxElapsed then elapsed = maxElapsed end
    local gain = elapsed * limit
    if gain < cap - st then tokens = st + gain end
  end
  local lag = base - now
  if mode >= 2 then return adjust(key, tokens, base, cap, floorAt, limit, lag, w, cost, mode) end

  if cost > burst then
    return 0, whole(tokens, w), resetMs(tokens, cap, limit, lag), w, nextMs(tokens, cap, limit, w, lag)
  end
  local need = cost * w
  if tokens < need then
    local left = tokens - need
    if left >= -dl and hold then return reserve(key, left, base, cap, limit, w, lag, mode, whole(tokens, w)) end
    -- refused: its retry is when it would be held for the whole reach (or, holding none, served now)
    if not hold then dl = 0 end
    return 0, whole(tokens, w), resetMs(tokens, cap, limit, lag), lag + ceil((-left - dl) / limit), nextMs(tokens, cap, limit, w, lag)
  end

  -- admitted: resetMs and nextMs inline (the common path makes no Lua call); tokens >= 0 here
  --@inline whole resetMs nextMs: the helpers' form (--|), held equal to the code down to --@end by test/internals/inlined.test.ts
  --| tokens = tokens - need
  --| local reset = resetMs(tokens, cap, limit, lag)
  --| if mode == 0 then call('SET', key, packNumbers('<dd', tokens, base), 'PX', format('%d', reset)) end
  --| return 1, whole(tokens, w), reset, 0, nextMs(tokens, cap, limit, w, lag)
  tokens = tokens - need
  local left = floor(tokens / w)
  local reset, nextUnit = 0, 0
  if tokens < cap then
    reset = lag + ceil((cap - tokens) / limit)
    nextUnit = lag + ceil(((left + 1) * w - tokens) / limit)
  end
  if mode == 0 then call('SET', key, packNumbers('<dd', tokens, base), 'PX', format('%d', reset)) end
  return 1, left, reset, 0, nextUnit
  --@end
end
