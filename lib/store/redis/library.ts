import { createHash } from 'node:crypto'
import { ALGORITHMS } from '../algorithms.js'
import { assemble, batchCall, readSources, sharedTop, type Part, type ScriptSources } from './scripts.js'

/*
 * The Redis Functions library: the batch script and the lone decisions'
 * scripts of scripts.ts as functions of one library, loaded once per master
 * (FUNCTION LOAD) and called by name (FCALL). A script's top level runs on
 * every call; a library's runs once per load, so the prelude, the algorithms'
 * closures (`algorithm(n)` keeps them between calls), the reply's helpers and periodFn
 * are built once, each block spec is parsed once (spec.lua), and a call runs
 * only the batch driver's per-call parts (batch-specs.lua, the lazily built
 * paths, batch-loop.lua) or a lone decision (lone.lua).
 * benchmarks/instructions.ts counts the difference.
 *
 * The library's name carries a hash of its source, and so do its functions'
 * names (Redis keeps function names unique across libraries): during a rolling
 * deploy each version loads its own library beside the other's and calls
 * only its own functions. Nothing removes an old version's library; it is a
 * few dozen kB (docs/operations.md shows FUNCTION DELETE).
 */

export interface FunctionLibrary {
  /** `frrl_` and 12 hex digits of the source's SHA-1. */
  readonly name: string
  /** FUNCTION LOAD's argument. */
  readonly source: string
  /** The FCALL names: the batch function, and per algorithm (ALGORITHMS order) a lone decision's. */
  readonly batch: string
  readonly lone: readonly string[]
}

const VERSION = '@VERSION@'

function register (name: string, bind: string, body: string): string {
  return `redis.register_function('${name}', function (KEYS, ARGV)\n${bind}\n${body}end)\n`
}

/** The library, and the names it registers. */
export function buildLibrary (sources: ScriptSources = readSources()): FunctionLibrary {
  const names = sources.prelude.binds.join(', ')
  // A library sees no library functions while it loads: it declares the locals and binds them on its first call.
  const declare: Part = { name: 'the declared bindings', text: `local ${names}`, requires: ['libraryFunctions'], provides: sources.prelude.binds }
  const bind = `if call == nil then ${names} = libraryFunctions() end`
  const scope = new Set<string>()
  const top = `${sharedTop(sources, declare, scope)}\n${assemble([sources.batch], scope)}`
  const call = new Set([...scope, 'KEYS', 'ARGV'])
  const fn = (what: string): string => `frrl_${VERSION}_${what}`
  // Each lone function holds its algorithm's function, built at load (no algorithm(n) per call).
  const lone = ALGORITHMS.map((name, i) => `-- one ${name} decision
do
  local lone = algorithm(${i + 1})
${register(fn(`lone${i + 1}`), bind, assemble([sources.lone], new Set([...call, 'lone'])))}end`)
  const template = `#!lua name=frrl_${VERSION}
-- fastify-redis-rate-limit's functions, assembled by lib/store/redis/library.ts from scripts/*.lua
${top}
${register(fn('batch'), bind, batchCall(sources, call))}
${lone.join('\n')}
`
  const version = createHash('sha1').update(template).digest('hex').slice(0, 12)
  return {
    name: `frrl_${version}`,
    source: template.replaceAll(VERSION, version),
    batch: `frrl_${version}_batch`,
    lone: ALGORITHMS.map((_name, i) => `frrl_${version}_lone${i + 1}`)
  }
}
