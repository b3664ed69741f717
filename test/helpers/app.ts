import diagnostics from 'node:diagnostics_channel'
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { Redis } from 'ioredis'
import type { Test } from 'tap'
import rateLimit, { ALGORITHMS, type AlgorithmName, type RateLimitPluginOptions } from '../../lib/index.js'
import type { CompileContext } from '../../lib/policy/block.js'
import type { BlockRun, Penalty, StoreRequest } from '../../lib/store/port.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './redis.js'
import { RedisStore } from '../../lib/store/redis/store.js'
import { clientPort } from '../../lib/store/redis/client/detect.js'
import { KINDS } from '../../lib/kinds/index.js'

/** A mutable test clock: scripts receive `now` instead of reading Redis TIME. */
export class TestClock {
  now: number
  constructor (start = Date.UTC(2030, 0, 1)) {
    this.now = start
  }

  advance (ms: number): void {
    this.now += ms
  }

  read = (): number => this.now
}

/** A Fastify app with the plugin registered (awaited, as the README says). */
export async function buildApp (options: RateLimitPluginOptions, serverOptions: FastifyServerOptions = {}): Promise<FastifyInstance> {
  const app = Fastify({ logger: false, ...serverOptions })
  await app.register(rateLimit, options)
  return app
}

export interface RedisApp {
  app: FastifyInstance
  redis: Redis
  prefix: string
  clock: TestClock
}

/**
 * An app on the shared test Redis with its own key prefix and a test clock,
 * with the plugin's default options (its 50 ms timeout too: a generous one
 * once hid a limiter that failed open under load).
 * Teardown closes the app and deletes the prefix's keys (never a flush).
 */
export async function setupRedisApp (t: Test, label: string, options: RateLimitPluginOptions = {}, serverOptions: FastifyServerOptions = {}): Promise<RedisApp> {
  const server = await getRedis()
  const redis = createClient(server)
  const prefix = uniquePrefix(label)
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix, clock: clock.read, ...options }, serverOptions)
  cleanUpPrefix(t, redis, prefix, async () => await app.close())
  return { app, redis, prefix, clock }
}

/**
 * An app on either store with a test clock: the memory store, or the shared
 * test Redis under its own key prefix (deleted at teardown, never a flush).
 * For tests that hold both stores to the same behaviour.
 */
export async function setupStoreApp (t: Test, store: 'redis' | 'memory', label: string, options: RateLimitPluginOptions = {}): Promise<{ app: FastifyInstance, clock: TestClock }> {
  if (store === 'redis') {
    const { app, clock } = await setupRedisApp(t, label, options)
    return { app, clock }
  }
  const clock = new TestClock()
  const app = await buildApp({ store: 'memory', clock: clock.read, ...options })
  t.teardown(async () => { await app.close() })
  return { app, clock }
}

/** A BlockRun as the block compiler would build it, for tests that drive the stores directly. */
/** A RedisStore on a ready client of the suite's Redis, on the test clock, for property tests against the memory model; keys removed at teardown. */
export async function setupModelStore (t: Test, label: string): Promise<{ redisStore: RedisStore, clock: TestClock, prefix: string }> {
  const client = createClient(await getRedis())
  const prefix = uniquePrefix(label)
  const clock = new TestClock(1_900_000_000_000)
  const redisStore = new RedisStore(clientPort(client)!, { timeout: 1000, maxBatch: 128, maxInFlight: 1, maxPending: 10_000, coalesce: true, onBatch: undefined }, clock.read)
  t.teardown(async () => {
    const keys = await client.keys(`${prefix}:*`)
    if (keys.length > 0) await client.del(...keys)
    client.disconnect()
  })
  await new Promise<void>((resolve) => { if (client.status === 'ready') resolve(); else client.once('ready', () => { resolve() }) })
  return { redisStore, clock, prefix }
}

/** A store request of one record per block: run i decided on keys[i] at costs[i] (1 when missing). */
export function storeRequest (runs: readonly BlockRun[], keys: readonly string[], costs: readonly number[], slot?: string): StoreRequest {
  const request: StoreRequest = { blocks: runs.map((run, i) => ({ run, key: keys[i] ?? '', cost: costs[i] ?? 1 })) }
  if (slot !== undefined) request.slot = slot
  return request
}

export function testRun (block: { algorithm: AlgorithmName, limit: number, windowMs: number, shadow: boolean, penalty?: Penalty }): BlockRun {
  return {
    algorithm: block.algorithm,
    algorithmNumber: ALGORITHMS.indexOf(block.algorithm) + 1,
    params: { limit: block.limit, windowMs: block.windowMs, burst: block.limit },
    kind: KINDS.window,
    shadow: block.shadow,
    tier: undefined,
    penalty: block.penalty
  }
}

/**
 * What the plugin hands the block and policy compilers (prefix `rl`, fail
 * open, enforced, no Cluster, /64 IPv6 subnets), for tests that compile
 * blocks without an app; `overrides` change only the fields a test is about.
 */
export function compileContext (overrides: Partial<CompileContext> = {}): CompileContext {
  return { prefix: 'rl', onRedisError: 'open', mode: 'enforce', cluster: false, ipv6Subnet: 64, user: undefined, onPartError: () => {}, ...overrides }
}

/** Every message published on a diagnostics channel during the test (unsubscribed at teardown). */
export function listenChannel<T> (t: Test, channel: string): T[] {
  const messages: T[] = []
  const listener = (message: unknown): void => { messages.push(message as T) }
  diagnostics.subscribe(channel, listener)
  t.teardown(() => { diagnostics.unsubscribe(channel, listener) })
  return messages
}

/**
 * Reads `sample` at every event-loop turn (setImmediate, and after each read
 * when it is async) until `work` settles: the largest value read and how many
 * reads. For bounds that must hold at every instant of a burst.
 */
export async function largestWhile<T> (work: Promise<T>, sample: () => number | Promise<number>): Promise<{ result: T, largest: number, reads: number }> {
  const run = { done: false }
  let largest = -Infinity
  let reads = 0
  const sampling = (async () => {
    while (!run.done) {
      largest = Math.max(largest, await sample())
      reads++
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()
  try {
    return { result: await work, largest, reads }
  } finally {
    run.done = true
    await sampling
  }
}
