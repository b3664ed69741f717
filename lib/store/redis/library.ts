import { createHash } from 'node:crypto'
import { ALGORITHMS } from '../algorithms.js'
import { algorithmBuilder, batchDriver, loneCall, prelude, readSources, type ScriptSources } from './scripts.js'

/*
 * The Redis Functions library: the batch script and the lone decisions'
 * scripts of scripts.ts as functions of one library, loaded once per master
 * (FUNCTION LOAD) and called by name (FCALL). A script's top level runs on
 * every call; a library's runs once per load, so the prelude, the algorithms'
 * closures (`algorithm(n)` keeps them between calls), the reply's helpers and periodFn
 * are built once, each block spec is parsed once (spec.lua), and a call runs
 * only the part of batch.lua after its "Per call from here" line.
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
/** The prelude's binding line: a library declares the locals and binds them on its first call (its load sees no library functions). */
const BINDING = /^local ([\w, ]+) = libraryFunctions\(\)$/m
const PER_CALL = /^-- Per call from here.*\n(?:--.*\n)*local KEYS, ARGV = KEYS, ARGV\n/m

function split (pattern: RegExp, text: string, file: string): [string, string, RegExpExecArray] {
  const found = pattern.exec(text)
  if (found === null) throw new Error(`${file} has lost the line the Functions library splits at (${String(pattern)})`)
  return [text.slice(0, found.index), text.slice(found.index + found[0].length), found]
}

function register (name: string, bind: string, body: string): string {
  return `redis.register_function('${name}', function (KEYS, ARGV)\n${bind}\n${body}end)\n`
}

/** The library, and the names it registers. */
export function buildLibrary (sources: ScriptSources = readSources()): FunctionLibrary {
  const [beforeBinding, afterBinding, binding] = split(BINDING, prelude(sources), 'scripts/prelude.lua')
  const names = binding[1] as string
  const bind = `if call == nil then ${names} = libraryFunctions() end`
  const [driverTop, driverCall] = split(PER_CALL, batchDriver(sources), 'scripts/batch.lua')
  const fn = (what: string): string => `frrl_${VERSION}_${what}`
  const template = `#!lua name=frrl_${VERSION}
-- fastify-redis-rate-limit's functions, assembled by lib/store/redis/library.ts from scripts/*.lua
${beforeBinding}local ${names}
${afterBinding}
${algorithmBuilder(sources)}
${sources.reply}
${sources.spec}
${driverTop}
${register(fn('batch'), bind, driverCall)}
${ALGORITHMS.map((name, i) => `-- one ${name} decision\n${register(fn(`lone${i + 1}`), bind, loneCall(`algorithm(${i + 1})`))}`).join('\n')}`
  const version = createHash('sha1').update(template).digest('hex').slice(0, 12)
  return {
    name: `frrl_${version}`,
    source: template.replaceAll(VERSION, version),
    batch: `frrl_${version}_batch`,
    lone: ALGORITHMS.map((_name, i) => `frrl_${version}_lone${i + 1}`)
  }
}
