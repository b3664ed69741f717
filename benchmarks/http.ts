import { spawn, type ChildProcess } from 'node:child_process'
import { createRequire } from 'node:module'
import { createHistogram, type RecordableHistogram } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { clientIp, KEYS_10K, STATS_PATH, type BenchConfig } from './configs.js'
import { commandDelta, commandStats, machineBusySeconds, processCpuSeconds, redisCpuSeconds, sleep, type BenchRedis } from './common.js'

/*
 * One measured run: start the configuration's server as a child process,
 * warm it up, snapshot CPU counters (server /proc, Redis INFO cpu and
 * commandstats, this process), drive it with autocannon for `duration`
 * seconds, snapshot again, stop it.
 */

interface AutocannonResult {
  duration: number
  errors: number
  timeouts: number
  non2xx: number
  statusCodeStats: Record<string, { count: number }>
  latency: { p50: number, p99: number, totalCount: number }
  requests: { total: number }
}
interface AutocannonClient {
  requestIterator: { requests: unknown[], currentRequestIndex: number, currentRequest: unknown }
}
interface Tracker { on: (event: 'response', listener: (client: unknown, statusCode: number, bytes: number, ms: number) => void) => void }
type Autocannon = (options: Record<string, unknown>, callback: (error: Error | null, result: AutocannonResult) => void) => Tracker
const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon

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
}

export interface RunResult {
  id: string
  round: number
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
  /** EVALSHA/EVAL calls: one per batch for the plugin, one per request for @fastify/rate-limit. */
  scriptCalls: number
  /** Decisions per script call (the mean batch size; 1 without coalescing). */
  decisionsPerCall: number
  /** EVALSHA usec (INFO commandstats) ÷ decisions. */
  evalUsecPerDecision: number
  /** redis.call per decision, from commandstats (commands other than EVALSHA ÷ decisions). */
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

/** Raw HTTP/1.1 requests, built once: the load generator only writes buffers. */
function buildRequests (config: BenchConfig, port: number): Array<{ requestBuffer: Buffer }> {
  const count = config.load === '10k' ? KEYS_10K : 1
  const requests: Array<{ requestBuffer: Buffer }> = []
  for (let n = 0; n < count; n++) {
    requests.push({ requestBuffer: Buffer.from(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: keep-alive\r\nX-Forwarded-For: ${clientIp(n)}\r\n\r\n`) })
  }
  return requests
}

/** autocannon's own histogram has whole-millisecond resolution: latencies go to a µs histogram instead. */
async function drive (port: number, requests: Array<{ requestBuffer: Buffer }>, connections: number, duration: number, latency?: RecordableHistogram): Promise<AutocannonResult> {
  let nextClient = 0
  const stride = Math.max(1, Math.floor(requests.length / connections))
  return await new Promise((resolve, reject) => {
    const tracker = autocannon({
      url: `http://127.0.0.1:${port}/`,
      connections,
      pipelining: 1,
      duration,
      requests: [{ method: 'GET', path: '/' }],
      // Swap in the prebuilt buffers, each connection starting at its own offset, so
      // 50 connections do not send the same key at the same moment and nothing is rebuilt.
      setupClient: (client: AutocannonClient) => {
        const iterator = client.requestIterator
        const offset = (nextClient++ * stride) % requests.length
        iterator.requests = requests
        iterator.currentRequestIndex = offset
        iterator.currentRequest = requests[offset]
      }
    }, (error, result) => { if (error !== null) reject(error); else resolve(result) })
    if (latency !== undefined) tracker.on('response', (_client, _status, _bytes, ms) => { latency.record(Math.max(1, Math.round(ms * 1000))) })
  })
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

export async function runOne (config: BenchConfig, round: number, options: RunOptions): Promise<RunResult> {
  const connections = config.connections ?? options.connections
  const warmup = config.warmup ?? options.warmup
  const admin = new Redis(options.redis.url)
  const prefix = `b${round}${Math.random().toString(36).slice(2, 8)}`
  try {
    if (options.redis.private) await admin.flushall()
    const started = await startServer(config, options, prefix)
    if ('unsupported' in started) return emptyResult(config, round, started.unsupported)
    try {
      const requests = buildRequests(config, started.port)
      if (warmup > 0) await drive(started.port, requests, connections, warmup)
      const statsBefore = await pluginStats(started.port)
      await sleep(100)
      const cmdBefore = await commandStats(admin)
      const redisBefore = await redisCpuSeconds(admin)
      const serverBefore = processCpuSeconds(started.pid)
      const genBefore = process.cpuUsage()
      const busyBefore = machineBusySeconds()
      const wallBefore = process.hrtime.bigint()

      if (options.profileFile !== undefined) await fetch(`http://127.0.0.1:${started.port}/__bench/profile/start`, { method: 'POST' })
      const latency = createHistogram()
      const result = await drive(started.port, requests, connections, options.duration, latency)

      const wall = Number(process.hrtime.bigint() - wallBefore) / 1e9
      const busy = machineBusySeconds() - busyBefore
      const gen = process.cpuUsage(genBefore)
      const serverCpu = processCpuSeconds(started.pid) - serverBefore
      const redisCpu = await redisCpuSeconds(admin) - redisBefore
      const genCpu = (gen.user + gen.system) / 1e6
      const commands = commandDelta(cmdBefore, await commandStats(admin))
      const statsAfter = await pluginStats(started.port)
      if (options.profileFile !== undefined) await fetch(`http://127.0.0.1:${started.port}/__bench/profile/stop?file=${encodeURIComponent(options.profileFile)}`, { method: 'POST' })

      const responses = result.requests.total
      const stats = diffStats(statsBefore, statsAfter)
      const scriptCalls = commands.evalCalls
      const decisions = storeDecisions(config, stats, scriptCalls)
      const statusCodes: Record<string, number> = {}
      for (const [code, stat] of Object.entries(result.statusCodeStats)) statusCodes[code] = stat.count
      return {
        id: config.id,
        round,
        note: started.note === '' ? undefined : started.note,
        rps: responses / result.duration,
        p50: latency.percentile(50) / 1000,
        p99: latency.percentile(99) / 1000,
        responses,
        non2xx: result.non2xx,
        errors: result.errors + result.timeouts,
        statusCodes,
        nodeCpuUsPerReq: serverCpu * 1e6 / responses,
        serverCpuPercent: serverCpu / wall * 100,
        generatorCpuPercent: genCpu / wall * 100,
        otherCpuPercent: Math.max(0, busy - serverCpu - genCpu - (options.redis.private ? redisCpu : 0)) / wall * 100,
        redisCpuUsPerDecision: decisions > 0 ? redisCpu * 1e6 / decisions : Number.NaN,
        redisCommands: commands.total,
        decisions,
        scriptCalls,
        decisionsPerCall: scriptCalls > 0 ? decisions / scriptCalls : Number.NaN,
        evalUsecPerDecision: decisions > 0 ? commands.evalUsec / decisions : Number.NaN,
        callsPerDecision: decisions > 0 ? (commands.total - scriptCalls) / decisions : Number.NaN,
        connections,
        warmup,
        pluginStats: stats
      }
    } finally {
      await stopServer(started.child)
    }
  } finally {
    admin.disconnect()
  }
}

export function emptyResult (config: BenchConfig, round: number, unsupported: string): RunResult {
  return {
    id: config.id,
    round,
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
    pluginStats: undefined
  }
}
