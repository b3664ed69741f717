-- The multi-limit driver: every block of one request in one call, all-or-nothing.
-- Shared by the multi script (this driver on its own, which the multi-limit
-- property test holds to the memory store) and the batch script (batch.lua).
--
--   KEYS[i]   state key of block i (all keys of one request share one hash tag)
--   ARGV[1]   now in ms ('' = Redis TIME, read once for every block)
--   ARGV[2]   '1' = peek: decide, write nothing; 'r<ms>' = refund each block's
--             cost, spent <ms> ago (returns one 1/0 per block: given back or not)
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
local function multi (KEYS, ARGV)
  local now = ARGV[1]
  if now == nil or now == '' then now = redisNow() end
  local n = #KEYS
  if string.sub(ARGV[2], 1, 1) == 'r' then
    -- refund mode ('r<elapsedMs>'): give back each block's cost, spent elapsedMs ago
    local elapsed = string.sub(ARGV[2], 2)
    local given = {}
    for i = 1, n do
      local b = 2 + (i - 1) * MULTI_STRIDE
      given[i] = algorithms[tonumber(ARGV[b + 1])]({ KEYS[i] }, { ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], now, '2', elapsed })[1]
    end
    return given
  end
  local out = {}
  local admit = true
  local allowed = {}
  for i = 1, n do
    local b = 2 + (i - 1) * MULTI_STRIDE
    local r = algorithms[tonumber(ARGV[b + 1])]({ KEYS[i] }, { ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], now, '1' })
    allowed[i] = r[1] == 1
    if r[1] ~= 1 and ARGV[b + 6] ~= '1' then admit = false end
    for j = 1, DECISION_STRIDE do out[#out + 1] = r[j] end
  end
  if admit and ARGV[2] ~= '1' then
    for i = 1, n do
      if allowed[i] then
        local b = 2 + (i - 1) * MULTI_STRIDE
        algorithms[tonumber(ARGV[b + 1])]({ KEYS[i] }, { ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], now, '' })
      end
    end
  end
  return out
end
