/*
 * The real @fastify/cors beside the plugin, on a real Redis: registration
 * order, what happens to preflights, and CORS headers on a 429.
 */
import { test, type Test } from 'tap'
import cors, { type FastifyCorsOptions } from '@fastify/cors'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { type RateLimitPluginOptions } from '../lib/index.js'
import { TestClock } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './helpers/redis.js'

const ok = async (): Promise<string> => 'ok'
const ORIGIN = 'https://app.example'
const preflight = { method: 'OPTIONS' as const, url: '/orders', headers: { origin: ORIGIN, 'access-control-request-method': 'POST' } }

interface Setup {
  corsFirst?: boolean
  corsOptions?: FastifyCorsOptions
  plugin?: RateLimitPluginOptions
  beforeCors?: (app: FastifyInstance) => void
}

async function build (t: Test, setup: Setup): Promise<{ app: FastifyInstance, redis: Redis, prefix: string }> {
  const redis = createClient(await getRedis())
  const prefix = uniquePrefix('cors')
  const app = Fastify({ logger: false })
  cleanUpPrefix(t, redis, prefix, async () => await app.close())
  const corsOptions: FastifyCorsOptions = { origin: ORIGIN, exposedHeaders: ['RateLimit', 'RateLimit-Policy', 'Retry-After'], ...setup.corsOptions }
  const plugin = { redis, prefix, clock: new TestClock().read, timeout: 5000, ...setup.plugin }
  setup.beforeCors?.(app)
  if (setup.corsFirst === true) {
    await app.register(cors, corsOptions)
    await app.register(rateLimit, plugin)
  } else {
    await app.register(rateLimit, plugin)
    await app.register(cors, corsOptions)
  }
  app.post('/orders', { config: { rateLimit: { limit: 2, window: '1m', name: 'orders' } } }, ok)
  return { app, redis, prefix }
}

function preflightEntry (app: FastifyInstance): unknown {
  return app.rateLimit.policies().find((p) => p.method === 'OPTIONS' && p.url === '*')
}

for (const corsFirst of [true, false]) {
  const order = corsFirst ? 'cors registered before the plugin' : 'cors registered after the plugin'
  test(`${order}: startup succeeds in strict mode, preflights are opted out and never counted`, async (t) => {
    const { app, redis, prefix } = await build(t, { corsFirst })
    await app.ready()
    t.same(preflightEntry(app), { method: 'OPTIONS', url: '*', limit: false, limits: [] }, 'policies() lists the preflight route as opted out')

    for (let i = 0; i < 5; i++) {
      const reply = await app.inject(preflight)
      t.equal(reply.statusCode, 204, `preflight ${i + 1} answered by cors`)
      t.equal(reply.headers['access-control-allow-origin'], ORIGIN)
      t.equal(reply.headers['access-control-allow-methods'], 'GET,HEAD,POST')
      t.equal(reply.headers['ratelimit-policy'], undefined, 'no rate limit headers on a preflight')
    }
    t.same(await redis.keys(`${prefix}:*`), [], 'five preflights touched no key')

    // The actual requests are limited, and a 429 still carries the CORS headers a browser needs to read it.
    const replies = []
    for (let i = 0; i < 3; i++) replies.push(await app.inject({ method: 'POST', url: '/orders', headers: { origin: ORIGIN } }))
    t.same(replies.map((r) => r.statusCode), [200, 200, 429])
    t.same(replies.map((r) => r.headers.ratelimit?.toString().replace(/;t=\d+$/, '')), ['"orders";r=1', '"orders";r=0', '"orders";r=0'], 'the full quota: preflights spent nothing')
    const refused = replies[2]
    t.equal(refused?.headers['access-control-allow-origin'], ORIGIN, 'the 429 is readable cross-origin')
    t.equal(refused?.headers['access-control-expose-headers'], 'RateLimit, RateLimit-Policy, Retry-After')
    t.ok(Number(refused?.headers['retry-after']) >= 1)
  })
}

test('with a defaultLimit the preflight route is still opted out (cors answers preflights before any route hook)', async (t) => {
  const { app } = await build(t, { plugin: { defaultLimit: { limit: 1, window: '1m' } } })
  app.get('/other', ok)
  await app.ready()
  t.same(preflightEntry(app), { method: 'OPTIONS', url: '*', limit: false, limits: [] })
  t.same([(await app.inject(preflight)).statusCode, (await app.inject(preflight)).statusCode], [204, 204])
  t.same([(await app.inject('/other')).statusCode, (await app.inject('/other')).statusCode], [200, 429], 'undeclared routes get the default')
})

test('limiting preflights: declare a block on the preflight route and let cors continue to it', async (t) => {
  const { app } = await build(t, {
    corsOptions: { preflightContinue: true },
    // Runs before the plugin's own onRoute hook sees the route cors adds.
    beforeCors: (instance) => {
      instance.addHook('onRoute', (route) => {
        if (route.method === 'OPTIONS' && route.url === '*') route.config = { ...route.config, rateLimit: { limit: 2, window: '1m', name: 'preflight' } }
      })
    }
  })
  await app.ready()
  t.match(preflightEntry(app), { limit: { name: 'preflight', limit: 2 } })
  const replies = [await app.inject(preflight), await app.inject(preflight), await app.inject(preflight)]
  t.same(replies.map((r) => r.statusCode), [200, 200, 429], 'two preflights a minute, then 429 (cors replies 200 when it continues)')
  t.equal(replies[0]?.headers['ratelimit-policy'], '"preflight";q=2;w=60')
  t.equal(replies[2]?.headers['access-control-allow-origin'], ORIGIN, 'the refused preflight carries CORS headers')
  t.equal(replies[2]?.headers['content-type'], 'application/problem+json; charset=utf-8')
  t.equal((await app.inject({ method: 'POST', url: '/orders', headers: { origin: ORIGIN } })).statusCode, 200, 'the preflight budget is its own')
})

test('only the catch-all preflight route is exempt: other routes declared before the plugin are refused', async (t) => {
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const app = Fastify({ logger: false })
  t.teardown(async () => { await app.close() })
  // preflightContinue: cors lets OPTIONS requests reach the routes (else its hook answers them all).
  await app.register(cors, { origin: ORIGIN, preflightContinue: true })
  app.options('/explicit', ok)
  await app.register(rateLimit, { redis, defaultLimit: { limit: 5, window: '1m' } })
  await app.ready()
  const explicit = await app.inject({ ...preflight, url: '/explicit' })
  t.equal(explicit.statusCode, 500, 'an OPTIONS route declared before the plugin is refused')
  t.equal(JSON.parse(explicit.body).code, 'FST_RRL_ROUTE_NOT_SEEN')
  const other = await app.inject(preflight)
  t.equal(other.statusCode, 200, 'the catch-all, declared before it too, is not refused')
  t.notOk(other.headers['ratelimit-policy'], 'nor limited: opted out')
  t.match(app.rateLimit.policies().find((p) => p.url === '*'), { method: 'OPTIONS', limit: false }, 'policies() lists the catch-all it never saw, by asking the router')

  const strict = Fastify({ logger: false })
  t.teardown(async () => { await strict.close() })
  await strict.register(rateLimit, { redis })
  strict.options('/explicit', ok)
  await t.rejects(async () => { await strict.ready() }, { code: 'FST_RRL_MISSING_LIMIT', message: /OPTIONS \/explicit/ }, 'strict mode still wants every other OPTIONS route to declare')
})
