/*
 * npm run bench:path
 *
 * The path of one admitted request, counted rather than timed (issue 49: "an
 * admitted request in at most N calls across at most M modules"): the
 * function calls, the modules they live in and the async hops, per request.
 * V8's precise coverage with call counts (node:inspector, in this process)
 * gives each function's invocations between two takes; a take also resets the
 * counts, so the measured window holds one request (or one burst) and nothing
 * of the warm-up. A count does not move with the machine's load: the same tree
 * reads the same figures.
 *
 * Setup: a private redis-server on a free loopback port, an app with the
 * plugin at its default options and the app's own ioredis client (the
 * README's Quick Start options), one route `GET /x` with
 * `{ limit: 1_000_000, window: '1m' }` (sliding window, keyed by IP). Each
 * case is measured after 300 warm-up requests (JIT and lazy work done), over
 * app.inject and over a listening server (node:http, keep-alive): 21 single
 * requests (the median per function and per total), and 5 bursts of 100
 * requests sent together, ÷ 100 (the batched case: one script call carries many).
 *
 * Every function is attributed to its file: the plugin (lib/**, through tsx:
 * the sources' names and lines), the plugin's runtime dependencies, ioredis
 * and its dependencies, Fastify and its dependencies (find-my-way, avvio,
 * light-my-request, …), Node's internals (the HTTP client's share too), this
 * harness. Async hops (a separate pass, async_hooks): the promises,
 * immediates, timers and ticks created while the innermost frame outside Node
 * is the plugin's, and how many of their callbacks ran. The order of the
 * plugin's table is the order of first calls, read with conditional
 * breakpoints that never pause, whose hit counts must equal the coverage's.
 * Checks at the end say whether the tool counted what it should.
 * Writes benchmarks/results/<date>-path.md.
 */
import { Session, type Profiler, type Debugger } from 'node:inspector'
import { createHook } from 'node:async_hooks'
import { execFileSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { Agent, request as httpRequest } from 'node:http'
import { findSourceMap } from 'node:module'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import rateLimit from '../lib/index.js'
import { startRedisServer } from '../test/helpers/redis.js'
import { median, packageVersion } from './common.js'

const HERE = dirname(fileURLToPath(import.meta.url))
const ROOT = dirname(HERE)
const SELF = pathToFileURL(fileURLToPath(import.meta.url)).href
const LIB = pathToFileURL(join(ROOT, 'lib')).href + '/'
const WARMUP = 300
const SINGLES = 21
const BURSTS = 5
const BURST = 100
/** Quiet ms after the response reached the client, so the server's end of the request (finish, close) is inside the window. */
const SETTLE_MS = 5
/** esbuild's keepNames helper (tsx transpiles with it): a call the tsc build does not make. */
const TRANSPILER_HELPERS = new Set(['__name'])

// ---------------------------------------------------------------- inspector

const session = new Session()
session.connect()

/** A same-thread session answers synchronously: no await, so no promise of the harness inside a window. */
function post<T> (method: string, params: object = {}): T {
  let answered = false
  let failure: Error | null = null
  let result: T | undefined
  const send = session.post.bind(session) as (method: string, params: object, callback: (error: Error | null, result: T) => void) => void
  send(method, params, (error, value) => { answered = true; failure = error; result = value })
  if (!answered) throw new Error(`${method}: the inspector did not answer synchronously`)
  if (failure !== null) throw failure
  return result as T
}

// ---------------------------------------------------------------- attribution

type Category = 'plugin' | 'plugin deps' | 'ioredis' | 'fastify' | 'node' | 'harness' | 'other'
const SHOWN: Category[] = ['plugin', 'plugin deps', 'ioredis', 'fastify', 'node', 'other']

/** The installed directory of `name` as Node resolves it from `from`. */
function packageDir (name: string, from: string): string | undefined {
  for (let dir = from; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name)
    if (existsSync(join(candidate, 'package.json'))) return candidate
    if (dirname(dir) === dir) return undefined
  }
}

/** The directories of a package's runtime dependencies, transitively (optional ones when installed). */
function closure (roots: string[], from: string): Set<string> {
  const seen = new Set<string>()
  const visit = (name: string, at: string): void => {
    const dir = packageDir(name, at)
    if (dir === undefined || seen.has(dir)) return
    seen.add(dir)
    const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { dependencies?: Record<string, string>, optionalDependencies?: Record<string, string> }
    for (const dep of Object.keys({ ...manifest.dependencies, ...manifest.optionalDependencies })) visit(dep, dir)
  }
  for (const name of roots) visit(name, from)
  return seen
}

const ownDeps = Object.keys((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> }).dependencies)
/** A package in two closures counts under the first listed. */
const PACKAGES: Array<[Category, Set<string>]> = [
  ['plugin deps', closure(ownDeps, ROOT)],
  ['ioredis', closure(['ioredis'], ROOT)],
  ['fastify', closure(['fastify'], ROOT)]
]
const sharedPackages = [...PACKAGES[0]![1], ...PACKAGES[1]![1]].filter((dir) => PACKAGES[2]![1].has(dir)).map((dir) => relative(ROOT, dir))

function categoryOf (url: string): Category {
  if (url.startsWith(LIB)) return 'plugin'
  if (url === SELF) return 'harness'
  // No URL: code made by eval or new Function (a compiled serializer or validator), whoever made it.
  if (url === '') return 'other'
  if (url.startsWith('node:') || !url.includes('/')) return 'node'
  const path = url.startsWith('file:') ? fileURLToPath(url) : url
  const at = path.lastIndexOf('/node_modules/')
  if (at >= 0) {
    const rest = path.slice(at + '/node_modules/'.length).split('/')
    const dir = path.slice(0, at) + '/node_modules/' + (rest[0]?.startsWith('@') === true ? `${rest[0]}/${rest[1]}` : rest[0])
    for (const [category, dirs] of PACKAGES) if (dirs.has(dir)) return category
  }
  return 'other'
}

/** lib/… for the plugin, the path under node_modules/ for a package, the URL otherwise. */
function shortName (url: string): string {
  if (url.startsWith(LIB)) return url.slice(LIB.length - 'lib/'.length)
  const at = url.lastIndexOf('/node_modules/')
  return at >= 0 ? url.slice(at + '/node_modules/'.length) : url
}

// ---------------------------------------------------------------- coverage windows

interface FunctionInfo { scriptId: string, url: string, name: string, start: number, end: number, category: Category }
/** Every function seen in a window, by `scriptId:startOffset`. */
const functions = new Map<string, FunctionInfo>()
type Counts = Map<string, number>

/** Counts since the previous take (which this resets). */
function takeCounts (): Counts {
  const { result } = post<Profiler.TakePreciseCoverageReturnType>('Profiler.takePreciseCoverage')
  const counts: Counts = new Map()
  for (const script of result) {
    for (const fn of script.functions) {
      const range = fn.ranges[0]
      if (range === undefined || range.count === 0) continue
      const id = `${script.scriptId}:${range.startOffset}`
      if (!functions.has(id)) functions.set(id, { scriptId: script.scriptId, url: script.url, name: fn.functionName, start: range.startOffset, end: range.endOffset, category: categoryOf(script.url) })
      counts.set(id, range.count)
    }
  }
  return counts
}

const settle = async (): Promise<void> => { await new Promise((resolve) => setTimeout(resolve, SETTLE_MS)) }

/** The calls `work` makes: reset, work, its settle, take. */
async function countWindow (work: () => Promise<void>): Promise<Counts> {
  takeCounts()
  await work()
  await settle()
  return takeCounts()
}

// ---------------------------------------------------------------- async hops

interface AsyncCounts { created: Map<string, number>, ran: Map<string, number>, sites: Map<string, { created: number, ran: number }> }
let asyncWindow: AsyncCounts | undefined
/** asyncId → what the window counts its callbacks under. */
const asyncOwners = new Map<number, { key: string, site: string | undefined }>()

interface CallSite { getFileName: () => string | null, getFunctionName: () => string | null, getMethodName: () => string | null, getLineNumber: () => number | null, getColumnNumber: () => number | null }

/** The innermost frame outside Node's internals, below the hook: who made the resource. */
function creator (): CallSite | undefined {
  const prepare = Error.prepareStackTrace
  const limit = Error.stackTraceLimit
  Error.prepareStackTrace = (_, frames) => frames
  Error.stackTraceLimit = 40
  const holder: { stack?: CallSite[] } = {}
  Error.captureStackTrace(holder, onInit)
  const frames = holder.stack ?? []
  Error.prepareStackTrace = prepare
  Error.stackTraceLimit = limit
  return frames.find((frame) => { const file = frame.getFileName() ?? ''; return file !== '' && !file.startsWith('node:') })
}

/** file:function:line of a plugin frame, its line the TypeScript source's. */
function siteOf (frame: CallSite): string {
  const file = frame.getFileName() as string
  const url = file.startsWith('file:') ? file : pathToFileURL(file).href
  const line = originalLine(url, (frame.getLineNumber() ?? 1) - 1, (frame.getColumnNumber() ?? 1) - 1)
  return `${shortName(url)}:${frame.getFunctionName() ?? frame.getMethodName() ?? '(anonymous)'}:${line ?? '?'}`
}

function onInit (asyncId: number, type: string): void {
  const window = asyncWindow
  if (window === undefined) return
  const frame = creator()
  const file = frame?.getFileName() ?? ''
  // No frame outside Node's internals: a promise V8 or Node made on its own (counted under Node's).
  const category = frame === undefined ? 'node' : categoryOf(file.startsWith('file:') ? file : pathToFileURL(file).href)
  const key = `${category}|${type}`
  const site = category === 'plugin' && frame !== undefined ? `${siteOf(frame)} ${type}` : undefined
  window.created.set(key, (window.created.get(key) ?? 0) + 1)
  if (site !== undefined) { const entry = window.sites.get(site) ?? { created: 0, ran: 0 }; entry.created++; window.sites.set(site, entry) }
  asyncOwners.set(asyncId, { key, site })
}

function onBefore (asyncId: number): void {
  const window = asyncWindow
  const owner = asyncOwners.get(asyncId)
  if (window === undefined || owner === undefined) return
  window.ran.set(owner.key, (window.ran.get(owner.key) ?? 0) + 1)
  if (owner.site !== undefined) { const entry = window.sites.get(owner.site); if (entry !== undefined) entry.ran++ }
}

const hook = createHook({ init: onInit, before: onBefore })

async function asyncCountWindow (work: () => Promise<void>): Promise<AsyncCounts> {
  asyncOwners.clear()
  const window: AsyncCounts = { created: new Map(), ran: new Map(), sites: new Map() }
  asyncWindow = window
  await work()
  await settle()
  asyncWindow = undefined
  return window
}

// ---------------------------------------------------------------- source lines

const sources = new Map<string, number[]>()

/** Offsets of each line's start in a script's generated code (needs the Debugger domain). */
function lineStarts (scriptId: string): number[] {
  let starts = sources.get(scriptId)
  if (starts === undefined) {
    const { scriptSource } = post<Debugger.GetScriptSourceReturnType>('Debugger.getScriptSource', { scriptId })
    starts = [0]
    for (let i = scriptSource.indexOf('\n'); i >= 0; i = scriptSource.indexOf('\n', i + 1)) starts.push(i + 1)
    sources.set(scriptId, starts)
  }
  return starts
}

function positionOf (scriptId: string, offset: number): { lineNumber: number, columnNumber: number } {
  const starts = lineStarts(scriptId)
  let low = 0
  let high = starts.length - 1
  while (low < high) {
    const mid = (low + high + 1) >> 1
    if ((starts[mid] as number) <= offset) low = mid
    else high = mid - 1
  }
  return { lineNumber: low, columnNumber: offset - (starts[low] as number) }
}

/** 1-based line in the TypeScript source (tsx's inline source map), from a 0-based generated position; undefined: code the transpiler made. */
function originalLine (url: string, line: number, column: number): number | undefined {
  const entry = findSourceMap(url)?.findEntry(line, column) as { originalLine?: number } | undefined
  return entry?.originalLine === undefined ? undefined : entry.originalLine + 1
}

const sourceFiles = new Map<string, string[]>()

/** The TypeScript source's text of a 1-based line, shortened: what names an anonymous function. */
function sourceText (url: string, line: number): string {
  let file = sourceFiles.get(url)
  if (file === undefined) sourceFiles.set(url, file = readFileSync(fileURLToPath(url), 'utf8').split('\n'))
  const text = file[line - 1]?.trim() ?? ''
  return text.length > 60 ? text.slice(0, 57) + '...' : text
}

// ---------------------------------------------------------------- the app

/** The README Quick Start's wiring, at the plugin's default options (or the memory store, for the checks). */
async function buildApp (redisUrl: string | undefined): Promise<FastifyInstance> {
  const app = Fastify()
  if (redisUrl === undefined) {
    await app.register(rateLimit, { store: 'memory' })
  } else {
    const redis = new Redis(redisUrl, {
      enableOfflineQueue: false,
      commandTimeout: 1000,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 1,
      retryStrategy: (attempt) => Math.min(attempt * 50, 200)
    })
    redis.on('error', (err) => { app.log.warn({ err }, 'redis') })
    app.addHook('onClose', async () => { await redis.quit().catch(() => { redis.disconnect() }) })
    await app.register(rateLimit, { redis })
  }
  app.get('/x', { config: { rateLimit: { limit: 1_000_000, window: '1m' } } }, async () => ({ ok: true }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  return app
}

type Send = () => Promise<number>

function senders (app: FastifyInstance): { inject: Send, http: Send, close: () => void } {
  const address = app.server.address()
  if (address === null || typeof address !== 'object') throw new Error('the app is not listening')
  const agent = new Agent({ keepAlive: true })
  const http: Send = async () => await new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: address.port, path: '/x', agent }, (res) => {
      res.resume()
      res.on('end', () => { resolve(res.statusCode ?? 0) })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end()
  })
  const inject: Send = async () => (await app.inject('/x')).statusCode
  return { inject, http, close: () => { agent.destroy() } }
}

/** `n` requests at once; every one must be admitted. */
async function admitted (send: Send, n: number): Promise<void> {
  const codes = await Promise.all(Array.from({ length: n }, send))
  const refused = codes.filter((code) => code !== 200)
  if (refused.length > 0) throw new Error(`${refused.length} of ${n} requests not admitted (status ${refused[0]})`)
}

// ---------------------------------------------------------------- figures

interface Case { label: string, perRequest: number, windows: Counts[], async: AsyncCounts[] }

const isHelper = (info: FunctionInfo): boolean => info.category === 'plugin' && TRANSPILER_HELPERS.has(info.name)

/** Per request: each function's median count over the case's windows. */
function medianCounts (c: Case): Counts {
  const ids = new Set(c.windows.flatMap((w) => [...w.keys()]))
  const out: Counts = new Map()
  for (const id of ids) {
    const value = median(c.windows.map((w) => w.get(id) ?? 0)) / c.perRequest
    if (value > 0) out.set(id, value)
  }
  return out
}

interface Totals { calls: number, modules: number, functions: number }
function totals (counts: Counts, category: Category): Totals {
  let calls = 0
  const modules = new Set<string>()
  let fns = 0
  for (const [id, count] of counts) {
    const info = functions.get(id) as FunctionInfo
    if (info.category !== category || isHelper(info)) continue
    calls += count
    fns++
    modules.add(info.url)
  }
  return { calls, modules: modules.size, functions: fns }
}

/** Each window's total for a category: for the spread. */
function windowTotals (c: Case, category: Category): number[] {
  return c.windows.map((w) => totals(w, category).calls / c.perRequest)
}

const fmt = (value: number): string => Number.isInteger(value) ? value.toLocaleString('en-US') : value.toFixed(2)
const spread = (values: number[]): string => {
  const low = Math.min(...values)
  const high = Math.max(...values)
  return low === high ? 'all equal' : `${fmt(low)}–${fmt(high)}`
}

function asyncMedian (c: Case, pick: (a: AsyncCounts) => Map<string, number>, key: string): number {
  return median(c.async.map((a) => pick(a).get(key) ?? 0)) / c.perRequest
}

// ---------------------------------------------------------------- main

async function main (): Promise<void> {
  post('Profiler.enable')
  // Before anything loads or warms: starting precise coverage deoptimizes every function once.
  post('Profiler.startPreciseCoverage', { callCount: true, detailed: false })
  // A private redis-server on a free loopback port (test/helpers: killed with this process whatever ends it).
  const redis = await startRedisServer()
  const app = await buildApp(redis.url)
  const startup = takeCounts()
  const send = senders(app)
  const checks: Array<[boolean, string]> = []
  try {
    const cases: Case[] = []
    for (const [label, transport] of [['inject', send.inject], ['HTTP', send.http]] as const) {
      for (let i = 0; i < WARMUP; i++) await admitted(transport, 1)
      for (let i = 0; i < 3; i++) await admitted(transport, BURST)
      const single: Case = { label: `${label}, one request`, perRequest: 1, windows: [], async: [] }
      for (let i = 0; i < SINGLES; i++) single.windows.push(await countWindow(() => admitted(transport, 1)))
      const burst: Case = { label: `${label}, ${BURST} at once, ÷ ${BURST}`, perRequest: BURST, windows: [], async: [] }
      for (let i = 0; i < BURSTS; i++) burst.windows.push(await countWindow(() => admitted(transport, BURST)))
      cases.push(single, burst)
    }
    // A window with no request: what runs anyway (fleet polls, timers).
    const idle = await countWindow(async () => {})

    // Async hops: a pass of its own (the hook's stack captures would show in the counts).
    hook.enable()
    for (const c of cases) {
      const transport = c.label.startsWith('inject') ? send.inject : send.http
      for (let i = 0; i < 50; i++) await admitted(transport, 1)
      const reps = c.perRequest === 1 ? SINGLES : BURSTS
      for (let i = 0; i < reps; i++) c.async.push(await asyncCountWindow(() => admitted(transport, c.perRequest)))
    }
    hook.disable()

    // The memory store's app, for the checks: its store is counted there and nowhere on the Redis path.
    const memoryApp = await buildApp(undefined)
    const memorySend = senders(memoryApp)
    for (let i = 0; i < 50; i++) await admitted(memorySend.inject, 1)
    const memoryWindow = await countWindow(() => admitted(memorySend.inject, 1))
    memorySend.close()
    await memoryApp.close()

    // Order of first calls: conditional breakpoints that record and never pause.
    post('Debugger.enable')
    const tables = cases.map(medianCounts)
    const pluginIds = [...new Set(tables.flatMap((t) => [...t.keys()]))].filter((id) => functions.get(id)?.category === 'plugin' && !isHelper(functions.get(id) as FunctionInfo))
    const trace: number[] = []
    ;(globalThis as Record<string, unknown>).__pathTrace = trace
    const breakpoints: string[] = []
    const traced = new Set<number>()
    pluginIds.forEach((id, index) => {
      const info = functions.get(id) as FunctionInfo
      const { locations } = post<Debugger.GetPossibleBreakpointsReturnType>('Debugger.getPossibleBreakpoints', {
        start: { scriptId: info.scriptId, ...positionOf(info.scriptId, info.start) },
        end: { scriptId: info.scriptId, ...positionOf(info.scriptId, info.end) },
        restrictToFunction: true
      })
      const location = locations[0]
      if (location === undefined) return
      const { breakpointId } = post<Debugger.SetBreakpointReturnType>('Debugger.setBreakpoint', { location, condition: `globalThis.__pathTrace.push(${index}), false` })
      breakpoints.push(breakpointId)
      traced.add(index)
    })
    const traces: number[][] = []
    for (const transport of [send.inject, send.http]) {
      trace.length = 0
      await admitted(transport, 1)
      await settle()
      traces.push([...trace])
    }
    for (const breakpointId of breakpoints) post('Debugger.removeBreakpoint', { breakpointId })

    // ------------------------------------------------------------ the checks
    const idOf = (file: string, name: string): string | undefined => [...functions].find(([, info]) => info.url === LIB + file && info.name === name)?.[0]
    const injectSingle = cases[0] as Case
    const httpSingle = cases[2] as Case
    for (const c of [injectSingle, httpSingle]) {
      const hookId = idOf('request/route-hook.ts', 'rateLimitHook')
      const counts = c.windows.map((w) => hookId === undefined ? 0 : w.get(hookId) ?? 0)
      checks.push([counts.every((n) => n === 1), `${c.label}: rateLimitHook (request/route-hook.ts), once per request, counted 1 in every window (${spread(counts)})`])
    }
    const createHookId = idOf('request/route-hook.ts', 'createRouteHook')
    checks.push([createHookId !== undefined && (startup.get(createHookId) ?? 0) >= 1 && cases.every((c) => c.windows.every((w) => !w.has(createHookId))),
      `createRouteHook (once per route, at startup): ${createHookId === undefined ? 'never seen' : startup.get(createHookId) ?? 0} at startup, 0 in every request window (the take before a window resets the counts)`])
    const memoryCalls = (counts: Counts): number => [...counts].filter(([id]) => functions.get(id)?.url.startsWith(LIB + 'store/memory/') === true).reduce((sum, [, n]) => sum + n, 0)
    const redisStoreDecide = idOf('store/redis/store.ts', 'decide')
    checks.push([memoryCalls(memoryWindow) > 0 && cases.every((c) => c.windows.every((w) => memoryCalls(w) === 0)),
      `lib/store/memory/: ${memoryCalls(memoryWindow)} calls for one request of an app on the memory store, 0 in every window of the Redis app`])
    checks.push([redisStoreDecide !== undefined && (memoryWindow.get(redisStoreDecide) ?? 0) === 0 && injectSingle.windows.every((w) => w.get(redisStoreDecide) === 1),
      'RedisStore.decide (store/redis/store.ts): 1 per request on the Redis app, 0 on the memory app'])
    const injectTable = tables[0] as Counts
    const httpTable = tables[2] as Counts
    for (const [label, table, seq] of [['inject', injectTable, traces[0] ?? []], ['HTTP', httpTable, traces[1] ?? []]] as const) {
      const hits = new Map<number, number>()
      for (const index of seq) hits.set(index, (hits.get(index) ?? 0) + 1)
      const disagree = pluginIds.filter((id, index) => traced.has(index) && (hits.get(index) ?? 0) !== (table.get(id) ?? 0))
      checks.push([disagree.length === 0, `${label}: one more request, counted by conditional breakpoints instead of coverage, gives ${pluginIds.length - disagree.length} of ${pluginIds.length} plugin functions the coverage median's count` +
        (disagree.length === 0 ? '' : ` (differ: ${disagree.map((id) => { const info = functions.get(id) as FunctionInfo; return `${shortName(info.url)}:${info.name || '(anonymous)'}` }).join(', ')})`)])
    }
    checks.push([true, `a window with no request: ${totals(idle, 'plugin').calls} plugin calls, ${totals(idle, 'ioredis').calls} ioredis, ${totals(idle, 'fastify').calls} Fastify, ${totals(idle, 'node').calls} in Node's internals (the harness's settle timer and the inspector's answer to the take that opens a window: in every window's Node figure)`])

    // ------------------------------------------------------------ the report
    const lineOf = (id: string): number | undefined => {
      const info = functions.get(id) as FunctionInfo
      const at = positionOf(info.scriptId, info.start)
      return originalLine(info.url, at.lineNumber, at.columnNumber)
    }
    // An anonymous function (or a class's field initializers) is named by its line's text.
    const nameOf = (id: string): { file: string, name: string, line: string } => {
      const info = functions.get(id) as FunctionInfo
      const line = lineOf(id)
      const bare = info.name === '' || info.name.startsWith('<')
      const name = `\`${info.name === '' ? '(anonymous)' : info.name}\`` + (bare && line !== undefined ? ` in \`${sourceText(info.url, line).replaceAll('|', '\\|').replaceAll('`', "'")}\`` : '')
      return { file: shortName(info.url), name, line: line === undefined ? '?' : String(line) }
    }
    const unmapped = pluginIds.filter((id) => lineOf(id) === undefined)
    checks.push([unmapped.length === 0, `every plugin function counted maps to a line of its TypeScript source (tsx's source map)${unmapped.length === 0 ? '' : `; not: ${unmapped.join(', ')}`}; esbuild's \`__name\` helper does not, and is left out`])
    // Files in the order of their first call, functions by first call within a file; what no trace reached last, by count.
    const firstCall = new Map<string, number>()
    let position = 0
    for (const seq of traces) for (const index of seq) { const id = pluginIds[index] as string; if (!firstCall.has(id)) firstCall.set(id, position++) }
    const fileFirst = new Map<string, number>()
    for (const id of pluginIds) {
      const file = functions.get(id)?.url as string
      fileFirst.set(file, Math.min(fileFirst.get(file) ?? Infinity, firstCall.get(id) ?? Infinity))
    }
    const ordered = [...pluginIds].sort((a, b) => {
      const fa = functions.get(a)?.url as string
      const fb = functions.get(b)?.url as string
      return (fileFirst.get(fa) as number) - (fileFirst.get(fb) as number) || (fa < fb ? -1 : fa > fb ? 1 : 0) ||
        (firstCall.get(a) ?? Infinity) - (firstCall.get(b) ?? Infinity) || (injectTable.get(b) ?? 0) - (injectTable.get(a) ?? 0)
    })
    const helperCalls = (table: Counts): number => [...table].filter(([id]) => isHelper(functions.get(id) as FunctionInfo)).reduce((sum, [, n]) => sum + n, 0)
    const helperFiles = [...new Set(tables.flatMap((t) => [...t.keys()]).filter((id) => isHelper(functions.get(id) as FunctionInfo)).map((id) => shortName((functions.get(id) as FunctionInfo).url)))]

    const admin = new Redis(redis.url)
    const redisVersion = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? '?'
    admin.disconnect()
    const pluginInject = totals(injectTable, 'plugin')
    const otherRows = (table: Counts): string => [...table].filter(([id]) => functions.get(id)?.category === 'other')
      .map(([id, n]) => { const info = functions.get(id) as FunctionInfo; return `\`${info.name || '(anonymous)'}\` (${info.url === '' ? 'no file' : shortName(info.url)}) ${fmt(n)}` }).join(', ')
    const asyncTypes = [...new Set(cases.flatMap((c) => c.async.flatMap((a) => [...a.created.keys()])))].filter((key) => key.startsWith('plugin|')).map((key) => key.slice('plugin|'.length)).sort()
    const pluginHttp = totals(httpTable, 'plugin')

    const lines: string[] = [
      `# The path of one admitted request, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
      '',
      `\`npm run bench:path\` (benchmarks/path.ts) on ${gitHead()}: function calls counted by V8's precise coverage (call counts), not timed. ` +
        `Node ${process.version}, Fastify ${packageVersion('fastify')}, ioredis ${packageVersion('ioredis')}, redis-server ${redisVersion} (private, loopback). ` +
        'The plugin at its default options with the app\'s own ioredis client (the README Quick Start\'s options), one route `GET /x` with ' +
        '`{ limit: 1_000_000, window: \'1m\' }` (sliding window, keyed by IP); the lib/ sources through tsx. ' +
        `After ${WARMUP} warm-up requests per transport: ${SINGLES} single requests (medians), and ${BURSTS} bursts of ${BURST} requests sent together, ÷ ${BURST}. Every measured request was admitted (200).`,
      '',
      `Issue 49's target, an admitted request in at most 25 calls of the plugin's own code across at most 12 modules: ${pluginInject.calls <= 25 && pluginInject.modules <= 12 ? 'met' : 'not met'} ` +
        `(${fmt(pluginInject.calls)} calls in ${pluginInject.modules} modules through inject, ${fmt(pluginHttp.calls)} in ${pluginHttp.modules} over HTTP).`,
      '',
      'Async hops of the plugin\'s own code per request (callbacks of the promises, immediates, ticks and timers it created that ran in the window; below): ' +
        cases.map((c) => {
          const ran = asyncTypes.map((type) => [type, asyncMedian(c, (a) => a.ran, `plugin|${type}`)] as const).filter(([, n]) => n > 0)
          return `${c.label} ${fmt(ran.reduce((sum, [, n]) => sum + n, 0))}${ran.length > 0 ? ` (${ran.map(([type, n]) => `${type} ${fmt(n)}`).join(', ')})` : ''}`
        }).join('; ') + '.',
      '',
      '## Calls per request',
      '',
      'Calls are function invocations (a function inlined by the JIT still counts each call). Modules are the distinct files those functions are in. ' +
        '"Plugin" is lib/**; the other columns are packages with their own dependencies (Node\'s internals include the HTTP client\'s side, in this process).',
      '',
      '| case | plugin calls | plugin modules | plugin functions | plugin calls, spread over windows | plugin deps calls | ioredis calls | ioredis modules | Fastify calls | Fastify modules | Node internals calls | other calls |',
      '| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    ]
    cases.forEach((c, i) => {
      const table = tables[i] as Counts
      const t = Object.fromEntries(SHOWN.map((category) => [category, totals(table, category)])) as Record<Category, Totals>
      lines.push(`| ${c.label} | ${fmt(t.plugin.calls)} | ${t.plugin.modules} | ${t.plugin.functions} | ${spread(windowTotals(c, 'plugin'))} | ${fmt(t['plugin deps'].calls)} | ${fmt(t.ioredis.calls)} | ${t.ioredis.modules} | ${fmt(t.fastify.calls)} | ${t.fastify.modules} | ${fmt(t.node.calls)} | ${fmt(t.other.calls)} |`)
    })
    lines.push('',
      `Each figure is the median of its windows' counts per function, summed. Not in the plugin's figures: esbuild's \`__name\` helper, which tsx's transpilation (keepNames) calls where a named function is made at run time and the tsc build does not (${cases.map((c, i) => `${fmt(helperCalls(tables[i] as Counts))}`).join(', ')} per request in the rows above, in ${helperFiles.join(', ') || 'no module'}).` +
        (sharedPackages.length > 0 ? ` A package both Fastify and the plugin (or ioredis) depend on counts under the latter: ${sharedPackages.map((dir) => dir.replace(/^node_modules\//, '')).join(', ')}.` : '') +
        ` "Other" is code with no file (eval, new Function) or in no listed package; through inject, one request: ${otherRows(injectTable) || 'none'}.`,
      '',
      '## The plugin\'s functions',
      '',
      'In the order of first calls (files by their first function\'s, then functions within the file), as one request through inject, then one over HTTP, called them. Lines are the TypeScript source\'s (the function\'s start).',
      '',
      `| file | function | line | ${cases.map((c) => c.label).join(' | ')} |`,
      `| --- | --- | ---: | ${cases.map(() => '---:').join(' | ')} |`)
    for (const id of ordered) {
      const { file, name, line } = nameOf(id)
      lines.push(`| ${file} | ${name} | ${line} | ${tables.map((t) => fmt(t.get(id) ?? 0)).join(' | ')} |`)
    }
    lines.push(`| **total** | | | ${cases.map((c, i) => `**${fmt(totals(tables[i] as Counts, 'plugin').calls)}**`).join(' | ')} |`,
      `| **modules** | | | ${cases.map((c, i) => `**${totals(tables[i] as Counts, 'plugin').modules}**`).join(' | ')} |`)

    // ioredis and Fastify by module: where their calls are.
    for (const category of ['ioredis', 'fastify'] as const) {
      const byModule = new Map<string, number[]>()
      tables.forEach((table, i) => {
        for (const [id, n] of table) {
          const info = functions.get(id) as FunctionInfo
          if (info.category !== category) continue
          const row = byModule.get(shortName(info.url)) ?? cases.map(() => 0)
          row[i] = (row[i] as number) + n
          byModule.set(shortName(info.url), row)
        }
      })
      lines.push('', `## ${category === 'ioredis' ? 'ioredis and its dependencies' : 'Fastify and its dependencies'}, calls by module`, '',
        `| module | ${cases.map((c) => c.label).join(' | ')} |`, `| --- | ${cases.map(() => '---:').join(' | ')} |`,
        ...[...byModule].sort((a, b) => (b[1][0] as number) - (a[1][0] as number) || (b[1][2] as number) - (a[1][2] as number)).map(([file, row]) => `| ${file} | ${row.map(fmt).join(' | ')} |`))
    }

    // Async hops.
    // Plugin rows first; a row whose median is 0 in every case came from background work some window caught.
    const byCreator = (a: string, b: string): number => Number(!a.startsWith('plugin|')) - Number(!b.startsWith('plugin|')) || (a < b ? -1 : a > b ? 1 : 0)
    const asyncKeys = [...new Set(cases.flatMap((c) => c.async.flatMap((a) => [...a.created.keys()])))].sort(byCreator)
      .filter((key) => cases.some((c) => asyncMedian(c, (a) => a.created, key) > 0))
    lines.push('', '## Async hops per request', '',
      'A separate pass (async_hooks): each async resource created in a window is attributed to the innermost frame outside Node\'s internals ' +
        '(a `.then` the plugin calls on an ioredis promise is the plugin\'s; the promise ioredis makes is ioredis\'s). "ran" counts the resource\'s callbacks ' +
        'that ran in the window (for a PROMISE, its reaction: a continuation). Medians per request, created / ran.', '',
      `| creator | resource | ${cases.map((c) => c.label).join(' | ')} |`, `| --- | --- | ${cases.map(() => '---:').join(' | ')} |`)
    for (const key of asyncKeys) {
      const [category, type] = key.split('|') as [string, string]
      lines.push(`| ${category === 'node' ? 'Node internals (or no JavaScript frame)' : category === 'harness' ? 'this harness (the client\'s requests, the settle timer)' : category} | ${type} | ${cases.map((c) => `${fmt(asyncMedian(c, (a) => a.created, key))} / ${fmt(asyncMedian(c, (a) => a.ran, key))}`).join(' | ')} |`)
    }
    const siteMedian = (c: Case, site: string, pick: 'created' | 'ran'): number => median(c.async.map((a) => a.sites.get(site)?.[pick] ?? 0)) / c.perRequest
    const allSites = [...new Set(cases.flatMap((c) => c.async.flatMap((a) => [...a.sites.keys()])))].sort()
    const sites = allSites.filter((site) => cases.some((c) => siteMedian(c, site, 'created') > 0))
    const background = allSites.filter((site) => !sites.includes(site))
    lines.push('', 'The plugin\'s sites (file:function:line resource), created / ran per request:', '',
      `| site | ${cases.map((c) => c.label).join(' | ')} |`, `| --- | ${cases.map(() => '---:').join(' | ')} |`)
    for (const site of sites) {
      lines.push(`| ${site} | ${cases.map((c) => `${fmt(siteMedian(c, site, 'created'))} / ${fmt(siteMedian(c, site, 'ran'))}`).join(' | ')} |`)
    }
    if (background.length > 0) lines.push('', `Seen only in windows that caught background work (median 0): ${background.join(', ')}.`)

    lines.push('', '## Checks', '', ...checks.map(([ok, text]) => `- ${ok ? 'pass' : '**FAIL**'}: ${text}`), '',
      '## What it counts', '',
      '- Invocations of JavaScript functions, as V8 counts them with precise coverage: the figure of the source, whatever the JIT inlines. ' +
        'Builtins (Array.prototype.push, Map.get, JSON, string methods) and native code are not functions with coverage and are not counted; a getter or a class\'s field initializer (`<instance_members_initializer>`, run by each `new`) is.',
      `- A window is everything that ran between two takes: the request, its answer, and ${SETTLE_MS} ms after the client read the response (the server's end of the request). ` +
        'Background work that falls in a window (the fleet-record poll every second, timers) is in that window; the median over windows leaves it out, the spread column shows it.',
      '- Over HTTP the server and the client share this process: Node\'s internals and "other" include the client\'s side; the plugin\'s, ioredis\'s and Fastify\'s do not.',
      '- The plugin runs from its TypeScript sources through tsx (esbuild): the same functions as the tsc build, plus the `__name` calls noted above.',
      '- The async pass counts resources Node reports to async_hooks. Promise hooks make V8 report every promise, also an `await`\'s own; a callback-style path shows the promises its callees make.',
      '')
    const markdown = lines.join('\n')
    process.stdout.write(markdown)
    const out = join(HERE, 'results', `${new Date().toISOString().slice(0, 10)}-path.md`)
    mkdirSync(dirname(out), { recursive: true })
    writeFileSync(out, markdown)
    process.stderr.write(`written ${out}\n`)
    if (checks.some(([ok]) => !ok)) process.exitCode = 1
  } finally {
    send.close()
    await app.close()
    await redis.stop()
    session.disconnect()
  }
}

/** The commit measured, and whether lib/ differs from it. */
function gitHead (): string {
  try {
    const git = (...args: string[]): string => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim()
    const dirty = git('status', '--porcelain', '--', 'lib') !== '' ? ' with uncommitted changes in lib/' : ''
    return `${git('rev-parse', '--abbrev-ref', 'HEAD')} ${git('rev-parse', '--short', 'HEAD')}${dirty}`
  } catch {
    return 'an unknown commit'
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
    process.exit(1)
  })
}
