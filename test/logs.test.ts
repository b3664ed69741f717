import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, TestClock } from './helpers/app.js'
import { pluginClient } from './helpers/clients.js'
import { createClient, freePort, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * The plugin's own log lines say what happened, under Fastify's default
 * (JSON) logger: store failures by what the request got, Redis absent at
 * startup, and the printPolicies table.
 */

type Line = Record<string, unknown> & { msg?: string, level?: number }

function capture (): { lines: Line[], logger: { level: string, stream: { write: (line: string) => void } } } {
  const lines: Line[] = []
  return { lines, logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line) as Line) } } } }
}

const ok = async (): Promise<string> => 'ok'
const STARTUP_WARNING = /Redis is not ready at startup/

/** Redis absent: nothing listens on the client's port. */
async function absentApp (t: Test): Promise<{ app: FastifyInstance, lines: Line[], clock: TestClock }> {
  const redis = pluginClient('recommended', await freePort())
  const { lines, logger } = capture()
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix: 'logs', clock: clock.read, circuitBreaker: false }, { logger })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  return { app, lines, clock }
}

test('Redis absent at ready(): one coded warning at startup, and each degraded line says what the request got', async (t) => {
  const { app, lines, clock } = await absentApp(t)
  app.get('/open', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'open' } } }, ok)
  app.get('/closed', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'closed' } } }, ok)
  app.get('/local', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'local', localLimit: 2 } } }, ok)
  app.get('/shadow', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'closed', mode: 'shadow' } } }, ok)
  await app.ready()
  const startup = lines.filter((line) => STARTUP_WARNING.test(line.msg ?? ''))
  t.equal(startup.length, 1, 'one line at startup')
  t.match(startup[0], { level: 40, err: { code: 'FST_RRL_REDIS_UNAVAILABLE' } }, 'a warning, coded')

  // The store-failure lines are throttled to one a second: step the clock past it before each request.
  const degradedLine = async (url: string, status: number): Promise<Line | undefined> => {
    clock.advance(1001)
    const before = lines.length
    t.equal((await app.inject(url)).statusCode, status, `${url}: ${status}`)
    return lines.slice(before).find((line) => (line.msg ?? '').startsWith('rate limiter degraded'))
  }
  t.match(await degradedLine('/closed', 503), { level: 40, msg: 'rate limiter degraded: request refused with 503', onRedisError: 'closed' })
  t.match(await degradedLine('/open', 200), { level: 40, msg: 'rate limiter degraded: request admitted without a decision', onRedisError: 'open' })
  t.match(await degradedLine('/local', 200), { msg: 'rate limiter degraded: decided by this instance\'s local limit' })
  t.match(await degradedLine('/shadow', 200), { msg: 'rate limiter degraded: request admitted without a decision' }, 'a shadow-only route is never refused')
  clock.advance(1001)
  const before = lines.length
  t.match(await app.rateLimit.consume('GET /closed', { ip: '203.0.113.5' }), { allowed: false, degraded: true })
  t.match(lines.slice(before), [{ msg: 'rate limiter degraded: refused (onRedisError closed)', route: 'api GET /closed' }], 'consume() answers a decision, not a 503')
})

test('Redis ready at startup: no startup warning', async (t) => {
  const redis = createClient(await getRedis())
  const { lines, logger } = capture()
  const app = await buildApp({ redis, prefix: uniquePrefix('logs') }, { logger })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  app.get('/x', { config: { rateLimit: { limit: 5, window: '1m' } } }, ok)
  await app.ready()
  t.same(lines.filter((line) => STARTUP_WARNING.test(line.msg ?? '') || (line.level ?? 0) >= 40), [])
})

test('printPolicies under the default JSON logger: one line per table line, none with a line break', async (t) => {
  const { lines, logger } = capture()
  const app = await buildApp({ store: 'memory', printPolicies: true, globalLimits: [{ name: 'fleet', limit: 300, window: '1m' }] }, { logger })
  t.teardown(async () => { await app.close() })
  app.get('/orders/:id', { config: { rateLimit: [{ limit: 10, window: '1s', name: 'orders-burst' }, { limit: 1000, window: '1h', name: 'orders-hourly', algorithm: 'gcra' }] } }, ok)
  app.get('/health', { config: { rateLimit: false } }, ok)
  await app.ready()
  const table = lines.filter((line) => (line.msg ?? '').startsWith('rate limits:'))
  t.same(table.map((line) => line.level), table.map(() => 30), 'info')
  t.notOk(table.some((line) => (line.msg ?? '').includes('\n')), 'no message holds a line break')
  const text = table.map((line) => (line.msg ?? '').slice('rate limits: '.length))
  t.match(text[0], /^route\s+policy\s+algorithm\s+limit\s+window/, 'the column names first')
  t.match(table[0], { routes: 4 }, 'with the count of routes (HEAD twins included)')
  t.match(text.slice(1), [
    /^GET \/orders\/:id\s+orders-burst\s+sliding-window\s+10\s+1000ms/,
    /^GET \/orders\/:id\s+orders-hourly\s+gcra\s+1000\s+3600000ms/,
    /^GET \/orders\/:id\s+fleet \(global\)/,
    /^GET \/health\s+\(none: rateLimit false\)/
  ], 'then a line per limit, aligned')
  t.equal(text.length, 5)
})
