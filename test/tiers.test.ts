/**
 * Tiers: `limit` (and `burst`) as a per-tier map chosen by the plugin's
 * `tier(request)`, compiled at startup; the key does not depend on the tier,
 * so a caller that changes tier keeps its state, as each algorithm defines it.
 */
import { test, type Test } from 'tap'
import { ALGORITHMS, type RateLimitPluginOptions } from '../lib/index.js'
import { setupRedisApp } from './helpers/app.js'

async function setup (t: Test, options: RateLimitPluginOptions = {}) {
  return await setupRedisApp(t, 'tier', {
    timeout: 5000,
    user: (req) => req.headers['x-user'] as string | undefined,
    tier: (req) => {
      const tier = req.headers['x-tier']
      if (tier === 'explode') throw new Error('tier lookup failed')
      return tier as string | undefined
    },
    ...options
  })
}

test('each tier gets its limit; unknown, missing or failing tiers get the default', async (t) => {
  const { app } = await setup(t)
  app.get('/api', { config: { rateLimit: { limit: { default: 2, free: 3, pro: 5 }, window: '1m', name: 'api', by: 'user', algorithm: 'fixed-window' } } }, async (req) => req.rateLimit)
  await app.ready()
  const call = async (user: string, tier?: string) => await app.inject({ url: '/api', headers: tier === undefined ? { 'x-user': user } : { 'x-user': user, 'x-tier': tier } })
  const pro = await call('p', 'pro')
  t.equal(pro.headers['ratelimit-policy'], '"api";q=5;w=60;frrl-tier="pro"', 'RateLimit-Policy names the tier')
  t.match(pro.json(), { limit: 5, remaining: 4, tier: 'pro', policies: [{ tier: 'pro' }] })
  const anonymous = await call('a')
  t.equal(anonymous.headers['ratelimit-policy'], '"api";q=2;w=60;frrl-tier="default"')
  t.match(anonymous.json(), { limit: 2, tier: 'default' })
  t.match((await call('g', 'gold')).json(), { limit: 2, tier: 'default' }, 'an unknown tier gets the default')
  t.match((await call('e', 'explode')).json(), { limit: 2, tier: 'default' }, 'a throwing tier function gets the default, never a 500')
  const counts = []
  for (let i = 0; i < 6; i++) counts.push((await call('f', 'free')).statusCode)
  t.same(counts, [200, 200, 200, 429, 429, 429], 'free: 3')
  t.match(app.rateLimit.policies()[0], { limit: { limit: 2, tiers: { default: { limit: 2 }, free: { limit: 3 }, pro: { limit: 5 } } } })
})

test('burst per tier for token-bucket and gcra', async (t) => {
  const { app } = await setup(t)
  for (const algorithm of ['token-bucket', 'gcra'] as const) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: { default: 1, pro: 2 }, burst: { default: 2, pro: 6 }, window: '1s', by: 'user' } } }, async () => 'ok')
  }
  await app.ready()
  for (const algorithm of ['token-bucket', 'gcra']) {
    for (const [tier, burst] of [['default', 2], ['pro', 6]] as const) {
      const codes = []
      for (let i = 0; i < burst + 1; i++) codes.push((await app.inject({ url: `/${algorithm}`, headers: { 'x-user': `${algorithm}-${tier}`, 'x-tier': tier } })).statusCode)
      t.same(codes, [...Array(burst).fill(200), 429], `${algorithm} ${tier}: a burst of ${burst}`)
    }
  }
})

/*
 * A caller who spent 2 of the default tier's 2 units moves to pro (5 per
 * minute). Keys do not depend on the tier, so the state carries over:
 * counting algorithms keep the units spent (3 more now); token-bucket keeps
 * its tokens (none: it refills at pro's rate) and gcra its time debt (60 s,
 * which at pro's rate is a full bucket of 5).
 */
const EXPECTED_AFTER_UPGRADE: Record<string, number> = {
  'fixed-window': 3,
  'sliding-window': 3,
  'sliding-log': 3,
  'token-bucket': 0,
  gcra: 0
}

test('a caller who changes tier keeps its state, as each algorithm defines it', async (t) => {
  const { app, clock } = await setup(t)
  for (const algorithm of ALGORITHMS) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: { default: 2, pro: 5 }, window: '1m', by: 'user' } } }, async () => 'ok')
  }
  await app.ready()
  for (const algorithm of ALGORITHMS) {
    const headers = { 'x-user': `upgrader-${algorithm}` }
    const before = []
    for (let i = 0; i < 3; i++) before.push((await app.inject({ url: `/${algorithm}`, headers })).statusCode)
    t.same(before, [200, 200, 429], `${algorithm}: default tier spent`)
    let admitted = 0
    for (let i = 0; i < 6; i++) if ((await app.inject({ url: `/${algorithm}`, headers: { ...headers, 'x-tier': 'pro' } })).statusCode === 200) admitted++
    t.equal(admitted, EXPECTED_AFTER_UPGRADE[algorithm], `${algorithm}: ${EXPECTED_AFTER_UPGRADE[algorithm]} more right after the upgrade`)
  }
  // and the refill runs at the new tier's rate: pro refills one unit every 12 s
  clock.advance(12_000)
  t.equal((await app.inject({ url: '/token-bucket', headers: { 'x-user': 'upgrader-token-bucket', 'x-tier': 'pro' } })).statusCode, 200, 'token-bucket: one unit 12 s later (pro rate)')
  t.equal((await app.inject({ url: '/gcra', headers: { 'x-user': 'upgrader-gcra', 'x-tier': 'pro' } })).statusCode, 200, 'gcra: one unit 12 s later (pro rate)')
})
