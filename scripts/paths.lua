-- The batch driver's paths beyond its common case: several blocks
-- (all-or-nothing through multi.lua's decideAll), penalties (penalty.lua),
-- peeks, and adjustments. The builder (lib/store/redis/scripts.ts) places this
-- chunk last in the lazily built paths(), after multi.lua and penalty.lua; it is
-- built on the first decision of a call that needs it.
--@requires KEYS ARGV now tonumber sFn sLimit sWindow sBurst sShadow sPenalty modeOf decideAll penaltyRead penaltyRefused DECISION_STRIDE ADJUST_STRIDE

-- Per enforced block serving a penalty, the ms left of it; nil when none is.
local function penalized (spec, pkeys, n)
  local blocked = nil
  for i = 1, n do
    if pkeys[i] and not sShadow[spec[i]] then
      local untilMs = penaltyRead(pkeys[i])
      if untilMs > now then
        blocked = blocked or {}
        blocked[i] = untilMs - now
      end
    end
  end
  return blocked
end

-- A decision refused by penalties: each penalized block answers 2, the others are only peeked.
local function refusedByPenalty (keys, spec, cost, n, blocked)
  local out = {}
  for i = 1, n do
    local o = (i - 1) * DECISION_STRIDE
    if blocked[i] then
      local wait = blocked[i]
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = 2, 0, wait, wait, wait
    else
      local s = spec[i]
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = sFn[s](keys[i], sLimit[s], sWindow[s], sBurst[s], cost[i], now, 1)
    end
  end
  return out
end

-- A charge's refusals by blocks with a penalty: each counts one; one that starts a penalty answers 2.
local function countRefusals (spec, pkeys, n, r)
  for i = 1, n do
    local s = spec[i]
    local o = (i - 1) * DECISION_STRIDE
    if pkeys[i] and not sShadow[s] and r[o + 1] ~= 1 and r[o + 1] ~= 4 then
      local untilMs = penaltyRefused(pkeys[i], sPenalty[s], sWindow[s], now)
      if untilMs then
        -- a penalty's wait is the documented exception: reset, retry and next all wait it out
        local wait = untilMs - now
        r[o + 1] = 2
        for j = 3, 5 do
          if r[o + j] < wait then r[o + j] = wait end
        end
      end
    end
  end
end

-- Any decision: n blocks whose (spec, cost) pairs start at ARGV[at], keys at KEYS[k].
local function decide (at, k, n, modeArg)
  local mode = modeOf(modeArg)
  local keys, spec, cost, pkeys = {}, {}, {}, {}
  local fns, limits, windows, bursts, shadows = {}, {}, {}, {}, {}
  local p = k + n
  for i = 1, n do
    local s = tonumber(ARGV[at + (i - 1) * 2])
    local c = ARGV[at + (i - 1) * 2 + 1]
    keys[i], spec[i], cost[i] = KEYS[k + i - 1], s, tonumber(c) or c
    fns[i], limits[i], windows[i], bursts[i], shadows[i] = sFn[s], sLimit[s], sWindow[s], sBurst[s], sShadow[s]
    if sPenalty[s] ~= '' then
      pkeys[i] = KEYS[p]
      p = p + 1
    end
  end
  local blocked = penalized(spec, pkeys, n)
  if blocked then return refusedByPenalty(keys, spec, cost, n, blocked), p end
  local r = decideAll(keys, fns, limits, windows, bursts, cost, shadows, n, mode, now)
  if mode == 0 then countRefusals(spec, pkeys, n, r) end
  return r, p
end

-- One adjustment entry on KEYS[k], its values at ARGV[b]: 1 when it changed something.
local function adjustOne (k, b)
  local kind, s = ARGV[b], tonumber(ARGV[b + 1])
  -- a slot's release ('x') or renewal ('n'): the slot id in place of the units (concurrency.lua)
  if kind == 'x' or kind == 'n' then
    local mode = 2
    if kind == 'n' then mode = 3 end
    if sFn[s](KEYS[k], sLimit[s], sWindow[s], sBurst[s], ARGV[b + 2], now, mode) == 1 then return 1 end
    return 0
  end
  -- chargedAt '': a change outside a request (adjust()), made now
  local units, chargedAt = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]) or now
  if kind ~= 'u' then error('unknown adjustment kind ' .. tostring(kind)) end
  local mode = 3
  if units < 0 then
    mode = 2
    units = -units
  elseif units == 0 then
    return 0
  end
  local changed = sFn[s](KEYS[k], sLimit[s], sWindow[s], sBurst[s], units, now, mode, chargedAt)
  if changed == 1 then return 1 end
  return 0
end

-- n adjustment entries from ARGV[at], keys from KEYS[k]: one integer each.
local function adjustAll (at, k, n)
  local r = {}
  for i = 1, n do r[i] = adjustOne(k + i - 1, at + (i - 1) * ADJUST_STRIDE) end
  return r
end

return { decide = decide, adjustAll = adjustAll }
