#!lua
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
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local w = tonumber(ARGV[2])
local cost = tonumber(ARGV[4])
local dry = ARGV[6] == '1'
local now
if ARGV[5] == nil or ARGV[5] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = math.floor(tonumber(ARGV[5]))
end
local nowStr = string.format('%d', now)
if ARGV[6] == '2' then return { 0 } end

redis.call('ZREMRANGEBYSCORE', key, '-inf', now - w)
local count = redis.call('ZCARD', key)

if cost <= limit and count + cost <= limit then
  if dry then return { 1, limit - count - cost, w, 0 } end
  local chunk = 1000
  local added = 0
  local first = 1
  while first <= cost do
    local last = math.min(cost, first + chunk - 1)
    local args = {}
    for i = first, last do
      args[#args + 1] = nowStr
      args[#args + 1] = nowStr .. ':' .. string.format('%d', count + i)
    end
    added = added + redis.call('ZADD', key, 'NX', unpack(args))
    first = last + 1
  end
  if added < cost then
    -- only after the clock went backwards: renumber the missing units above the largest seq at this score
    local top = 0
    local same = redis.call('ZRANGEBYSCORE', key, nowStr, nowStr)
    for _, member in ipairs(same) do
      local seq = tonumber(string.match(member, ':(%d+)$')) or 0
      if seq > top then top = seq end
    end
    local missing = cost - added
    first = 1
    while first <= missing do
      local last = math.min(missing, first + chunk - 1)
      local args = {}
      for i = first, last do
        args[#args + 1] = nowStr
        args[#args + 1] = nowStr .. ':' .. string.format('%d', top + i)
      end
      redis.call('ZADD', key, 'NX', unpack(args))
      first = last + 1
    end
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
return { 0, available, newest + w - now, retry }
