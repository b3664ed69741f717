-- The batch driver: every decision one store dispatched in one event-loop
-- turn (for one slot on a Cluster), in one call, each atomic on its own.
-- Its wire format is lib/store/redis/protocol.ts's:
--
--   ARGV[1]   now in ms ('' = Redis TIME, read once for the whole batch)
--   ARGV[2]   S, the number of distinct block specs in this batch, then S
--             specs of SPEC_STRIDE values: the spec's text (spec.lua:
--             algorithm number, limit, windowMs, burst, shadow ('1' = decided
--             and recorded, never blocks), penalty ('' or
--             'after:forMs:backoff:maxMs')), its kind's tail ('' or a calendar
--             period's boundaries 'b0:b1:b2:b3', see lib/kinds/period/calendar.ts: the
--             block counts in the one of [b0,b1), [b1,b2), [b2,b3) holding now; or
--             a delay's 'd<ms>' (turns may be reserved up to ms ahead) or 'n<ms>'
--             (the same reach, no turn reserved: this instance holds no more); or
--             a concurrency block's wait, 'w' (may join the slot's queue) or
--             'o' (keeps the queue's order, does not join))
--   then per decision, in order, either
--     s                (s > 0) one block of spec s, charged 1, no penalty: the
--                      common case; its one key is next in KEYS
--     -2, s, cost      the same with another cost
--     0, n, mode, then n pairs (spec, cost)
--                      any decision: mode '' = charge, '1' = peek (a
--                      concurrency block's cost is the request's slot id,
--                      concurrency.lua); its n block keys, then one penalty key per block whose spec has a
--                      penalty, are next in KEYS
--     -1, n, then n entries of ADJUST_STRIDE values (kind, spec, units, chargedAt)
--                      adjustments after a decision (Store.adjust): kind 'u' =
--                      signed units on spec's block, charged at ms `chargedAt`
--                      (the `now` its decision's call replied with; '' = now)
--                      (< 0 give back: the algorithm's mode 2; > 0 charge, never
--                      refused: its mode 3); kind 'x' = release the slot id
--                      given as units (concurrency.lua's mode 2), 'n' = renew
--                      it (mode 3); one key per entry is next in KEYS
--
-- The common case runs its algorithm straight: no table, no closure per
-- decision. Several blocks go through decideAll (all-or-nothing). Each
-- decision runs under pcall, so one bad key (WRONGTYPE) fails that decision
-- alone; a failing decision has written nothing, because every algorithm's
-- first command on its key is the one that fails (a read, or fixed-window's
-- INCRBY, which fails without writing) and decideAll writes only after every
-- dry pass. Penalties: see penalty.lua.
--
-- Reply: `now` (the call's clock, once: a request that may give units back
-- later keeps it as its charge's time), then per decision in order its
-- values, or its error text alone (the one string). A decision or peek answers per block `remaining * 4 + allowed`
-- (allowed 0, 1, or 2 for a penalty), resetMs, then retryAfterMs unless
-- allowed is 1 (it is 0 then), then nextMs; a reserved turn (a delay's
-- allowed 4) answers `-wait`, resetMs, nextMs, or with units free before it (a cost
-- above them) `-wait`, -1 - resetMs, nextMs, those units: three integers for an admitted
-- block, four otherwise (each integer of a reply costs Redis to write and
-- ioredis to decode). An admitted block whose resetMs and
-- nextMs are both below REPLY_PACK (reply.lua) answers two: `remaining * 4 + 3`,
-- then resetMs * REPLY_PACK + nextMs. Adjustments answer one per entry:
-- 1 when it changed something, else 0. reply.lua writes it (emit), protocol.ts
-- splitBatchReply reads it.
-- The builder (lib/store/redis/scripts.ts) places this fragment at the top
-- (a library keeps it between calls), then per call batch-specs.lua, the lazily
-- built paths (multi.lua, penalty.lua, paths.lua: --@provides paths) and batch-loop.lua.
--@requires match tonumber sub
--@provides delayFn queueFn periodFn sFn sLimit sWindow sBurst sShadow sPenalty specOf numbered
-- A calendar period's block: fixed-window over the period holding now (its start
-- the window's index, its length the window), or an error for its decisions alone
-- when none does (a clock more than a period from the Node that sent them).
local function periodFn (fn, bounds, at)
  local b0, b1, b2, b3 = match(bounds, '^(%d+):(%d+):(%d+):(%d+)$')
  local b = { tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3) }
  for i = 1, 3 do
    local start, length = b[i], b[i + 1] - b[i]
    if at >= start and at < b[i + 1] then
      return function (key, limit, w, burst, cost, t, mode, chargedAt) return fn(key, limit, w, burst, cost, t, mode, chargedAt, start) end, length
    end
  end
  return function () error('now is outside the calendar periods sent') end, 1
end

-- A delay's block ('d<ms>' or 'n<ms>', see the header): the algorithm with its reach and
-- whether it may reserve a turn (gcra.lua, token-bucket.lua).
local function delayFn (fn, tail)
  local reach, hold = tonumber(sub(tail, 2)), sub(tail, 1, 1) == 'd'
  return function (key, limit, w, burst, cost, t, mode, chargedAt) return fn(key, limit, w, burst, cost, t, mode, chargedAt, reach, hold) end
end

-- A concurrency block's wait ('w' may join the queue, 'o' keeps its order without joining: concurrency.lua).
local function queueFn (fn, tail)
  return function (key, limit, w, burst, cost, t, mode) return fn(key, limit, w, burst, cost, t, mode, nil, tail) end
end

-- The batch's specs by number. A library keeps these tables between calls (each
-- call sets specs 1…S and reads no further: no table is built per call).
local sFn, sLimit, sWindow, sBurst, sShadow, sPenalty = {}, {}, {}, {}, {}, {}
-- A spec's number by its text as a decision sends it ('1', '2', …): a table read
-- per decision instead of a tonumber (strtod); numbered up to the most specs seen.
local specOf, numbered = {}, 0
