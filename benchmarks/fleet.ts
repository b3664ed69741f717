/*
 * npm run bench -- fleet [options]: what one shared Redis costs a fleet (issue 33, item 3).
 *
 *   --instances N     instance processes (default 4: few, busy processes, so the driver's own CPU stays
 *                     well below the machine's and the saturation a point shows is Redis's)
 *   --rates R,R,…     fleet-wide offered decisions per second (default 1000,2000,4000,8000,16000)
 *   --seconds S       per point (default 8)
 *   --share C         Redis's CPU quota in cores, 0.1 to 2 (default 0.25), a cgroup with a 10 ms period
 *   --sides a,b       frl, ours (default options), ours-in-flight-<n> (maxInFlight n; 1024: no group commit);
 *                     default frl,ours,ours-in-flight-1024
 *   --algorithm A     our block's algorithm (default fixed-window, the peer's)
 *   --max-load L      quiet gate at the start of each side (default 1.5)   --load-wait S (default 180)
 *   --out FILE        markdown (default benchmarks/results/<date>-fleet.md), with FILE.json
 *
 * Both sides are driven at the same layer with the same ioredis options:
 * our `fastify.rateLimit.consume()` (default options) against
 * @fastify/rate-limit's RedisStore.incr, against a private standalone
 * redis-server. On 2 cores the instances and Redis compete, so Redis is made
 * the bottleneck honestly: a CPU quota (cgroup `cpu.cfs_quota_us` over a
 * `cpu.cfs_period_us` of 10 ms, or cgroup v2's `cpu.max`), never a SIGSTOP
 * (read as silence) nor taskset alone. Per point: Redis CPU µs per decision
 * (INFO cpu), decisions per script call (commandstats), p50/p99 decision
 * latency, decisions degraded, achieved rate, and the rate at which this
 * point's cost would fill one Redis core.
 */
import { fork, type ChildProcess } from 'node:child_process'
import { mkdirSync, rmdirSync, writeFileSync, existsSync, readFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { availableParallelism } from 'node:os'
import { Redis } from 'ioredis'
import { commandDelta, commandStats, machineDescription, packageVersion, processCpuSeconds, redisCpuSeconds, startRedis } from './common.js'
import { loadAverage, waitForQuiet, type Gate } from './quiet.js'
import type { FleetSide, InstanceSetup, RunReport } from './fleet-instance.js'

const SIDES: FleetSide[] = ['frl', 'ours', 'ours-in-flight-1024']
const isSide = (side: string): side is FleetSide => side === 'frl' || side === 'ours' || /^ours-in-flight-[1-9]\d*$/.test(side)
const PERIOD_US = 10_000

interface Args { instances: number, rates: number[], seconds: number, share: number, sides: FleetSide[], algorithm: string, maxLoad: number, loadWait: number, out: string }

export interface FleetPoint {
  side: FleetSide
  offered: number
  /** Decisions per second answered by Redis, not degraded. */
  achieved: number
  decisions: number
  degraded: number
  redisCpuUsPerDecision: number
  redisCores: number
  decisionsPerCall: number
  nodeCpuUsPerDecision: number
  p50Ms: number
  p99Ms: number
  oneCoreRate: number
  /** The rate at which the instance processes and Redis, at this point's costs per decision, would fill every core of the machine. */
  machineCeiling: number
  /** Share of the quota's periods in which Redis used all of it: near 1, Redis is the bottleneck. */
  throttledShare: number
  loadEnd: number
  /** Commands Redis ran during the point, by name (scripts and what they call are one each). */
  commands: Record<string, number>
}

function parseArgs (argv: string[]): Args {
  const args: Args = { instances: 4, rates: [1000, 2000, 4000, 8000, 16000], seconds: 8, share: 0.25, sides: SIDES, algorithm: 'fixed-window', maxLoad: 1.5, loadWait: 180, out: `benchmarks/results/${new Date().toISOString().slice(0, 10)}-fleet.md` }
  for (let i = 0; i < argv.length; i += 2) {
    const [arg, raw] = [argv[i], argv[i + 1] ?? '']
    const value = Number(raw)
    if (arg === '--out') args.out = raw
    else if (arg === '--rates') args.rates = raw.split(',').map(Number)
    else if (arg === '--sides') args.sides = raw.split(',') as FleetSide[]
    else if (arg === '--algorithm') args.algorithm = raw
    else if (arg === '--instances' && value >= 1) args.instances = value
    else if (arg === '--seconds' && value > 0) args.seconds = value
    // The kernel's least quota is 1 ms: a tenth of a core at the 10 ms period.
    else if (arg === '--share' && value >= 0.1 && value <= 2) args.share = value
    else if (arg === '--max-load' && value > 0) args.maxLoad = value
    else if (arg === '--load-wait' && value >= 0) args.loadWait = value
    else throw new Error(`unknown or invalid argument ${arg ?? ''} (see the header of benchmarks/fleet.ts)`)
  }
  if (args.rates.some((r) => !(r > 0)) || args.sides.some((s) => !isSide(s))) throw new Error('--rates takes positive numbers, --sides frl, ours or ours-in-flight-<n>')
  return args
}

interface Quota {
  undo: () => void
  /** Quota periods so far, and those in which Redis used its whole quota and was held (cgroup cpu.stat). */
  periods: () => { periods: number, throttled: number }
}

function cpuStat (file: string, periods: string, throttled: string): () => { periods: number, throttled: number } {
  return () => {
    const fields = new Map(readFileSync(file, 'utf8').trim().split('\n').map((line) => line.split(' ') as [string, string]))
    return { periods: Number(fields.get(periods) ?? 0), throttled: Number(fields.get(throttled) ?? 0) }
  }
}

/** Puts `pid` (every thread) under a CPU quota of `share` cores per 10 ms. Throws when no cgroup can be written. */
function cpuQuota (pid: number, share: number): Quota {
  const quota = Math.round(share * PERIOD_US)
  const v1 = '/sys/fs/cgroup/cpu'
  if (existsSync(`${v1}/tasks`)) {
    const dir = `${v1}/rrl-fleet-${process.pid}`
    mkdirSync(dir)
    writeFileSync(`${dir}/cpu.cfs_period_us`, String(PERIOD_US))
    writeFileSync(`${dir}/cpu.cfs_quota_us`, String(quota))
    writeFileSync(`${dir}/cgroup.procs`, String(pid))
    return { undo: () => { try { rmdirSync(dir) } catch {} }, periods: cpuStat(`${dir}/cpu.stat`, 'nr_periods', 'nr_throttled') }
  }
  const v2 = '/sys/fs/cgroup'
  if (existsSync(`${v2}/cgroup.controllers`) && readFileSync(`${v2}/cgroup.controllers`, 'utf8').includes('cpu')) {
    const dir = `${v2}/rrl-fleet-${process.pid}`
    writeFileSync(`${v2}/cgroup.subtree_control`, '+cpu')
    mkdirSync(dir)
    writeFileSync(`${dir}/cpu.max`, `${quota} ${PERIOD_US}`)
    writeFileSync(`${dir}/cgroup.procs`, String(pid))
    return { undo: () => { try { rmdirSync(dir) } catch {} }, periods: cpuStat(`${dir}/cpu.stat`, 'nr_periods', 'nr_throttled') }
  }
  throw new Error('no writable cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max): the fleet benchmark needs one to make Redis the bottleneck (run as root)')
}

function percentile (sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? Number.NaN
}

async function startInstances (args: Args, side: FleetSide, url: string): Promise<ChildProcess[]> {
  const children: ChildProcess[] = []
  for (let i = 0; i < args.instances; i++) {
    const setup: InstanceSetup = { side, url, algorithm: args.algorithm, keys: 10_000, seed: 1000 + i }
    const child = fork(new URL('./fleet-instance.ts', import.meta.url).pathname, [JSON.stringify(setup)], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
    children.push(child)
  }
  await Promise.all(children.map(async (child) => await new Promise<void>((resolve, reject) => {
    child.once('message', () => { resolve() })
    child.once('exit', (code) => { reject(new Error(`instance exited (${String(code)}) before it was ready`)) })
  })))
  return children
}

async function point (args: Args, side: FleetSide, children: ChildProcess[], admin: Redis, rate: number, round: number, quota: Quota): Promise<FleetPoint> {
  const periodsBefore = quota.periods()
  const cpuBefore = await redisCpuSeconds(admin)
  const statsBefore = await commandStats(admin)
  const nodeBefore = children.reduce((sum, c) => sum + processCpuSeconds(c.pid ?? 0), 0)
  const reports = await Promise.all(children.map(async (child) => await new Promise<RunReport>((resolve) => {
    child.once('message', (report) => { resolve(report as RunReport) })
    child.send({ cmd: 'run', rate: rate / children.length, seconds: args.seconds, round })
  })))
  const nodeCpu = children.reduce((sum, c) => sum + processCpuSeconds(c.pid ?? 0), 0) - nodeBefore
  const periodsAfter = quota.periods()
  const redisCpu = await redisCpuSeconds(admin) - cpuBefore
  const { evalCalls, byName } = commandDelta(statsBefore, await commandStats(admin))
  const decisions = reports.reduce((sum, r) => sum + r.decisions, 0)
  // Costs are per decision Redis made and the caller got: a degraded one (the client gave up) is counted apart.
  const decided = reports.reduce((sum, r) => sum + r.decided, 0)
  const latencies = reports.flatMap((r) => r.latenciesMs).sort((a, b) => a - b)
  const elapsed = Math.max(...reports.map((r) => r.elapsedS))
  const usPerDecision = redisCpu * 1e6 / Math.max(1, decided)
  return {
    side,
    offered: rate,
    achieved: decided / args.seconds,
    decisions,
    degraded: reports.reduce((sum, r) => sum + r.degraded, 0),
    redisCpuUsPerDecision: usPerDecision,
    redisCores: redisCpu / elapsed,
    decisionsPerCall: decided / Math.max(1, evalCalls),
    nodeCpuUsPerDecision: nodeCpu * 1e6 / Math.max(1, decided),
    p50Ms: percentile(latencies, 0.5),
    p99Ms: percentile(latencies, 0.99),
    oneCoreRate: 1e6 / usPerDecision,
    machineCeiling: availableParallelism() * 1e6 / (usPerDecision + nodeCpu * 1e6 / Math.max(1, decided)),
    throttledShare: (periodsAfter.throttled - periodsBefore.throttled) / Math.max(1, periodsAfter.periods - periodsBefore.periods),
    loadEnd: loadAverage(),
    commands: Object.fromEntries(byName)
  }
}

function report (args: Args, points: FleetPoint[], gates: Map<FleetSide, Gate>, versions: string): string {
  const lines = [
    '# Fleet benchmark: one shared Redis',
    '',
    `${machineDescription()}; ${versions}.`,
    `${args.instances} instance processes, Poisson arrivals each (own seed), ${args.seconds} s per point, 10,000 keys, ${args.algorithm} for ours; Redis under a CPU quota of ${args.share} core per ${PERIOD_US / 1000} ms period. Both sides through the same ioredis options: our consume() (default options, maxInFlight 1; \`ours-in-flight-n\` sets maxInFlight n, 1024 being no group commit) and @fastify/rate-limit's RedisStore.incr.`,
    '',
    ...[...gates].map(([side, gate]) => `- ${side}: load ${gate.loadStart.toFixed(2)} at start (${gate.gate})`),
    '',
    `The machine's own ceiling is the rate at which the instance processes and Redis together, at a point's Node and Redis CPU per decision, would fill all ${availableParallelism()} cores: a point whose offered rate is near it measures the machine, not Redis.`,
    '',
    '| side | offered /s | decided /s (not degraded) | decisions per call | Redis CPU µs per decision | × peer | Redis cores used | periods throttled | one core would serve /s | Node CPU µs per decision | machine ceiling /s | p50 ms | p99 ms | degraded | load at end |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
  ]
  for (const p of points) {
    const peer = points.find((q) => q.side === 'frl' && q.offered === p.offered)
    const ratio = peer === undefined ? '' : (p.redisCpuUsPerDecision / peer.redisCpuUsPerDecision).toFixed(2)
    lines.push(`| ${p.side} | ${p.offered} | ${p.achieved.toFixed(0)} | ${p.decisionsPerCall.toFixed(1)} | ${p.redisCpuUsPerDecision.toFixed(1)} | ${ratio} | ${p.redisCores.toFixed(3)} | ${(p.throttledShare * 100).toFixed(0)} % | ${p.oneCoreRate.toFixed(0)} | ${p.nodeCpuUsPerDecision.toFixed(1)} | ${p.machineCeiling.toFixed(0)} | ${p.p50Ms.toFixed(2)} | ${p.p99Ms.toFixed(2)} | ${p.degraded} | ${p.loadEnd.toFixed(2)} |`)
  }
  return lines.join('\n') + '\n'
}

export async function runFleetBench (argv: string[]): Promise<void> {
  const args = parseArgs(argv)
  const redis = await startRedis()
  if (!redis.private || redis.pid === undefined) throw new Error('the fleet benchmark needs a private redis-server (redis-server on PATH) to put under a CPU quota')
  const admin = new Redis(redis.url)
  const points: FleetPoint[] = []
  const gates = new Map<FleetSide, Gate>()
  let quota: Quota | undefined
  try {
    quota = cpuQuota(redis.pid, args.share)
    for (const side of args.sides) {
      await admin.flushall()
      gates.set(side, await waitForQuiet(side, { maxLoad: args.maxLoad, waitS: args.loadWait }))
      const children = await startInstances(args, side, redis.url)
      try {
        for (const [round, rate] of args.rates.entries()) {
          const p = await point(args, side, children, admin, rate, round, quota)
          points.push(p)
          process.stderr.write(`  ${side} ${rate}/s: ${p.achieved.toFixed(0)}/s, ${p.decisionsPerCall.toFixed(1)} per call, Redis ${p.redisCpuUsPerDecision.toFixed(1)} µs/decision, p99 ${p.p99Ms.toFixed(1)} ms, degraded ${p.degraded}\n`)
        }
      } finally {
        for (const child of children) child.send({ cmd: 'stop' })
        await Promise.all(children.map(async (child) => await new Promise((resolve) => child.once('exit', resolve))))
      }
    }
  } finally {
    admin.disconnect()
    await redis.stop()
    quota?.undo()
  }
  const versions = `Node ${process.version}, Redis ${redis.version}, @fastify/rate-limit ${packageVersion('@fastify/rate-limit')}, ioredis ${packageVersion('ioredis')}`
  const markdown = report(args, points, gates, versions)
  mkdirSync(dirname(args.out), { recursive: true })
  writeFileSync(args.out, markdown)
  writeFileSync(args.out.replace(/\.md$/, '') + '.json', JSON.stringify({ args, gates: Object.fromEntries(gates), points }, null, 2))
  process.stdout.write(markdown)
}
