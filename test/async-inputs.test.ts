/**
 * Async `by` / `user` / `tier` and the block's `requestLimit` (issue 12, item 1),
 * against a real Redis: awaited, bounded by `identityTimeout`, and on a
 * rejection, an overrun or a bad value the same fallback as a bad sync value
 * (client IP, default tier, static limit), logged once per burst. Never a
 * 500, an unhandled rejection or a hang. Overruns use promises that never
 * settle and a small identityTimeout, not sleeps.
 */
import { test, type Test } from 'tap'
import type { FastifyRequest } from 'fastify'
import { setupRedisApp, type RedisApp } from './helpers/app.js'
import type { RateLimitPluginOptions } from '../lib/index.js'

const never = new Promise<never>(() => {})
const IP = '203.0.113.60'

interface Logged { lines: Array<Record<string, unknown>>, codes: (code: string) => Array<Record<string, unknown>> }

// Checked by the last test: no function's rejection may go unhandled.
const unhandled: unknown[] = []
process.on('unhandledRejection', (reason: unknown) => { unhandled.push(reason) })

/** An app on the test Redis whose log lines are kept. */
async function loggedApp (t: Test, label: string, options: RateLimitPluginOptions): Promise<RedisApp & Logged> {
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line) as Record<string, unknown>) } }
  const app = await setupRedisApp(t, label, options, { logger: { level: 'warn', stream } })
  const codes = (code: string): Array<Record<string, unknown>> => lines.filter((line) => (line.err as { code?: string } | undefined)?.code === code)
  return { ...app, lines, codes }
}

/** Named outcomes for an identity / tier / limit function, picked by the `x-case` header. */
function cases<T> (good: (req: FastifyRequest) => T): Record<string, (req: FastifyRequest) => unknown> {
  return {
    sync: (req) => good(req),
    async: async (req) => await Promise.resolve(good(req)),
    rejects: async () => { throw new Error('lookup failed') },
    rejectsOddly: () => Promise.reject(Object.create(null)),
    never: () => never,
    badValue: async () => ({ not: 'usable' }),
    throws: () => { throw new Error('sync boom') }
  }
}

function pick (table: Record<string, (req: FastifyRequest) => unknown>) {
  return (req: FastifyRequest): never => (table[String(req.headers['x-case'])] as (req: FastifyRequest) => unknown)(req) as never
}

test('async by functions and user: awaited; rejection, overrun or bad value → the client IP, logged once per burst', async (t) => {
  const by = cases((req) => String(req.headers['x-id']))
  const { app, redis, prefix, clock, codes } = await loggedApp(t, 'aby', { identityTimeout: 20, user: pick(by) })
  app.get('/by', { config: { rateLimit: { limit: 2, window: '1m', by: pick(by) } } }, async (req) => req.rateLimit)
  app.get('/user', { config: { rateLimit: { limit: 2, window: '1m', by: 'user' } } }, async (req) => req.rateLimit)
  app.get('/both', { config: { rateLimit: { limit: 2, window: '1m', by: ['ip', pick(by), 'header:x-id'] } } }, async (req) => req.rateLimit)
  await app.ready()
  const call = async (url: string, name: string, id = 'alice') => await app.inject({ url, headers: { 'x-case': name, 'x-id': id }, remoteAddress: IP })

  for (const [url, label] of [['/by', 'f0'], ['/user', 'u']] as const) {
    // A resolved value is an identity of its own, exactly as the same value returned synchronously.
    t.equal((await call(url, 'async', 'alice')).json().remaining, 1, `${url}: async alice`)
    t.equal((await call(url, 'sync', 'alice')).json().remaining, 0, `${url}: sync alice shares the bucket`)
    t.equal((await call(url, 'async', 'alice')).statusCode, 429, `${url}: and is limited`)
    t.equal((await call(url, 'async', 'bob')).statusCode, 200, `${url}: bob is not alice`)
    // Every failure falls back to the caller's own address, in its own bucket.
    const started = Date.now()
    for (const name of ['rejects', 'never']) t.equal((await call(url, name)).statusCode, 200, `${url}: ${name} → fallback, admitted`)
    t.ok(Date.now() - started < 2000, `${url}: an identity that never settles costs identityTimeout, not a hang`)
    for (const name of ['badValue', 'rejectsOddly', 'throws']) t.equal((await call(url, name)).statusCode, 429, `${url}: ${name} → the same fallback bucket, now full`)
    const fallback = `${prefix}:{GET:${url}|${label}~${IP}}:SW60000`
    t.equal(await redis.exists(fallback), 1, `${url}: the fallback key is the client IP`)
  }
  // Several parts: the async one awaited beside the sync ones.
  t.equal((await call('/both', 'async', 'alice')).json().remaining, 1)
  t.equal((await call('/both', 'never', 'alice')).json().remaining, 1, 'an overrun part falls back alone: a different identity')
  t.equal((await call('/both', 'sync', 'alice')).json().remaining, 0)

  const logged = codes('FST_RRL_IDENTITY_FAILED')
  t.equal(logged.length, 1, 'ten failures in one burst: one line')
  t.match(logged[0], { level: 40, err: { message: /Identity part `custom`/ } })
  clock.advance(1500)
  await call('/by', 'never')
  const next = codes('FST_RRL_IDENTITY_FAILED')
  t.equal(next.length, 2, 'the next burst logs again')
  t.match(next[1], { suppressed: 10, cause: /did not finish within 20 ms \(identityTimeout\)/ })
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('async tier: awaited; rejection, overrun, bad value or throw → the default tier, logged once per burst', async (t) => {
  const tier = cases((req) => req.headers['x-plan'] as string)
  const { app, codes, clock } = await loggedApp(t, 'atier', { identityTimeout: 20, tier: pick(tier) })
  app.get('/feed', { config: { rateLimit: { limit: { default: 2, pro: 10 }, window: '1m', by: 'header:x-who' } } }, async (req) => req.rateLimit)
  await app.ready()
  const call = async (name: string, who: string, plan = 'pro') => (await app.inject({ url: '/feed', headers: { 'x-case': name, 'x-plan': plan, 'x-who': who } })).json()
  t.match(await call('async', 'a'), { limit: 10, tier: 'pro', remaining: 9 }, 'an async tier is awaited')
  t.match(await call('sync', 'b'), { limit: 10, tier: 'pro' })
  t.match(await call('async', 'c', 'unknown-plan'), { limit: 2, tier: 'default' }, 'an unknown name is the default, not an error')
  for (const name of ['rejects', 'rejectsOddly', 'never', 'badValue', 'throws']) {
    t.match(await call(name, `x-${name}`), { limit: 2, tier: 'default' }, `${name} → default tier`)
  }
  const logged = codes('FST_RRL_REQUEST_VALUE_FAILED')
  t.equal(logged.length, 1, 'one line for the burst')
  t.match(logged[0], { err: { message: /Rate limit `tier` for route GET \/feed failed \(lookup failed\); using the default tier/ } })
  clock.advance(1500)
  await call('badValue', 'y')
  t.match(codes('FST_RRL_REQUEST_VALUE_FAILED')[1], { suppressed: 4, err: { message: /returned a value of type object; using the default tier/ } })
})

test('requestLimit: sync or async, applied per request; rejection, overrun or a bad value → the static limit', async (t) => {
  const limits: Record<string, unknown> = { alice: 5, bob: 1, zero: 0, fraction: 2.5, text: '5', huge: 1e12 }
  const limit = cases((req) => limits[String(req.headers['x-id'])])
  const { app, codes, clock } = await loggedApp(t, 'alim', { identityTimeout: 20 })
  app.get('/items', { config: { rateLimit: { limit: 3, window: '1m', by: 'header:x-id', requestLimit: pick(limit) } } }, async (req) => req.rateLimit)
  app.get('/bucket', { config: { rateLimit: { algorithm: 'token-bucket', limit: 3, burst: 2, window: '1m', by: 'header:x-id', requestLimit: pick(limit) } } }, async (req) => req.rateLimit)
  app.get('/mixed', { config: { rateLimit: [{ limit: 3, window: '1m', by: 'header:x-id', requestLimit: pick(limit), name: 'dyn' }, { limit: 100, window: '1h', by: 'header:x-id', name: 'fixed' }] } }, async (req) => req.rateLimit)
  await app.ready()
  const call = async (url: string, name: string, id: string) => await app.inject({ url, headers: { 'x-case': name, 'x-id': id } })

  const first = await call('/items', 'async', 'alice')
  t.match(first.json(), { limit: 5, remaining: 4 }, 'an async limit is applied')
  t.equal(first.headers['ratelimit-policy'], '"get-items";q=5;w=60', 'and shown in RateLimit-Policy')
  t.equal((await call('/items', 'sync', 'alice')).json().remaining, 3, 'a sync one too, on the same key')
  t.equal((await call('/items', 'async', 'bob')).json().limit, 1)
  t.equal((await call('/items', 'async', 'bob')).statusCode, 429, 'bob\'s limit of 1 holds')
  t.equal((await call('/items', 'sync', 'nobody')).json().limit, 3, 'undefined from the function: the static limit')

  for (const name of ['rejects', 'rejectsOddly', 'never', 'badValue', 'throws']) {
    const res = await call('/items', name, `f-${name}`)
    t.match(res.json(), { limit: 3, remaining: 2 }, `${name} → the static limit`)
    t.equal(res.headers['ratelimit-policy'], '"get-items";q=3;w=60')
  }
  for (const id of ['zero', 'fraction', 'text', 'huge']) t.equal((await call('/items', 'async', id)).json().limit, 3, `${id} → the static limit`)

  // A declared burst stays; the sustained rate follows the request's limit.
  t.match((await call('/bucket', 'async', 'alice')).json(), { limit: 5, remaining: 1 }, 'token bucket: limit 5, capacity still the declared burst 2')
  // With several blocks, only the one with requestLimit changes; headers list both.
  const mixed = await call('/mixed', 'async', 'alice')
  t.match(mixed.json().policies, [{ policy: 'dyn', limit: 5 }, { policy: 'fixed', limit: 100 }])
  t.equal(mixed.headers['ratelimit-policy'], '"dyn";q=5;w=60, "fixed";q=100;w=3600')

  const logged = codes('FST_RRL_REQUEST_VALUE_FAILED')
  t.equal(logged.length, 1, 'nine failures in one burst: one line')
  t.match(logged[0], { err: { message: /`requestLimit` for route GET \/items \(get-items\) failed \(lookup failed\); using the block's limit \(requestLimit must give an integer from 1 to 100000000\)/ } })
  clock.advance(1500)
  await call('/items', 'async', 'zero')
  t.match(codes('FST_RRL_REQUEST_VALUE_FAILED')[1], { suppressed: 8, err: { message: /returned 0;/ } })
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('tier, limit and identity that all never settle: one wait, all fall back, the request is decided', async (t) => {
  const { app } = await loggedApp(t, 'aall', { identityTimeout: 30, tier: () => never })
  app.get('/slow', { config: { rateLimit: { limit: { default: 4, pro: 8 }, window: '1m', by: () => never, requestLimit: () => never } } }, async (req) => req.rateLimit)
  await app.ready()
  const started = Date.now()
  const res = await app.inject({ url: '/slow', remoteAddress: IP })
  const elapsed = Date.now() - started
  t.equal(res.statusCode, 200)
  t.match(res.json(), { limit: 4, tier: 'default', remaining: 3 })
  t.ok(elapsed < 1000, `decided in ${elapsed} ms (identityTimeout 30 ms)`)
})

test('the programmatic API awaits async function parts too', async (t) => {
  const { app } = await loggedApp(t, 'aapi', {
    policies: { 'per-account': { limit: 2, window: '1m', by: async (req) => await Promise.resolve(req.headers['x-account'] as string | undefined) } }
  })
  app.get('/account', { config: { rateLimit: { limit: 2, window: '1m', by: async (req) => await Promise.resolve(req.headers['x-account'] as string | undefined) } } }, async (req) => req.rateLimit)
  await app.ready()
  t.match(await app.rateLimit.consume('per-account', { headers: { 'x-account': 'acme' } }), { remaining: 1 })
  t.match(await app.rateLimit.consume('per-account', { headers: { 'x-account': 'acme' } }), { remaining: 0 })
  t.match(await app.rateLimit.peek('per-account', { headers: { 'x-account': 'other' } }), { remaining: 2 })
  t.equal((await app.inject({ url: '/account', headers: { 'x-account': 'acme' } })).json().remaining, 1)
  t.match(await app.rateLimit.peek('GET /account', { headers: { 'x-account': 'acme' } }), { remaining: 1 }, 'the request and the API name the same key')
  await app.rateLimit.reset('GET /account', { headers: { 'x-account': 'acme' } })
  t.match(await app.rateLimit.peek('GET /account', { headers: { 'x-account': 'acme' } }), { remaining: 2 })
})

test('no unhandled rejection from any of the above', async (t) => {
  await new Promise((resolve) => setImmediate(resolve))
  t.same(unhandled, [])
})
