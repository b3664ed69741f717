/*
 * The console page's public types (`fastify-redis-rate-limit/console`), as a
 * user compiles against them: the plugin registers at a prefix with its
 * options, and a wrong type for each option does not compile.
 */
import Fastify, { type FastifyPluginAsync, type FastifyRequest } from 'fastify'
import { describe, expect, test } from 'tstyche'
import consolePage, { fastifyRedisRateLimitConsole, type ConsolePageOptions } from '../lib/console/page/index.js'

describe('fastify-redis-rate-limit/console', () => {
  const app = Fastify()

  test('the default export is the plugin, its options typed', () => {
    expect(consolePage).type.toBe(fastifyRedisRateLimitConsole)
    expect(consolePage).type.toBeAssignableTo<FastifyPluginAsync<ConsolePageOptions>>()
  })

  test('registers at a prefix with authorize, or public', () => {
    expect(app.register(consolePage, { prefix: '/ops/limits', authorize: (request: FastifyRequest) => request.ip === '127.0.0.1' })).type.not.toRaiseError()
    expect(app.register(consolePage, { prefix: '/ops', authorize: async () => true, actor: async (request) => request.ip, refresh: '2s', audit: 100 })).type.not.toRaiseError()
    expect(app.register(consolePage, { public: true, rateLimit: [{ limit: 60, window: '1m' }], configKey: 'limits' })).type.not.toRaiseError()
  })

  test('a wrong type for an option does not compile', () => {
    expect(app.register(consolePage, { authorize: () => 'yes' })).type.toRaiseError()
    expect(app.register(consolePage, { authorize: () => true, actor: () => 42 })).type.toRaiseError()
    expect(app.register(consolePage, { public: 'yes' })).type.toRaiseError()
    expect(app.register(consolePage, { authorize: () => true, refresh: true })).type.toRaiseError()
    expect(app.register(consolePage, { authorize: () => true, audit: '50' })).type.toRaiseError()
    expect(app.register(consolePage, { authorize: () => true, rateLimit: false })).type.toRaiseError()
    expect(app.register(consolePage, { authorize: () => true, rateLimit: { limit: '5' } })).type.toRaiseError()
  })
})
