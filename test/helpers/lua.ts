/*
 * Scripts that only tests and benchmarks run, built from the production
 * fragments with the production builder (lib/store/redis/scripts.ts): one
 * algorithm on its own (algorithms.test.ts, scripts.test.ts, benchmarks), and
 * the multi-limit driver on its own (benchmarks/scripts.ts). The store
 * sends only the batch function (or the same driver as a script: scripts/library.lua, eval-script.lua).
 */
import { createHash } from 'node:crypto'
import { ALGORITHMS, type AlgorithmName } from '../../lib/store/algorithms.js'
import { REPLY_PACK } from '../../lib/store/redis/protocol.js'
import { assemble, bindings, chunk, generated, PRELUDE_LINE, readSources, sharedTop, type LoadedScript, type ScriptSources } from '../../scripts/build/assemble.js'

/** Values per block in the multi script's ARGV (after the two leading ones). */
export const MULTI_STRIDE = 6

function loaded (source: string): LoadedScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') }
}

/**
 * One algorithm's script reads its ARGV as numbers and replies with a table:
 * KEYS[1] = state key; ARGV = limit, windowMs, burst, cost, now ('' = Redis
 * TIME), the algorithm's mode as its number ('' = 0: charge, 1 dry, 2 refund,
 * 3 charge without deciding), the charge's time for a refund (default now).
 */
const STANDALONE_CALL = `local mode = tonumber(ARGV[6]) or 0
local now = nowMs(ARGV[5])
return { algorithm(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), now, mode, tonumber(ARGV[7]) or now) }
`

export function loadScripts (sources: ScriptSources = readSources()): Record<AlgorithmName, LoadedScript> {
  const scripts = {} as Record<AlgorithmName, LoadedScript>
  for (const name of ALGORITHMS) {
    const scope = new Set<string>()
    const top = assemble([PRELUDE_LINE, sources.prelude, bindings(sources), sources.clock], scope)
    scripts[name] = loaded(`#!lua\n-- ${name}, assembled by test/helpers/lua.ts from scripts/*.lua\n${top}\n-- ${name}\nlocal algorithm = ${chunk(sources[name], scope)}\n${STANDALONE_CALL}`)
  }
  return scripts
}

/**
 * The multi script's driver, decideAll's arrays from its ARGV: KEYS[i] the
 * state key of block i; ARGV[1] now in ms ('' = Redis TIME), ARGV[2] the mode
 * ('' charge, '1' peek), then per block MULTI_STRIDE values: algorithm number,
 * limit, windowMs, burst, cost, shadow ('1' = never blocks).
 */
const MULTI_DRIVER = `local function multi (KEYS, ARGV)
  local now = nowMs(ARGV[1])
  local mode = modeOf(ARGV[2])
  local n = #KEYS
  local fns, limits, windows, bursts, costs, shadows = {}, {}, {}, {}, {}, {}
  for i = 1, n do
    local b = 2 + (i - 1) * ${MULTI_STRIDE}
    fns[i] = algorithm(tonumber(ARGV[b + 1]))
    -- a concurrency block's cost is the request's slot id (never a number)
    limits[i], windows[i], bursts[i], costs[i] = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]) or ARGV[b + 5]
    shadows[i] = ARGV[b + 6] == '1'
  end
  return decideAll(KEYS, fns, limits, windows, bursts, costs, shadows, n, mode, now)
end
return multi(KEYS, ARGV)
`

/** The multi-limit script: scripts/multi.lua's decideAll on its own, for benchmarks/scripts.ts. */
export function buildMultiScript (sources: ScriptSources = readSources()): LoadedScript {
  const scope = new Set<string>()
  const top = sharedTop(sources, bindings(sources), scope)
  const driver = assemble([sources.multi, generated('the multi driver', MULTI_DRIVER, [], ['nowMs', 'modeOf', 'algorithm', 'tonumber', 'decideAll'])], scope)
  return loaded(`#!lua\n-- multi-limit driver, assembled by test/helpers/lua.ts from scripts/*.lua\n${top}\n${driver}`)
}

/**
 * Lua for a test harness around the batch script: `readBlock(r, o)` reads one
 * block's values from the batch reply `r` after position o (batch.lua's reply
 * layout: two, three or four values) and returns the next position and the
 * five numbers allowed, remaining, resetMs, retryAfterMs, nextMs.
 */
export const READ_BLOCK_LUA = `local function readBlock (r, o)
  local v = r[o + 1]
  if type(v) ~= 'number' then error(tostring(v)) end
  -- a reserved turn (a delay): -wait, reset, next, or -wait, -1 - reset, next, the units free before it; allowed 4
  if v < 0 then
    if r[o + 2] < 0 then return o + 4, 4, r[o + 4], -1 - r[o + 2], -v, r[o + 3] end
    return o + 3, 4, 0, r[o + 2], -v, r[o + 3]
  end
  local a = v % 4
  if a == 3 then return o + 2, 1, (v - 3) / 4, math.floor(r[o + 2] / ${REPLY_PACK}), 0, r[o + 2] % ${REPLY_PACK} end
  if a == 1 then return o + 3, 1, (v - 1) / 4, r[o + 2], 0, r[o + 3] end
  return o + 4, a, (v - a) / 4, r[o + 2], r[o + 3], r[o + 4]
end
`
