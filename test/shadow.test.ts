/**
 * Shadow mode: decisions are taken and recorded (request.rateLimit, stats,
 * logs, the Redis count) but never enforced: no 429, no 503, no headers.
 */
import { test, type Test } from 'tap'
import { buildApp, setupRedisApp } from './helpers/app.js'
import { freePort, readState, uniquePrefix } from './helpers/redis.js'

const setup = async (t: Test, options: Parameters<typeof buildApp>[0] = {}, serverOptions = {}) => await setupRedisApp(t, 'sh', options, serverOptions)

test('plugin-wide shadow mode: over the limit is recorded, never refused', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const { app, redis, prefix, clock } = await setup(t, { mode: 'shadow' }, { logger: { level: 'info', stream } })
  app.get('/x', { config: { rateLimit: { limit: 2, window: '1m', algorithm: 'fixed-window', name: 'x' } } }, async (req) => ({ rl: req.rateLimit }))
  await app.ready()
  const replies = []
  for (let i = 0; i < 6; i++) replies.push(await app.inject('/x'))
  t.same(replies.map((res) => res.statusCode), [200, 200, 200, 200, 200, 200], 'nothing refused')
  t.ok(replies.every((res) => res.headers['ratelimit-policy'] === undefined && res.headers.ratelimit === undefined && res.headers['retry-after'] === undefined), 'no rate limit header: clients must not slow down for a limit being tried out')
  t.match(replies[1]?.json().rl, { allowed: true, outcome: 'allowed', remaining: 0 })
  t.match(replies[2]?.json().rl, { allowed: true, outcome: 'shadow-limited', remaining: 0, policy: 'x', policies: [{ policy: 'x', allowed: false, shadow: true }] })
  t.ok((replies[2]?.json().rl.retryAfterMs as number) > 0, 'the would-be Retry-After is recorded')
  t.match(app.rateLimit.stats(), { allowed: 6, limited: 0, shadowLimited: 4 })
  const [key] = await redis.keys(`${prefix}:*`)
  t.equal((await readState(redis, key as string))?.[1], 2, 'the count is what a real limit would have admitted')
  const shadowLines = lines.filter((line) => line.msg === 'rate limit exceeded in shadow mode (not enforced)')
  t.equal(shadowLines.length, 1, 'logged once for the identity in this window, not per request')
  t.match(shadowLines[0], { route: 'GET /x', policy: 'x', limit: 2, violated: ['x'] })
  clock.advance(60_000)
  await app.inject('/x')
  await app.inject('/x')
  await app.inject('/x')
  t.equal(lines.filter((line) => line.msg === 'rate limit exceeded in shadow mode (not enforced)').length, 2, 'next window: one more line')
  t.match(app.rateLimit.policies()[0], { limit: { mode: 'shadow' } })
})

test('a route can opt into or out of shadow mode', async (t) => {
  const { app } = await setup(t, { mode: 'shadow' })
  app.get('/enforced', { config: { rateLimit: { limit: 1, window: '1m', mode: 'enforce' } } }, async () => 'ok')
  app.get('/tried', { config: { rateLimit: { limit: 1, window: '1m' } } }, async () => 'ok')
  await app.ready()
  t.same([(await app.inject('/enforced')).statusCode, (await app.inject('/enforced')).statusCode], [200, 429])
  t.same([(await app.inject('/tried')).statusCode, (await app.inject('/tried')).statusCode], [200, 200])

  const enforcing = await buildApp({ store: 'memory' })
  t.teardown(() => enforcing.close())
  enforcing.get('/new', { config: { rateLimit: { limit: 1, window: '1m', mode: 'shadow' } } }, async (req) => req.rateLimit)
  await enforcing.ready()
  await enforcing.inject('/new')
  const res = await enforcing.inject('/new')
  t.equal(res.statusCode, 200)
  t.equal(res.json().outcome, 'shadow-limited', 'the memory store honours shadow mode too')
})

test('a shadow route never answers 503, whatever onRedisError says', async (t) => {
  const { Redis } = await import('ioredis')
  const port = await freePort()
  const redis = new Redis({ port, lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  redis.on('error', () => {})
  const app = await buildApp({ redis, onRedisError: 'closed', prefix: uniquePrefix('sh') })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  app.get('/shadow', { config: { rateLimit: { limit: 1, window: '1m', mode: 'shadow' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { limit: 1, window: '1m' } } }, async () => 'ok')
  await app.ready()
  const res = await app.inject('/shadow')
  t.equal(res.statusCode, 200)
  t.match(res.json(), { degraded: true, outcome: 'degraded', allowed: true })
  t.equal((await app.inject('/closed')).statusCode, 503, 'an enforced route still fails closed')
})
