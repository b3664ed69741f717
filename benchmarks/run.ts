/*
 * npm run bench [-- options]
 *
 *   (no positional)   HTTP benchmark, then the Redis-side script benchmark
 *   http | scripts    only one of the two
 *   memory            Redis bytes per tracked caller, every algorithm and @fastify/rate-limit (benchmarks/memory.ts has its options)
 *   fleet             N instance processes at fixed arrival rates against one Redis under a CPU quota (benchmarks/fleet.ts has its options)
 *   --quick           CI smoke test: 5 configurations, 1 round, 1 s warm-up, 3 s runs (the overload case 2 s), short script loop,
 *                     no waiting for a quiet machine (the load is still recorded) (< 1 min); never quotable
 *   --rounds N        rounds (default 3); configurations are interleaved in every round
 *   --duration S      measured seconds per run (default 8)      --warmup S   warm-up seconds (default 3)
 *   --connections N   (default 50; the overload cases always use 3,000 and no warm-up)   --only a,b   configuration ids
 *   --load TOOL       load generator: autocannon (default, in the harness process) or wrk (a child process; Debian's
 *                     `wrk` package: `npm run bench:install-wrk`); both send the same 10k X-Forwarded-For client keys
 *   --wrk-threads N   wrk's -t (default 1)
 *   --max-load L      quiet-machine gate: before every run (each configuration in each round, and the script
 *                     benchmark) wait until the 1-minute load average (/proc/loadavg) is below L (default 1.5)
 *   --load-wait S     wait at most S seconds for it (default 180; --quick: 0, record only). A run that starts at or
 *                     above L is marked not quotable, and no target verdict is stated from it
 *   --max-other P     repeat a run when other processes used more than P % CPU during it (default 25); a run still
 *                     above P after the repeats is not quotable either
 *   --retries N       at most N repeats per run (default 2; --quick: 0)
 *   --ts              run the servers through tsx from lib/*.ts (default: server and lib/ compiled by tsc into a temp dir)
 *   --cpu-prof        CPU profile of each measured window (benchmarks/results/profiles/<id>-r<round>.cpuprofile),
 *                     summarised with benchmarks/profile.ts (self time per function, µs per request)
 *   --out FILE        markdown file to write (default benchmarks/results/<date>.md; --quick writes none), with
 *                     the raw figures (FILE.json: every run's load at start and end, gate, quotability) and a chart
 *
 * Redis: a private redis-server on a free loopback port (BENCH_REDIS_URL to use another; never flushed then).
 * Benchmarks run alone: no test suite, helper session or other benchmark at the same time.
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CONFIGS, configById, QUICK_IDS, type BenchConfig } from './configs.js'
import { generatorCpuSeconds, machineBusySeconds, machineDescription, packageVersion, processCpuSeconds, startRedis, type BenchRedis } from './common.js'
import { emptyResult, liveServers, runOne, type RunResult } from './http.js'
import { writeChart } from './chart.js'
import { loadDriver, type LoadDriver, type LoadTool } from './load.js'
import { WrkMissing } from './wrk.js'
import { summarise as summariseProfile } from './profile.js'
import { loadAverage, notQuotable, waitForQuiet, type Conditions, type GateOptions } from './quiet.js'
import { fmt, httpSections, quotableBanner, summarise } from './report.js'
import { runMemoryBench } from './memory.js'
import { runFleetBench } from './fleet.js'
import { runScriptBench } from './scripts.js'
import { targetsMarkdown, type TargetInput } from './targets.js'

const HERE = dirname(fileURLToPath(import.meta.url))
const ROOT = dirname(HERE)

/**
 * Compiles benchmarks/server.ts and lib/ with tsc into a temp dir laid out like
 * the repository (scripts/ and node_modules/ as symlinks, a package.json with
 * type: module), so the servers run plain JavaScript, as users run the published
 * build: no tsx loader, whose transform adds a __name() call per closure.
 * Type errors do not stop the emit (lib/ may be mid-change).
 */
function buildServer (): { entry: string, cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'rrl-bench-build-'))
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
  const result = spawnSync(process.execPath, [tsc, '--outDir', dir, '--rootDir', ROOT, '--module', 'NodeNext', '--moduleResolution', 'NodeNext',
    '--target', 'ES2022', '--skipLibCheck', '--esModuleInterop', '--strict', '--types', 'node', join(HERE, 'server.ts'), join(ROOT, 'lib', 'index.ts')], { encoding: 'utf8' })
  writeFileSync(join(dir, 'package.json'), '{ "type": "module" }\n')
  symlinkSync(join(ROOT, 'scripts'), join(dir, 'scripts'))
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'))
  if (result.status !== 0) process.stderr.write(`tsc reported errors building the server (emitted anyway):\n${(result.stdout ?? '').split('\n').slice(0, 5).join('\n')}\n`)
  return { entry: join(dir, 'benchmarks', 'server.js'), cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

interface Args {
  mode: 'all' | 'http' | 'scripts'
  quick: boolean
  rounds: number
  duration: number
  warmup: number
  connections: number
  only: string[] | undefined
  cpuProf: boolean
  out: string | undefined
  maxOther: number
  retries: number
  ts: boolean
  load: LoadTool
  wrkThreads: number
  maxLoad: number
  loadWait: number
}

function loadTool (value: string): LoadTool {
  if (value !== 'autocannon' && value !== 'wrk') throw new Error(`--load takes autocannon or wrk (got ${value})`)
  return value
}

function parseArgs (argv: string[]): Args {
  const args: Args = { mode: 'all', quick: false, rounds: 3, duration: 8, warmup: 3, connections: 50, only: undefined, cpuProf: false, out: undefined, maxOther: 25, retries: 2, ts: false, load: 'autocannon', wrkThreads: 1, maxLoad: 1.5, loadWait: 180 }
  const explicit = new Set<string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string
    const value = (): string => {
      const next = argv[++i]
      if (next === undefined) throw new Error(`${arg} needs a value`)
      return next
    }
    switch (arg) {
      case 'http': case 'scripts': args.mode = arg; break
      case '--quick': args.quick = true; break
      case '--rounds': args.rounds = Number(value()); explicit.add('rounds'); break
      case '--duration': args.duration = Number(value()); explicit.add('duration'); break
      case '--warmup': args.warmup = Number(value()); explicit.add('warmup'); break
      case '--connections': args.connections = Number(value()); break
      case '--only': args.only = value().split(','); break
      case '--cpu-prof': args.cpuProf = true; break
      case '--ts': args.ts = true; break
      case '--out': args.out = value(); break
      case '--max-other': args.maxOther = Number(value()); break
      case '--retries': args.retries = Number(value()); explicit.add('retries'); break
      case '--load': args.load = loadTool(value()); break
      case '--wrk-threads': args.wrkThreads = Number(value()); break
      case '--max-load': args.maxLoad = Number(value()); break
      case '--load-wait': args.loadWait = Number(value()); explicit.add('loadWait'); break
      default: throw new Error(`unknown argument ${arg} (see the header of benchmarks/run.ts)`)
    }
  }
  if (args.quick) {
    if (!explicit.has('rounds')) args.rounds = 1
    if (!explicit.has('duration')) args.duration = 3
    if (!explicit.has('warmup')) args.warmup = 1
    args.only ??= QUICK_IDS
    if (!explicit.has('retries')) args.retries = 0
    // CI runs --quick right after the test suite: waiting for the load to settle would only slow it down.
    if (!explicit.has('loadWait')) args.loadWait = 0
  }
  return args
}

/** Measured seconds of one run: --quick keeps the overload case to 2 s (it must stay a < 1 min smoke test). */
const QUICK_OVERLOAD_SECONDS = 2
function durationOf (config: BenchConfig, args: Args): number {
  return args.quick && config.load === 'overload' ? Math.min(args.duration, QUICK_OVERLOAD_SECONDS) : args.duration
}

const gateOf = (args: Args): GateOptions => ({ maxLoad: args.maxLoad, waitS: args.loadWait })
const limitsOf = (args: Args): { maxLoad: number, maxOther: number } => ({ maxLoad: args.maxLoad, maxOther: args.maxOther })

/** Of two attempts, the one to keep: a quotable one first, then the one with less other CPU. */
function better (candidate: RunResult, kept: RunResult): boolean {
  const [a, b] = [candidate.notQuotable === undefined, kept.notQuotable === undefined]
  return a !== b ? a : !(candidate.otherCpuPercent >= kept.otherCpuPercent)
}

interface HttpContext { args: Args, redis: BenchRedis, driver: LoadDriver, serverEntry: string | undefined, profileDir: string, sections: string[] }

/**
 * One configuration in one round: wait for the quiet gate, run; repeat (up to --retries) while other
 * processes took more than --max-other % CPU; keep the best attempt.
 */
async function measureConfig (config: BenchConfig, round: number, ctx: HttpContext): Promise<RunResult> {
  const { args } = ctx
  let result: RunResult | undefined
  for (let attempt = 0; attempt <= args.retries; attempt++) {
    const gate = await waitForQuiet(`${config.id} round ${round}`, gateOf(args))
    const profileFile = args.cpuProf ? join(ctx.profileDir, `${config.id}-r${round}.cpuprofile`) : undefined
    let candidate: RunResult
    try {
      const options = { connections: args.connections, warmup: args.warmup, duration: durationOf(config, args), nodeArgs: [], redis: ctx.redis, serverEntry: ctx.serverEntry, profileFile, driver: ctx.driver }
      candidate = await runOne(config, round, options, gate)
      if (profileFile !== undefined && candidate.unsupported === undefined) {
        ctx.sections.push(`### Profile: ${config.label}, round ${round}`, '', summariseProfile(profileFile, candidate.responses, 25, candidate.nodeCpuUsPerReq), '')
      }
    } catch (error) {
      // One broken configuration (lib/ mid-change, say) must not lose the others' figures.
      const message = (error instanceof Error ? error.message : String(error)).split('\n').slice(0, 2).join(' ')
      candidate = emptyResult(config, round, `run failed: ${message}`, { ...gate, loadTool: ctx.driver.tool })
    }
    candidate.notQuotable = candidate.unsupported === undefined ? notQuotable(candidate, limitsOf(args)) : undefined
    if (result === undefined || better(candidate, result)) result = candidate
    if (candidate.unsupported !== undefined || !(candidate.otherCpuPercent > args.maxOther)) break
    process.stderr.write(`  ${config.id}: other processes used ${fmt(candidate.otherCpuPercent)} % CPU during the run; ${attempt < args.retries ? 'repeating' : 'keeping the best attempt'}\n`)
  }
  return result as RunResult
}

/** Every round of every configuration, interleaved; the HTTP markdown goes to ctx.sections. */
async function runHttp (ctx: HttpContext): Promise<{ results: RunResult[], rows: ReturnType<typeof summarise> }> {
  const { args } = ctx
  const configs = args.only === undefined ? CONFIGS : args.only.map(configById)
  const results: RunResult[] = []
  for (let round = 1; round <= args.rounds; round++) {
    // Rotate the order every round, so no configuration always runs first (cold machine) or last.
    const shift = (round - 1) % configs.length
    for (const config of [...configs.slice(shift), ...configs.slice(0, shift)]) {
      const result = await measureConfig(config, round, ctx)
      results.push(result)
      const figures = result.unsupported !== undefined ? 'n/a' : `${fmt(result.rps)} req/s, node ${fmt(result.nodeCpuUsPerReq, 1)} µs/req, redis ${fmt(result.redisCpuUsPerDecision, 1)} µs/decision, non-2xx ${result.non2xx}`
      process.stderr.write(`round ${round}/${args.rounds} ${config.id.padEnd(24)} ${figures}, load ${fmt(result.loadStart, 2)}→${fmt(result.loadEnd, 2)}${result.notQuotable === undefined ? '' : ' (not quotable)'}\n`)
    }
  }
  const rows = summarise(configs, results)
  const loadGenerator = ctx.driver.tool === 'wrk' ? `wrk ${ctx.driver.version} (-t ${args.wrkThreads}, a child process, benchmarks/wrk-keys.lua)` : 'autocannon in the harness process (no workers), prebuilt requests'
  const info = { ...args, overloadSeconds: durationOf(configById('overload'), args), loadGenerator, tool: ctx.driver.tool }
  ctx.sections.push(...httpSections(rows, results, info))
  return { results, rows }
}

/** The script benchmark behind the same quiet gate; its conditions are measured around the whole of it. */
async function runScripts (args: Args, redis: BenchRedis): Promise<{ markdown: string, raw: unknown, batches: TargetInput['batches'], conditions: Conditions, notQuotable: string | undefined }> {
  const gate = await waitForQuiet('script benchmark', gateOf(args))
  const redisCpu = (): number => redis.pid === undefined ? 0 : processCpuSeconds(redis.pid)
  const before = { busy: machineBusySeconds(), own: generatorCpuSeconds(), redis: redisCpu(), wall: process.hrtime.bigint() }
  const scripts = await runScriptBench(redis, { quick: args.quick })
  const wall = Number(process.hrtime.bigint() - before.wall) / 1e9
  const other = (machineBusySeconds() - before.busy - (generatorCpuSeconds() - before.own) - (redisCpu() - before.redis)) / wall * 100
  const conditions: Conditions = { ...gate, loadEnd: loadAverage(), otherCpuPercent: Math.max(0, other) }
  const reason = notQuotable(conditions, limitsOf(args))
  const line = `Script benchmark conditions: 1-minute load average ${fmt(gate.loadStart, 2)} at the start (gate: ${gate.gate}, waited ${fmt(gate.waitedS)} s), ${fmt(conditions.loadEnd, 2)} at the end; ` +
    `other processes used ${fmt(conditions.otherCpuPercent)} % CPU during it: ${reason === undefined ? 'quotable' : `**not quotable** (${reason})`}.`
  return { markdown: `${line}\n\n${scripts.markdown}`, raw: { conditions, notQuotable: reason, ...(scripts.raw as object) }, batches: scripts.batches, conditions, notQuotable: reason }
}

function headerLines (args: Args, redis: BenchRedis, driver: LoadDriver, started: Date): string[] {
  return [
    `# Benchmark results, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC${args.quick ? ' (--quick: smoke test, not for quoting)' : ''}`,
    '',
    `Machine: ${machineDescription()}. Redis ${redis.version} (${redis.private ? 'private server started by the harness' : `external ${redis.url}: CPU and command counts include other clients`}), ` +
      `Fastify ${packageVersion('fastify')}, ioredis ${packageVersion('ioredis')}, @fastify/rate-limit ${packageVersion('@fastify/rate-limit')}, load generator ${driver.tool} ${driver.version}. ` +
      `Quiet gate: 1-minute load average < ${args.maxLoad} before every run, waiting at most ${args.loadWait} s${args.loadWait <= 0 ? ' (no waiting: the load is recorded only)' : ''}.`,
    ''
  ]
}

/** The markdown, the raw figures beside it (.json) and the HTTP chart (.svg). */
function writeOutputs (out: string, markdown: string, raw: unknown, started: Date): void {
  mkdirSync(dirname(out), { recursive: true })
  writeFileSync(out, markdown)
  const base = out.replace(/\.md$/, '')
  writeFileSync(base + '.json', JSON.stringify(raw, null, 2) + '\n')
  // The HTTP figures as a bar chart beside the markdown (docs/performance.md shows one).
  const charted = writeChart(base + '.json', base + '.svg', `${started.toISOString().slice(0, 16).replace('T', ' ')} UTC`)
  process.stderr.write(`written ${out}${charted ? ` and ${base}.svg` : ''}\n`)
}

async function main (): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  // Before anything starts: a missing wrk is an instruction to install it, not a failed run.
  const driver = loadDriver(args.mode === 'scripts' ? 'autocannon' : args.load, args.wrkThreads)
  const redis = await startRedis()
  const interrupted = (): void => {
    for (const child of liveServers) child.kill('SIGKILL')
    redis.stop().finally(() => process.exit(130))
  }
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  const started = new Date()
  const sections: string[] = []
  const raw: Record<string, unknown> = { conditions: { quick: args.quick, load: driver.tool, maxLoad: args.maxLoad, loadWait: args.loadWait, maxOther: args.maxOther, rounds: args.rounds, connections: args.connections } }
  const cleanups: Array<() => void> = [() => { driver.cleanup() }]
  let http: Awaited<ReturnType<typeof runHttp>> | undefined
  let scripts: Awaited<ReturnType<typeof runScripts>> | undefined
  try {
    if (args.mode !== 'scripts') {
      const profileDir = join(HERE, 'results', 'profiles')
      if (args.cpuProf) mkdirSync(profileDir, { recursive: true })
      const built = args.ts ? undefined : buildServer()
      cleanups.push(() => built?.cleanup())
      http = await runHttp({ args, redis, driver, serverEntry: built?.entry, profileDir, sections })
      raw.http = http.results
    }
    if (args.mode !== 'http') {
      scripts = await runScripts(args, redis)
      raw.scripts = scripts.raw
      sections.push(scripts.markdown)
    }
  } finally {
    for (const cleanup of cleanups) cleanup()
    await redis.stop()
  }
  sections.push(targetsMarkdown({
    rows: http?.rows, batches: scripts?.batches, batchesNotQuotable: scripts?.notQuotable, tool: driver.tool, rounds: args.rounds, connections: args.connections, quick: args.quick
  }))
  sections.push(`Reproduce: \`npm run bench${process.argv.length > 2 ? ' -- ' + process.argv.slice(2).join(' ') : ''}\``, '')
  const markdown = [...headerLines(args, redis, driver, started), ...quotableBanner(limitsOf(args), http?.results ?? [], scripts?.notQuotable), ...sections].join('\n')
  process.stdout.write(markdown)
  const out = args.out ?? (args.quick ? undefined : join(HERE, 'results', `${started.toISOString().slice(0, 10)}.md`))
  if (out !== undefined) writeOutputs(out, markdown, raw, started)
}

// `npm run bench -- memory …`: bytes per caller (benchmarks/memory.ts), its own options and report.
const subcommands: Record<string, (argv: string[]) => Promise<void>> = { memory: runMemoryBench, fleet: runFleetBench }
const sub = subcommands[process.argv[2] ?? '']
const entry = sub === undefined ? main : async () => { await sub(process.argv.slice(3)) }
entry().catch((error: unknown) => {
  // A missing wrk says how to install it; anything else shows where it failed.
  process.stderr.write(`${error instanceof WrkMissing ? error.message : error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exit(1)
})
