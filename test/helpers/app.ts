import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify'
import rateLimit, { type RateLimitPluginOptions } from '../../lib/index.js'

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
