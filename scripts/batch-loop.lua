-- The batch driver per call, second part: every decision of the call, in
-- order, into the reply (batch.lua's header has the layout). The common case
-- runs its algorithm straight; the other paths come from paths(), built on
-- their first use in a call (the builder's lazy group of multi.lua,
-- penalty.lua and paths.lua): a script's top level runs on every call, and
-- each closure it creates costs (benchmarks/instructions.ts), so a batch of
-- straight decisions builds none.
--@requires KEYS ARGV now specs emit errorText paths tonumber sFn sLimit sWindow sBurst sPenalty specOf SPEC_STRIDE DECISION_STRIDE ADJUST_STRIDE REPLY_PACK
--@updates out

out[1] = now
local o = 1
local at = 3 + specs * SPEC_STRIDE
local k = 1
local last = #ARGV
while at <= last do
  -- the common case by a table read of its text (no tonumber: strtod), cost 1 implied
  local head = ARGV[at]
  local s, cost, width = specOf[head], 1, 1
  if s == nil and head == '-2' then s, cost, width = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), 3 end
  if s then
    local ok, a, r, reset, retry, nextMs = pcall(sFn[s], KEYS[k], sLimit[s], sWindow[s], sBurst[s], cost, now, 0)
    -- emit's packed admitted case, inline: the common case makes no Lua call
    --@inline emit: the helpers' form (--|), held equal to the code down to --@end by test/internals/inlined.test.ts
    --| if ok then
    --|   o = emit(o, a, r, reset, retry, nextMs)
    if ok and a == 1 and reset < REPLY_PACK and nextMs < REPLY_PACK and reset >= 0 and nextMs >= 0 then
      out[o + 1], out[o + 2] = r * 4 + 3, reset * REPLY_PACK + nextMs
      o = o + 2
    elseif ok then
      o = emit(o, a, r, reset, retry, nextMs)
    --@end
    else
      out[o + 1] = errorText(a)
      o = o + 1
    end
    k = k + 1
    at = at + width
  elseif head == '-1' then
    local n = tonumber(ARGV[at + 1])
    local ok, r = pcall(paths().adjustAll, at + 2, k, n)
    if ok then
      for i = 1, n do out[o + i] = r[i] end
      o = o + n
    else
      out[o + 1] = errorText(r)
      o = o + 1
    end
    k = k + n
    at = at + 2 + n * ADJUST_STRIDE
  else
    local n = tonumber(ARGV[at + 1])
    local ok, r, nextKey = pcall(paths().decide, at + 3, k, n, ARGV[at + 2])
    if ok then
      for i = 1, #r, DECISION_STRIDE do o = emit(o, r[i], r[i + 1], r[i + 2], r[i + 3], r[i + 4]) end
      k = nextKey
    else
      out[o + 1] = errorText(r)
      o = o + 1
      -- the keys of a failed decision: its blocks, then its penalty keys
      k = k + n
      for i = 1, n do
        if sPenalty[tonumber(ARGV[at + 3 + (i - 1) * 2])] ~= '' then k = k + 1 end
      end
    end
    at = at + 3 + n * 2
  end
end
out[o + 1] = nil
return out
