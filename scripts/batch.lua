-- The batch driver: every decision one store dispatched in one event-loop
-- turn (for one slot on a Cluster), in one call, each atomic on its own.
-- Its wire format is lib/store/redis/protocol.ts's:
--
--   ARGV[1]   now in ms ('' = Redis TIME, read once for the whole batch)
--   then per decision d, in order: blocks n, mode ('' = decide, '1' = peek,
--   'r<ms>' = refund), then per block the multi script's six values
--   (algorithm number, limit, windowMs, burst, cost, shadow) and a penalty
--   spec ('' or 'after:forMs:backoff:maxMs'): BATCH_STRIDE values; decision
--   d's n block keys, then one penalty key per block with a spec, follow the
--   previous decisions' keys in KEYS.
--
-- A one-block decision runs its algorithm once (no dry pass to pay for); a
-- multi-block one runs the multi driver (all-or-nothing). Each decision runs
-- under pcall, so one bad key (WRONGTYPE) fails that decision alone; a
-- failing decision has written nothing, because every algorithm reads its key
-- before it writes and the multi driver writes only after every dry pass.
-- Penalties: see penalty.lua.
--
-- Reply, per decision in order: 1 followed by its values (DECISION_STRIDE per
-- block for a decision or a peek: allowed (0, 1, or 2 for a penalty),
-- remaining, resetMs, retryAfterMs, nextMs; 1 per block for a refund), or 0
-- followed by the error text.
local STRIDE = BATCH_STRIDE
local function runBlock (key, argv, b, mode, now)
  if string.sub(mode, 1, 1) == 'r' then
    return algorithms[tonumber(argv[b])]({ key }, { argv[b + 1], argv[b + 2], argv[b + 3], argv[b + 4], now, '2', string.sub(mode, 2) })
  end
  return algorithms[tonumber(argv[b])]({ key }, { argv[b + 1], argv[b + 2], argv[b + 3], argv[b + 4], now, mode })
end
-- Penalty keys follow the block keys, one per block with a spec: block i's, or nil.
local function penaltyKeys (at, k, n)
  local pkeys = {}
  local p = k + n
  for i = 1, n do
    if ARGV[at + (i - 1) * STRIDE + 6] ~= '' then
      pkeys[i] = KEYS[p]
      p = p + 1
    end
  end
  return pkeys
end
-- Per enforced block serving a penalty, the ms left of it; nil when none is.
local function penalized (at, n, pkeys, now)
  local blocked = nil
  for i = 1, n do
    local b = at + (i - 1) * STRIDE
    if pkeys[i] and ARGV[b + 5] ~= '1' then
      local untilMs = penaltyRead(pkeys[i])
      if untilMs > tonumber(now) then
        blocked = blocked or {}
        blocked[i] = untilMs - tonumber(now)
      end
    end
  end
  return blocked
end
-- A decision refused by penalties: each penalized block answers 2, the others are only peeked.
local function refusedByPenalty (at, k, n, blocked, now)
  local out = {}
  for i = 1, n do
    if blocked[i] then
      out[#out + 1] = 2
      out[#out + 1] = 0
      out[#out + 1] = blocked[i]
      out[#out + 1] = blocked[i]
      out[#out + 1] = blocked[i]
    else
      local r = runBlock(KEYS[k + i - 1], ARGV, at + (i - 1) * STRIDE, '1', now)
      for j = 1, DECISION_STRIDE do out[#out + 1] = r[j] end
    end
  end
  return out
end
-- The blocks themselves: one algorithm run for one block, the multi driver for several.
local function decideBlocks (at, k, n, mode, now)
  if n == 1 then return runBlock(KEYS[k], ARGV, at, mode, now) end
  local keys = {}
  local argv = { now, mode }
  for i = 1, n do
    keys[i] = KEYS[k + i - 1]
    for j = 0, MULTI_STRIDE - 1 do argv[#argv + 1] = ARGV[at + (i - 1) * STRIDE + j] end
  end
  return multi(keys, argv)
end
-- A charge's refusals by blocks with a penalty: each counts one; one that starts a penalty answers 2.
local function countRefusals (at, n, pkeys, r, now)
  for i = 1, n do
    local b = at + (i - 1) * STRIDE
    local o = (i - 1) * DECISION_STRIDE
    if pkeys[i] and ARGV[b + 5] ~= '1' and r[o + 1] ~= 1 then
      local untilMs = penaltyRefused(pkeys[i], ARGV[b + 6], tonumber(ARGV[b + 2]), tonumber(now))
      if untilMs then
        -- a penalty's wait is the documented exception: reset, retry and next all wait it out
        local wait = untilMs - tonumber(now)
        r[o + 1] = 2
        for j = 3, 5 do
          if r[o + j] < wait then r[o + j] = wait end
        end
      end
    end
  end
end
-- One decision: n blocks whose values start at ARGV[at], keys at KEYS[k]; returns its reply values.
local function decide (at, k, n, mode, now)
  local pkeys = penaltyKeys(at, k, n)
  if string.sub(mode, 1, 1) ~= 'r' then
    local blocked = penalized(at, n, pkeys, now)
    if blocked then return refusedByPenalty(at, k, n, blocked, now) end
  end
  local r = decideBlocks(at, k, n, mode, now)
  if mode == '' then countRefusals(at, n, pkeys, r, now) end
  return r
end
local now = ARGV[1]
if now == nil or now == '' then now = redisNow() end
local out = {}
local at = 2
local k = 1
while at <= #ARGV do
  local n = tonumber(ARGV[at])
  local mode = ARGV[at + 1]
  local ok, r = pcall(decide, at + 2, k, n, mode, now)
  if ok then
    out[#out + 1] = 1
    for i = 1, #r do out[#out + 1] = r[i] end
  else
    out[#out + 1] = 0
    if type(r) == 'table' and r.err ~= nil then out[#out + 1] = r.err else out[#out + 1] = tostring(r) end
  end
  k = k + n
  for i = 1, n do
    if ARGV[at + 2 + (i - 1) * STRIDE + 6] ~= '' then k = k + 1 end
  end
  at = at + 2 + n * STRIDE
end
return out
