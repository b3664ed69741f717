/**
 * What RateLimit-Policy says about a policy beyond q and w (issue 18, item 4):
 * the tier as the vendor-prefixed extension parameter `frrl-tier` in every
 * mode that sends the field, and a startup warning for two policy names of one
 * route that differ only in case.
 */
import { test } from 'tap'
import { parseList } from 'structured-headers'
import type { HeaderMode } from '../lib/index.js'
import { FST_RRL_POLICY_NAME_CASE } from '../lib/errors.js'
import { buildApp } from './helpers/app.js'
import { warningsDelivered, watchWarnings } from './helpers/warnings.js'

test('the tier is the Structured Fields parameter frrl-tier, in every mode that sends RateLimit-Policy', async (t) => {
  for (const headers of ['ietf', 'both'] as const satisfies readonly HeaderMode[]) {
    const app = await buildApp({ store: 'memory', headers, tier: (request) => request.headers['x-plan'] as string | undefined })
    t.teardown(async () => { await app.close() })
    app.get('/feed', { config: { rateLimit: { name: 'feed', limit: { default: 60, pro: 300 }, window: '1m' } } }, async () => 'ok')
    const pro = await app.inject({ url: '/feed', headers: { 'x-plan': 'pro' } })
    t.equal(pro.headers['ratelimit-policy'], '"feed";q=300;w=60;frrl-tier="pro"', headers)
    const [item] = parseList(pro.headers['ratelimit-policy'] as string)
    t.equal(item?.[0], 'feed')
    t.same([...(item?.[1] ?? new Map()).entries()], [['q', 300], ['w', 60], ['frrl-tier', 'pro']], `${headers}: parses, and no bare \`tier\` parameter`)
    const plain = await app.inject({ url: '/feed' })
    t.equal(plain.headers['ratelimit-policy'], '"feed";q=60;w=60;frrl-tier="default"', `${headers}: the default tier is named too`)
  }
  const legacy = await buildApp({ store: 'memory', headers: 'legacy', tier: () => 'pro' })
  t.teardown(async () => { await legacy.close() })
  legacy.get('/feed', { config: { rateLimit: { limit: { default: 60, pro: 300 }, window: '1m' } } }, async () => 'ok')
  const reply = await legacy.inject({ url: '/feed' })
  t.equal(reply.headers['ratelimit-policy'], undefined, 'legacy mode sends no RateLimit-Policy, so no parameter')
  t.equal(reply.headers['x-ratelimit-limit'], '300')
})

test('two policy names of one route differing only in case: a startup warning, not an error', async (t) => {
  const seen = watchWarnings(t, FST_RRL_POLICY_NAME_CASE)
  const app = await buildApp({ store: 'memory' })
  t.teardown(async () => { await app.close() })
  app.get('/distinct', { config: { rateLimit: [{ name: 'burst', limit: 2, window: '1s' }, { name: 'hourly', limit: 100, window: '1h' }] } }, async () => 'ok')
  await warningsDelivered()
  t.equal(seen.length, 0, 'distinct names: no warning')
  app.get('/twins', { config: { rateLimit: [{ name: 'Burst', limit: 2, window: '1s' }, { name: 'burst', limit: 100, window: '1h' }] } }, async () => 'ok')
  await app.ready()
  await warningsDelivered()
  t.equal(seen.length, 1)
  t.equal(seen[0]?.name, 'FastifyRedisRateLimitWarning')
  t.match(seen[0]?.message, /GET \/twins has rate limit policies whose names differ only in case \("Burst" and "burst"\)/)
  const reply = await app.inject({ url: '/twins' })
  t.equal(reply.statusCode, 200, 'the route works')
  t.equal(reply.headers['ratelimit-policy'], '"Burst";q=2;w=1, "burst";q=100;w=3600', 'both policies are listed as declared')
})

test('a route block whose name differs only in case from a globalLimits block warns too', async (t) => {
  const seen = watchWarnings(t, FST_RRL_POLICY_NAME_CASE)
  const app = await buildApp({ store: 'memory', globalLimits: [{ name: 'Global', limit: 1000, window: '1m' }] })
  t.teardown(async () => { await app.close() })
  app.get('/x', { config: { rateLimit: { name: 'global', limit: 5, window: '1m' } } }, async () => 'ok')
  await app.ready()
  await warningsDelivered()
  t.equal(seen.length, 1)
  t.match(seen[0]?.message, /"global" and "Global"/)
})
