/**
 * The programmatic API on fastify.rateLimit, against a real Redis: peek (no
 * charge), reset, consume (routes, named policies, global blocks), the
 * identity object, the startup table, and the coded errors of misuse.
 */
import { test, type Test } from 'tap'
import type { RateLimitDecision, RateLimitIdentity } from '../lib/index.js'
import { buildApp, setupRedisApp } from './helpers/app.js'

const ok = async () => ({ ok: true })

const setup = async (t: Test, options: Parameters<typeof buildApp>[0] = {}, serverOptions = {}) => await setupRedisApp(t, 'api', options, serverOptions)

test('peek charges nothing; consume charges like a request; reset starts over', async (t) => {
  const { app } = await setup(t)
  app.get('/orders/:id', { config: { rateLimit: { limit: 3, window: '1m', name: 'orders', algorithm: 'fixed-window' } } }, ok)
  await app.ready()
  const me: RateLimitIdentity = { ip: '127.0.0.1' } // what app.inject() connects from

  for (let i = 0; i < 5; i++) {
    const peek = await app.rateLimit.peek('GET /orders/:id', me)
    t.match(peek, { allowed: true, remaining: 3, limit: 3, policy: 'orders', outcome: 'allowed', degraded: false }, 'peek: 3 available, nothing charged')
  }
  t.equal((await app.inject('/orders/1')).headers.ratelimit?.toString().split(';')[1], 'r=2', 'the route sees all 3 units: its first request leaves 2')

  const consumed: RateLimitDecision = await app.rateLimit.consume('orders', me)
  t.match(consumed, { allowed: true, remaining: 1 }, 'consume by block name charges the same bucket as the route')
  t.match(await app.rateLimit.peek('orders', me, 2), { allowed: false, remaining: 1 }, 'a peek of cost 2 would be refused; 1 unit left')
  t.equal((await app.inject('/orders/2')).statusCode, 200)
  t.equal((await app.inject('/orders/3')).statusCode, 429)
  const refused = await app.rateLimit.consume('GET /orders/:id', me)
  t.match(refused, { allowed: false, remaining: 0, outcome: 'limited' })
  t.ok(refused.retryAfterMs > 0 && refused.retryAfterMs <= 60_000)

  await app.rateLimit.reset('GET /orders/:id', me)
  t.match(await app.rateLimit.peek('orders', me), { allowed: true, remaining: 3 }, 'reset: full again')
  t.equal((await app.inject('/orders/4')).statusCode, 200, 'and the route admits again (the local deny cache was cleared too)')
  t.match(await app.rateLimit.peek('orders', { ip: '10.9.8.7' }), { remaining: 3 }, 'another caller was never charged')
})

test('named policies for limits outside HTTP; identities by user, header, tier', async (t) => {
  const { app } = await setup(t, {
    user: (req) => (req.headers['x-user'] as string | undefined),
    tier: (req) => req.headers['x-tier'] as string | undefined,
    policies: {
      'ws-messages': { limit: 3, window: '10s', by: 'user' },
      exports: [{ limit: 2, window: '1h', by: 'user', algorithm: 'token-bucket' }, { limit: 10, window: '1d', by: 'user' }],
      tenant: { limit: 2, window: '1m', by: 'header:x-tenant' },
      tiered: { limit: { default: 1, pro: 3 }, window: '1m', by: 'user' }
    }
  })
  app.get('/me', { config: { rateLimit: { limit: 100, window: '1m', by: 'user' } } }, ok)
  await app.ready()

  const alice = { user: 'alice' }
  const results = []
  for (let i = 0; i < 4; i++) results.push((await app.rateLimit.consume('ws-messages', alice)).allowed)
  t.same(results, [true, true, true, false], 'a websocket message limit: 3 per 10 s')
  t.match(await app.rateLimit.consume('ws-messages', { user: 'bob' }), { allowed: true, remaining: 2 }, 'per user')

  t.match(await app.rateLimit.consume('exports', alice, 2), { allowed: true, policies: [{ policy: 'exports', remaining: 0 }, { policy: 'exports-1', remaining: 8 }] }, 'a named array: both blocks, all-or-nothing')
  const refused = await app.rateLimit.consume('exports', alice)
  t.match(refused, { allowed: false, policy: 'exports', policies: [{ policy: 'exports', allowed: false }, { policy: 'exports-1', allowed: true, remaining: 8 }] }, 'the daily block was not charged for the refused call')

  t.equal((await app.rateLimit.consume('tenant', { headers: { 'X-Tenant': 'acme' } })).remaining, 1, 'header parts: names are case-insensitive')
  t.equal((await app.rateLimit.consume('tenant', { headers: { 'x-tenant': 'acme' } })).remaining, 0)
  t.equal((await app.rateLimit.consume('tenant', { headers: { 'x-tenant': 'other' } })).remaining, 1)

  t.match(await app.rateLimit.consume('tiered', { user: 'carol', tier: 'pro' }), { allowed: true, limit: 3, remaining: 2, tier: 'pro' })
  t.match(await app.rateLimit.consume('tiered', { user: 'dave' }), { allowed: true, limit: 1, remaining: 0, tier: 'default' })

  // The API renders the same identity as a request: alice's HTTP bucket is the one the API sees.
  await app.inject({ url: '/me', headers: { 'x-user': 'alice' } })
  t.match(await app.rateLimit.peek('GET /me', alice), { remaining: 99 })
})

test('global blocks can be named; a route reset leaves them alone', async (t) => {
  const { app } = await setup(t, { user: (req) => req.headers['x-user'] as string | undefined, globalLimits: [{ name: 'per-user', limit: 5, window: '1m' }] })
  app.get('/a', { config: { rateLimit: { limit: 2, window: '1m', name: 'a' } } }, ok)
  await app.ready()
  const erin = { user: 'erin' }
  t.same([(await app.inject({ url: '/a', headers: { 'x-user': 'erin' } })).statusCode, (await app.inject({ url: '/a', headers: { 'x-user': 'erin' } })).statusCode, (await app.inject({ url: '/a', headers: { 'x-user': 'erin' } })).statusCode], [200, 200, 429])
  t.match(await app.rateLimit.peek('per-user', erin), { remaining: 3 })
  await app.rateLimit.reset('GET /a', erin)
  t.match(await app.rateLimit.peek('GET /a', erin), { allowed: true, policies: [{ policy: 'a', remaining: 2 }, { policy: 'per-user', remaining: 3 }] }, 'the route\'s own block is reset, the global one is not')
  await app.rateLimit.reset('per-user', erin)
  t.match(await app.rateLimit.peek('per-user', erin), { remaining: 5 })
})

test('misuse is a coded error', async (t) => {
  const { app } = await setup(t)
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1s' } } }, ok)
  app.get('/y', { config: { rateLimit: { limit: 1, window: '1s', name: 'shared' } } }, ok)
  app.get('/z', { config: { rateLimit: { limit: 1, window: '1s', name: 'shared' } } }, ok)
  await app.ready()
  await t.rejects(app.rateLimit.peek('GET /nope', { ip: '1.2.3.4' }), { code: 'FST_RRL_UNKNOWN_POLICY' })
  await t.rejects(app.rateLimit.consume('GET /x', 'alice' as never), { code: 'FST_RRL_INVALID_API_CALL', message: /identity must be an object/ })
  await t.rejects(app.rateLimit.consume('GET /x', { user: 42 } as never), { code: 'FST_RRL_INVALID_API_CALL', message: /identity.user/ })
  await t.rejects(app.rateLimit.consume('GET /x', { ip: '1.2.3.4' }, 0), { code: 'FST_RRL_INVALID_API_CALL', message: /cost/ })
  await t.rejects(app.rateLimit.reset(5 as never, { ip: '1.2.3.4' }), { code: 'FST_RRL_INVALID_API_CALL' })
  await t.rejects(app.rateLimit.peek('shared', { ip: '1.2.3.4' }), { code: 'FST_RRL_AMBIGUOUS_TARGET', message: /"shared" names 2 routes: 'GET \/y', 'GET \/z'/ })
  t.match(await app.rateLimit.peek('GET /y', { ip: '1.2.3.4' }), { policy: 'shared' }, 'the route still names it')
})
