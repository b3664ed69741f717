/**
 * `settle` (issue 20, item 3): a block charges `cost` at admission (the
 * reservation) and, when the raw response closes, the difference between
 * what `settle(request, reply)` answers and the reservation is charged or
 * given back, in one store call. Usage may end over the limit (an overdraft):
 * the next requests wait until it is back under, Retry-After saying how long.
 * Held on Redis and on the memory store with an injected clock.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { PassThrough } from 'node:stream'
import { test, type Test } from 'tap'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import type { RateLimitPluginOptions } from '../lib/index.js'
import { buildApp, setupRedisApp, TestClock } from './helpers/app.js'
import { createClient, getRedis, readState } from './helpers/redis.js'
import { memoryAlgorithms } from '../lib/kinds/window/memory/algorithms.js'
import type { GcraState, TokenBucketState } from '../lib/kinds/window/memory/buckets.js'

const SETTLING = ['fixed-window', 'sliding-window', 'token-bucket', 'gcra'] as const
const STORES = ['redis', 'memory'] as const
const IP = { ip: '127.0.0.1' }
const never = new Promise<never>(() => {})

interface Setup { app: FastifyInstance, clock: TestClock, lines: Array<Record<string, unknown>> }

/** An app on either store with a test clock (aligned to a minute) whose warn lines are kept. */
async function setup (t: Test, store: 'redis' | 'memory', options: RateLimitPluginOptions = {}): Promise<Setup> {
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } }
  const serverOptions: FastifyServerOptions = { logger: { level: 'warn', stream } }
  if (store === 'redis') {
    const { app, clock } = await setupRedisApp(t, 'st', options, serverOptions)
    return { app, clock, lines }
  }
  const clock = new TestClock()
  const app = await buildApp({ store: 'memory', clock: clock.read, ...options }, serverOptions)
  t.teardown(async () => { await app.close() })
  return { app, clock, lines }
}

/** The units a request used, from its `x-used` header (a sync settle: applied before the caller's next request). */
const used = (request: FastifyRequest): number => Number(request.headers['x-used'])

async function call (app: FastifyInstance, url: string, units?: number): Promise<{ statusCode: number, retryAfter: string | undefined }> {
  const response = await app.inject({ url, headers: units === undefined ? {} : { 'x-used': String(units) } })
  return { statusCode: response.statusCode, retryAfter: response.headers['retry-after'] as string | undefined }
}

async function remaining (app: FastifyInstance, target: string): Promise<number> {
  return (await app.rateLimit.peek(target, IP)).remaining
}

/** Polls until `done` holds (a store call after a close, or an async settle, runs on its own schedule); false after 5 s. */
async function eventually (done: () => boolean | Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + 5000
  while (Date.now() < deadline) {
    if (await done()) return true
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  return false
}

for (const store of STORES) {
  test(`${store}: settle charges more, less and exactly the reservation`, async (t) => {
    const { app, clock } = await setup(t, store)
    for (const algorithm of SETTLING) {
      app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: 20, window: '1m', cost: 3, settle: used } } }, async () => 'ok')
    }
    await app.ready()
    clock.now = Math.ceil(clock.now / 60_000) * 60_000
    for (const algorithm of SETTLING) {
      const target = `GET /${algorithm}`
      t.equal((await call(app, `/${algorithm}`, 3)).statusCode, 200)
      t.equal(await remaining(app, target), 17, `${algorithm}: exactly the reservation: 3 stay charged`)
      await call(app, `/${algorithm}`, 8)
      t.equal(await remaining(app, target), 9, `${algorithm}: 8 used of 3 reserved: 5 more charged`)
      await call(app, `/${algorithm}`, 1)
      t.equal(await remaining(app, target), 8, `${algorithm}: 1 used of 3 reserved: 2 given back`)
      await call(app, `/${algorithm}`, 0)
      t.equal(await remaining(app, target), 8, `${algorithm}: 0 used: the whole reservation back`)
    }
    t.equal(app.rateLimit.stats().settled, 12, 'every settle that changed usage is counted (the exact ones are not)')
    t.match(app.rateLimit.policies().find((route) => route.url === '/gcra')?.limits[0], { settles: true, refunds: false })
  })

  test(`${store}: an overdraft refuses the next requests for exactly as long as it lasts`, async (t) => {
    const { app, clock } = await setup(t, store)
    for (const algorithm of SETTLING) {
      app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: 10, window: '10s', settle: used } } }, async () => 'ok')
    }
    await app.ready()
    // fixed and sliding window: 16 used of 10 (the window ends in 10 s; the sliding estimate
    // falls to 9 once 16 × (W - e) <= 9 × W in the next window, at e = 4375: after 14.375 s);
    // token bucket and gcra at one unit per second: 7 s.
    const waits: Record<typeof SETTLING[number], number> = { 'fixed-window': 10_000, 'sliding-window': 14_375, 'token-bucket': 7000, gcra: 7000 }
    for (const algorithm of SETTLING) {
      clock.now = Math.ceil(clock.now / 60_000) * 60_000
      const url = `/${algorithm}`
      await call(app, url, 6)
      t.equal((await call(app, url, 10)).statusCode, 200, `${algorithm}: admitted with 4 left, then used 10: 6 over the limit`)
      t.equal(await remaining(app, `GET ${url}`), 0, `${algorithm}: nothing left, never below 0`)
      const refused = await call(app, url, 1)
      t.equal(refused.statusCode, 429, `${algorithm}: the overdraft is not erased`)
      t.equal(refused.retryAfter, String(Math.ceil(waits[algorithm] / 1000)), `${algorithm}: Retry-After says how long`)
      clock.advance(waits[algorithm] - 1)
      t.equal((await call(app, url, 1)).statusCode, 429, `${algorithm}: still refused 1 ms before`)
      clock.advance(1)
      t.equal((await call(app, url, 1)).statusCode, 200, `${algorithm}: admitted once usage is back under the limit`)
    }
  })

  test(`${store}: an overdraft is kept up to one capacity over the limit`, async (t) => {
    const { app, clock } = await setup(t, store)
    app.get('/tb', { config: { rateLimit: { algorithm: 'token-bucket', limit: 10, window: '10s', settle: used } } }, async () => 'ok')
    await app.ready()
    // three requests admitted while the bucket is full enough, each then settling 10: 30 charged
    // of a 10-token bucket; the bucket goes down to -10 (one capacity), not to -20
    await Promise.all([call(app, '/tb', 10), call(app, '/tb', 10), call(app, '/tb', 10)])
    const refused = await call(app, '/tb', 1)
    t.equal(refused.statusCode, 429)
    t.equal(refused.retryAfter, '11', '11 tokens to refill at one per second (from -10 to 1)')
    clock.advance(11_000)
    t.equal((await call(app, '/tb', 1)).statusCode, 200)
  })
}

for (const store of STORES) {
  test(`${store}: a settle that fails in any way leaves the reservation charged, logged once per burst, the response untouched`, async (t) => {
    const { app, clock, lines } = await setup(t, store, { identityTimeout: 20 })
    const kinds: Record<string, (request: FastifyRequest, reply: FastifyReply) => unknown> = {
      throws: () => { throw new Error('meter down') },
      rejects: async () => { throw new Error('meter down') },
      overrun: async () => await never,
      fraction: () => 1.5,
      negative: () => -1,
      aboveCapacity: () => 11,
      string: () => '4',
      nothing: () => undefined,
      asyncBad: async () => Number.NaN
    }
    for (const [kind, settle] of Object.entries(kinds)) {
      app.get(`/${kind}`, { config: { rateLimit: { algorithm: 'fixed-window', limit: 10, window: '1m', cost: 2, settle: settle as (request: FastifyRequest) => number } } }, async () => ({ kind }))
    }
    await app.ready()
    clock.now = Math.ceil(clock.now / 60_000) * 60_000
    for (const kind of Object.keys(kinds)) {
      const response = await app.inject(`/${kind}`)
      t.same([response.statusCode, response.json()], [200, { kind }], `${kind}: the response is untouched`)
      t.ok(await eventually(() => lines.length >= 1), `${kind}: logged`)
      t.equal(await remaining(app, `GET /${kind}`), 8, `${kind}: the reservation stays charged`)
      // a second failure in the same burst is counted, not logged
      await app.inject(`/${kind}`)
      t.ok(await eventually(async () => await remaining(app, `GET /${kind}`) === 6))
      await new Promise((resolve) => setTimeout(resolve, kind === 'overrun' ? 40 : 0))
      t.equal(lines.length, 1, `${kind}: once per burst`)
      t.match(lines[0], { level: 40, err: { code: 'FST_RRL_REQUEST_VALUE_FAILED', message: /`settle` for route GET \/\S+ \(get-\S+\)/ } })
      t.match(lines[0], { msg: /rate limit settle unusable; leaving the reservation charged \(settle must give an integer from 0 to 10\)/ })
      lines.length = 0
      clock.advance(1500)
    }
    t.equal(app.rateLimit.stats().settled, 0)
  })
}

test('refusals and degraded answers never settle', async (t) => {
  const { app } = await setup(t, 'memory')
  let calls = 0
  app.get('/keep', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1, window: '1m', settle: () => { calls++; return 1 } } } }, async () => 'ok')
  await app.ready()
  const codes = [(await call(app, '/keep')).statusCode, (await call(app, '/keep')).statusCode, (await call(app, '/keep')).statusCode]
  t.same(codes, [200, 429, 429])
  t.equal(calls, 1, 'the two refusals charged nothing and settled nothing')

  const client = createClient(await getRedis())
  const { app: down } = await setupRedisApp(t, 'stdown', { onRedisError: 'open', redis: client })
  let degraded = 0
  down.get('/open', { config: { rateLimit: { limit: 5, window: '1m', settle: () => { degraded++; return 0 } } } }, async () => 'ok')
  await down.ready()
  client.disconnect()
  const response = await down.inject('/open')
  t.equal(response.statusCode, 200)
  t.equal(down.rateLimit.stats().degraded, 1)
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(degraded, 0, 'a degraded answer charged nothing in the store: nothing to settle')
})

test('an async settle is awaited beside a sync one, each block settling its own difference', async (t) => {
  const { app } = await setup(t, 'redis')
  app.get('/two', {
    config: {
      rateLimit: [
        { name: 'tokens', algorithm: 'token-bucket', limit: 100, window: '1m', cost: 10, settle: async (request) => await Promise.resolve(used(request)) },
        { name: 'calls', algorithm: 'fixed-window', limit: 5, window: '1m' },
        { name: 'tokens-hourly', algorithm: 'fixed-window', limit: 1000, window: '1h', cost: 10, settle: (request) => used(request) }
      ]
    }
  }, async () => 'ok')
  await app.ready()
  await call(app, '/two', 25)
  t.ok(await eventually(() => app.rateLimit.stats().settled === 1))
  t.match(await app.rateLimit.peek('GET /two', IP), { policies: [{ policy: 'tokens', remaining: 75 }, { policy: 'calls', remaining: 4 }, { policy: 'tokens-hourly', remaining: 975 }] })
})

test('a difference goes to the window the reservation was charged in while it is current, else a charge goes to the current one', async (t) => {
  for (const store of STORES) {
    const { app, clock } = await setup(t, store)
    let delay = 0
    app.get('/w', { config: { rateLimit: { algorithm: 'fixed-window', limit: 10, window: '10s', cost: 4, settle: used } } }, async () => { clock.advance(delay); return 'ok' })
    await app.ready()
    clock.now = Math.ceil(clock.now / 60_000) * 60_000 + 9000
    delay = 2000
    await call(app, '/w', 1)
    t.equal(await remaining(app, 'GET /w'), 10, `${store}: a give-back after the window ended is dropped (the new window owes nothing)`)
    clock.now = Math.ceil(clock.now / 60_000) * 60_000 + 9000
    await call(app, '/w', 7)
    t.equal(await remaining(app, 'GET /w'), 7, `${store}: a charge after the window ended goes to the current one (no usage is lost)`)
  }
})

for (const store of STORES) {
  test(`${store}: a client that aborts a streaming response still settles, once`, async (t) => {
    const { app } = await setup(t, store)
    let chunks = 0
    let settles = 0
    let settledWith = -1
    app.get('/stream', {
      config: { rateLimit: { algorithm: 'fixed-window', limit: 50, window: '1m', cost: 10, settle: () => { settles++; settledWith = chunks; return chunks } } }
    }, async (req, reply) => {
      const body = new PassThrough()
      const timer = setInterval(() => { chunks++; body.write(`chunk ${chunks}\n`) }, 5)
      req.raw.once('close', () => { clearInterval(timer); body.destroy() })
      return await reply.type('text/plain').send(body)
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as AddressInfo).port
    await new Promise<void>((resolve, reject) => {
      const request = http.get({ port, host: '127.0.0.1', path: '/stream' }, (response) => {
        let seen = 0
        response.on('data', (data: Buffer) => {
          seen += data.toString().split('\n').length - 1
          if (seen >= 3) { request.destroy(); resolve() }
        })
      })
      request.on('error', () => {})
      request.setTimeout(5000, () => { reject(new Error('no chunks')) })
    })
    t.ok(await eventually(() => app.rateLimit.stats().settled === 1), 'the aborted request settled')
    t.equal(settles, 1, 'once')
    t.ok(settledWith >= 3, `${settledWith} chunks streamed before the abort`)
    t.equal(await remaining(app, 'GET /stream'), 50 - settledWith, 'charged what it streamed, not the reservation')
  })
}

test('a request cut by connectionTimeout still settles, once', async (t) => {
  const app = await buildApp({ store: 'memory' }, { connectionTimeout: 200, logger: false })
  t.teardown(async () => { await app.close() })
  let settles = 0
  app.get('/slow', { config: { rateLimit: { algorithm: 'gcra', limit: 10, window: '1m', cost: 5, settle: () => { settles++; return 2 } } } }, async (req) => {
    // the handler works until the connection goes (it would stream in a real service)
    await new Promise((resolve) => { req.raw.once('close', resolve) })
    return 'late'
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  const outcome = await new Promise<string>((resolve) => {
    const request = http.get({ port, host: '127.0.0.1', path: '/slow' }, () => { resolve('answered') })
    request.on('error', (error) => { resolve(error.message) })
  })
  t.match(outcome, /socket hang up|ECONNRESET/, 'the server cut the connection')
  t.ok(await eventually(() => app.rateLimit.stats().settled === 1), 'settled when the connection closed')
  t.equal(settles, 1)
  t.equal(await remaining(app, 'GET /slow'), 8, 'charged the 2 it used, not the 5 reserved')
})

test('a request whose client left before the decision settles at once after it', async (t) => {
  const { app } = await setup(t, 'memory', { identityTimeout: 5000 })
  let arrived = (): void => {}
  const seen = new Promise<void>((resolve) => { arrived = resolve })
  let settles = 0
  app.get('/late', {
    config: {
      rateLimit: {
        algorithm: 'fixed-window',
        limit: 10,
        window: '1m',
        cost: 4,
        // the identity is known only once the client has gone: the response has closed before the decision
        by: async (req) => { arrived(); await new Promise((resolve) => { req.raw.socket.once('close', resolve) }); return 'late' },
        settle: () => { settles++; return 1 }
      }
    }
  }, async () => 'ok')
  await app.listen({ port: 0, host: '127.0.0.1' })
  const port = (app.server.address() as AddressInfo).port
  const request = http.get({ port, host: '127.0.0.1', path: '/late' })
  request.on('error', () => {})
  await seen
  request.destroy()
  t.ok(await eventually(() => app.rateLimit.stats().settled === 1), 'settled')
  t.equal(settles, 1)
})

test('startup: settle is a function, not with refundOn, not on sliding-log, and its overdraft stays exact', async (t) => {
  const app = await buildApp({ store: 'memory' })
  t.teardown(async () => { await app.close() })
  const route = (path: string, rateLimit: Record<string, unknown>): void => { app.get(path, { config: { rateLimit: rateLimit as never } }, async () => 'ok') }
  t.throws(() => { route('/a', { limit: 5, window: '1m', settle: 3 }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*must be a function/ })
  t.throws(() => { route('/b', { limit: 5, window: '1m', settle: () => 1, refundOn: () => true }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*cannot be combined with refundOn/ })
  t.throws(() => { route('/c', { algorithm: 'sliding-log', limit: 5, window: '1m', settle: () => 1 }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*not supported by sliding-log/ })
  t.throws(() => { route('/d', { algorithm: 'token-bucket', limit: 100_000_000, window: '1d', settle: () => 1 }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*at most 52124995 for a 86400000 ms window \(got 100000000\)/ })
  t.throws(() => { route('/e', { algorithm: 'gcra', limit: 10, burst: { default: 10, pro: 60_000_000 }, window: '1d', settle: () => 1 }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*\(got 60000000\)/ })
  t.doesNotThrow(() => { route('/f', { algorithm: 'fixed-window', limit: 100_000_000, window: '1d', settle: () => 1 }) }, 'fixed-window multiplies nothing by the window')
  t.doesNotThrow(() => { route('/g', { algorithm: 'sliding-window', limit: 52_124_995, window: '1d', settle: () => 1 }) })
  await t.rejects(buildApp({ store: 'memory', policies: { tokens: { limit: 5, window: '1m', settle: () => 1 } } }), { code: 'FST_RRL_INVALID_BLOCK', message: /settle.*needs a request.*adjust/ }, 'a named policy has no request to settle')
})

test('clock frozen: 200 concurrent settled requests over 2 instances leave usage equal to the sum of what they used', async (t) => {
  const { app: a, redis, prefix, clock } = await setupRedisApp(t, 'stc')
  const other = createClient(await getRedis())
  const b = await buildApp({ redis: other, prefix, clock: clock.read })
  t.teardown(async () => { await b.close(); other.disconnect() })
  const blocks = {
    fw: { algorithm: 'fixed-window', limit: 2000, window: '1h' },
    tb: { algorithm: 'token-bucket', limit: 2000, window: '1h' },
    gcra: { algorithm: 'gcra', limit: 2000, window: '1h', burst: 1500 }
  } as const
  for (const app of [a, b]) {
    for (const [path, block] of Object.entries(blocks)) app.get(`/${path}`, { config: { rateLimit: { ...block, cost: 1, settle: used } } }, async () => 'ok')
    await app.ready()
  }
  const usedBy = (i: number): number => (i * 7) % 10
  const codes = await Promise.all(Object.keys(blocks).flatMap((path) =>
    Array.from({ length: 200 }, async (_, i) => (await call(i % 2 === 0 ? a : b, `/${path}`, usedBy(i))).statusCode)))
  t.ok(codes.every((code) => code === 200), 'all 600 admitted')
  const changed = 3 * Array.from({ length: 200 }, (_, i) => usedBy(i)).filter((units) => units !== 1).length
  t.ok(await eventually(() => a.rateLimit.stats().settled + b.rateLimit.stats().settled === changed), 'every settle that changed usage reached the store')
  const sum = Array.from({ length: 200 }, (_, i) => usedBy(i)).reduce((x, y) => x + y, 0)
  t.equal(await remaining(a, 'GET /fw'), 2000 - sum, `fixed-window: the count is the sum of the settled units (${sum})`)

  // token-bucket and gcra: the stored state is the model's after the same charges in any order
  for (const path of ['tb', 'gcra'] as const) {
    const name = path === 'tb' ? 'token-bucket' : 'gcra'
    const params = { limit: 2000, windowMs: 3_600_000, burst: path === 'tb' ? 2000 : 1500 }
    const algorithm = memoryAlgorithms[name]
    let state: unknown
    for (let i = 0; i < 200; i++) state = algorithm.step(state, params, 1, clock.now).state ?? state
    for (let i = 0; i < 200; i++) {
      const units = usedBy(i) - 1
      if (units > 0) state = algorithm.charge?.(state, params, units, clock.now)?.state
      if (units < 0) state = algorithm.refund?.(state, params, -units, clock.now, clock.now)?.state
    }
    const [key] = await redis.keys(`${prefix}:{GET:/${path}|*`)
    const stored = await readState(redis, key as string)
    const expected = path === 'tb'
      ? [(state as TokenBucketState).tokens, (state as TokenBucketState).ts]
      : [(state as GcraState).tatMs, (state as GcraState).frac]
    t.same(stored, expected, `${name}: the state equals the model's`)
  }
})

for (const store of STORES) {
  test(`${store}: fastify.rateLimit.adjust changes usage outside a request, never refused`, async (t) => {
    const { app, clock } = await setup(t, store, {
      globalLimits: [{ name: 'everything', algorithm: 'fixed-window', limit: 1000, window: '1h' }],
      policies: { stream: { algorithm: 'gcra', limit: 100, window: '1m' } }
    })
    app.get('/llm', {
      config: {
        rateLimit: [
          { name: 'tokens', algorithm: 'token-bucket', limit: 100, window: '1m' },
          { name: 'tokens-daily', algorithm: 'sliding-window', limit: 1000, window: '1d' },
          { name: 'logins', algorithm: 'sliding-log', limit: 5, window: '1m' }
        ]
      }
    }, async () => 'ok')
    await app.ready()
    clock.now = Math.ceil(clock.now / 86_400_000) * 86_400_000
    const left = async (): Promise<number[]> => (await app.rateLimit.peek('GET /llm', IP)).policies.map((policy) => policy.remaining)

    t.same(await app.rateLimit.adjust('GET /llm', IP, 40), ['tokens', 'tokens-daily'], 'every block of the route that supports it (not sliding-log, not the global one)')
    t.same(await left(), [60, 960, 5, 1000])
    t.same(await app.rateLimit.adjust('GET /llm', IP, -15), ['tokens', 'tokens-daily'])
    t.same(await left(), [75, 975, 5, 1000], 'negative units give back')
    await app.rateLimit.adjust('GET /llm', IP, 150)
    t.same(await left(), [0, 825, 5, 1000], 'never refused: an overdraft of 75')
    const refused = await call(app, '/llm')
    t.equal(refused.statusCode, 429)
    t.equal(refused.retryAfter, '46', '76 tokens to refill at 100 a minute before one is whole: 45.6 s')
    await app.rateLimit.adjust('GET /llm', IP, -200)
    t.equal((await call(app, '/llm')).statusCode, 200, 'given back: admitted again on this instance at once (its deny cache forgets the caller)')
    t.same(await app.rateLimit.adjust('GET /llm', IP, 0), ['tokens', 'tokens-daily'], '0 changes nothing')

    t.same(await app.rateLimit.adjust('everything', IP, 10), ['everything'], 'a global block, by its name')
    t.equal((await app.rateLimit.peek('everything', IP)).remaining, 1000 - 1 - 10)
    t.same(await app.rateLimit.adjust('stream', { ip: '203.0.113.9' }, 30), ['stream'], 'a named policy')
    t.equal((await app.rateLimit.peek('stream', { ip: '203.0.113.9' })).remaining, 70)
    t.same(await app.rateLimit.adjust('tokens-daily', IP, 25), ['tokens-daily'], 'a block by its name: that block alone')
    t.same(await left(), [99, 1000 - 1 - 25, 4, 1000 - 1 - 10], 'the other blocks as the admitted request left them')
    t.same(await app.rateLimit.adjust('logins', IP, 1), [], 'sliding-log cannot change after the fact: nothing to apply')

    for (const units of [1.5, '2', Number.NaN, 100_000_001, undefined]) {
      await t.rejects(app.rateLimit.adjust('GET /llm', IP, units as number), { code: 'FST_RRL_INVALID_API_CALL', message: /units must be an integer/ }, `units ${String(units)}`)
    }
    await t.rejects(app.rateLimit.adjust('GET /nope', IP, 1), { code: 'FST_RRL_UNKNOWN_POLICY' })
  })
}
