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
--@requires call tonumber format SLOT_RETRY_MS

-- The key lives as long as its longest lease. Numbers go to Redis as integer
-- text: a Lua number argument is formatted with %.17g, which costs more.
local function keep (key, lease)
  if call('PTTL', key) < lease then call('PEXPIRE', key, format('%d', lease)) end
end

return function (key, limit, lease, _, member, now, mode)
  local held = tonumber(call('ZSCORE', key, member) or '0')
  if mode == 2 then
    call('ZREM', key, member)
    if held > now then return 1 end
    return 0
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
    return 1, 0, 0, 0, 0
  end
  local live = call('ZCOUNT', key, format('(%d', now), '+inf')
  if held > now then return 1, limit - live, 0, 0, 0 end
  if live < limit then return 1, limit - live - 1, 0, 0, 0 end
  return 0, 0, 0, SLOT_RETRY_MS, 0
end
