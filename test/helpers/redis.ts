/**
 * Where the tests get a real Redis, in this order:
 *   1. REDIS_URL, when set (never flushed: tests isolate themselves by key prefix);
 *   2. a container from @testcontainers/redis, where a Docker engine answers;
 *   3. a private `redis-server` from PATH, started on a free loopback port.
 * If none works the suite fails with a message saying how to provide one:
 * a missing Redis never turns into a skipped test.
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { Redis, type RedisOptions } from 'ioredis'
import type { Test } from 'tap'
import { ping } from './processes.js'
import { startServer, type ManagedServer } from './topologies.js'

export { freePort } from './processes.js'

export interface RedisServer {
  url: string
  host: string
  port: number
  /** Stops what this helper started; a no-op for REDIS_URL. */
  stop: () => Promise<void>
}

const HOW_TO_PROVIDE = 'No Redis for the tests. Install redis-server (apt-get install redis-server, brew install redis) so the tests can start their own on free loopback ports, start Docker so @testcontainers/redis can run one, or set REDIS_URL=redis://host:port to a Redis 7+ the tests may write to (they use unique key prefixes and never flush it).'

/**
 * A throwaway `redis-server` on a free loopback port, owned by this test
 * process (see processes.ts); resolves once it answers PING. Use it for
 * anything that flushes, stops, hangs or reconfigures a server.
 */
export async function startRedisServer (extraArgs: string[] = []): Promise<ManagedServer> {
  try {
    return await startServer(extraArgs, { label: 'redis' })
  } catch (error) {
    throw new Error(`${(error as Error).message}. ${HOW_TO_PROVIDE}`, { cause: error })
  }
}

/** A private server for one test, stopped by the test's teardown, with a fail-fast admin client. */
export async function privateRedis (t: Test): Promise<{ server: ManagedServer, admin: Redis }> {
  const server = await startRedisServer()
  const admin = createClient(server)
  t.teardown(async () => {
    admin.disconnect()
    await server.stop()
  })
  return { server, admin }
}

function dockerAnswers (): boolean {
  try {
    execFileSync('docker', ['info'], { stdio: 'ignore', timeout: 3000 })
    return true
  } catch {
    return false
  }
}

let shared: Promise<RedisServer> | undefined

/**
 * One Redis per test file, chosen as the module comment says. A server this
 * helper starts lives until the test file's process ends, and dies with it.
 */
export async function getRedis (): Promise<RedisServer> {
  shared ??= provision()
  return await shared
}

async function provision (): Promise<RedisServer> {
  const fromEnv = process.env.REDIS_URL
  if (fromEnv !== undefined && fromEnv !== '') {
    const parsed = new URL(fromEnv)
    const port = Number(parsed.port || 6379)
    if (!(await ping(port, parsed.hostname))) throw new Error(`REDIS_URL=${fromEnv} does not answer PING. ${HOW_TO_PROVIDE}`)
    return { url: fromEnv, host: parsed.hostname, port, stop: async () => {} }
  }
  if (dockerAnswers()) {
    const { RedisContainer } = await import('@testcontainers/redis')
    // Ryuk, testcontainers' reaper, removes the container if this process dies first.
    const container = await new RedisContainer('redis:7.0').start()
    const url = container.getConnectionUrl()
    const parsed = new URL(url)
    process.once('beforeExit', () => { container.stop().catch(() => {}) })
    return { url, host: parsed.hostname, port: Number(parsed.port), stop: async () => { await container.stop() } }
  }
  return await startRedisServer()
}

/** A key prefix no other test (or other run) shares; tests never flush a shared server. */
export function uniquePrefix (label = 't'): string {
  return `${label}${randomBytes(4).toString('hex')}`
}

/** Deletes the keys under a test's own prefix, the console's (`<prefix>/console:`) too (never a flush: the server is shared). */
export async function deletePrefix (redis: Redis, prefix: string): Promise<void> {
  const keys = [...await redis.keys(`${prefix}:*`), ...await redis.keys(`${prefix}/console:*`)]
  // One DEL per key: on a Cluster the keys hash to different slots.
  for (const key of keys) await redis.del(key)
}

/**
 * At the test's teardown: `close` what the test opened (apps, sockets), then
 * delete the prefix's keys and disconnect `redis`.
 */
export function cleanUpPrefix (t: Test, redis: Redis, prefix: string, close: () => Promise<unknown> = async () => {}): void {
  t.teardown(async () => {
    await close()
    await deletePrefix(redis, prefix)
    redis.disconnect()
  })
}

/** Script calls (FCALL + EVALSHA + EVAL) a server has counted: INFO commandstats. */
export async function scriptCalls (admin: Redis): Promise<number> {
  const stats = await admin.info('commandstats')
  let calls = 0
  for (const name of ['fcall', 'evalsha', 'eval']) calls += Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(stats)?.[1] ?? 0)
  return calls
}

/** A client that fails fast instead of queueing: what the README recommends. */
export function createClient (server: RedisServer, options: RedisOptions = {}): Redis {
  return new Redis(server.url, { enableOfflineQueue: true, maxRetriesPerRequest: 1, ...options })
}

/** A client that can read a value as bytes (ioredis Redis, Cluster). */
interface BufferReader { getBuffer: (key: string) => Promise<Buffer | null> }

/** fixed-window's state, format 3 (scripts/fixed-window.lua): one integer, tag * 2^30 + count. */
const COUNT_SPAN = 2 ** 30
const TAG_SPAN = 8_388_593

/** The tag fixed-window stores for a window index (a calendar period's: its start in ms). */
export function windowTag (index: number): number {
  return index % TAG_SPAN
}

/**
 * The numbers of an algorithm's state under key: fixed-window [tag, count]
 * (format 3, decimal text: windowTag), else format 2, little-endian doubles
 * (scripts/prelude.lua): sliding-window [index, cur, prev], token-bucket
 * [tokens, ms], gcra [tatMs, frac]; null when absent.
 */
export async function readState (client: BufferReader, key: string): Promise<number[] | null> {
  const bytes = await client.getBuffer(key)
  if (bytes === null) return null
  const text = bytes.toString('latin1')
  if (/^\d+$/.test(text)) {
    const value = Number(text)
    return [Math.floor(value / COUNT_SPAN), value % COUNT_SPAN]
  }
  return Array.from({ length: bytes.length / 8 }, (_, i) => bytes.readDoubleLE(i * 8))
}
