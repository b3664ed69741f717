-- Concurrency slots: a block kind, not an algorithm. The key is a sorted set
-- of the requests in flight: member = the request's slot id (never a number),
-- score = its lease's expiry in ms (Redis TIME, or the injected clock). It is
-- called as the algorithms are, with the slot id in place of the cost and the
-- lease in place of the window, so the drivers decide it all-or-nothing with
-- the request's other blocks (multi.lua decideAll):
--
--   mode 1 (dry)     admits when the member holds a live slot, or fewer than
--                    `limit` live slots are held; writes nothing
--   mode 0 (take)    removes expired members, adds the member (run only after
--                    a dry pass admitted), keeps the key alive for the lease
--   mode 2 (release) ZREM: idempotent, answers 1 when a live slot was removed
--   mode 3 (renew)   a live slot's lease starts again from now; an expired or
--                    released one is never brought back (answers 0)
--
-- Reply (modes 0 and 1): allowed, free slots after this request, 0, retry
-- (SLOT_RETRY_MS when refused: a slot may free at any moment; the prelude
-- line's, from lib/store/algorithms.ts), 0.
--
-- A block with `wait` (batch.lua queueFn: `queue` 'w' may join the queue, 'o'
-- keeps its order but does not join) has two more keys beside the slots, on
-- the same hash tag: key..'q', the waiters in arrival order (member = slot id,
-- score = Redis TIME in ms * 1024, at least one past the last: ties keep the
-- order of the calls), and key..'l', each waiter's lease (score = expiry; a
-- crashed instance's waiters lapse like its slots). A free slot goes to the
-- oldest live waiters first: a request is admitted only when the slots held
-- plus the waiters ahead of it are below the limit. Then:
--   mode 1 (dry)     also answers 5 (would wait: remaining = waiters ahead)
--                    for 'w' when it is not admitted
--   mode 4 (join)    run by decideAll when the request's only refusals are 5:
--                    joins the queue (its place kept if already in it) and
--                    renews its lease; each poll of a waiter does this again
--   mode 0, mode 2   leave the queue too; when waiters remain and a slot may
--                    be free, PUBLISH the key on WAKE_CHANNEL (their instances
--                    poll at once: lib/kinds/concurrency/waiters.ts)
--@requires call tonumber format SLOT_RETRY_MS WAKE_CHANNEL

-- The key lives as long as its longest lease. Numbers go to Redis as integer
-- text: a Lua number argument is formatted with %.17g, which costs more.
local function keep (key, lease)
  if call('PTTL', key) < lease then call('PEXPIRE', key, format('%d', lease)) end
end

-- Waiters whose lease lapsed leave the queue.
local function dropLapsed (qkey, lkey, now)
  local lapsed = call('ZRANGEBYSCORE', lkey, '-inf', format('%d', now))
  if #lapsed == 0 then return end
  for i = 1, #lapsed do call('ZREM', qkey, lapsed[i]) end
  call('ZREMRANGEBYSCORE', lkey, '-inf', format('%d', now))
end

-- The member leaves the queue; waiters left are told when a slot may be free for them.
local function leave (key, member, limit, now)
  local qkey = key .. 'q'
  if call('ZREM', qkey, member) == 1 then call('ZREM', key .. 'l', member) end
  if call('ZCARD', qkey) > 0 and call('ZCOUNT', key, format('(%d', now), '+inf') < limit then call('PUBLISH', WAKE_CHANNEL, key) end
end

-- Joins the queue (or keeps its place) and renews the waiter's lease.
local function join (key, member, lease, now)
  local qkey, lkey = key .. 'q', key .. 'l'
  if not call('ZSCORE', qkey, member) then
    local score = now * 1024
    local last = call('ZRANGE', qkey, -1, -1, 'WITHSCORES')[2]
    if last and tonumber(last) >= score then score = tonumber(last) + 1 end
    call('ZADD', qkey, format('%d', score), member)
  end
  call('ZADD', lkey, format('%d', now + lease), member)
  keep(qkey, lease)
  keep(lkey, lease)
end

-- Dry pass of a block with `wait`: the slots held and the waiters ahead against the limit.
local function dryQueued (key, limit, member, now, live, queue)
  local qkey = key .. 'q'
  dropLapsed(qkey, key .. 'l', now)
  local ahead = call('ZRANK', qkey, member)
  if not ahead then ahead = call('ZCARD', qkey) end
  if live + ahead < limit then return 1, limit - live - 1, 0, 0, 0 end
  if queue == 'w' then return 5, ahead, 0, SLOT_RETRY_MS, 0 end
  return 0, 0, 0, SLOT_RETRY_MS, 0
end

return function (key, limit, lease, _, member, now, mode, _chargedAt, queue)
  local held = tonumber(call('ZSCORE', key, member) or '0')
  if mode == 2 then
    call('ZREM', key, member)
    if queue then leave(key, member, limit, now) end
    if held > now then return 1 end
    return 0
  end
  if mode == 4 then
    join(key, member, lease, now)
    return 1
  end
  if mode == 3 then
    if held <= now then return 0 end
    call('ZADD', key, format('%d', now + lease), member)
    keep(key, lease)
    return 1
  end
  if mode == 0 then
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
    call('ZADD', key, format('%d', now + lease), member)
    keep(key, lease)
    if queue then leave(key, member, limit, now) end
    return 1, 0, 0, 0, 0
  end
  local live = call('ZCOUNT', key, format('(%d', now), '+inf')
  if held > now then return 1, limit - live, 0, 0, 0 end
  if queue then return dryQueued(key, limit, member, now, live, queue) end
  if live < limit then return 1, limit - live - 1, 0, 0, 0 end
  return 0, 0, 0, SLOT_RETRY_MS, 0
end
