-- fixed-window: windows aligned to multiples of windowMs since the epoch.
--@requires call pcallRedis floor min format find
-- The chunk returns function (key, limit, w, burst, cost, now, mode, chargedAt) with numbers;
--   mode 0 = charge, 1 = dry (decide and write nothing: peeks and the first pass of a
--   multi-limit decision), 2 = refund `cost` units charged at ms `chargedAt` (returns 1 when
--   given back, else 0), 3 = charge `cost` units without deciding (settle, adjust: never
--   refused; usage is kept up to one capacity over the limit, an overdraft the next
--   decisions wait out; returns 1). lib/store/redis/scripts.ts wraps it as a script of (KEYS, ARGV).
-- State format 3: one integer, tag * COUNT_SPAN + count, where tag is the
-- window's index modulo TAG_SPAN and count the units consumed in it. A charge
-- is one INCRBY on it: the increment tells the stored window and count, with
-- no read, no unpacking and no SET (each costs Redis more than the
-- arithmetic). A stored tag other than the current window's counts as zero,
-- so a stale key (the injected clock ran ahead of Redis TTLs) behaves exactly
-- like an absent one; so does a value that is not an integer (not ours).
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: INCRBY (+ SET PX on a window's first charge, + INCRBY of -cost when refused); a peek GET.
-- Every undo is an INCRBY of a negative amount, not DECRBY: a user whose ACL lacks
-- INCRBY fails before anything is written, and none holds INCRBY without its undo.
-- A calendar period's block passes `periodStart` (batch.lua periodFn): the window is
-- [start, start + w) and its index the start, so every instance names it alike.

-- count < 2^30 (at most 3 * MAX_LIMIT while a refused charge is undone) and
-- tag < 2^23 keep the integer below 2^53, exact as a Lua number. TAG_SPAN is
-- prime: calendar periods start at multiples of a day in ms (2^10 * 84375),
-- which a power of two would divide.
local COUNT_SPAN = 1073741824
local TAG_SPAN = 8388593

-- The stored count in the window tagged `base`, nil when the value is stale, absent
-- (0: what INCRBY finds in a missing key) or not ours. A stored 0 (tag 0, all
-- refunded) reads as nil too: it is rewritten with the same expiry.
local function countIn (value, base)
  if value and value > 0 and value >= base and value < base + COUNT_SPAN then return value - base end
  return nil
end

-- A refusal in the stored window (count > 0, so the quota is restored when the window ends).
local function refused (limit, count, toEnd)
  local available = limit - count
  if available < 0 then available = 0 end
  return 0, available, toEnd, toEnd, toEnd
end

-- INCRBY's error as the value before it: -1 (no window's) for a value that is
-- not an integer or would overflow (not ours); any other error, WRONGTYPE
-- among them, is raised: it fails this decision alone, having written nothing.
local function foreign (e)
  if find(e.err, '^ERR value is not an integer') or find(e.err, '^ERR increment or decrement would overflow') then return -1 end
  error(e)
end

-- INCRBY key cost: the value before it.
local function increment (key, cost)
  local value = pcallRedis('INCRBY', key, cost)
  if type(value) == 'number' then return value - cost end
  return foreign(value)
end

-- A window's first charge: the count, with the window's end as the key's expiry.
local function start (key, base, count, toEnd)
  call('SET', key, format('%d', base + count), 'PX', format('%d', toEnd))
end

-- A charge without deciding (mode 3), to the current window: kept up to twice the limit.
local function settle (key, limit, cost, base, toEnd)
  local before = increment(key, cost)
  local count = countIn(before, base)
  local capped = 2 * limit
  if count == nil then
    start(key, base, min(cost, capped), toEnd)
  elseif count + cost > capped then
    call('INCRBY', key, capped - count - cost)
  end
  return 1
end

-- A refund (mode 2), only while the window it was charged in (at ms chargedAt,
-- the script's own clock then) is the current one, [from, from + w).
local function refund (key, cost, base, from, w, chargedAt)
  local count = countIn(tonumber(call('GET', key)), base) or 0
  if count == 0 or chargedAt < from or chargedAt >= from + w then return 0 end
  call('INCRBY', key, -min(cost, count))
  return 1
end

-- A decision from the stored count, writing nothing: a dry one (mode 1), or a cost above the limit.
local function decideDry (key, limit, w, cost, base, toEnd)
  local count = countIn(tonumber(call('GET', key)), base) or 0
  local available = limit - count
  if available < 0 then available = 0 end
  if cost > limit then
    -- can never be admitted
    local reset = 0
    if count > 0 then reset = toEnd end
    return 0, available, reset, w, reset
  end
  if count + cost > limit then return refused(limit, count, toEnd) end
  return 1, limit - count - cost, toEnd, 0, toEnd
end

return function (key, limit, w, _, cost, now, mode, chargedAt, periodStart)
  local idx = periodStart or floor(now / w)
  local from = periodStart or idx * w
  local toEnd = from + w - now
  local base = (idx % TAG_SPAN) * COUNT_SPAN
  if mode == 3 then return settle(key, limit, cost, base, toEnd) end
  if mode == 2 then return refund(key, cost, base, from, w, chargedAt) end
  if mode == 1 or cost > limit then return decideDry(key, limit, w, cost, base, toEnd) end

  -- The common case: one INCRBY, undone by INCRBY -cost when refused; increment and
  -- countIn inline, a cost of 1 sent as text (Redis formats a Lua number with %.17g).
  --@inline countIn: the helpers' form (--|), held equal to the code down to --@end by test/internals/inlined.test.ts
  --| local before = pcallRedis('INCRBY', key, cost)
  --| if type(before) == 'number' then before = before - cost else before = foreign(before) end
  --| local count = countIn(before, base)
  --| if count then
  --|   if count + cost > limit then
  --|     call('INCRBY', key, -cost)
  --|     return refused(limit, count, toEnd)
  --|   end
  --|   return 1, limit - count - cost, toEnd, 0, toEnd
  --| end
  local before = pcallRedis('INCRBY', key, cost == 1 and '1' or cost)
  if type(before) == 'number' then before = before - cost else before = foreign(before) end
  if before > 0 and before >= base and before < base + COUNT_SPAN then
    local count = before - base
    if count + cost > limit then
      call('INCRBY', key, cost == 1 and '-1' or -cost)
      return refused(limit, count, toEnd)
    end
    return 1, limit - count - cost, toEnd, 0, toEnd
  end
  --@end
  -- absent (0: INCRBY created the key), stale or not ours (countIn's nil): the window's first charge
  start(key, base, cost, toEnd)
  return 1, limit - cost, toEnd, 0, toEnd
end
