import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, setupRedisApp, setupStoreApp } from './helpers/app.js'
import { createClient, privateRedis } from './helpers/redis.js'

const ok = async () => ({ ok: true })

const setup = async (t: Test, options: Parameters<typeof buildApp>[0] = {}, serverOptions = {}) => await setupRedisApp(t, 't', options, serverOptions)

async function statuses (app: FastifyInstance, n: number, url: string, headers: Record<string, string> = {}): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < n; i++) codes.push((await app.inject({ url, headers })).statusCode)
  return codes
}

test('admitted requests carry IETF headers; the one over the limit gets a 429 problem', async (t) => {
  const { app } = await setup(t)
  app.get('/orders/:id', { config: { rateLimit: { limit: 3, window: '1m', name: 'orders', algorithm: 'fixed-window' } } }, ok)
  await app.ready()
  const first = await app.inject('/orders/1')
  t.equal(first.statusCode, 200)
  t.equal(first.headers['ratelimit-policy'], '"orders";q=3;w=60')
  t.match(first.headers.ratelimit, /^"orders";r=2;t=\d+$/)
  await app.inject('/orders/2')
  await app.inject('/orders/3')
  const rejected = await app.inject('/orders/4?token=secret')
  t.equal(rejected.statusCode, 429)
  t.equal(rejected.headers['content-type'], 'application/problem+json; charset=utf-8')
  const retryAfter = Number(rejected.headers['retry-after'])
  t.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`)
  t.equal(rejected.headers.ratelimit, `"orders";r=0;t=${retryAfter}`, 't is when one more unit frees: with r=0 and one-unit requests, the retry itself')
  t.same(rejected.json(), {
    type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
    title: 'Too Many Requests',
    status: 429,
    detail: `Rate limit exceeded; retry in ${retryAfter} second${retryAfter === 1 ? '' : 's'}.`,
    instance: '/orders/4',
    'violated-policies': ['orders']
  })
})

test('Retry-After is the exact wait rounded up, and the request is admitted then', async (t) => {
  const { app, clock } = await setup(t)
  app.get('/x', { config: { rateLimit: { limit: 2, window: '10s', algorithm: 'sliding-log' } } }, ok)
  await app.ready()
  await app.inject('/x')
  clock.advance(2500)
  await app.inject('/x')
  const rejected = await app.inject('/x')
  t.equal(rejected.statusCode, 429)
  t.equal(rejected.headers['retry-after'], '8', '7.5 s until the first entry leaves, rounded up')
  clock.advance(7499)
  t.equal((await app.inject('/x')).statusCode, 429, 'one ms early is still refused')
  clock.advance(1)
  t.equal((await app.inject('/x')).statusCode, 200)
})

test('sliding-window (the default) admits no request over the limit just across a window boundary', async (t) => {
  for (const store of ['redis', 'memory'] as const) {
    await t.test(store, async (t) => {
      // the test clock starts on a minute boundary, so also on a 10 s one
      const { app, clock } = await setupStoreApp(t, store, 'swb')
      app.get('/one', { config: { rateLimit: { limit: 1, window: '1m', name: 'one' } } }, ok)
      // the same block beside another: the multi-block path decides alike
      app.get('/two', { config: { rateLimit: [{ limit: 1, window: '1m' }, { limit: 100, window: '1h', algorithm: 'fixed-window' }] } }, ok)
      app.get('/three', { config: { rateLimit: { limit: 3, window: '10s' } } }, ok)
      await app.ready()

      clock.advance(59_999)
      t.same(await statuses(app, 1, '/one'), [200], 'one request 1 ms before the boundary')
      t.same(await statuses(app, 1, '/two'), [200])
      clock.advance(2)
      t.match(await app.rateLimit.peek('GET /one', { ip: '127.0.0.1' }), { allowed: false, remaining: 0 }, 'a peek 2 ms later, across the boundary, is refused')
      const refused = await app.inject('/one')
      t.equal(refused.statusCode, 429, 'the previous window\'s one request still weighs 1: no second request')
      t.equal(refused.headers['retry-after'], '60', 'admitted again when that window has left the trailing minute, 59,999 ms on')
      t.equal((await app.inject('/two')).statusCode, 429, 'the multi-block path refuses it too')

      // 3 at 9,999 ms into a 10 s window (69,999): a fourth 2 ms later is refused, and admitted
      // once 3 × (W - e) <= 2 × W, at e = 3,334
      clock.advance(9998)
      t.same(await statuses(app, 3, '/three'), [200, 200, 200])
      clock.advance(2)
      t.same(await statuses(app, 1, '/three'), [429], 'no fourth across the boundary')
      clock.advance(3332)
      t.same(await statuses(app, 1, '/three'), [429], 'still refused at e = 3,333')
      clock.advance(1)
      t.same(await statuses(app, 2, '/three'), [200, 429], 'a fourth at e = 3,334, then the estimate is at the limit again')
    })
  }
})

test('the route template keys the bucket: /orders/1 and /orders/2 share it; other routes do not', async (t) => {
  const { app } = await setup(t)
  app.get('/orders/:id', { config: { rateLimit: { limit: 2, window: '1m' } } }, ok)
  app.get('/items/:id', { config: { rateLimit: { limit: 2, window: '1m' } } }, ok)
  await app.ready()
  t.same(await statuses(app, 1, '/orders/1'), [200])
  t.same(await statuses(app, 2, '/orders/2'), [200, 429])
  t.same(await statuses(app, 3, '/items/9'), [200, 200, 429])
})

test('HEAD requests count against the GET bucket of the same route', async (t) => {
  const { app } = await setup(t)
  app.get('/page', { config: { rateLimit: { limit: 2, window: '1m' } } }, ok)
  await app.ready()
  t.equal((await app.inject({ method: 'HEAD', url: '/page' })).statusCode, 200)
  t.equal((await app.inject({ method: 'GET', url: '/page' })).statusCode, 200)
  t.equal((await app.inject({ method: 'HEAD', url: '/page' })).statusCode, 429)
})

test('every key the plugin writes has a TTL and follows the key scheme', async (t) => {
  const { app, redis, prefix } = await setup(t, { user: (req) => req.headers['x-user'] as string | undefined })
  const algorithms = ['fixed-window', 'sliding-window', 'sliding-log', 'token-bucket', 'gcra'] as const
  for (const algorithm of algorithms) {
    app.get(`/${algorithm}/:id`, { config: { rateLimit: { limit: 5, window: '1m', algorithm } } }, ok)
  }
  await app.ready()
  for (const algorithm of algorithms) {
    await app.inject({ url: `/${algorithm}/1`, headers: { 'x-user': 'alice' } })
    await app.inject(`/${algorithm}/2`)
  }
  const keys = (await redis.keys(`${prefix}:*`)).sort()
  t.equal(keys.length, 10, 'one key per algorithm and identity')
  for (const key of keys) {
    const ttl = await redis.pttl(key)
    t.ok(ttl > 0 && ttl <= 120_000, `${key} expires (pttl ${ttl})`)
    t.match(key, new RegExp(`^${prefix}:\\{GET:/[a-z-]+/:id\\|(u=[A-Za-z0-9_-]{22}|u~127\\.0\\.0\\.1)\\}:(FC|SW|sl|TB|GC)60000$`))
    t.notMatch(key, /alice/, 'identity values are hashed')
  }
})

test('FUNCTION FLUSH and SCRIPT FLUSH between requests: the next decision loads the library again and still counts', async (t) => {
  // A flush runs only on a server this test started (REDIS_URL's server is shared with everything else).
  const { server, admin } = await privateRedis(t)
  const redis = createClient(server)
  const app = await buildApp({ redis, prefix: 't', timeout: 5000 })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  app.get('/x', { config: { rateLimit: { limit: 2, window: '1m', algorithm: 'token-bucket' } } }, ok)
  await app.ready()
  t.equal((await app.inject('/x')).statusCode, 200)
  await admin.call('FUNCTION', 'FLUSH')
  await admin.script('FLUSH')
  t.equal((await app.inject('/x')).statusCode, 200)
  t.equal((await app.inject('/x')).statusCode, 429, 'the count survived the flush')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('by body field: runs in preValidation and keys on the hashed field', async (t) => {
  const { app } = await setup(t)
  app.post('/login', { config: { rateLimit: { algorithm: 'sliding-log', limit: 2, window: '15m', by: ['ip', 'body:username'] } } }, async (req) => ({ rl: req.rateLimit }))
  await app.ready()
  const login = async (username?: string) => await app.inject({ method: 'POST', url: '/login', payload: username === undefined ? {} : { username } })
  t.equal((await login('alice')).statusCode, 200)
  t.equal((await login('alice')).statusCode, 200)
  t.equal((await login('alice')).statusCode, 429)
  t.equal((await login('bob')).statusCode, 200, 'another username from the same IP has its own bucket')
  const anonymous = await login()
  t.equal(anonymous.statusCode, 200, 'a missing field falls back to the IP, in its own bucket')
  t.match(anonymous.json(), { rl: { allowed: true, limit: 2, remaining: 1, degraded: false } })
})

test('identity kinds: user, api key, header and param each get their own bucket', async (t) => {
  const { app } = await setup(t, {
    user: (req) => req.headers['x-user'] as string | undefined,
    apiKey: (req) => req.headers['x-api-key'] as string | undefined
  })
  app.get('/u', { config: { rateLimit: { limit: 1, window: '1m', by: 'user' } } }, ok)
  app.get('/k', { config: { rateLimit: { limit: 1, window: '1m', by: 'api-key' } } }, ok)
  app.get('/h', { config: { rateLimit: { limit: 1, window: '1m', by: 'header:x-tenant' } } }, ok)
  app.get('/p/:tenant', { config: { rateLimit: { limit: 1, window: '1m', by: 'param:tenant' } } }, ok)
  app.get('/d', { config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
  await app.ready()
  t.same(await statuses(app, 2, '/u', { 'x-user': 'a' }), [200, 429])
  t.same(await statuses(app, 1, '/u', { 'x-user': 'b' }), [200])
  t.same(await statuses(app, 2, '/k', { 'x-api-key': 'k1' }), [200, 429])
  t.same(await statuses(app, 1, '/k', { 'x-api-key': 'k2' }), [200])
  t.same(await statuses(app, 2, '/h', { 'x-tenant': 't1' }), [200, 429])
  t.same(await statuses(app, 1, '/h', { 'x-tenant': 't2' }), [200])
  t.same(await statuses(app, 2, '/p/one'), [200, 429])
  const rejected = await app.inject('/p/one')
  t.equal(rejected.json().instance, '/p/:tenant', 'a path param identity is not echoed back')
  t.same(await statuses(app, 1, '/p/two'), [200])
  t.same(await statuses(app, 2, '/d', { 'x-user': 'a' }), [200, 429], 'default identity: the user')
  t.same(await statuses(app, 1, '/d', { 'x-user': 'b' }), [200])
  t.same(await statuses(app, 2, '/d'), [200, 429], 'default identity without a user: the IP')
})

test('trustProxy decides the client IP; X-Forwarded-For is not parsed by the plugin', async (t) => {
  const trusted = await setup(t, {}, { trustProxy: ['127.0.0.1'] })
  trusted.app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', by: 'ip' } } }, ok)
  await trusted.app.ready()
  t.same(await statuses(trusted.app, 2, '/x', { 'x-forwarded-for': '203.0.113.7' }), [200, 429])
  t.same(await statuses(trusted.app, 1, '/x', { 'x-forwarded-for': '203.0.113.8' }), [200], 'behind a trusted proxy each client has its own bucket')

  const untrusted = await setup(t)
  untrusted.app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', by: 'ip' } } }, ok)
  await untrusted.app.ready()
  t.same(await statuses(untrusted.app, 1, '/x', { 'x-forwarded-for': '203.0.113.7' }), [200])
  t.same(await statuses(untrusted.app, 1, '/x', { 'x-forwarded-for': '203.0.113.8' }), [429], 'without trustProxy a forged header changes nothing')
})

test('legacy and both header modes, and headers: false', async (t) => {
  for (const [mode, expectIetf, expectLegacy] of [['legacy', false, true], ['both', true, true], [false, false, false]] as const) {
    const { app } = await setup(t, { headers: mode })
    app.get('/x', { config: { rateLimit: { limit: 2, window: '30s', algorithm: 'fixed-window' } } }, ok)
    await app.ready()
    const res = await app.inject('/x')
    t.equal(res.headers['ratelimit'] !== undefined, expectIetf, `${mode}: ietf`)
    t.equal(res.headers['x-ratelimit-limit'] !== undefined, expectLegacy, `${mode}: legacy`)
    if (expectLegacy) {
      t.equal(res.headers['x-ratelimit-limit'], '2')
      t.equal(res.headers['x-ratelimit-remaining'], '1')
      const reset = Number(res.headers['x-ratelimit-reset'])
      t.ok(reset >= 1 && reset <= 30, `reset in seconds from now (${reset})`)
    }
    await app.inject('/x')
    const rejected = await app.inject('/x')
    t.equal(rejected.statusCode, 429)
    t.ok(Number(rejected.headers['retry-after']) >= 1, 'Retry-After is sent in every mode')
  }
})

test('cost: a number or a function; a broken cost function is charged 1 and logged, never a 500', async (t) => {
  const { app } = await setup(t)
  app.get('/fixed', { config: { rateLimit: { limit: 5, window: '1m', cost: 2 } } }, ok)
  app.get('/fn', {
    config: {
      rateLimit: {
        limit: 5,
        window: '1m',
        cost: (req) => {
          const value = req.headers['x-cost']
          if (value === 'throw') throw new Error('boom')
          return Number(value)
        }
      }
    }
  }, ok)
  await app.ready()
  t.same(await statuses(app, 3, '/fixed'), [200, 200, 429])
  t.equal((await app.inject({ url: '/fn', headers: { 'x-cost': '3' } })).statusCode, 200)
  t.equal((await app.inject({ url: '/fn', headers: { 'x-cost': '3' } })).statusCode, 429)
  for (const bad of ['NaN', '-1', '0', '1.5', 'throw', '1e12']) {
    const res = await app.inject({ url: '/fn', headers: { 'x-cost': bad } })
    t.not(res.statusCode, 500, `cost ${bad}`)
  }
  const last = await app.inject({ url: '/fn', headers: { 'x-cost': 'throw' } })
  t.equal(last.statusCode, 429, 'bad costs were charged 1 each and used up the quota')
})

test('request.rateLimit holds the decision for handlers', async (t) => {
  const { app } = await setup(t)
  app.get('/x', { config: { rateLimit: { limit: 3, window: '1m', name: 'x' } } }, async (req) => req.rateLimit)
  await app.ready()
  const body = (await app.inject('/x')).json()
  t.match(body, { allowed: true, limit: 3, remaining: 2, retryAfterMs: 0, policy: 'x', degraded: false })
  t.ok(body.resetMs > 0)
})

test('opted-out routes never touch Redis', async (t) => {
  const { app, redis, prefix } = await setup(t)
  app.get('/health', { config: { rateLimit: false } }, async (req) => ({ rl: req.rateLimit }))
  await app.ready()
  const res = await app.inject('/health')
  t.same(res.json(), { rl: null })
  t.equal(res.headers.ratelimit, undefined)
  t.same(await redis.keys(`${prefix}:*`), [])
})

test('rejections are logged once per identity per window with route, identity kind, policy and limit, never the identity value', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const { app } = await setup(t, {}, { logger: { level: 'info', stream } })
  app.post('/login', { config: { rateLimit: { algorithm: 'sliding-log', limit: 1, window: '1m', by: ['ip', 'body:username'], name: 'login' } } }, ok)
  await app.ready()
  for (let i = 0; i < 3; i++) await app.inject({ method: 'POST', url: '/login', payload: { username: 'carol-secret-name' } })
  const rejections = lines.filter((line) => line.msg === 'rate limit exceeded')
  t.equal(rejections.length, 1, 'two rejections of one identity in one window: one line, not one per request')
  t.match(rejections[0], { route: 'POST /login', identityKind: ['ip', 'body'], policy: 'login', limit: 1 })
  await app.inject({ method: 'POST', url: '/login', payload: { username: 'another-user' } })
  t.equal(lines.filter((line) => line.msg === 'rate limit exceeded').length, 1, 'another identity is admitted: nothing logged')
  await app.inject({ method: 'POST', url: '/login', payload: { username: 'another-user' } })
  t.equal(lines.filter((line) => line.msg === 'rate limit exceeded').length, 2, 'another identity rejected: its own line')
  t.notMatch(JSON.stringify(lines), /carol-secret-name/, 'the username appears in no log line')
})
