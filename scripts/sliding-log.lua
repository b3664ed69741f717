-- sliding-log: one sorted-set entry per admitted unit, score = now (ms).
--@requires call min format match find sub
-- The chunk returns function (key, limit, w, burst, cost, now, mode) with numbers; mode 0 =
--   charge, 1 = dry (decide and write nothing), 2 = refund, which sliding-log does not
--   support: returns 0 and changes nothing. scripts.ts wraps it as a script of (KEYS, ARGV).
-- An entry with score s counts while now < s + W (evicted once s <= now - W).
-- Members are "<now>:<seq>", seq = entries left after eviction + i. With a clock that
-- never goes backwards, every earlier call at the same ms saw no more entries than this one,
-- so its seqs are all <= count: new members never collide. If the clock went backwards a
-- collision is detected (ZADD NX added fewer) and the missing units get seqs above the
-- largest one at that score, so requests in the same ms never merge.
-- Returns allowed, remaining, resetMs, retryAfterMs, nextMs (ms until remaining grows by one unit; 0 = full).
-- Calls: ZREMRANGEBYSCORE, ZCARD, then ZADD (per 1000 units) + PEXPIRE when admitted,
-- (+ one ZRANGE for nextMs when the log was not empty), or one or more ZRANGE when rejected.
-- ZADD NX n units scored nowStr, members "<nowStr>:<seq>" with seq = from + 1 .. from + n,
-- 1000 per call; returns how many were new. The caller sets the TTL.
local function addUnits (key, nowStr, from, n)
  local added = 0
  local first = 1
  while first <= n do
    local last = min(n, first + 999)
    local args = {}
    for i = first, last do
      args[#args + 1] = nowStr
      args[#args + 1] = nowStr .. ':' .. format('%d', from + i)
    end
    added = added + call('ZADD', key, 'NX', unpack(args))
    first = last + 1
  end
  return added
end

-- The largest seq among the members scored nowStr.
local function topSeq (key, nowStr)
  local top = 0
  local same = call('ZRANGEBYSCORE', key, nowStr, nowStr)
  for _, member in ipairs(same) do
    local seq = tonumber(match(member, ':(%d+)$')) or 0
    if seq > top then top = seq end
  end
  return top
end

-- The ms an entry was added at, from its member "<ms>:<seq>" (its score, which
-- WITHSCORES would hand over as %.17g text to parse). A member of another form is not
-- ours: its score then.
local function addedAt (key, member)
  local colon = find(member, ':', 1, true)
  local ms = colon and tonumber(sub(member, 1, colon - 1))
  if ms then return ms end
  return tonumber(call('ZSCORE', key, member))
end

-- ms until the k-th oldest entry expires (k >= 1, count >= k). Ranks go as
-- integer text: Redis formats a Lua number argument with %.17g (every number
-- argument in this file, for the same reason).
local function expiryOf (key, k, w, now)
  local rank = '0'
  if k > 1 then rank = format('%d', k - 1) end
  return addedAt(key, call('ZRANGE', key, rank, rank)[1]) + w - now
end

-- A refusal's reset, retry and next in ms: until the newest entry expires, until
-- enough of the oldest have for `cost`, and until the next one does (the
-- `more`-th oldest, more = count + available + 1 - limit). One ZRANGE from the
-- `more`-th entry when few entries follow it, else one per entry needed (count > 0).
local function refusal (key, count, limit, w, cost, now, more)
  local k = count + cost - limit
  if count - more < 16 then
    local r = call('ZRANGE', key, format('%d', more - 1), '-1')
    local retry = w
    if cost <= limit then retry = addedAt(key, r[k - more + 1]) + w - now end
    return addedAt(key, r[#r]) + w - now, retry, addedAt(key, r[1]) + w - now
  end
  local retry = w
  if cost <= limit then retry = expiryOf(key, k, w, now) end
  return expiryOf(key, count, w, now), retry, expiryOf(key, more, w, now)
end

-- The texts of now, w and the eviction cutoff, kept from the last decision: a
-- batch shares now, and most of its decisions w; a string.format is dear.
local lastNow, lastW, nowStr, wStr, cutoffStr
-- Member suffixes ':<seq>' by seq, for the first SEQ_TEXTS seqs (about 70 kB of Lua memory at most).
local SEQ_TEXTS = 1024
local seqTexts = {}

return function (key, limit, w, _, cost, now, mode)
  if mode >= 2 then return 0 end
  if now ~= lastNow then
    lastNow, lastW, nowStr = now, nil, format('%d', now)
  end
  if w ~= lastW then
    lastW, wStr, cutoffStr = w, format('%d', w), format('%d', now - w)
  end

  call('ZREMRANGEBYSCORE', key, '-inf', cutoffStr)
  local count = call('ZCARD', key)

  if cost <= limit and count + cost <= limit then
    -- one more unit frees when the oldest entry expires (this request's own, when the log was empty);
    -- expiryOf(key, 1) and, for one unit, addUnits inline: no Lua call, no argument table
    --@inline expiryOf addUnits: the helpers' form (--|), held equal to the code down to --@end by test/internals/inlined.test.ts
    --| local nextMs = w
    --| if count > 0 then nextMs = expiryOf(key, 1, w, now) end
    --| if mode == 1 then return 1, limit - count - cost, w, 0, nextMs end
    --| local added = addUnits(key, nowStr, count, cost)
    local nextMs = w
    if count > 0 then nextMs = addedAt(key, call('ZRANGE', key, '0', '0')[1]) + w - now end
    if mode == 1 then return 1, limit - count - cost, w, 0, nextMs end
    local added
    if cost == 1 then
      local seq = count + 1
      local suffix = seqTexts[seq]
      if suffix == nil then
        suffix = ':' .. format('%d', seq)
        if seq <= SEQ_TEXTS then seqTexts[seq] = suffix end
      end
      added = call('ZADD', key, 'NX', nowStr, nowStr .. suffix)
    else
      added = addUnits(key, nowStr, count, cost)
    end
    --@end
    if added < cost then
      -- only after the clock went backwards: renumber the missing units above the largest seq at this score
      addUnits(key, nowStr, topSeq(key, nowStr), cost - added)
    end
    -- the newest entry is now: the whole set is irrelevant W ms from now
    call('PEXPIRE', key, wStr)
    return 1, limit - count - cost, w, 0, nextMs
  end

  local available = limit - count
  if available < 0 then available = 0 end
  if count == 0 then
    -- only when cost > limit: nothing stored, never admissible
    return 0, available, 0, w, 0
  end

  -- one more unit frees when the more-th oldest expires (the oldest, unless the limit was lowered)
  local reset, retry, nextMs = refusal(key, count, limit, w, cost, now, count + available + 1 - limit)
  return 0, available, reset, retry, nextMs
end
