import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { STATS_PATH, type BenchConfig } from './configs.js'
import { commandDelta, commandStats, generatorCpuSeconds, machineBusySeconds, processCpuSeconds, redisCpuSeconds, sleep, type BenchRedis } from './common.js'
import type { DriveResult, LoadDriver } from './load.js'
import { loadAverage, type Conditions, type Gate } from './quiet.js'

/*
 * One measured run: start the configuration's server as a child process,
 * warm it up, snapshot CPU counters (server /proc, Redis INFO cpu and
 * commandstats, the load generator), drive it with the load driver
 * (autocannon or wrk) for `duration` seconds, snapshot again, stop it.
 */

export interface RunOptions {
  connections: number
  warmup: number
  duration: number
  /** Extra node flags for the server process. */
  nodeArgs: string[]
  /** Where to write a CPU profile of the measured window, if wanted. */
  profileFile?: string | undefined
  /** A compiled server.js to run with plain node, or undefined for server.ts through tsx. */
  serverEntry: string | undefined
  redis: BenchRedis
  driver: LoadDriver
}

/** One measured run; its Conditions (load at start and end, the gate) say whether its figures may be quoted. */
export interface RunResult extends Conditions {
  id: string
  round: number
  /** autocannon or wrk. */
  loadTool: string
  /** Why its figures may not be quoted (the quiet gate, other CPU), or undefined. */
  notQuotable?: string | undefined
  unsupported?: string
  note?: string
  rps: number
  p50: number
  p99: number
  responses: number
  non2xx: number
  errors: number
  statusCodes: Record<string, number>
  nodeCpuUsPerReq: number
  serverCpuPercent: number
  generatorCpuPercent: number
  /** Machine busy time not spent by the server, the load generator or (private) Redis: other processes competing. */
  otherCpuPercent: number
  redisCpuUsPerDecision: number
  redisCommands: number
  /** Decisions Redis took: the plugin's allowed + limited (stats()), or EVALSHA calls for @fastify/rate-limit. */
  decisions: number
  /** Script calls (FCALL, EVALSHA, EVAL): one per batch for the plugin, one per request for @fastify/rate-limit. */
  scriptCalls: number
  /** Decisions per script call (the mean batch size; 1 without coalescing). */
  decisionsPerCall: number
  /** Script-call usec (INFO commandstats: FCALL, EVALSHA, EVAL) ÷ decisions. */
  evalUsecPerDecision: number
  /** redis.call per decision, from commandstats (commands other than the script calls ÷ decisions). */
  callsPerDecision: number
  /** Connections and warm-up this run used (the overload case fixes its own). */
  connections: number
  warmup: number
  pluginStats: unknown
}

const SERVER = fileURLToPath(new URL('./server.ts', import.meta.url))

/** Servers running now: killed if the harness is interrupted. */
export const liveServers = new Set<ChildProcess>()

interface Started { child: ChildProcess, port: number, pid: number, note: string }

async function startServer (config: BenchConfig, options: RunOptions, prefix: string): Promise<Started | { unsupported: string }> {
  const entry = options.serverEntry === undefined ? ['--import', 'tsx', SERVER] : [options.serverEntry]
  const child = spawn(process.execPath, [...options.nodeArgs, ...entry, config.id], {
    env: { ...process.env, BENCH_REDIS_URL: options.redis.url, BENCH_PREFIX: prefix },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  liveServers.add(child)
  child.once('exit', () => liveServers.delete(child))
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  return await new Promise((resolve, reject) => {
    let stdout = ''
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      reject(new Error(`server ${config.id} printed no READY line within 30 s\n${stderr}`))
    }, 30_000)
    child.stdout?.on('data', (chunk: Buffer) => {
      stdout += chunk.toString()
      const line = stdout.split('\n').find((l) => l.startsWith('READY ') || l.startsWith('UNSUPPORTED '))
      if (line === undefined) return
      clearTimeout(timer)
      if (line.startsWith('UNSUPPORTED ')) {
        resolve({ unsupported: line.slice(12) })
        return
      }
      const ready = JSON.parse(line.slice(6)) as { port: number, pid: number, note: string }
      resolve({ child, ...ready })
    })
    child.once('exit', (code) => {
      clearTimeout(timer)
      if (!stdout.includes('READY ') && !stdout.includes('UNSUPPORTED ')) reject(new Error(`server ${config.id} exited with ${String(code)} before READY\n${stderr}`))
    })
  })
}

async function stopServer (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const gone = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000)
  await gone
  clearTimeout(timer)
}

async function pluginStats (port: number): Promise<unknown> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}${STATS_PATH}`)
    return await response.json()
  } catch {
    return undefined
  }
}

function diffStats (before: unknown, after: unknown): unknown {
  if (typeof before !== 'object' || before === null || typeof after !== 'object' || after === null) return after
  const result: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(after)) {
    const earlier = (before as Record<string, unknown>)[name]
    result[name] = typeof value === 'number' && typeof earlier === 'number' ? value - earlier : value
  }
  return result
}

/**
 * Decisions the store sent to Redis in the window: the plugin's allowed + limited counters
 * (stats() diff; the deny cache's refusals never reach Redis, so a run without script calls
 * has none), else one per script call (@fastify/rate-limit: one EVALSHA per request).
 */
function storeDecisions (config: BenchConfig, stats: unknown, scriptCalls: number): number {
  if (config.kind !== 'ours' || scriptCalls === 0) return scriptCalls
  const { allowed, limited } = (stats ?? {}) as { allowed?: unknown, limited?: unknown }
  return typeof allowed === 'number' && typeof limited === 'number' ? allowed + limited : Number.NaN
}

/** CPU counters at one moment: the server (/proc), Redis (INFO cpu, commandstats), the load generator, the machine. */
interface Snapshot { commands: Awaited<ReturnType<typeof commandStats>>, redis: number, server: number, generator: number, busy: number, wall: bigint }

async function snapshot (admin: Redis, pid: number): Promise<Snapshot> {
  const commands = await commandStats(admin)
  const redis = await redisCpuSeconds(admin)
  return { commands, redis, server: processCpuSeconds(pid), generator: generatorCpuSeconds(), busy: machineBusySeconds(), wall: process.hrtime.bigint() }
}

type Measured = Omit<RunResult, 'id' | 'round' | 'loadTool' | 'note' | 'connections' | 'warmup' | 'gate' | 'loadStart' | 'waitedS' | 'loadEnd'>

/** The run's figures from the snapshots around the measured window and what the driver reported. */
function figures (config: BenchConfig, drove: DriveResult, before: Snapshot, after: Snapshot, stats: unknown, privateRedis: boolean): Measured {
  const wall = Number(after.wall - before.wall) / 1e9
  const serverCpu = after.server - before.server
  const redisCpu = after.redis - before.redis
  const genCpu = after.generator - before.generator
  const commands = commandDelta(before.commands, after.commands)
  const responses = drove.responses
  const scriptCalls = commands.evalCalls
  const decisions = storeDecisions(config, stats, scriptCalls)
  return {
    rps: responses / drove.seconds,
    p50: drove.p50Ms,
    p99: drove.p99Ms,
    responses,
    non2xx: drove.non2xx,
    errors: drove.errors,
    statusCodes: drove.statusCodes,
    nodeCpuUsPerReq: serverCpu * 1e6 / responses,
    serverCpuPercent: serverCpu / wall * 100,
    generatorCpuPercent: genCpu / wall * 100,
    otherCpuPercent: Math.max(0, after.busy - before.busy - serverCpu - genCpu - (privateRedis ? redisCpu : 0)) / wall * 100,
    redisCpuUsPerDecision: decisions > 0 ? redisCpu * 1e6 / decisions : Number.NaN,
    redisCommands: commands.total,
    decisions,
    scriptCalls,
    decisionsPerCall: scriptCalls > 0 ? decisions / scriptCalls : Number.NaN,
    evalUsecPerDecision: decisions > 0 ? commands.evalUsec / decisions : Number.NaN,
    callsPerDecision: decisions > 0 ? (commands.total - scriptCalls) / decisions : Number.NaN,
    pluginStats: stats
  }
}

/** One run of a configuration; `gate` is how the quiet-machine gate found the machine just before it. */
export async function runOne (config: BenchConfig, round: number, options: RunOptions, gate: Gate): Promise<RunResult> {
  const connections = config.connections ?? options.connections
  const warmup = config.warmup ?? options.warmup
  const admin = new Redis(options.redis.url)
  const prefix = `b${round}${Math.random().toString(36).slice(2, 8)}`
  const base = { id: config.id, round, loadTool: options.driver.tool, connections, warmup, ...gate }
  try {
    if (options.redis.private) await admin.flushall()
    const started = await startServer(config, options, prefix)
    if ('unsupported' in started) return emptyResult(config, round, started.unsupported, base)
    try {
      const profile = `http://127.0.0.1:${started.port}/__bench/profile`
      if (warmup > 0) await options.driver.drive(config, { port: started.port, connections, seconds: warmup })
      const statsBefore = await pluginStats(started.port)
      await sleep(100)
      const before = await snapshot(admin, started.pid)
      if (options.profileFile !== undefined) await fetch(`${profile}/start`, { method: 'POST' })
      const drove = await options.driver.drive(config, { port: started.port, connections, seconds: options.duration })
      const after = await snapshot(admin, started.pid)
      const loadEnd = loadAverage()
      const statsAfter = await pluginStats(started.port)
      if (options.profileFile !== undefined) await fetch(`${profile}/stop?file=${encodeURIComponent(options.profileFile)}`, { method: 'POST' })
      const measured = figures(config, drove, before, after, diffStats(statsBefore, statsAfter), options.redis.private)
      return { ...base, note: started.note === '' ? undefined : started.note, loadEnd, ...measured }
    } finally {
      await stopServer(started.child)
    }
  } finally {
    admin.disconnect()
  }
}

/** A run with no figures (unsupported, or failed); `base` carries what is known of it. */
export function emptyResult (config: BenchConfig, round: number, unsupported: string, base: Partial<RunResult> = {}): RunResult {
  return {
    id: config.id,
    round,
    loadTool: '',
    gate: 'unchecked',
    loadStart: Number.NaN,
    waitedS: 0,
    loadEnd: Number.NaN,
    unsupported,
    rps: Number.NaN,
    p50: Number.NaN,
    p99: Number.NaN,
    responses: 0,
    non2xx: 0,
    errors: 0,
    statusCodes: {},
    nodeCpuUsPerReq: Number.NaN,
    serverCpuPercent: Number.NaN,
    generatorCpuPercent: Number.NaN,
    otherCpuPercent: Number.NaN,
    redisCpuUsPerDecision: Number.NaN,
    redisCommands: 0,
    decisions: 0,
    scriptCalls: 0,
    decisionsPerCall: Number.NaN,
    evalUsecPerDecision: Number.NaN,
    callsPerDecision: Number.NaN,
    connections: config.connections ?? 0,
    warmup: config.warmup ?? 0,
    pluginStats: undefined,
    ...base
  }
}
