/*
 * npm run bench [-- options]
 *
 *   (no positional)   HTTP benchmark, then the Redis-side script benchmark
 *   http | scripts    only one of the two
 *   --quick           CI smoke test: 5 configurations, 1 round, 1 s warm-up, 3 s runs (the overload case 2 s), short script loop (< 1 min)
 *   --rounds N        rounds (default 3); configurations are interleaved in every round
 *   --duration S      measured seconds per run (default 8)      --warmup S   warm-up seconds (default 3)
 *   --connections N   (default 50; the overload cases always use 3,000 and no warm-up)   --only a,b   configuration ids
 *   --ts              run the servers through tsx from lib/*.ts (default: server and lib/ compiled by tsc into a temp dir)
 *   --cpu-prof        CPU profile of each measured window (benchmarks/results/profiles/<id>-r<round>.cpuprofile),
 *                     summarised with benchmarks/profile.ts (self time per function, µs per request)
 *   --out FILE        markdown file to write (default benchmarks/results/<date>.md; --quick writes none)
 *   --max-other P     repeat a run when other processes used more than P % CPU during it (default 25)
 *   --retries N       at most N repeats per run (default 2; --quick: 0)
 *
 * Redis: a private redis-server on a free loopback port (BENCH_REDIS_URL to use another; never flushed then).
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CONFIGS, configById, OVERLOAD_LIMIT, QUICK_IDS, type BenchConfig } from './configs.js'
import { machineDescription, median, packageVersion, startRedis } from './common.js'
import { emptyResult, liveServers, runOne, type RunResult } from './http.js'
import { writeChart } from './chart.js'
import { summarise as summariseProfile } from './profile.js'
import { runScriptBench } from './scripts.js'

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
    '--target', 'ES2022', '--skipLibCheck', '--esModuleInterop', '--types', 'node', join(HERE, 'server.ts'), join(ROOT, 'lib', 'index.ts')], { encoding: 'utf8' })
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
}

function parseArgs (argv: string[]): Args {
  const args: Args = { mode: 'all', quick: false, rounds: 3, duration: 8, warmup: 3, connections: 50, only: undefined, cpuProf: false, out: undefined, maxOther: 25, retries: 2, ts: false }
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
      default: throw new Error(`unknown argument ${arg} (see the header of benchmarks/run.ts)`)
    }
  }
  if (args.quick) {
    if (!explicit.has('rounds')) args.rounds = 1
    if (!explicit.has('duration')) args.duration = 3
    if (!explicit.has('warmup')) args.warmup = 1
    args.only ??= QUICK_IDS
    if (!explicit.has('retries')) args.retries = 0
  }
  return args
}

/** Measured seconds of one run: --quick keeps the overload case to 2 s (it must stay a < 1 min smoke test). */
const QUICK_OVERLOAD_SECONDS = 2
function durationOf (config: BenchConfig, args: Args): number {
  return args.quick && config.load === 'overload' ? Math.min(args.duration, QUICK_OVERLOAD_SECONDS) : args.duration
}

const fmt = (value: number, digits = 0): string => Number.isFinite(value) ? value.toFixed(digits) : '–'
const ratio = (value: number): string => Number.isFinite(value) ? value.toFixed(2) + '×' : '–'

interface Row {
  config: BenchConfig
  runs: RunResult[]
  unsupported: string | undefined
  rps: number
  vsBare: number
  vsFrl: number
  p50: number
  p99: number
  nodeUs: number
  nodeOverUs: number
  nodeOverFrlUs: number
  redisUs: number
  evalUs: number
  perCall: number
  calls: number
  cmdsPerReq: number
  non2xx: number
  serverCpu: number
  genCpu: number
  otherCpu: number
}

function summarise (configs: BenchConfig[], results: RunResult[]): Row[] {
  const inRound = (id: string, round: number): RunResult | undefined => results.find((r) => r.id === id && r.round === round && r.unsupported === undefined)
  return configs.map((config) => {
    const runs = results.filter((r) => r.id === config.id)
    const ok = runs.filter((r) => r.unsupported === undefined)
    const per = (pick: (r: RunResult) => number): number => median(ok.map(pick))
    const against = (baseId: string, pick: (r: RunResult, base: RunResult) => number): number =>
      median(ok.map((r) => { const base = inRound(baseId, r.round); return base === undefined ? Number.NaN : pick(r, base) }))
    return {
      config,
      runs,
      unsupported: ok.length === 0 ? runs[0]?.unsupported : undefined,
      rps: per((r) => r.rps),
      vsBare: against('bare', (r, b) => r.rps / b.rps),
      vsFrl: against('frl', (r, b) => r.rps / b.rps),
      p50: per((r) => r.p50),
      p99: per((r) => r.p99),
      nodeUs: per((r) => r.nodeCpuUsPerReq),
      nodeOverUs: against('bare', (r, b) => r.nodeCpuUsPerReq - b.nodeCpuUsPerReq),
      nodeOverFrlUs: against('frl', (r, b) => r.nodeCpuUsPerReq - b.nodeCpuUsPerReq),
      redisUs: per((r) => r.redisCpuUsPerDecision),
      evalUs: per((r) => r.evalUsecPerDecision),
      perCall: per((r) => r.decisionsPerCall),
      calls: per((r) => r.callsPerDecision),
      cmdsPerReq: per((r) => r.redisCommands / r.responses),
      non2xx: ok.reduce((sum, r) => sum + r.non2xx + r.errors, 0),
      serverCpu: per((r) => r.serverCpuPercent),
      genCpu: per((r) => r.generatorCpuPercent),
      otherCpu: per((r) => r.otherCpuPercent)
    }
  })
}

function httpTable (rows: Row[]): string {
  const lines = [
    '| configuration | req/s | × bare | × @fastify/rate-limit | p50 ms | p99 ms | Node CPU µs/req | Node µs over bare | Redis CPU µs/decision | EVALSHA µs/decision (cmdstat) | decisions/script call | redis.call/decision | Redis cmds/req | non-2xx+errors | server CPU % | load-gen CPU % | other CPU % |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows) {
    if (row.unsupported !== undefined) {
      lines.push(`| ${row.config.label} | n/a | n/a | n/a | | | | | | | | | | | | | |`)
      continue
    }
    lines.push(`| ${row.config.label} | ${fmt(row.rps)} | ${ratio(row.vsBare)} | ${ratio(row.vsFrl)} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.nodeUs, 1)} | ${row.config.id === 'bare' ? '–' : fmt(row.nodeOverUs, 1)} | ${fmt(row.redisUs, 1)} | ${fmt(row.evalUs, 1)} | ${fmt(row.perCall, 1)} | ${fmt(row.calls, 2)} | ${fmt(row.cmdsPerReq, 2)} | ${row.non2xx} | ${fmt(row.serverCpu)} | ${fmt(row.genCpu)} | ${fmt(row.otherCpu)} |`)
  }
  return lines.join('\n')
}

interface Distribution { count: number, mean: number, p50: number, p90: number, p99: number, max: number }
interface OverloadStats { allowed?: number, limited?: number, degraded?: number, batchSize?: Distribution, storeLatencyMs?: Distribution }

const statsOf = (run: RunResult): OverloadStats => (run.pluginStats ?? {}) as OverloadStats
const okRuns = (row: Row): RunResult[] => row.runs.filter((r) => r.unsupported === undefined)
const isOverload = (row: Row): boolean => row.config.load === 'overload'

/** Every round's value, comma-separated (the overload counts are shown per round, not as a median). */
const eachRound = (row: Row, pick: (run: RunResult) => number | undefined): string => okRuns(row).map((run) => { const v = pick(run); return v === undefined ? '?' : fmt(v) }).join(', ')

function targets (rows: Row[]): string {
  const byId = new Map(rows.map((row) => [row.config.id, row]))
  const lines: string[] = ['| issue | target | measured | met |', '| --- | --- | --- | --- |']
  const verdict = (ok: boolean | undefined): string => ok === undefined ? 'n/a' : ok ? 'yes' : '**no**'
  const check = (value: number, ok: (value: number) => boolean): string => verdict(Number.isFinite(value) ? ok(value) : undefined)
  const sw = byId.get('sliding-window-10k')
  if (sw !== undefined) {
    lines.push(`| 11 | sliding-window (default), 10k keys, 50 connections ≥ 0.80× bare | ${ratio(sw.vsBare)} | ${check(sw.vsBare, (v) => v >= 0.8)} |`)
    lines.push(`| 11 | sliding-window (default), 10k keys ≥ 1.30× @fastify/rate-limit | ${ratio(sw.vsFrl)} | ${check(sw.vsFrl, (v) => v >= 1.3)} |`)
    lines.push(`| 11 | sliding-window (default), 10k keys: Node CPU ≤ 5 µs/decision over bare | ${fmt(sw.nodeOverUs, 1)} µs | ${check(sw.nodeOverUs, (v) => v <= 5)} |`)
    lines.push(`| 11 | sliding-window (default), 10k keys: Redis CPU ≤ 5 µs/decision | ${fmt(sw.redisUs, 1)} µs | ${check(sw.redisUs, (v) => v <= 5)} |`)
  }
  for (const row of rows) {
    if (!isOverload(row) || row.unsupported !== undefined) continue
    const runs = okRuns(row)
    const exact = runs.length > 0 && runs.every((run) => statsOf(run).allowed === OVERLOAD_LIMIT && statsOf(run).degraded === 0 && (run.statusCodes['200'] ?? 0) === OVERLOAD_LIMIT)
    lines.push(`| 11 | ${row.config.label}: exactly ${OVERLOAD_LIMIT} admitted, 0 degraded | admitted ${eachRound(row, (r) => statsOf(r).allowed)}; degraded ${eachRound(row, (r) => statsOf(r).degraded)} | ${verdict(runs.length > 0 ? exact : undefined)} |`)
  }
  const flood = byId.get('flood-cache')
  if (flood !== undefined) {
    const unsupported = flood.unsupported !== undefined
    lines.push(`| 6 | flood, deny cache on: ≥ 0.95× bare | ${unsupported ? 'n/a (no deny cache in the plugin)' : ratio(flood.vsBare)} | ${verdict(unsupported ? undefined : flood.vsBare >= 0.95)} |`)
    lines.push(`| 6 | flood, deny cache on: zero Redis commands | ${unsupported ? 'n/a' : fmt(flood.cmdsPerReq, 4) + ' per request'} | ${verdict(unsupported ? undefined : flood.cmdsPerReq === 0)} |`)
  }
  return lines.join('\n')
}

/** The overload cases: what was admitted, refused and degraded, per round. */
function overloadTable (rows: Row[]): string {
  const lines = [
    '| configuration | responses | req/s | 200 | 429 | other status / errors | allowed (stats) | limited (stats) | degraded (stats) | store errors by cause | p50 ms | p99 ms | Node CPU µs/req | decisions/script call | server CPU % | other CPU % |',
    '| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows.filter(isOverload)) {
    if (row.unsupported !== undefined) continue
    const others = eachRound(row, (r) => Object.entries(r.statusCodes).filter(([code]) => code !== '200' && code !== '429').reduce((sum, [, n]) => sum + n, 0) + r.errors)
    const causes = okRuns(row).map((r) => Object.entries((r.pluginStats ?? {}) as Record<string, unknown>).filter(([name, n]) => name.startsWith('storeError_') && typeof n === 'number' && n > 0).map(([name, n]) => `${name.slice(11)} ${String(n)}`).join(' + ') || '0').join(', ')
    lines.push(`| ${row.config.label} | ${eachRound(row, (r) => r.responses)} | ${fmt(row.rps)} | ${eachRound(row, (r) => r.statusCodes['200'] ?? 0)} | ${eachRound(row, (r) => r.statusCodes['429'] ?? 0)} | ${others} | ` +
      `${eachRound(row, (r) => statsOf(r).allowed)} | ${eachRound(row, (r) => statsOf(r).limited)} | ${eachRound(row, (r) => statsOf(r).degraded)} | ${causes} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.nodeUs, 1)} | ${fmt(row.perCall, 1)} | ${fmt(row.serverCpu)} | ${fmt(row.otherCpu)} |`)
  }
  return lines.join('\n')
}

/** rate_limit.store.batch.size and rate_limit.store.latency as the plugin recorded them (configurations with batchMetrics). */
function batchTable (rows: Row[]): string {
  const lines = [
    '| configuration | round | script calls | batch mean | p50 | p90 | p99 | max | store latency p50 ms | p99 ms | max ms |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const row of rows) {
    for (const run of okRuns(row)) {
      const batch = statsOf(run).batchSize
      if (batch === undefined) continue
      const latency = statsOf(run).storeLatencyMs
      lines.push(`| ${row.config.label} | ${run.round} | ${batch.count} | ${fmt(batch.mean, 1)} | ${fmt(batch.p50)} | ${fmt(batch.p90)} | ${fmt(batch.p99)} | ${fmt(batch.max)} | ${fmt(latency?.p50 ?? Number.NaN, 2)} | ${fmt(latency?.p99 ?? Number.NaN, 2)} | ${fmt(latency?.max ?? Number.NaN, 2)} |`)
    }
  }
  return lines.length > 2 ? lines.join('\n') : ''
}

/** maxBatch 64 / 128 (default) / 256, at 50 connections and under the 3,000-connection overload. */
function maxBatchTable (rows: Row[]): string {
  const byId = new Map(rows.map((row) => [row.config.id, row]))
  const lines = [
    '| maxBatch | 50 conn.: req/s | × bare | Node CPU µs/req | Redis CPU µs/decision | decisions/call | p99 ms | 3,000 conn. overload: req/s | Node CPU µs/req | decisions/call | p99 ms | admitted | degraded |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  let any = false
  for (const [cap, normal, flood] of [[64, 'sliding-window-10k-mb64', 'overload-mb64'], [128, 'sliding-window-10k', 'overload'], [256, 'sliding-window-10k-mb256', 'overload-mb256']] as const) {
    const a = byId.get(normal)
    const b = byId.get(flood)
    if (a === undefined && b === undefined) continue
    any = true
    const cells = a === undefined || a.unsupported !== undefined ? ['–', '–', '–', '–', '–', '–'] : [fmt(a.rps), ratio(a.vsBare), fmt(a.nodeUs, 1), fmt(a.redisUs, 1), fmt(a.perCall, 1), fmt(a.p99, 2)]
    const over = b === undefined || b.unsupported !== undefined ? ['–', '–', '–', '–', '–', '–'] : [fmt(b.rps), fmt(b.nodeUs, 1), fmt(b.perCall, 1), fmt(b.p99, 2), eachRound(b, (r) => statsOf(r).allowed), eachRound(b, (r) => statsOf(r).degraded)]
    lines.push(`| ${cap}${cap === 128 ? ' (default)' : ''} | ${cells.join(' | ')} | ${over.join(' | ')} |`)
  }
  return any ? lines.join('\n') : ''
}

function notes (rows: Row[]): string {
  const out: string[] = []
  for (const row of rows) {
    const note = row.runs.find((r) => r.note !== undefined)?.note
    if (row.unsupported !== undefined) out.push(`- ${row.config.label}: n/a — ${row.unsupported}`)
    else if (note !== undefined) out.push(`- ${row.config.label}: ${note}`)
    const codes = new Map<string, number>()
    for (const run of row.runs) for (const [code, count] of Object.entries(run.statusCodes)) codes.set(code, (codes.get(code) ?? 0) + count)
    const unexpected = [...codes].filter(([code]) => code !== '200')
    if (unexpected.length > 0) out.push(`- ${row.config.label}: status codes ${[...codes].map(([c, n]) => `${c}×${n}`).join(', ')}`)
  }
  return out.join('\n')
}

async function main (): Promise<void> {
  const args = parseArgs(process.argv.slice(2))
  const redis = await startRedis()
  const interrupted = (): void => {
    for (const child of liveServers) child.kill('SIGKILL')
    redis.stop().finally(() => process.exit(130))
  }
  process.once('SIGINT', interrupted)
  process.once('SIGTERM', interrupted)
  const started = new Date()
  const sections: string[] = []
  const header = [
    `# Benchmark results, ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC${args.quick ? ' (--quick: smoke test, not for quoting)' : ''}`,
    '',
    `Machine: ${machineDescription()}. Redis ${redis.version} (${redis.private ? 'private server started by the harness' : `external ${redis.url}: CPU and command counts include other clients`}), ` +
      `Fastify ${packageVersion('fastify')}, ioredis ${packageVersion('ioredis')}, @fastify/rate-limit ${packageVersion('@fastify/rate-limit')}, autocannon ${packageVersion('autocannon')}.`,
    ''
  ]
  const raw: Record<string, unknown> = {}
  const cleanups: Array<() => void> = []
  try {
    if (args.mode !== 'scripts') {
      const configs = args.only === undefined ? CONFIGS : args.only.map(configById)
      const nodeArgs: string[] = []
      const profileDir = join(HERE, 'results', 'profiles')
      if (args.cpuProf) mkdirSync(profileDir, { recursive: true })
      const built = args.ts ? undefined : buildServer()
      cleanups.push(() => built?.cleanup())
      const serverEntry = built?.entry
      const results: RunResult[] = []
      for (let round = 1; round <= args.rounds; round++) {
        // Rotate the order every round, so no configuration always runs first (cold machine) or last.
        const shift = (round - 1) % configs.length
        const order = [...configs.slice(shift), ...configs.slice(0, shift)]
        for (const config of order) {
          let result: RunResult | undefined
          // A run during which other processes took more than --max-other % of a core is repeated
          // (up to --retries times); the quietest attempt is kept and its figure shown in the table.
          for (let attempt = 0; attempt <= args.retries; attempt++) {
            let candidate: RunResult
            const profileFile = args.cpuProf ? join(profileDir, `${config.id}-r${round}.cpuprofile`) : undefined
            try {
              candidate = await runOne(config, round, { connections: args.connections, warmup: args.warmup, duration: durationOf(config, args), nodeArgs, redis, serverEntry, profileFile })
              if (profileFile !== undefined && candidate.unsupported === undefined) {
                sections.push(`### Profile: ${config.label}, round ${round}`, '', summariseProfile(profileFile, candidate.responses, 25, candidate.nodeCpuUsPerReq), '')
              }
            } catch (error) {
              // One broken configuration (lib/ mid-change, say) must not lose the others' figures.
              const message = (error instanceof Error ? error.message : String(error)).split('\n').slice(0, 2).join(' ')
              candidate = emptyResult(config, round, `run failed: ${message}`)
            }
            if (result === undefined || !(candidate.otherCpuPercent >= result.otherCpuPercent)) result = candidate
            if (candidate.unsupported !== undefined || !(candidate.otherCpuPercent > args.maxOther)) break
            process.stderr.write(`  ${config.id}: other processes used ${fmt(candidate.otherCpuPercent)} % CPU during the run; ${attempt < args.retries ? 'repeating' : 'keeping the quietest attempt'}\n`)
          }
          if (result === undefined) continue
          results.push(result)
          process.stderr.write(`round ${round}/${args.rounds} ${config.id.padEnd(24)} ${result.unsupported !== undefined ? 'n/a' : `${fmt(result.rps)} req/s, node ${fmt(result.nodeCpuUsPerReq, 1)} µs/req, redis ${fmt(result.redisCpuUsPerDecision, 1)} µs/decision, non-2xx ${result.non2xx}`}\n`)
        }
      }
      const rows = summarise(configs, results)
      raw.http = results
      const steady = rows.filter((row) => !isOverload(row))
      sections.push(
        '## HTTP: req/s and CPU per request',
        '',
        `${args.rounds} round(s), configurations interleaved (order rotated each round); each run: fresh server process, ${args.warmup} s warm-up, ${args.duration} s measured, ` +
          `the plugin ${args.ts ? 'from lib/*.ts through tsx' : 'compiled by tsc and run by plain node (no tsx)'}, ` +
          `${args.connections} connections, autocannon in the harness process (no workers), prebuilt requests. Medians over rounds; ratios are taken within a round, then the median. ` +
          `A run during which other processes used more than ${args.maxOther} % CPU was repeated (at most ${args.retries} times, quietest kept): "other CPU %" shows what competed. ` +
          'Client keys are X-Forwarded-For addresses (trustProxy: 127.0.0.1): "10k keys" rotates 10,000 of them, "1 hot key" sends one. ' +
          'Node CPU is the server process\'s utime+stime (/proc) ÷ responses; Redis CPU is INFO cpu (sys+user) ÷ decisions (the plugin\'s allowed + limited counters; ' +
          '@fastify/rate-limit: its EVALSHA calls); decisions/script call is decisions ÷ EVALSHA calls (the mean batch); redis.call/decision is the other commandstats calls ÷ decisions.',
        '',
        httpTable(steady),
        ''
      )
      if (rows.some(isOverload)) {
        sections.push(
          '### Overload: 3,000 connections, one identity, limit 25 per hour',
          '',
          'The plugin\'s default options except `denyCache: false` (every request is a Redis decision), sliding window, no warm-up, ' +
            `${durationOf(configById('overload'), args)} s measured, one value per round. allowed/limited/degraded are the plugin's stats() over the window; 200/429 are the responses autocannon counted.`,
          '',
          overloadTable(rows),
          ''
        )
      }
      const batches = batchTable(rows)
      if (batches !== '') {
        sections.push(
          '### Batch sizes (rate_limit.store.batch.size) and store latency (rate_limit.store.latency)',
          '',
          'Recorded by the plugin through a recording OpenTelemetry MeterProvider the server registers before ready() (configurations marked so; the per-decision ' +
            'metric calls cost some Node CPU, so throughput rows run without it), over the measured window of each round.',
          '',
          batches,
          ''
        )
      }
      const caps = maxBatchTable(rows)
      if (caps !== '') sections.push('### maxBatch', '', caps, '')
      sections.push('### Targets', '', targets(rows), '')
      const extra = notes(rows)
      if (extra !== '') sections.push('### Notes', '', extra, '')
    }
    if (args.mode !== 'http') {
      const scripts = await runScriptBench(redis, { quick: args.quick })
      raw.scripts = scripts.raw
      sections.push(scripts.markdown)
    }
  } finally {
    for (const cleanup of cleanups) cleanup()
    await redis.stop()
  }
  sections.push(`Reproduce: \`npm run bench${process.argv.length > 2 ? ' -- ' + process.argv.slice(2).join(' ') : ''}\``, '')
  const markdown = [...header, ...sections].join('\n')
  process.stdout.write(markdown)
  const out = args.out ?? (args.quick ? undefined : join(HERE, 'results', `${started.toISOString().slice(0, 10)}.md`))
  if (out !== undefined) {
    mkdirSync(dirname(out), { recursive: true })
    writeFileSync(out, markdown)
    const base = out.replace(/\.md$/, '')
    writeFileSync(base + '.json', JSON.stringify(raw, null, 2) + '\n')
    // The HTTP figures as a bar chart beside the markdown (docs/performance.md shows one).
    const charted = writeChart(base + '.json', base + '.svg', `${started.toISOString().slice(0, 16).replace('T', ' ')} UTC`)
    process.stderr.write(`written ${out}${charted ? ` and ${base}.svg` : ''}\n`)
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`)
  process.exit(1)
})
