/**
 * The public surface, pinned: the names the built package exports at run
 * time (`dist/index.js`), the names of its `errors` namespace, and the type
 * names its declarations export (`dist/index.d.ts`). An issue that changes
 * the public surface updates these lists on purpose; a refactor leaves them
 * alone. The package is built as `npm run build` builds it (the project's
 * tsc and tsconfig.build.json), into a temp dir, not into dist/, without
 * type-checking (`noCheck`: the same emit, compared file by file, in 40 %
 * less CPU); the type errors of lib/ are `npm run typecheck`'s to find.
 */
import { test } from 'tap'
import { readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import ts from 'typescript'
import { tempDir } from '../helpers/processes.js'

const RUNTIME_EXPORTS = [
  'ALGORITHMS',
  'CHANNELS',
  'METRICS',
  'canonicalIp',
  'default',
  'errors',
  'fastifyRedisRateLimit'
]

/** The error codes and process warnings of the `errors` namespace. */
const ERROR_EXPORTS = [
  'FST_RRL_AMBIGUOUS_TARGET',
  'FST_RRL_BAD_SCRIPT_REPLY',
  'FST_RRL_BANNED',
  'FST_RRL_CONSOLE_BAD_TOKEN',
  'FST_RRL_CONSOLE_FORBIDDEN',
  'FST_RRL_CONSOLE_NO_AUTHORIZE',
  'FST_RRL_CONSOLE_NO_RATE_LIMIT',
  'FST_RRL_CONSOLE_PUBLIC',
  'FST_RRL_EVICTION_POLICY',
  'FST_RRL_FORWARDED_UNTRUSTED',
  'FST_RRL_IDENTITY_FAILED',
  'FST_RRL_INVALID_API_CALL',
  'FST_RRL_INVALID_BLOCK',
  'FST_RRL_INVALID_COST',
  'FST_RRL_INVALID_OPTION',
  'FST_RRL_LIMITER_UNAVAILABLE',
  'FST_RRL_MISSING_LIMIT',
  'FST_RRL_NO_REDIS',
  'FST_RRL_POLICY_NAME_CASE',
  'FST_RRL_RATE_LIMITED',
  'FST_RRL_REDIS_CIRCUIT_OPEN',
  'FST_RRL_REDIS_TIMEOUT',
  'FST_RRL_REDIS_UNAVAILABLE',
  'FST_RRL_REPLY_BUILDER_FAILED',
  'FST_RRL_REQUEST_VALUE_FAILED',
  'FST_RRL_ROUTES_BEFORE_PLUGIN',
  'FST_RRL_ROUTE_NOT_SEEN',
  'FST_RRL_SCRIPT_ERROR',
  'FST_RRL_SKIP_FAILED',
  'FST_RRL_STORE_OVERLOADED',
  'FST_RRL_TRUST_PROXY_TRUE',
  'FST_RRL_UNKNOWN_POLICY',
  'FST_RRL_UNSUPPORTED_CLIENT'
]

/** Exported names that are types only (no value at run time). */
const TYPE_EXPORTS = [
  'AlgorithmName',
  'AnyRateLimitBlock',
  'AuditEntry',
  'CheckedRouteRateLimit',
  'DecisionMessage',
  'FailurePolicy',
  'FleetNode',
  'FleetRoute',
  'FleetView',
  'HeaderFormat',
  'HeaderMode',
  'IdentityFunction',
  'IdentityPartSpec',
  'InstancePicture',
  'NodeHealth',
  'PictureCaller',
  'PictureRow',
  'PolicyBlockSummary',
  'PolicyDisagreement',
  'PolicySummary',
  'RateLimitApi',
  'RateLimitBan',
  'RateLimitBanInput',
  'RateLimitBanKind',
  'RateLimitBlock',
  'RateLimitBlockFields',
  'RateLimitConcurrencyBlock',
  'RateLimitDecision',
  'RateLimitHook',
  'RateLimitIdentity',
  'RateLimitMode',
  'RateLimitOverride',
  'RateLimitOverrideInput',
  'RateLimitPenalty',
  'RateLimitPeriod',
  'RateLimitPeriodBlock',
  'RateLimitPluginOptions',
  'RateLimitPolicyDecision',
  'RateLimitRefusal',
  'RateLimitRefusalError',
  'RateLimitRefusalErrorConstructor',
  'RateLimitReply',
  'RateLimitRouteTarget',
  'RateLimitSlot',
  'RateLimitStats',
  'RateLimitTarget',
  'RateLimitWeekday',
  'RateLimitWindowBlock',
  'RedisClientLike',
  'ReplyBuilder',
  'RouteCounts',
  'RouteRateLimit',
  'SkipPredicate',
  'StoreErrorMessage',
  'TieredCount'
]

/** `fastify-redis-rate-limit/console` (package.json `exports['./console']`): the page plugin, its options type. */
const CONSOLE_RUNTIME_EXPORTS = ['default', 'fastifyRedisRateLimitConsole']
const CONSOLE_TYPE_EXPORTS = ['ConsolePageOptions']

const root = fileURLToPath(new URL('../..', import.meta.url))

/**
 * Builds the package into a temp dir laid out as the tarball is (dist/ beside
 * scripts/, a package.json of type module), with the project's node_modules
 * linked in so the build can load its dependencies.
 */
function build (): { dir: string, program: ts.Program } {
  const dir = tempDir('exports')
  const host = { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d: ts.Diagnostic) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')) } }
  const config = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.build.json'), { outDir: join(dir, 'dist'), noCheck: true }, host)
  if (config === undefined || config.errors.length > 0) throw new Error('tsconfig.build.json does not parse')
  const program = ts.createProgram({ rootNames: config.fileNames, options: config.options })
  const emitted = program.emit()
  // What can stop a build besides a type error: the options, the syntax, the emit itself.
  const problems = [...program.getOptionsDiagnostics(), ...program.getGlobalDiagnostics(), ...program.getSyntacticDiagnostics(), ...emitted.diagnostics]
  if (emitted.emitSkipped || problems.length > 0) {
    throw new Error(ts.formatDiagnostics(problems, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => '\n' }))
  }
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'))
  symlinkSync(join(root, 'scripts'), join(dir, 'scripts'))
  return { dir, program }
}

/**
 * The module's exports as the compiler sees them in the built .d.ts, split
 * into those with a value and types only. The build's program is reused for
 * the files both read (node_modules' declarations).
 */
function declaredExports (file: string, build: ts.Program): { values: string[], types: string[] } {
  const program = ts.createProgram({ rootNames: [file], options: build.getCompilerOptions(), oldProgram: build })
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(file)
  const module = source === undefined ? undefined : checker.getSymbolAtLocation(source)
  if (module === undefined) throw new Error(`${file} is not a module`)
  const values: string[] = []
  const types: string[] = []
  for (const symbol of checker.getExportsOfModule(module)) {
    const target = (symbol.flags & ts.SymbolFlags.Alias) !== 0 ? checker.getAliasedSymbol(symbol) : symbol
    if ((target.flags & ts.SymbolFlags.Value) !== 0) values.push(symbol.name)
    else types.push(symbol.name)
  }
  return { values: values.sort(), types: types.sort() }
}

test('the built package exports exactly the pinned runtime names and type names', async (t) => {
  const started = performance.now()
  const { dir, program } = build()
  const loaded = await import(pathToFileURL(join(dir, 'dist', 'index.js')).href) as Record<string, unknown>
  t.same(Object.keys(loaded).sort(), RUNTIME_EXPORTS, 'runtime exports of dist/index.js')
  t.same(Object.keys(loaded.errors as object).sort(), ERROR_EXPORTS, 'the errors namespace')
  const declared = declaredExports(join(dir, 'dist', 'index.d.ts'), program)
  t.same(declared.values, RUNTIME_EXPORTS, 'dist/index.d.ts declares exactly the values dist/index.js exports')
  t.same(declared.types, TYPE_EXPORTS, 'type-only exports of dist/index.d.ts')
  t.comment(`built and inspected in ${Math.round(performance.now() - started)} ms`)
})

test('the console entry: package.json exports it, and its build exports the pinned names', async (t) => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { exports: Record<string, unknown>, files: string[] }
  t.same(pkg.exports['./console'], { types: './dist/console/page/index.d.ts', default: './dist/console/page/index.js' }, 'package.json exports ./console (types, then default)')
  const { dir, program } = build()
  const entry = join(dir, 'dist', 'console', 'page', 'index.js')
  const loaded = await import(pathToFileURL(entry).href) as Record<string, unknown>
  t.same(Object.keys(loaded).sort(), CONSOLE_RUNTIME_EXPORTS, 'runtime exports of dist/console/page/index.js')
  t.equal(loaded.default, loaded.fastifyRedisRateLimitConsole, 'the default export is the plugin')
  const declared = declaredExports(join(dir, 'dist', 'console', 'page', 'index.d.ts'), program)
  t.same(declared.values, CONSOLE_RUNTIME_EXPORTS, 'its .d.ts declares the same values')
  t.same(declared.types, CONSOLE_TYPE_EXPORTS, 'and the options type')
})
