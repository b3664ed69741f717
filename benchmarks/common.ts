import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { Redis } from 'ioredis'
import { ping } from '../test/helpers/processes.js'
import { startRedisServer } from '../test/helpers/redis.js'

export interface BenchRedis {
  url: string
  /** True when the harness started it: its CPU and commands are ours alone, and it may be flushed. */
  private: boolean
  pid: number | undefined
  version: string
  stop: () => Promise<void>
}

function hasRedisServer (): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0
}

async function pingable (url: string): Promise<boolean> {
  const { hostname, port } = new URL(url)
  return await ping(Number(port || 6379), hostname)
}

/**
 * A private redis-server on a free loopback port (so INFO cpu and INFO
 * commandstats count our work alone), or, when no redis-server is on PATH,
 * BENCH_REDIS_URL / REDIS_URL (never flushed; figures then include other clients).
 */
export async function startRedis (): Promise<BenchRedis> {
  const external = process.env.BENCH_REDIS_URL ?? (hasRedisServer() ? undefined : process.env.REDIS_URL)
  if (external !== undefined && external !== '') {
    if (!(await pingable(external))) throw new Error(`${external} does not answer PING`)
    return { url: external, private: false, pid: undefined, version: await redisVersion(external), stop: async () => {} }
  }
  if (!hasRedisServer()) throw new Error('no redis-server on PATH and no REDIS_URL: install redis-server (apt-get install redis-server) or set REDIS_URL')
  // The same loopback server the tests start (free port, no persistence, killed on stop).
  const server = await startRedisServer()
  return { url: server.url, private: true, pid: server.pid, version: await redisVersion(server.url), stop: server.stop }
}

async function redisVersion (url: string): Promise<string> {
  const client = new Redis(url)
  try {
    return parseInfo(await client.info('server')).get('redis_version') ?? '?'
  } finally {
    client.disconnect()
  }
}

export function sleep (ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** `INFO` text → field map. */
export function parseInfo (text: string): Map<string, string> {
  const map = new Map<string, string>()
  for (const line of text.split('\r\n')) {
    const colon = line.indexOf(':')
    if (colon > 0 && !line.startsWith('#')) map.set(line.slice(0, colon), line.slice(colon + 1))
  }
  return map
}

/** Redis CPU seconds so far (main thread and background threads, user + system). */
export async function redisCpuSeconds (client: Redis): Promise<number> {
  const info = parseInfo(await client.info('cpu'))
  return Number(info.get('used_cpu_sys')) + Number(info.get('used_cpu_user'))
}

export interface CommandStat { calls: number, usec: number }

/** INFO commandstats → command name → calls and total µs. */
export async function commandStats (client: Redis): Promise<Map<string, CommandStat>> {
  const result = new Map<string, CommandStat>()
  for (const [field, value] of parseInfo(await client.info('commandstats'))) {
    if (!field.startsWith('cmdstat_')) continue
    const calls = /calls=(\d+)/.exec(value)
    const usec = /usec=(\d+)/.exec(value)
    result.set(field.slice(8), { calls: Number(calls?.[1] ?? 0), usec: Number(usec?.[1] ?? 0) })
  }
  return result
}

/** Commands the harness itself sends; everything else came from the server under test. */
const HARNESS_COMMANDS = new Set(['info', 'config|resetstat', 'config', 'flushall', 'ping', 'hello', 'client|setinfo', 'client', 'select', 'memory|usage', 'dbsize', 'script|load', 'script|flush', 'script', 'function|load', 'function'])

export function commandDelta (before: Map<string, CommandStat>, after: Map<string, CommandStat>): { total: number, byName: Map<string, number>, evalUsec: number, evalCalls: number } {
  const byName = new Map<string, number>()
  let total = 0
  let evalUsec = 0
  let evalCalls = 0
  for (const [name, stat] of after) {
    const calls = stat.calls - (before.get(name)?.calls ?? 0)
    if (calls <= 0 || HARNESS_COMMANDS.has(name)) continue
    byName.set(name, calls)
    total += calls
    if (name === 'fcall' || name === 'evalsha' || name === 'eval') {
      evalCalls += calls
      evalUsec += stat.usec - (before.get(name)?.usec ?? 0)
    }
  }
  return { total, byName, evalUsec, evalCalls }
}

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100

/** CPU seconds (user + system, all threads) of a process, from /proc/<pid>/stat. */
export function processCpuSeconds (pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  // Fields after the command name, which is in parentheses and may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  const utime = Number(fields[11])
  const stime = Number(fields[12])
  return (utime + stime) / CLOCK_TICKS
}

/**
 * CPU seconds of this process plus its exited children (/proc/self/stat utime, stime, cutime,
 * cstime): the load generator's, whether autocannon in this process or a wrk that has exited.
 * Children still running (the server, redis-server) are not in it.
 */
export function generatorCpuSeconds (): number {
  const stat = readFileSync('/proc/self/stat', 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0) / CLOCK_TICKS
}

/** Busy CPU seconds of the whole machine (all cores) from /proc/stat: to tell when something else competed. */
export function machineBusySeconds (): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? ''
  const fields = line.trim().split(/\s+/).slice(1).map(Number)
  const total = fields.reduce((sum, value) => sum + value, 0)
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0)
  return (total - idle) / CLOCK_TICKS
}

export function median (values: number[]): number {
  const finite = values.filter((value) => Number.isFinite(value)).sort((a, b) => a - b)
  if (finite.length === 0) return Number.NaN
  const mid = finite.length >> 1
  return finite.length % 2 === 1 ? finite[mid] as number : ((finite[mid - 1] as number) + (finite[mid] as number)) / 2
}

/**
 * A tight loop timed directly (overrides.ts, identity-hash.ts): ns per call of
 * `step(i)` over `iterations` calls in each of `rounds` rounds, sorted, and
 * their median. The steps' results are summed and returned, so the loop
 * cannot be optimised away.
 */
export function nsPerCall (rounds: number, iterations: number, step: (i: number) => number): { median: number, rounds: number[], sink: number } {
  const samples: number[] = []
  let sink = 0
  for (let round = 0; round < rounds; round++) {
    const started = process.hrtime.bigint()
    for (let i = 0; i < iterations; i++) sink += step(i)
    samples.push(Number(process.hrtime.bigint() - started) / iterations)
  }
  return { median: median(samples), rounds: samples.sort((a, b) => a - b), sink }
}

export function machineDescription (): string {
  let cpu = '?'
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('model name'))
    if (line !== undefined) cpu = line.slice(line.indexOf(':') + 1).trim()
  } catch {}
  const cores = spawnSync('nproc', [], { encoding: 'utf8' }).stdout.trim()
  let memory = '?'
  try {
    const kb = Number(/MemTotal:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'))?.[1])
    memory = `${Math.round(kb / 1024 / 1024)} GB`
  } catch {}
  return `${cores} vCPU (${cpu}), ${memory} RAM, Linux ${spawnSync('uname', ['-r'], { encoding: 'utf8' }).stdout.trim()}, Node ${process.version}`
}

export function packageVersion (name: string): string {
  try {
    const url = new URL(`../node_modules/${name}/package.json`, import.meta.url)
    return (JSON.parse(readFileSync(url, 'utf8')) as { version: string }).version
  } catch {
    return '?'
  }
}
