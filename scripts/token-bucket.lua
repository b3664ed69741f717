-- token-bucket: capacity = burst, refill = limit per windowMs, a new bucket is full.
-- The chunk returns function (key, limit, w, burst, cost, now, mode, elapsed) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units spent `elapsed` ms ago (returns 1 when
--   given back, else 0). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- Exact integer arithmetic: tokens are scaled by windowMs (one token = W units,
-- capacity = burst * W <= 8.64e15 < 2^53) and the bucket gains `limit` units per ms.
-- State: one string "scaledTokens:ts" (tokens as of ms ts). A full bucket is not stored:
-- the TTL is the time until the bucket is full again, so absent == full == stale.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: GET (+ SET PX when admitted).
-- The scaled tokens in the bucket now, and base: the ms they are counted at
-- (later than now only if the clock went backwards).
local function readTokens (key, cap, limit, now)
  local tokens = cap
  local base = now
  local stored = redis.call('GET', key)
  if stored then
    local sep = string.find(stored, ':', 1, true)
    local st = sep and tonumber(string.sub(stored, 1, sep - 1))
    local ts = sep and tonumber(string.sub(stored, sep + 1))
    if st and ts then
      if st > cap then st = cap end
      if st < 0 then st = 0 end
      local elapsed = now - ts
      if elapsed < 0 then
        elapsed = 0
        base = ts
      end
      -- beyond this the bucket is full anyway; keeps elapsed * limit below 2^53
      local maxElapsed = idiv(cap, limit) + 1
      if elapsed > maxElapsed then elapsed = maxElapsed end
      local gain = elapsed * limit
      if gain >= cap - st then
        tokens = cap
      else
        tokens = st + gain
      end
    end
  end
  return tokens, base
end

-- ms until the bucket is full again (t tokens, counted `lag` ms from now); 0 = full
local function resetMs (t, cap, limit, lag)
  if t >= cap then return 0 end
  return lag + cdiv(cap - t, limit)
end

-- ms until the bucket holds one more whole token; 0 = full
local function nextMs (t, cap, limit, w, lag)
  if t >= cap then return 0 end
  return lag + cdiv((idiv(t, w) + 1) * w - t, limit)
end

return function (key, limit, w, burst, cost, now, mode)

  local cap = burst * w
  local tokens, base = readTokens(key, cap, limit, now)
  local lag = base - now

  if mode == 2 then
    -- refund: the tokens go back into the bucket as it is now, up to its capacity
    tokens = tokens + cost * w
    if tokens >= cap then
      redis.call('DEL', key)
      return 1
    end
    redis.call('SET', key, string.format('%d:%d', tokens, base), 'PX', resetMs(tokens, cap, limit, lag))
    return 1
  end

  if cost > burst then
    return 0, idiv(tokens, w), resetMs(tokens, cap, limit, lag), w, nextMs(tokens, cap, limit, w, lag)
  end
  local need = cost * w
  if tokens < need then
    return 0, idiv(tokens, w), resetMs(tokens, cap, limit, lag), lag + cdiv(need - tokens, limit), nextMs(tokens, cap, limit, w, lag)
  end

  tokens = tokens - need
  local reset = resetMs(tokens, cap, limit, lag)
  if mode == 0 then redis.call('SET', key, string.format('%d:%d', tokens, base), 'PX', reset) end
  return 1, idiv(tokens, w), reset, 0, nextMs(tokens, cap, limit, w, lag)
end
