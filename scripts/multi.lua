-- Several blocks of one request in one call, all-or-nothing: decideAll, for
-- the batch driver's decisions of several blocks (paths.lua). The multi-limit
-- property test drives it on its own (test/helpers/lua.ts, its multi script):
--@requires sub tonumber DECISION_STRIDE
--@provides modeOf decideAll
--
-- The test's multi script's layout:
--   KEYS[i]   state key of block i (all keys of one request share one hash tag)
--   ARGV[1]   now in ms ('' = Redis TIME, read once for every block)
--   ARGV[2]   '1' = peek: decide, write nothing; 'r<ms>' = refund each block's
--             cost, charged at ms <ms> (returns one 1/0 per block: given back or not;
--             for a concurrency block, whose cost is the slot id: its slot released)
--   then per block i, at 2 + (i - 1) * MULTI_STRIDE: algorithm number (1-based,
--   ALGORITHMS order), limit, windowMs, burst, cost, shadow ('1' = decided and
--   recorded, never blocks the request)
--
-- Pass 1 runs every block dry (nothing written). If every enforced block
-- admits, pass 2 runs for real every enforced block and every shadow block that
-- admitted (a shadow block behaves as the real limit would have: it counts what
-- it would admit). If any enforced block rejects, nothing is written at all.
-- A block's dry decision equals its real one (same state, same now), so the
-- reply is pass 1's: DECISION_STRIDE integers per block (allowed, remaining,
-- resetMs, retryAfterMs, nextMs), DECISION_STRIDE * n in all.

-- The mode argument as a number (0 charge, 1 peek, 2 refund) and a refund's charge time (ms).
local function modeOf (arg)
  if arg == '1' then return 1, 0 end
  if sub(arg, 1, 1) == 'r' then return 2, tonumber(sub(arg, 2)) end
  return 0, 0
end

-- n blocks, block i being fns[i] at limits[i], windows[i], bursts[i] with costs[i].
local function decideAll (keys, fns, limits, windows, bursts, costs, shadows, n, mode, chargedAt, now)
  if mode == 2 then
    local given = {}
    for i = 1, n do given[i] = fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 2, chargedAt) end
    return given
  end
  local out = {}
  local admit = true
  local allowed = {}
  for i = 1, n do
    local a, r, reset, retry, nextMs = fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 1)
    allowed[i] = a == 1
    if a ~= 1 and not shadows[i] then admit = false end
    local o = (i - 1) * DECISION_STRIDE
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, r, reset, retry, nextMs
  end
  if admit and mode == 0 then
    for i = 1, n do
      if allowed[i] then fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 0) end
    end
  end
  return out
end
