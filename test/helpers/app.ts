import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import type { Redis } from 'ioredis'
import type { Test } from 'tap'
import rateLimit, { type RateLimitPluginOptions } from '../../lib/index.js'
import { createClient, getRedis, uniquePrefix } from './redis.js'

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
 * An app on the shared test Redis with its own key prefix and a test clock.
 * The timeout is generous: latency is tested in failure/faults tests, and a
 * loaded CI machine must not turn these decisions into degraded ones.
 * Teardown closes the app and deletes the prefix's keys (never a flush).
 */
export async function setupRedisApp (t: Test, label: string, options: RateLimitPluginOptions = {}, serverOptions: FastifyServerOptions = {}): Promise<RedisApp> {
  const server = await getRedis()
  const redis = createClient(server)
  const prefix = uniquePrefix(label)
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix, clock: clock.read, timeout: 5000, ...options }, serverOptions)
  t.teardown(async () => {
    await app.close()
    const keys = await redis.keys(`${prefix}:*`)
    if (keys.length > 0) await redis.del(...keys)
    redis.disconnect()
  })
  return { app, redis, prefix, clock }
}
