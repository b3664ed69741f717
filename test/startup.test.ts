import { test } from 'tap'
import Fastify from 'fastify'
import rateLimit from '../lib/index.js'
import { buildApp } from './helpers/app.js'

const ok = async () => 'ok'

test('registering with no Redis client and no memory store is a coded error', async (t) => {
  const app = Fastify()
  app.register(rateLimit, { defaultLimit: { limit: 1, window: '1s' } })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RRL_NO_REDIS' })
})

test('a redis option that is not an ioredis client is refused at register', async (t) => {
  const app = Fastify()
  app.register(rateLimit, { redis: {} as never })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RRL_INVALID_OPTION', message: /`redis`/ })
})

test('every plugin option is validated at register with a coded error naming it', async (t) => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ store: 'disk' }, /`store`/],
    [{ prefix: 'a{b}' }, /`prefix`/],
    [{ prefix: 'x'.repeat(21) }, /`prefix`/],
    [{ timeout: 0 }, /`timeout`/],
    [{ timeout: 1.5 }, /`timeout`/],
    [{ headers: 'draft-7' }, /`headers`/],
    [{ onRedisError: 'maybe' }, /`onRedisError`/],
    [{ ipv6Subnet: 200 }, /`ipv6Subnet`/],
    [{ user: 'id' }, /`user`/],
    [{ apiKey: 42 }, /`apiKey`/],
    [{ defaultLimit: [] }, /`defaultLimit`/],
    [{ clock: 5 }, /`clock`/],
    [{ limit: 5 }, /`limit` is not an option/],
    [{ globalLimits: { limit: 5, window: '1m' } }, /`globalLimits`/],
    [{ denyCache: true }, /`denyCache`/],
    [{ denyCache: { max: 0 } }, /`denyCache`/],
    [{ denyCache: { size: 10 } }, /`denyCache`/],
    [{ mode: 'observe' }, /`mode`/],
    [{ tier: 'pro' }, /`tier`/],
    [{ policies: [] }, /`policies`/],
    [{ policies: { '': { limit: 1, window: '1s' } } }, /`policies`/],
    [{ printPolicies: 'yes' }, /`printPolicies`/],
    [{ metrics: 1 }, /`metrics`/]
  ]
  for (const [options, message] of cases) {
    const app = Fastify()
    app.register(rateLimit, { store: 'memory', ...options } as never)
    await t.rejects(async () => { await app.ready() }, { code: 'FST_RRL_INVALID_OPTION', message }, JSON.stringify(options))
  }
})

test('an invalid defaultLimit fails at register, before any route', async (t) => {
  const app = Fastify()
  app.register(rateLimit, { store: 'memory', defaultLimit: { limit: 0, window: '1m' } })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RRL_INVALID_BLOCK', message: /from defaultLimit.*`limit`/ })
})

test('strict mode: ready() lists every route that declares no limit, once', async (t) => {
  const app = await buildApp({ store: 'memory' })
  app.get('/a', ok)
  app.post('/b', ok)
  app.get('/limited', { config: { rateLimit: { limit: 1, window: '1s' } } }, ok)
  app.get('/health', { config: { rateLimit: false } }, ok)
  const error = await app.ready().then(() => undefined, (err: Error & { code?: string }) => err)
  t.equal(error?.code, 'FST_RRL_MISSING_LIMIT')
  t.match(error?.message, /GET \/a, POST \/b/)
  t.notMatch(error?.message, /HEAD/, 'the HEAD route Fastify adds for GET /a is not listed separately')
  t.notMatch(error?.message, /limited|health/)
})

test('strict mode passes when every route declares or opts out', async (t) => {
  const app = await buildApp({ store: 'memory' })
  app.get('/limited', { config: { rateLimit: { limit: 1, window: '1s' } } }, ok)
  app.get('/health', { config: { rateLimit: false } }, ok)
  await app.ready()
  t.teardown(() => app.close())
  const names = app.rateLimit.policies().map((p) => `${p.method} ${p.url} ${p.limit === false ? 'off' : p.limit.name}`)
  t.same(names, ['GET /limited get-limited', 'HEAD /limited get-limited', 'GET /health off', 'HEAD /health off'])
})

test('defaultLimit covers routes that declare nothing, and policies() says so', async (t) => {
  const app = await buildApp({ store: 'memory', defaultLimit: { limit: 120, window: '1m' } })
  app.get('/orders/:id', ok)
  app.get('/own', { config: { rateLimit: { limit: 5, window: '1s', algorithm: 'gcra', burst: 2, name: 'own' } } }, ok)
  await app.ready()
  t.teardown(() => app.close())
  const [orders, , own] = app.rateLimit.policies()
  t.match(orders, { method: 'GET', url: '/orders/:id', limit: { limit: 120, windowMs: 60_000, algorithm: 'sliding-window', fromDefault: true, by: ['ip'] } })
  t.match(own, { limit: { name: 'own', limit: 5, windowMs: 1000, burst: 2, algorithm: 'gcra', fromDefault: false, onRedisError: 'open' } })
})

test('routes declared before the plugin loaded fail ready instead of running unlimited', async (t) => {
  const app = Fastify()
  app.get('/early', ok)
  // Not awaited: Fastify runs the plugin later, after /late is declared too.
  app.register(rateLimit, { store: 'memory', defaultLimit: { limit: 5, window: '1s' } })
  app.post('/late', ok)
  const error = await app.ready().then(() => undefined, (err: Error & { code?: string }) => err)
  t.equal(error?.code, 'FST_RRL_ROUTES_BEFORE_PLUGIN')
  t.match(error?.message, /GET \/early/)
  t.match(error?.message, /POST \/late/)
})

test('an invalid route block fails startup with a coded error naming the route and field', async (t) => {
  const cases: Array<[unknown, string, RegExp?]> = [
    [{ limit: 0, window: '1m' }, 'limit'],
    [{ limit: 1.5, window: '1m' }, 'limit'],
    [{ limit: -3, window: '1m' }, 'limit'],
    [{ limit: '10', window: '1m' }, 'limit'],
    [{ limit: 10, window: 'soon' }, 'window'],
    [{ limit: 10, window: 0 }, 'window'],
    [{ limit: 10, window: '2d' }, 'window'],
    [{ limit: 10, window: 86_400_001 }, 'window'],
    [{ limit: 10, window: '1m', algorithm: 'leaky' }, 'algorithm'],
    [{ limit: 10_001, window: '1m', algorithm: 'sliding-log' }, 'limit', /sliding-log/],
    [{ limit: 10, window: '1m', by: 'cookie:sid' }, 'by'],
    [{ limit: 10, window: '1m', by: [] }, 'by'],
    [{ limit: 10, window: '1m', by: 'user' }, 'by', /plugin option `user:/],
    [{ limit: 10, window: '1m', by: 'api-key' }, 'by', /plugin option `apiKey:/],
    [{ limit: 10, window: '1m', by: 'param:name' }, 'by', /no :name parameter/],
    [{ limit: 10, window: '1m', by: 'header:' }, 'by'],
    [{ limit: 10, window: '1m', burst: 5 }, 'burst', /only applies/],
    [{ limit: 10, window: '1m', algorithm: 'token-bucket', burst: 0 }, 'burst'],
    [{ limit: 10, window: '1m', cost: 11 }, 'cost'],
    [{ limit: 10, window: '1m', cost: 0 }, 'cost'],
    [{ limit: 10, window: '1m', onRedisError: 'sometimes' }, 'onRedisError'],
    [{ limit: 10, window: '1m', name: 'bad\nname' }, 'name'],
    [{ limit: 10, window: '1m', name: '' }, 'name'],
    [{ limit: 10, window: '1m', limt: 5 }, 'limt', /not a rate limit field/],
    [[], 'rateLimit'],
    [[{ limit: 10, window: '1m' }, { limit: 0, window: '1h' }], 'rateLimit\\[1\\]\\.limit'],
    [[{ limit: 10, window: '1m', name: 'a' }, { limit: 100, window: '1h', name: 'a' }], 'name', /used by two blocks/],
    [{ limit: 10, window: '1m', mode: 'dry' }, 'mode'],
    [{ limit: 10, window: '1m', refundOn: true }, 'refundOn'],
    [{ limit: 10, window: '1m', algorithm: 'sliding-log', refundOn: () => true }, 'refundOn', /sliding-log/],
    [{ limit: { pro: 10 }, window: '1m' }, 'limit', /fallback tier 'default'/],
    [{ limit: { default: 10, 'bad tier': 5 }, window: '1m' }, 'limit', /tier name/],
    ['fast', 'rateLimit']
  ]
  for (const [block, field, message] of cases) {
    const app = await buildApp({ store: 'memory' })
    const error = await (async () => {
      try {
        app.get('/orders/:id', { config: { rateLimit: block as never } }, ok)
        await app.ready()
      } catch (err) {
        return err as Error & { code?: string }
      }
      return undefined
    })()
    const label = JSON.stringify(block)
    t.equal(error?.code, 'FST_RRL_INVALID_BLOCK', label)
    t.match(error?.message, new RegExp(`route GET /orders/:id: \`${field}\``), label)
    if (message !== undefined) t.match(error?.message, message, label)
    await app.close().catch(() => {})
  }
})

test('valid durations and identity parts compile', async (t) => {
  const app = await buildApp({ store: 'memory', user: () => undefined, apiKey: (req) => req.headers['x-api-key'] as string | undefined })
  const windows = ['500ms', '1s', '1m', '15m', '1h', '1d', 250]
  windows.forEach((window, index) => app.get(`/w${index}`, { config: { rateLimit: { limit: 3, window } } }, ok))
  app.post('/p/:id', { config: { rateLimit: { limit: 3, window: '1s', by: ['ip', 'user', 'api-key', 'header:X-Tenant', 'param:id', 'body:username', (req) => req.headers.host] } } }, ok)
  await app.ready()
  t.teardown(() => app.close())
  const summaries = app.rateLimit.policies().filter((p) => p.method !== 'HEAD')
  t.same(summaries.slice(0, windows.length).map((p) => p.limit !== false && p.limit.windowMs), [500, 1000, 60_000, 900_000, 3_600_000, 86_400_000, 250])
})
