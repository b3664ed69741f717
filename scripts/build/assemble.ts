import { readFileSync } from 'node:fs'
import { ALGORITHMS } from '../../lib/store/algorithms.js'
import { SLOT_RETRY_MS, WAKE_CHANNEL } from '../../lib/kinds/concurrency/lease.js'
import { ADJUST_STRIDE, DECISION_STRIDE, QUEUED_HEAD, REPLY_PACK, SPEC_STRIDE } from '../../lib/store/redis/protocol.js'
import { loadedScript, type LoadedScript } from '../../lib/store/redis/lua.js'

export type { LoadedScript }

/*
 * The Lua build: what production runs (the Functions library, library.ts,
 * and the same batch driver as a script for EVAL where FUNCTION is refused),
 * assembled from the fragments in scripts/ and written by generate.ts to the
 * files Redis is given (scripts/library.lua, scripts/eval-script.lua). Each fragment's header declares what it reads from the fragments
 * before it (`--@requires`) and the locals it leaves to the ones after it
 * (`--@provides`), and which of those earlier locals it assigns to or writes
 * fields of (`--@updates`); the prelude also names the library functions it
 * binds (`--@binds`). `assemble` checks every declaration against the scope the
 * fragment is placed in, so a fragment cannot read a local nobody declared,
 * and luacheck (npm run lint:lua, .luacheckrc from the same declarations)
 * checks that a fragment reads nothing beyond its declarations.
 */
const SCRIPTS_DIR = new URL('../', import.meta.url)

/** The fragments: the algorithms (ALGORITHMS order), slots, and the drivers' parts. */
export const FRAGMENT_NAMES = [...ALGORITHMS, 'concurrency', 'prelude', 'clock', 'reply', 'spec', 'batch', 'batch-specs', 'multi', 'penalty', 'paths', 'batch-loop'] as const
export type FragmentName = typeof FRAGMENT_NAMES[number]

export interface Fragment {
  readonly name: string
  readonly text: string
  readonly requires: readonly string[]
  readonly provides: readonly string[]
  readonly updates: readonly string[]
  readonly binds: readonly string[]
}
export type ScriptSources = Record<FragmentName, Fragment>

/** A fragment's declarations: the `--@word names…` lines of its leading comment block. */
export function parseFragment (name: string, text: string): Fragment {
  const declared: Record<string, string[]> = { requires: [], provides: [], updates: [], binds: [] }
  for (const line of text.split('\n')) {
    if (!line.startsWith('--')) break
    if (!line.startsWith('--@')) continue
    const [word = '', ...names] = line.slice(3).trim().split(/\s+/)
    const list = declared[word]
    if (list === undefined) throw new Error(`scripts/${name}.lua: unknown declaration --@${word}`)
    list.push(...names)
  }
  return { name, text, requires: declared.requires as string[], provides: declared.provides as string[], updates: declared.updates as string[], binds: declared.binds as string[] }
}

export function readSources (): ScriptSources {
  const sources = {} as Record<FragmentName, Fragment>
  for (const name of FRAGMENT_NAMES) sources[name] = parseFragment(name, readFileSync(new URL(`${name}.lua`, SCRIPTS_DIR), 'utf8'))
  return sources
}

/**
 * The shared constants, their one definition in TypeScript, as the prelude
 * line: the top of every script and of the library.
 */
export const PRELUDE_CONSTANTS: Readonly<Record<string, number | string>> = { SPEC_STRIDE, DECISION_STRIDE, ADJUST_STRIDE, REPLY_PACK, SLOT_RETRY_MS, QUEUED_HEAD, WAKE_CHANNEL }

/** A part of an artifact: a fragment, or text the builder writes with its own declarations. */
export type Part = Fragment | { readonly name: string, readonly text: string, readonly requires: readonly string[], readonly provides: readonly string[], readonly updates?: readonly string[] }

/** Joins parts in order, each checked against the names in scope before it. */
export function assemble (parts: readonly Part[], scope: Set<string> = new Set()): string {
  const texts: string[] = []
  for (const part of parts) {
    for (const name of [...part.requires, ...part.updates ?? []]) {
      if (!scope.has(name)) throw new Error(`Lua build: ${part.name} requires ${name}, which no part before it provides`)
    }
    for (const name of part.provides) {
      if (scope.has(name)) throw new Error(`Lua build: ${part.name} provides ${name}, already in scope`)
      scope.add(name)
    }
    texts.push(part.text)
  }
  return texts.join('\n')
}

/** Generated text that only provides (the prelude line, the bindings). */
export function generated (name: string, text: string, provides: readonly string[], requires: readonly string[] = []): Part {
  return { name, text, requires, provides }
}

/** A chunk (a fragment that returns its value) as an expression: its locals stay its own. */
export function chunk (fragment: Fragment, scope: Set<string>): string {
  if (fragment.provides.length > 0) throw new Error(`Lua build: ${fragment.name} is placed as a chunk and cannot provide ${fragment.provides.join(', ')}`)
  return `(function ()\n${assemble([fragment], new Set(scope))}end)()`
}

// A string constant goes as a Lua string literal (JSON's double-quoted form is one for plain ASCII).
export const PRELUDE_LINE = generated('the prelude line', `local ${Object.keys(PRELUDE_CONSTANTS).join(', ')} = ${Object.values(PRELUDE_CONSTANTS).map((value) => typeof value === 'string' ? JSON.stringify(value) : value).join(', ')}`, Object.keys(PRELUDE_CONSTANTS))

/** The prelude's library functions as locals, bound at once (a script). */
export function bindings (sources: ScriptSources): Part {
  const names = sources.prelude.binds.join(', ')
  return generated('the bindings', `local ${names} = libraryFunctions()`, sources.prelude.binds, ['libraryFunctions'])
}

/** KEYS and ARGV as locals (a script: a global's read is a table lookup); a library function has them as arguments. */
export const SCRIPT_FRAME = generated('the script frame', 'local KEYS, ARGV = KEYS, ARGV', ['KEYS', 'ARGV'])

/**
 * `algorithm(n)`: every algorithm, numbered in ALGORITHMS order (the scripts'
 * algorithm numbers), then slots (CONCURRENCY_NUMBER), each built on its first
 * use in a call. A script's top level runs on every call and each closure it
 * creates costs (benchmarks/instructions.ts): one function and one table here.
 */
export function algorithmTable (sources: ScriptSources, scope: ReadonlySet<string>): Part {
  const chunks = [...ALGORITHMS.map((name) => sources[name]), sources.concurrency]
  const branches = chunks.map((fragment, i) => `  ${i === 0 ? 'if' : 'elseif'} n == ${i + 1} then\n    -- ${fragment.name}\n    fn = ${chunk(fragment, new Set(scope))}`)
  return generated('algorithm(n)', `local built = {}
local function algorithm (n)
  local fn = built[n]
  if fn ~= nil then return fn end
${branches.join('\n')}
  end
  built[n] = fn
  return fn
end`, ['algorithm'])
}

/** The batch driver's paths beyond its common case, built on their first use in a call (one closure). */
function lazyPaths (sources: ScriptSources, scope: ReadonlySet<string>): Part {
  const inner = new Set(scope)
  const body = assemble([sources.multi, sources.penalty], inner)
  return generated('paths()', `local slowPaths
local function paths ()
  if slowPaths == nil then
    slowPaths = (function ()
${body}
${assemble([sources.paths], inner)}end)()
  end
  return slowPaths
end`, ['paths'])
}

/** The parts of a call, in a scope that already holds what the top provides. */
export function batchCall (sources: ScriptSources, scope: Set<string>): string {
  const head = assemble([sources['batch-specs']], scope)
  return `${head}\n${assemble([lazyPaths(sources, scope), sources['batch-loop']], scope)}`
}

/** The top every script and the library share: prelude, bindings, clock, algorithms, reply, specs. */
export function sharedTop (sources: ScriptSources, bind: Part, scope: Set<string>): string {
  const head = assemble([PRELUDE_LINE, sources.prelude, bind, sources.clock], scope)
  return `${head}\n${assemble([algorithmTable(sources, scope), sources.reply, sources.spec], scope)}`
}

function header (what: string): string {
  return `#!lua\n-- ${what}, generated by scripts/build/ from scripts/*.lua: do not edit (npm run build:lua)\n`
}

/** The batch script (scripts/batch*.lua; wire format in protocol.ts): what the store sends. */
export function buildBatchScript (sources: ScriptSources = readSources()): LoadedScript {
  const scope = new Set<string>()
  const top = sharedTop(sources, bindings(sources), scope)
  const driver = assemble([sources.batch, SCRIPT_FRAME], scope)
  return loadedScript(`${header('batch driver')}${top}\n${driver}\n${batchCall(sources, scope)}`)
}
