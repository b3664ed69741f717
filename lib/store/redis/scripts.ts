import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { ALGORITHMS, type AlgorithmName } from '../algorithms.js'
import { ADJUST_STRIDE, DECISION_STRIDE, MULTI_STRIDE, REPLY_PACK, SPEC_STRIDE } from './protocol.js'

export interface LoadedScript {
  source: string
  sha: string
}

/*
 * The script registry: every script is assembled from the Lua files in
 * scripts/ and hashed once. `prelude.lua` (integer division, the clock) comes
 * first; each algorithm file is a chunk that returns its function of numbers
 * (key, limit, w, burst, cost, now, mode, chargedAt), returning its decision as
 * several values (no table); `multi.lua`, `penalty.lua` and `batch.lua` are the drivers.
 * The stride constants come from protocol.ts, their one definition.
 *
 * scripts/ ships beside lib/ and dist/, so one relative URL works from the
 * TypeScript sources and from the published build alike.
 */
const SCRIPTS_DIR = new URL('../../../scripts/', import.meta.url)

/** The Lua files, as read from scripts/. */
export interface ScriptSources {
  prelude: string
  algorithms: Record<AlgorithmName, string>
  /** Concurrency slots (a block kind, numbered after the algorithms). */
  concurrency: string
  multi: string
  penalty: string
  /** The batch driver's paths beyond its common case (spliced into batch.lua). */
  paths: string
  /** A call's reply (errorText, emit), for the batch and lone scripts. */
  reply: string
  /** A block spec's text, parsed once (the batch and lone scripts). */
  spec: string
  batch: string
}

function loaded (source: string): LoadedScript {
  return { source, sha: createHash('sha1').update(source).digest('hex') }
}

function readLua (name: string): string {
  return readFileSync(new URL(`${name}.lua`, SCRIPTS_DIR), 'utf8')
}

export function readSources (): ScriptSources {
  const algorithms = {} as Record<AlgorithmName, string>
  for (const name of ALGORITHMS) algorithms[name] = readLua(name)
  return { prelude: readLua('prelude'), algorithms, concurrency: readLua('concurrency'), multi: readLua('multi'), penalty: readLua('penalty'), paths: readLua('paths'), reply: readLua('reply'), spec: readLua('spec'), batch: readLua('batch') }
}

/** An algorithm chunk as a local holding its function (the chunk's helpers stay its own). */
function algorithmLocal (local: string, name: AlgorithmName, chunk: string): string {
  return `-- ${name}\nlocal ${local} = (function ()\n${chunk}end)()`
}

/**
 * `algorithm(n)`: every algorithm, numbered in ALGORITHMS order (the scripts'
 * algorithm numbers), then slots (CONCURRENCY_NUMBER), each built on its first
 * use in a call. A script's top level runs on every call and each closure it
 * creates costs (benchmarks/instructions.ts): one function and one table here,
 * where a maker per algorithm cost six closures more.
 */
export function algorithmBuilder (sources: ScriptSources): string {
  const chunks: Array<[string, string]> = [...ALGORITHMS.map((name): [string, string] => [name, sources.algorithms[name]]), ['concurrency', sources.concurrency]]
  const branches = chunks.map(([name, chunk], i) => `  ${i === 0 ? 'if' : 'elseif'} n == ${i + 1} then\n    -- ${name}\n    fn = (function ()\n${chunk}end)()`)
  return `local built = {}
local function algorithm (n)
  local fn = built[n]
  if fn ~= nil then return fn end
${branches.join('\n')}
  end
  built[n] = fn
  return fn
end`
}

/** batch.lua with multi.lua, penalty.lua and paths.lua spliced into its lazily built paths() (at its --@splice line). */
export function batchDriver (sources: ScriptSources): string {
  const marker = /^ *--@splice .*$/m
  if (!marker.test(sources.batch)) throw new Error('scripts/batch.lua has lost its --@splice line')
  return sources.batch.replace(marker, () => `${sources.multi}\n${sources.penalty}\n${sources.paths}`)
}

/** The wire constants (protocol.ts) and the prelude: the top of every script, and of the Functions library. */
export function prelude (sources: ScriptSources): string {
  return `local MULTI_STRIDE, SPEC_STRIDE, DECISION_STRIDE, ADJUST_STRIDE, REPLY_PACK = ${MULTI_STRIDE}, ${SPEC_STRIDE}, ${DECISION_STRIDE}, ${ADJUST_STRIDE}, ${REPLY_PACK}
${sources.prelude}`
}

function header (what: string, sources: ScriptSources): string {
  return `#!lua
-- ${what}, assembled by lib/store/redis/scripts.ts from scripts/*.lua
${prelude(sources)}`
}

/** One algorithm's script reads its ARGV as numbers and replies with a table (refund: { given }; ARGV[7] the charge's time, default now). */
const STANDALONE_CALL = `local mode = 0
if ARGV[6] == '1' then mode = 1 elseif ARGV[6] == '2' then mode = 2 elseif ARGV[6] == '3' then mode = 3 end
local now = nowMs(ARGV[5])
return { algorithm(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), now, mode, tonumber(ARGV[7]) or now) }
`

/**
 * A lone decision's call: `fn` (an algorithm's function) on its spec's numbers
 * (ARGV[1], spec.lua), the cost ('1' read without strtod) and now, replying as
 * the batch script does: `now`, then the straight decision's two, three or
 * four values (batch.lua), or the error text alone.
 */
export function loneCall (fn: string): string {
  return `local spec, cost, now = blockSpec(ARGV[1]), ARGV[2], nowMs(ARGV[3])
local ok, a, r, reset, retry, nextMs = pcall(${fn}, KEYS[1], spec[2], spec[3], spec[4], cost == '1' and 1 or tonumber(cost), now, 0)
if not ok then return { now, errorText(a) } end
out[1] = now
out[emit(1, a, r, reset, retry, nextMs) + 1] = nil
return out
`
}

/**
 * The store's script for a call of one straight decision (one block, charged,
 * no penalty, period or slot), per algorithm in ALGORITHMS order: KEYS[1] =
 * state key; ARGV = the block's spec text (protocol.ts specText), cost, now
 * ('' = Redis TIME).
 * Under light load most calls hold one decision, and this script costs Redis
 * about a third less than the batch script's driver for it
 * (benchmarks/instructions.ts).
 */
export function loadLoneScripts (sources: ScriptSources = readSources()): LoadedScript[] {
  return ALGORITHMS.map((name) => loaded(`${header(`${name}, one decision`, sources)}
${algorithmLocal('algorithm', name, sources.algorithms[name])}
${sources.reply}
${sources.spec}
${loneCall('algorithm')}`))
}

/**
 * One algorithm's script on its own: KEYS[1] = state key; ARGV = limit,
 * windowMs, burst, cost, now ('' = Redis TIME), mode (see SCRIPT_MODE).
 * Tests and benchmarks run these; the store sends only the batch script.
 */
export function loadScripts (sources: ScriptSources = readSources()): Record<AlgorithmName, LoadedScript> {
  const scripts = {} as Record<AlgorithmName, LoadedScript>
  for (const name of ALGORITHMS) {
    scripts[name] = loaded(`${header(name, sources)}
${algorithmLocal('algorithm', name, sources.algorithms[name])}
${STANDALONE_CALL}`)
  }
  return scripts
}

/**
 * The multi-limit script: the multi driver (scripts/multi.lua, layout there)
 * on its own, what the multi-limit property test holds to the memory store.
 * The store sends decisions through the batch script, which embeds it.
 */
export function buildMultiScript (sources: ScriptSources = readSources()): LoadedScript {
  return loaded(`${header('multi-limit driver', sources)}
${algorithmBuilder(sources)}
${sources.multi}
return multi(KEYS, ARGV)
`)
}

/** The batch script (scripts/batch.lua; wire format in protocol.ts): what the store sends. */
export function buildBatchScript (sources: ScriptSources = readSources()): LoadedScript {
  return loaded(`${header('batch driver', sources)}
${algorithmBuilder(sources)}
${sources.reply}
${sources.spec}
${batchDriver(sources)}`)
}
