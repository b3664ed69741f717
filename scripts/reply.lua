-- A call's reply, for the batch script and a lone decision's script (their
-- layout: batch.lua's header; protocol.ts splitBatchReply reads it).
--@requires REPLY_PACK QUEUED_HEAD
--@provides errorText out emit

-- A failed decision's reply text, whatever redis.call raised (a table with
-- `err`, or a Lua error): the decision answers this text alone.
local function errorText (e)
  if type(e) == 'table' and e.err ~= nil then return e.err end
  return tostring(e)
end

-- The reply, kept between calls by a library too: Redis replies with its values up
-- to the first nil, which each call sets after its last; growing a fresh table to
-- five values per decision cost as much again.
local out = {}

-- An admitted block's resetMs and nextMs travel as one integer, resetMs *
-- REPLY_PACK + nextMs (protocol.ts), when both are below REPLY_PACK ms (18.6 h;
-- every algorithm's are whole ms): its head is then remaining * 4 + 3, one
-- integer fewer per admitted block (each costs Redis to write, the client to decode).

-- One block's decision into the reply from out[o + 1]: remaining * 4 + allowed,
-- resetMs, retryAfterMs unless admitted (it is 0 then), nextMs, or for an
-- admitted block within REPLY_PACK, remaining * 4 + 3 and the packed pair, or for a
-- reserved turn (allowed 4, retry its wait, at least 1 ms; remaining the units free
-- before it) -wait, resetMs, nextMs when none are free, else -wait, -1 - resetMs,
-- nextMs, remaining (a reserved turn's resetMs is never negative); the new o.
local function emit (o, a, r, reset, retry, nextMs)
  if a == 4 then
    if r > 0 then
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = -retry, -1 - reset, nextMs, r
      return o + 4
    end
    out[o + 1], out[o + 2], out[o + 3] = -retry, reset, nextMs
    return o + 3
  end
  -- a place in a slot's queue (concurrency.lua's 5, remaining the waiters ahead)
  if a == 5 then
    out[o + 1], out[o + 2], out[o + 3] = QUEUED_HEAD - r, 0, 0
    return o + 3
  end
  if a == 1 then
    if reset < REPLY_PACK and nextMs < REPLY_PACK and reset >= 0 and nextMs >= 0 then
      out[o + 1], out[o + 2] = r * 4 + 3, reset * REPLY_PACK + nextMs
      return o + 2
    end
    out[o + 1], out[o + 2], out[o + 3] = r * 4 + 1, reset, nextMs
    return o + 3
  end
  out[o + 1], out[o + 2], out[o + 3], out[o + 4] = r * 4 + a, reset, retry, nextMs
  return o + 4
end
