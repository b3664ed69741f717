-- Several blocks of one request in one call, all-or-nothing: decideAll, for
-- the batch driver's decisions of several blocks (paths.lua; a benchmark also
-- drives it on its own: test/helpers/lua.ts, buildMultiScript).
--@requires DECISION_STRIDE
--@provides modeOf decideAll
--
-- Pass 1 runs every block dry (nothing written). A concurrency block with
-- `wait` and no slot answers 5: when every other enforced block admits, the
-- request joins its queue (mode 4) and nothing is charged; when another
-- refuses, it is refused as any. If every enforced block
-- admits, pass 2 runs for real every enforced block and every shadow block that
-- admitted (a shadow block behaves as the real limit would have: it counts what
-- it would admit). If any enforced block rejects, nothing is written at all.
-- A block's dry decision equals its real one (same state, same now), so the
-- reply is pass 1's: DECISION_STRIDE integers per block (allowed, remaining,
-- resetMs, retryAfterMs, nextMs), DECISION_STRIDE * n in all.

-- A decision's mode argument as the algorithms' mode number (protocol.ts
-- SCRIPT_MODE): '1' peek (1, dry), '' charge (0). Refunds and charges without
-- deciding are adjustments (paths.lua adjustOne).
local function modeOf (arg)
  if arg == '1' then return 1 end
  return 0
end

-- n blocks, block i being fns[i] at limits[i], windows[i], bursts[i] with costs[i].
local function decideAll (keys, fns, limits, windows, bursts, costs, shadows, n, mode, now)
  local out = {}
  local admit, queued = true, false
  local allowed = {}
  for i = 1, n do
    local a, r, reset, retry, nextMs = fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 1)
    -- 4: admitted at a reserved turn (a delay); 5: no slot, may wait for one (a concurrency block's wait)
    allowed[i] = a == 1 or a == 4
    if a == 5 then queued = true
    elseif not allowed[i] and not shadows[i] then admit = false end
    local o = (i - 1) * DECISION_STRIDE
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = a, r, reset, retry, nextMs
  end
  if admit and mode == 0 then
    if queued then
      -- every other block admits: the request waits, in the queues of the blocks without a slot (mode 4), charged nothing
      for i = 1, n do
        if out[(i - 1) * DECISION_STRIDE + 1] == 5 then fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 4) end
      end
    else
      for i = 1, n do
        if allowed[i] then fns[i](keys[i], limits[i], windows[i], bursts[i], costs[i], now, 0) end
      end
    end
  end
  return out
end
