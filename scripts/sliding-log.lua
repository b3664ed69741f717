-- sliding-log: one sorted-set entry per admitted unit, score = now (ms).
-- KEYS[1] = state key; ARGV = limit, windowMs, burst (unused), cost, now ('' = Redis TIME),
--   dry ('1' = decide and write nothing: peeks and the first pass of a multi-limit decision;
--   '2' = refund, which sliding-log does not support: returns { 0 } and changes nothing)
-- An entry with score s counts while now < s + W (evicted once s <= now - W).
-- Members are "<now>:<seq>", seq = entries left after eviction + i. With a clock that
-- never goes backwards, every earlier call at the same ms saw no more entries than this one,
-- so its seqs are all <= count: new members never collide. If the clock went backwards a
-- collision is detected (ZADD NX added fewer) and the missing units get seqs above the
-- largest one at that score, so requests in the same ms never merge.
-- Calls: ZREMRANGEBYSCORE, ZCARD, then ZADD (per 1000 units) + PEXPIRE when admitted,
-- or one or two ZRANGE when rejected (+ TIME when ARGV[5] is empty).
-- ZADD NX n units scored nowStr, members "<nowStr>:<seq>" with seq = from + 1 .. from + n,
-- 1000 per call; returns how many were new. The caller sets the TTL.
local function addUnits (key, nowStr, from, n)
  local added = 0
  local first = 1
  while first <= n do
    local last = math.min(n, first + 999)
    local args = {}
    for i = first, last do
      args[#args + 1] = nowStr
      args[#args + 1] = nowStr .. ':' .. string.format('%d', from + i)
    end
    added = added + redis.call('ZADD', key, 'NX', unpack(args))
    first = last + 1
  end
  return added
end

-- The largest seq among the members scored nowStr.
local function topSeq (key, nowStr)
  local top = 0
  local same = redis.call('ZRANGEBYSCORE', key, nowStr, nowStr)
  for _, member in ipairs(same) do
    local seq = tonumber(string.match(member, ':(%d+)$')) or 0
    if seq > top then top = seq end
  end
  return top
end

-- A refusal's reset and retry in ms: until the newest entry expires, and until
-- enough of the oldest have (one or two ZRANGE, count > 0).
local function refusal (key, count, limit, w, cost, now)
  local retry = w
  local newest
  if cost <= limit then
    -- the k-th oldest entry must expire first, k = count + cost - limit (1 <= k <= count)
    local k = count + cost - limit
    if count - k < 16 then
      local r = redis.call('ZRANGE', key, k - 1, -1, 'WITHSCORES')
      retry = tonumber(r[2]) + w - now
      newest = tonumber(r[#r])
    else
      local r = redis.call('ZRANGE', key, k - 1, k - 1, 'WITHSCORES')
      retry = tonumber(r[2]) + w - now
    end
  end
  if newest == nil then
    local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    newest = tonumber(r[2])
  end
  return newest + w - now, retry
end

return function (KEYS, ARGV)
  local key = KEYS[1]
  local limit, w, _, cost, now, dry = blockArgs(ARGV)
  local nowStr = string.format('%d', now)
  if ARGV[6] == '2' then return { 0 } end

  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
  local count = redis.call('ZCARD', key)

  if cost <= limit and count + cost <= limit then
    if dry then return { 1, limit - count - cost, w, 0 } end
    local added = addUnits(key, nowStr, count, cost)
    if added < cost then
      -- only after the clock went backwards: renumber the missing units above the largest seq at this score
      addUnits(key, nowStr, topSeq(key, nowStr), cost - added)
    end
    -- the newest entry is now: the whole set is irrelevant W ms from now
    redis.call('PEXPIRE', key, w)
    return { 1, limit - count - cost, w, 0 }
  end

  local available = limit - count
  if available < 0 then available = 0 end
  if count == 0 then
    -- only when cost > limit: nothing stored, never admissible
    return { 0, available, 0, w }
  end

  local reset, retry = refusal(key, count, limit, w, cost, now)
  return { 0, available, reset, retry }
end
