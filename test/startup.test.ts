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

test('a redis option that is not a supported client is refused at register, naming what was passed', async (t) => {
  const app = Fastify()
  app.register(rateLimit, { redis: {} as never })
  await t.rejects(async () => { await app.ready() }, { code: 'FST_RRL_UNSUPPORTED_CLIENT', message: /option `redis` is a plain object/ })
})

test('every plugin option is validated at register with a coded error naming it', async (t) => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ store: 'disk' }, /`store`/],
    [{ prefix: 'a{b}' }, /`prefix`/],
    [{ prefix: 'x'.repeat(21) }, /`prefix`/],
    [{ timeout: 0 }, /`timeout`/],
    [{ timeout: 1.5 }, /`timeout`/],
    [{ headers: 'draft-8' }, /`headers`/],
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

test('routes declared before the plugin loaded are refused with a coded 500, logged once per route, never served unlimited', async (t) => {
  const lines: Array<{ level: number, msg: string, err?: { code?: string, message?: string } }> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as (typeof lines)[number]) } }
  const app = Fastify({ logger: { level: 'error', stream } })
  t.teardown(async () => { await app.close() })
  let served = 0
  app.get('/early', async () => { served++; return 'early' })
  // Not awaited: Fastify runs the plugin later, after /late is declared too.
  app.register(rateLimit, { store: 'memory', defaultLimit: { limit: 5, window: '1s' } })
  app.post('/late', async () => { served++; return 'late' })
  await app.ready()
  for (const [method, url] of [['GET', '/early'], ['HEAD', '/early'], ['POST', '/late'], ['GET', '/early'], ['POST', '/late']] as const) {
    const reply = await app.inject({ method, url })
    t.equal(reply.statusCode, 500, `${method} ${url}: refused`)
    t.notOk(reply.headers['ratelimit-policy'], `${method} ${url}: no limit applied`)
    if (method !== 'HEAD') t.match(JSON.parse(reply.body), { status: 500, code: 'FST_RRL_ROUTE_NOT_SEEN' })
  }
  t.equal(served, 0, 'no handler ran')
  const logged = lines.filter((line) => line.err?.code === 'FST_RRL_ROUTE_NOT_SEEN')
  t.same(logged.map((line) => line.err?.message?.split(' was')[0]), ['Route GET /early', 'Route HEAD /early', 'Route POST /late'], 'once per route, naming it')
  t.match(logged[0]?.err?.message, /await app\.register\(rateLimit/, 'and the fix')
  t.equal((await app.inject('/missing')).statusCode, 404, 'a 404 is not refused')
})

test('an invalid route block fails startup with a coded error naming the route and field', async (t) => {
  const cases: Array<[unknown, string, RegExp?]> = [
    [{ limit: 0, window: '1m' }, 'limit'],
    [{ limit: 1.5, window: '1m' }, 'limit'],
    [{ limit: -3, window: '1m' }, 'limit'],
    [{ limit: '10', window: '1m' }, 'limit', /\(got "10"\)/],
    [{ limit: 10, window: '1m', cost: '2' }, 'cost', /\(got "2"\)/],
    [{ limit: 10, window: 'soon' }, 'window'],
    [{ limit: 10, window: 0 }, 'window'],
    [{ limit: 10, window: '367d' }, 'window'],
    [{ limit: 10, window: 366 * 86_400_000 + 1 }, 'window'],
    [{ limit: 10, window: '1M' }, 'window'],
    [{ limit: 10, window: '1d', period: 'month' }, 'period'],
    [{ limit: 10, period: 'month', timeZone: 'Nowhere/Town' }, 'timeZone'],
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

test('derived policy names fit any route: readable, at most 64 printable ASCII characters, stable and distinct per route', async (t) => {
  const long = '/api/v1/organizations/:orgId/projects/:projectId/environments/:envId/deployments'
  const routes = [
    long,
    long + '/:deploymentId', // shares the first 64 characters of its name with the one above
    '/' + Array.from({ length: 40 }, (_, i) => `level${i}/:p${i}`).join('/'),
    '/' + 'x'.repeat(500),
    '/café/ünïcode/日本語/:id',
    '/café/ünïcode/中文/:id', // the same readable slug as the one above
    '/files/*',
    '/user_info',
    '/orders/:id',
    '/'
  ]
  const build = async () => {
    const app = await buildApp({ store: 'memory', defaultLimit: { limit: 5, window: '1m' } })
    for (const url of routes) app.get(url, ok)
    // Several blocks: the `-1` of the second block still fits.
    app.post(long, { config: { rateLimit: [{ limit: 5, window: '1s' }, { limit: 50, window: '1h' }] } }, ok)
    await app.ready()
    t.teardown(async () => { await app.close() })
    return app
  }
  const app = await build()
  const named = app.rateLimit.policies().filter((p) => p.method !== 'HEAD' && p.limit !== false)
  const names = named.flatMap((p) => p.limits.map((block) => block.name))
  t.equal(names.length, routes.length + 2)
  for (const name of names) t.match(name, /^[\x21-\x7e]{1,64}$/, `${name}: 1 to 64 printable ASCII characters`)
  t.equal(new Set(names).size, names.length, 'no two routes or blocks share a derived name')
  const nameOf = (method: string, url: string) => named.find((p) => p.method === method && p.url === url)?.limits.map((block) => block.name)
  t.match(nameOf('GET', long), [/^get-api-v1-organizations-orgId-projects-projectId-envir-[0-9a-f]{8}$/], 'a readable prefix and a short hash, 64 characters')
  t.match(nameOf('POST', long), [/^post-api-v1-.*-[0-9a-f]{8}$/, /^post-api-v1-.*-[0-9a-f]{8}-1$/])
  t.same(nameOf('GET', '/orders/:id'), ['get-orders-id'], 'a short plain route keeps its plain name')
  t.same(nameOf('GET', '/'), ['get-root'])
  t.match(nameOf('GET', '/café/ünïcode/日本語/:id'), [/^get-caf-n-code-id-[0-9a-f]{8}$/])

  const again = await build()
  t.same(again.rateLimit.policies().filter((p) => p.method !== 'HEAD' && p.limit !== false).flatMap((p) => p.limits.map((block) => block.name)), names, 'the same names on every start')

  const res = await app.inject('/api/v1/organizations/o1/projects/p1/environments/e1/deployments')
  t.equal(res.statusCode, 200, 'the long route serves requests')
  t.equal(res.headers['ratelimit-policy'], `"${nameOf('GET', long)?.[0] ?? ''}";q=5;w=60`)
  const unicode = await app.inject(encodeURI('/café/ünïcode/日本語/7'))
  t.equal(unicode.statusCode, 200)
  t.match(unicode.headers['ratelimit-policy'], /^"get-caf-n-code-id-[0-9a-f]{8}";q=5;w=60$/)
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

/** What startup rejects with: the plugin registered with `options`, one route declaring `block` (none when undefined). */
async function startupError (options: Record<string, unknown>, block?: unknown): Promise<(Error & { code?: string }) | undefined> {
  const app = Fastify()
  try {
    await app.register(rateLimit, { store: 'memory', ...options } as never)
    if (block !== undefined) app.get('/orders/:id', { config: { rateLimit: block as never } }, ok)
    await app.ready()
  } catch (error) {
    return error as Error & { code?: string }
  } finally {
    await app.close().catch(() => {})
  }
  return undefined
}

test('an unknown route block field is named with a hint: a near miss, a peer\'s name, a plugin option', async (t) => {
  const byIp = (): string => 'x'
  const cases: Array<[unknown, string, RegExp]> = [
    [{ limt: 5, window: '1m' }, 'limt', /did you mean `limit`\? \(known: limit, window,/],
    [{ limit: 5, window: '1m', algorithm: 'token-bucket', burts: 3 }, 'burts', /did you mean `burst`\?/],
    [{ limit: 5, period: 'day', timezone: 'UTC' }, 'timezone', /did you mean `timeZone`\?/],
    [{ max: 5, timeWindow: '1m' }, 'max', /did you mean `limit`\? `max` is @fastify\/rate-limit's name.*a `max` function is `requestLimit` here/],
    [{ limit: 5, timeWindow: '1 minute' }, 'timeWindow', /did you mean `window`\? @fastify\/rate-limit's `timeWindow`: the same strings/],
    [{ limit: 5, windowMs: 60_000 }, 'windowMs', /did you mean `window`\? express-rate-limit's `windowMs` is milliseconds; `window` takes milliseconds or a string/],
    [{ limit: 5, window: '1m', keyGenerator: byIp }, 'keyGenerator', /did you mean `by`\?/],
    [{ limit: 5, window: '1m', allowList: ['10.0.0.1'] }, 'allowList', /did you mean `skip`\?.*the plugin option `allowList`/],
    [{ limit: 5, window: '1m', skipFailedRequests: true }, 'skipFailedRequests', /did you mean `refundOn`\?/],
    [{ limit: 5, window: '1m', exponentialBackoff: true }, 'exponentialBackoff', /did you mean `penalty`\?/],
    [{ limit: 5, window: '1m', ipv6Subnet: 56 }, 'ipv6Subnet', /did you mean the plugin option `ipv6Subnet`\? It is set once at register/],
    [{ limit: 5, window: '1m', user: byIp }, 'user', /did you mean `by: 'user'`\?/],
    [[{ limit: 5, window: '1m' }, { limt: 50, window: '1h' }], 'rateLimit\\[1\\]\\.limt', /did you mean `limit`\?/]
  ]
  for (const [block, field, message] of cases) {
    const error = await startupError({}, block)
    const label = JSON.stringify(block)
    t.equal(error?.code, 'FST_RRL_INVALID_BLOCK', label)
    t.match(error?.message, new RegExp(`route GET /orders/:id: \`${field}\` is not a rate limit field; ${message.source}`), label)
  }
  const far = await startupError({}, { limit: 5, window: '1m', frobnicate: 1 })
  t.match(far?.message, /`frobnicate` is not a rate limit field \(known: limit, window,/, 'no hint when nothing is near')
})

test('an unknown field of defaultLimit or globalLimits fails register with the same hint', async (t) => {
  const fromDefault = await startupError({ defaultLimit: { max: 100, timeWindow: '1m' } })
  t.equal(fromDefault?.code, 'FST_RRL_INVALID_BLOCK')
  t.match(fromDefault?.message, /\(from defaultLimit\): `max` is not a rate limit field; did you mean `limit`\?/)
  const global = await startupError({ globalLimits: [{ limit: 100, windowMs: 60_000 }] })
  t.equal(global?.code, 'FST_RRL_INVALID_BLOCK')
  t.match(global?.message, /globalLimits\[0\]: `windowMs` is not a rate limit field; did you mean `window`\?/)
})

test('an unknown plugin option is named with a hint: a near miss, a block field, a peer\'s name', async (t) => {
  const cases: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ timout: 100 }, 'timout', /did you mean `timeout`\?/],
    [{ allowlist: ['10.0.0.1'] }, 'allowlist', /did you mean `allowList`\?/],
    [{ limit: 5 }, 'limit', /did you mean a block's `limit`\? Blocks are defaultLimit, globalLimits/],
    [{ window: '1m' }, 'window', /did you mean a block's `window`\?/],
    [{ max: 100, timeWindow: '1 minute' }, 'max', /did you mean `defaultLimit: \{ limit, window \}`\? @fastify\/rate-limit's `max` is a block's `limit` here/],
    [{ timeWindow: '1 minute' }, 'timeWindow', /did you mean `defaultLimit: \{ limit, window \}`\?/],
    [{ windowMs: 60_000 }, 'windowMs', /did you mean `defaultLimit: \{ limit, window \}`\? express-rate-limit's `windowMs` is milliseconds/],
    [{ keyGenerator: () => 'x' }, 'keyGenerator', /did you mean the options `user` and `apiKey`, or a block's `by`\?/],
    [{ global: false }, 'global', /did you mean `defaultLimit`\?/],
    [{ nameSpace: 'app' }, 'nameSpace', /did you mean `prefix`\?/],
    [{ skip: () => false }, 'skip', /did you mean `allowList`\?/],
    [{ skipOnError: true }, 'skipOnError', /did you mean `onRedisError`\?/],
    [{ errorResponseBuilder: () => ({}) }, 'errorResponseBuilder', /did you mean `replyBuilder` \(or `useErrorHandler`\)\?/],
    [{ standardHeaders: true }, 'standardHeaders', /did you mean `headers`\?/]
  ]
  for (const [options, name, message] of cases) {
    const error = await startupError(options)
    t.equal(error?.code, 'FST_RRL_INVALID_OPTION', name)
    t.match(error?.message, new RegExp(`option \`${name}\` is not an option; ${message.source}`), name)
  }
  const far = await startupError({ redisClient: {} })
  t.match(far?.message, /`redisClient` is not an option \(known: redis, store,/, 'no hint when nothing is near')
})
