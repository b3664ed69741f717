import { test } from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative, resolve, dirname, sep } from 'node:path'
import { fileURLToPath } from 'node:url'

/*
 * The folder rules of lib/ (CONTRIBUTING.md, "Architecture"): which tier may
 * import which. An import that breaks a rule (the engine reaching for Fastify
 * or presentation, a store for the policy compiler) fails here. Last, issue
 * 19's rule: every Redis client is an optional peer dependency, and no lib
 * module (so no published .js or .d.ts) imports a client package, so a
 * project that installed only node-redis, or only iovalkey, loads and compiles.
 */

const lib = fileURLToPath(new URL('../../lib/', import.meta.url))

interface Import { from: string, to: string, typeOnly: boolean }

function sources (dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? sources(path) : name.endsWith('.ts') ? [path] : []
  })
}

/**
 * A capability's files of other tiers, kept in its folder (CONTRIBUTING.md,
 * "Architecture"): each is held to the rules of the tier it belongs to.
 */
const CAPABILITY_FILES: Record<string, string> = {
  'kinds/concurrency/waiters.ts': 'decide',
  'kinds/concurrency/slot-wait.ts': 'decide',
  'kinds/delay/holds.ts': 'decide',
  'kinds/delay/turns.ts': 'decide',
  'kinds/delay/held-request.ts': 'request',
  'fleet/ban-api.ts': 'api',
  'fleet/ban-refusal.ts': 'request'
}

/**
 * `store/redis/store.ts` → `store`; a top-level file is its own tier (`index`,
 * `types`, …). A kind's step that needs a higher tier sits in its kind's folder
 * under that tier's name (`kinds/concurrency/decide.ts` → `decide`), or is
 * named in CAPABILITY_FILES, and is held to that tier's rules.
 */
function tierOf (file: string): string {
  const path = relative(lib, file).split(sep).join('/')
  const named = CAPABILITY_FILES[path]
  if (named !== undefined) return named
  const parts = path.split('/')
  const base = (parts[parts.length - 1] as string).replace(/\.ts$/, '')
  if (parts[0] === 'kinds' && parts.length > 1 && base in ALLOWED && base !== 'kinds' && base !== 'index') return base
  return parts.length > 1 ? parts[0] as string : base
}

const STATEMENT = /^(import|export)\s+(type\s+)?([^;]*?)\s+from\s+'([^']+)'/gm

function importsOf (file: string): Import[] {
  const text = readFileSync(file, 'utf8')
  const out: Import[] = []
  for (const [, , typeKeyword, clause, spec] of text.matchAll(STATEMENT)) {
    const names = /\{([^}]*)\}/.exec(clause ?? '')?.[1]
    const allTypes = names !== undefined && !/^\s*\w/.test((clause ?? '').replace(/\{[^}]*\}/, '').replace(/,/g, '')) &&
      names.split(',').map((name) => name.trim()).filter(Boolean).every((name) => name.startsWith('type '))
    const target = (spec as string).startsWith('.') ? resolve(dirname(file), (spec as string).replace(/\.js$/, '.ts')) : spec as string
    out.push({ from: file, to: target, typeOnly: typeKeyword !== undefined || allTypes })
  }
  return out
}

/**
 * Tiers each tier may import values from (itself always); type-only imports
 * may also reach `types`. Only edges some module uses are listed, a value
 * edge only where a value is imported.
 */
const ALLOWED: Record<string, readonly string[]> = {
  util: [],
  errors: [],
  diagnostics: [],
  limits: [],
  kinds: ['util', 'limits'],
  store: ['util', 'errors', 'limits', 'kinds'],
  keys: ['util', 'errors', 'limits'],
  policy: ['util', 'errors', 'limits', 'kinds', 'store', 'keys'],
  fleet: ['limits', 'keys', 'policy'],
  picture: [],
  decide: ['util', 'errors', 'store', 'diagnostics'],
  reply: ['util', 'errors', 'decide'],
  request: ['util', 'errors', 'limits', 'store', 'keys', 'policy', 'decide', 'diagnostics'],
  api: ['util', 'errors', 'limits', 'kinds', 'keys', 'policy', 'fleet', 'decide', 'picture'],
  options: ['util', 'errors', 'limits', 'kinds', 'store', 'keys', 'policy', 'request'],
  types: [],
  runtime: ['util', 'errors', 'limits', 'kinds', 'store', 'keys', 'fleet', 'decide', 'reply', 'picture'],
  fastify: ['util', 'errors', 'diagnostics', 'keys', 'policy', 'request', 'api', 'options', 'runtime', 'picture'],
  console: ['util', 'errors', 'limits', 'kinds', 'keys', 'policy', 'fastify', 'picture'],
  index: ['errors', 'diagnostics', 'store', 'keys', 'fastify', 'types']
}
/** Type-only imports a tier may make beyond its value imports (its contract's types). */
const TYPES_ALSO: Record<string, readonly string[]> = {
  errors: ['types'],
  keys: ['types', 'store'],
  store: ['types'],
  policy: ['types'],
  fleet: ['types', 'store'],
  decide: ['types', 'kinds', 'policy', 'picture'],
  picture: ['types', 'store', 'diagnostics'],
  reply: ['types', 'store', 'policy'],
  request: ['types', 'kinds', 'fleet', 'reply'],
  api: ['types', 'store'],
  options: ['types', 'decide'],
  types: ['store'],
  runtime: ['policy', 'request', 'options'],
  kinds: ['store', 'types'],
  fastify: ['types'],
  console: ['types']
}

test('every lib module sits in a known tier and imports only what its tier may', async (t) => {
  const files = sources(lib)
  t.ok(files.length >= 25, `${files.length} modules in lib/`)
  for (const file of files) {
    const tier = tierOf(file)
    t.ok(tier in ALLOWED, `${relative(lib, file)} is in a known tier (${tier})`)
    for (const entry of importsOf(file)) {
      if (!entry.to.startsWith(lib)) continue
      const target = tierOf(entry.to)
      if (target === tier) continue
      const may = ALLOWED[tier]?.includes(target) === true || (entry.typeOnly && TYPES_ALSO[tier]?.includes(target) === true)
      t.ok(may, `${relative(lib, file)} imports ${relative(lib, entry.to)}${entry.typeOnly ? ' (types)' : ''}`)
    }
  }
})

/** Every import circle among `modules` (by `edges`), each once, as the path around it from its first module in sort order. */
function circles (modules: readonly string[], edges: (module: string) => readonly string[]): string[][] {
  const found = new Map<string, string[]>()
  const state = new Map<string, 'open' | 'done'>()
  const path: string[] = []
  const visit = (module: string): void => {
    state.set(module, 'open')
    path.push(module)
    for (const next of edges(module)) {
      if (state.get(next) === 'open') {
        const loop = path.slice(path.indexOf(next))
        const first = loop.indexOf([...loop].sort()[0] as string)
        const turned = [...loop.slice(first), ...loop.slice(0, first)]
        found.set(turned.join(' → '), turned)
      } else if (!state.has(next)) visit(next)
    }
    path.pop()
    state.set(module, 'done')
  }
  for (const module of [...modules].sort()) if (!state.has(module)) visit(module)
  return [...found.values()]
}

test('no import circle in lib/, type-only imports included (a shared type lives where it belongs)', async (t) => {
  const files = sources(lib)
  const edges = new Map(files.map((file) => [file, importsOf(file).map((entry) => entry.to).filter((to) => to.startsWith(lib))]))
  const found = circles(files, (file) => edges.get(file) ?? [])
  t.same(found.map((loop) => [...loop, loop[0]].map((file) => relative(lib, file as string)).join(' → ')), [], 'no module reaches itself through its imports')
  // The check can fail: a circle of two, one of three, and a module importing itself.
  const sample: Record<string, string[]> = { a: ['b'], b: ['a', 'c'], c: ['d'], d: ['e'], e: ['c'], f: ['f'] }
  t.same(circles(Object.keys(sample), (module) => sample[module] ?? []), [['a', 'b'], ['c', 'd', 'e'], ['f']], 'the check finds circles')
})

test('the decision engine and the stores import no Fastify value', async (t) => {
  for (const file of sources(lib).filter((file) => ['decide', 'store', 'util'].includes(tierOf(file)))) {
    for (const entry of importsOf(file)) {
      if (entry.to === 'fastify' || entry.to === 'fastify-plugin') t.ok(entry.typeOnly, `${relative(lib, file)} imports ${entry.to} for types only`)
    }
  }
})

test('only the store tier asks which store it has (the port says what the rest needs)', async (t) => {
  for (const file of sources(lib).filter((file) => tierOf(file) !== 'store')) {
    t.notMatch(readFileSync(file, 'utf8'), /instanceof\s+(RedisStore|MemoryStore)\b/, `${relative(lib, file)} tests no store class`)
  }
})

/** Ways of asking which kind a block is; outside lib/kinds/ the run's kind answers instead (kinds/contract.ts). */
const KIND_TESTS: readonly RegExp[] = [
  /[!=]==\s*'(window|period|concurrency)'/,
  /'(window|period|concurrency)'\s*[!=]==/,
  /\bisSlotRun\b/,
  /\.period\s*[!=]==\s*undefined/,
  /\.period\?\./,
  /\bkind\.name\b/,
  /\bKINDS\.(window|period|concurrency)\b/,
  /\.concurrency\s*[?)&|]/
]

function codeOf (file: string): string {
  return readFileSync(file, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '')
}

test('outside lib/kinds/, no module asks which kind a block is (each kind answers from its folder)', async (t) => {
  const outside = sources(lib).filter((file) => !relative(lib, file).startsWith('kinds' + sep))
  t.ok(outside.length > 50, `${outside.length} modules outside lib/kinds/`)
  for (const file of outside) {
    const code = codeOf(file)
    const found = KIND_TESTS.filter((pattern) => pattern.test(code)).map(String)
    t.same(found, [], `${relative(lib, file)} asks no kind question`)
  }
  // The rule can fail: the code this round moved into the kinds holds such questions.
  t.ok(KIND_TESTS.some((pattern) => pattern.test(codeOf(join(lib, 'kinds', 'policy.ts')))), 'the patterns catch a kind test')
})

test('every block kind has its folder and its contract', async (t) => {
  const { BLOCK_KINDS, KINDS } = await import('../../lib/kinds/index.js')
  for (const kind of BLOCK_KINDS) {
    t.ok(existsSync(join(lib, 'kinds', kind, 'kind.ts')), `lib/kinds/${kind}/kind.ts`)
    t.equal(KINDS[kind].name, kind, `KINDS.${kind} is the ${kind} kind`)
  }
})

test('no lib module shares its base name with a sibling folder (options.ts beside options/)', async (t) => {
  const twins = sources(lib).filter((file) => existsSync(file.replace(/\.ts$/, '')))
  t.same(twins.map((file) => relative(lib, file)), [], 'each concept has one home')
})

/** A default's or a bound's name: `MAX_…`, `MIN_…`, `DEFAULT_…`, or a table of defaults (`DEFAULTS`, `BLOCK_DEFAULTS`). */
const LIMIT_NAME = /^(?:(?:MAX|MIN|DEFAULT)_\w+|(?:\w+_)?DEFAULTS)$/

/** The names a module exports: declared (`export const X`), listed (`export { X as Y }`) or passed through (`export * from`, as `*`). */
function exportedNames (file: string): string[] {
  const code = codeOf(file)
  const declared = [...code.matchAll(/^export\s+(?:declare\s+)?(?:const|let|var|function|class|enum)\s+(\w+)/gm)].map((match) => match[1] as string)
  const listed = [...code.matchAll(/^export\s+(?:type\s+)?\{([^}]*)\}/gm)].flatMap((match) => (match[1] as string).split(',')
    .map((name) => name.trim().replace(/^type\s+/, '').split(/\s+as\s+/).pop() as string).filter(Boolean))
  const named = [...code.matchAll(/^export\s+\*\s+as\s+(\w+)/gm)].map((match) => match[1] as string)
  const passed = [...code.matchAll(/^export\s+\*\s+from/gm)].map(() => '*')
  return [...declared, ...listed, ...named, ...passed]
}

test('every default and bound is exported by lib/limits.ts alone, which imports nothing (one table)', async (t) => {
  const table = join(lib, 'limits.ts')
  const own = exportedNames(table).filter((name) => LIMIT_NAME.test(name))
  t.ok(own.length >= 40, `${own.length} defaults and bounds in limits.ts`)
  t.notMatch(codeOf(table), /^\s*import\b/m, 'limits.ts imports nothing')
  for (const file of sources(lib).filter((file) => file !== table)) {
    t.same(exportedNames(file).filter((name) => LIMIT_NAME.test(name)), [], `${relative(lib, file)} exports no default or bound`)
    const passes = importsOf(file).some((entry) => entry.to === table) && /^export\s+\*\s+from\s+'[^']*limits\.js'/m.test(codeOf(file))
    t.notOk(passes, `${relative(lib, file)} does not pass the table through`)
  }
  // The check can fail: the names it looks for are the ones the table holds.
  t.ok(['MAX_COST', 'MIN_LEASE_MS', 'DEFAULT_MAX_KEYS', 'DEFAULTS', 'BLOCK_DEFAULTS'].every((name) => own.includes(name)), 'it recognises the table\'s names')
  t.same(exportedNames(join(lib, 'index.ts')).sort(), ['*', 'ALGORITHMS', 'CHANNELS', 'DecisionMessage', 'METRICS', 'StoreErrorMessage', 'canonicalIp', 'errors', 'fastifyRedisRateLimit'], 'it reads declarations, lists, renames and pass-throughs (index.ts)')
})

test('nothing imports the entry module', async (t) => {
  for (const file of sources(lib)) {
    for (const entry of importsOf(file)) t.not(entry.to, join(lib, 'index.ts'), `${relative(lib, file)} does not import index.ts`)
  }
})

const root = join(lib, '..')
const CLIENT_PACKAGES = /^(ioredis|iovalkey|redis|@redis\/[^/]+|@valkey\/valkey-glide)(\/|$)/

test('no lib module imports a Redis client package', async (t) => {
  for (const file of sources(lib)) {
    const specs = [...readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)].map((match) => match[1] as string)
    t.same(specs.filter((spec) => CLIENT_PACKAGES.test(spec)), [], `${relative(root, file)} imports no client`)
  }
})

test('every supported client is an optional peer dependency', async (t) => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { peerDependencies: Record<string, string>, peerDependenciesMeta: Record<string, { optional?: boolean }> }
  for (const name of ['ioredis', 'iovalkey', 'redis']) {
    t.ok(pkg.peerDependencies[name], `${name} is a peer dependency`)
    t.equal(pkg.peerDependenciesMeta[name]?.optional, true, `${name} is optional`)
  }
})

test('every capability file the tier map names exists', async (t) => {
  for (const path of Object.keys(CAPABILITY_FILES)) t.ok(existsSync(join(lib, path)), path)
})
