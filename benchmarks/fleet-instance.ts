/*
 * One instance of `npm run bench -- fleet` (benchmarks/fleet.ts starts N of
 * them as separate processes). Told a side and a Redis URL, it builds that
 * side once, then for each `run` message offers decisions at a fixed rate
 * with its own Poisson arrivals (exponential gaps from its own seed: the
 * instances are not synchronised), and reports what it saw: decisions,
 * degraded ones, and each decision's latency from its scheduled arrival
 * (an open loop: a late instance adds its lag, as a real one would).
 */
import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import Fastify, { type FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import rateLimit from '../lib/index.js'
import { RECOMMENDED_OPTIONS } from '../test/helpers/ioredis-clients.js'
import { rng } from '../test/chaos/schedule.js'

/** `ours-in-flight-<n>`: ours with maxInFlight n (1024: no group commit). */
export type FleetSide = 'frl' | 'ours' | `ours-in-flight-${number}`

export interface InstanceSetup { side: FleetSide, url: string, algorithm: string, keys: number, seed: number }
export interface RunOrder { cmd: 'run', rate: number, seconds: number, round: number }
/** decisions: answered (degraded or not); decided: answered by Redis, not degraded; degraded also counts those unanswered at the end. */
export interface RunReport { decisions: number, decided: number, degraded: number, latenciesMs: number[], offered: number, elapsedS: number }

type Decide = (key: string) => Promise<boolean>
type FrlStore = new (continueExceeding: boolean, exponentialBackoff: boolean, redis: Redis, key: string) => {
  incr: (key: string, cb: (error: Error | null, result?: unknown) => void, timeWindow: number, max: number) => void
}

/** Both sides get the same ioredis options, the ones the README recommends. */
function client (url: string): Redis {
  const { hostname, port } = new URL(url)
  const redis = new Redis({ host: hostname, port: Number(port), ...RECOMMENDED_OPTIONS })
  redis.on('error', () => {})
  return redis
}

/** @fastify/rate-limit's Redis store, called as its onRequest hook calls it; an error is what it would answer degraded. */
function peer (redis: Redis): Decide {
  const RedisStore = createRequire(import.meta.url)('@fastify/rate-limit/store/RedisStore.js') as FrlStore
  const store = new RedisStore(false, false, redis, 'frl:')
  return async (key) => await new Promise((resolve) => {
    store.incr(key, (error) => { resolve(error !== null) }, 3_600_000, 100_000_000)
  })
}

/** Ours through `fastify.rateLimit.consume()`, a named policy, the plugin's default options (or group commit off). */
async function ours (redis: Redis, setup: InstanceSetup): Promise<{ decide: Decide, app: FastifyInstance }> {
  const app = Fastify({ logger: false })
  await app.register(rateLimit, {
    redis,
    policies: { fleet: { algorithm: setup.algorithm as 'fixed-window', limit: 100_000_000, window: '1h' } },
    ...(setup.side === 'ours' ? {} : { maxInFlight: Number(setup.side.slice('ours-in-flight-'.length)) })
  })
  await app.ready()
  return { app, decide: async (ip) => (await app.rateLimit.consume('fleet', { ip })).degraded }
}

/** Caller n's IPv4 address: the key both sides count under. */
function address (n: number): string {
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`
}

/** Offers `rate` decisions per second for `seconds`, Poisson arrivals; waits (at most 10 s) for the last answers. */
async function offer (decide: Decide, order: RunOrder, setup: InstanceSetup): Promise<RunReport> {
  // Each instance's arrivals and keys from its own seed.
  const next = rng(setup.seed * 7919 + order.round)
  const latencies: number[] = []
  let degraded = 0
  let offered = 0
  const counts = { outstanding: 0 }
  const start = performance.now()
  const end = start + order.seconds * 1000
  let arrival = start - Math.log(1 - next()) * 1000 / order.rate
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now()
      while (arrival <= now && arrival < end) {
        const scheduled = arrival
        offered++
        counts.outstanding++
        decide(address(Math.floor(next() * setup.keys))).then((wasDegraded) => {
          latencies.push(performance.now() - scheduled)
          if (wasDegraded) degraded++
        }, () => { degraded++ }).finally(() => { counts.outstanding-- })
        arrival -= Math.log(1 - next()) * 1000 / order.rate
      }
      if (arrival < end) setTimeout(tick, Math.max(0, Math.min(5, arrival - now)))
      else resolve()
    }
    tick()
  })
  const deadline = performance.now() + 10_000
  while (counts.outstanding > 0 && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5))
  return { decisions: latencies.length, decided: latencies.length - degraded, degraded: degraded + counts.outstanding, latenciesMs: latencies, offered, elapsedS: (performance.now() - start) / 1000 }
}

async function main (): Promise<void> {
  const setup = JSON.parse(process.argv[2] ?? '{}') as InstanceSetup
  const redis = client(setup.url)
  const { decide, app } = setup.side === 'frl' ? { decide: peer(redis), app: undefined } : await ours(redis, setup)
  // One decision first: the script loaded, the connection warm.
  await decide('10.255.255.255')
  process.on('message', (message: RunOrder | { cmd: 'stop' }) => {
    if (message.cmd === 'stop') {
      const stop = async (): Promise<void> => { await app?.close(); redis.disconnect(); process.exit(0) }
      stop().catch(() => { process.exit(1) })
      return
    }
    offer(decide, message, setup).then((report) => { process.send?.(report) }, (error: unknown) => { console.error(error); process.exit(1) })
  })
  process.send?.('ready')
}

await main()
