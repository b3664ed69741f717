/**
 * The local deny cache: after Redis refuses a key, this instance refuses it by
 * itself until Redis's retry time. Counted with INFO commandstats on a private
 * redis-server (the shared one serves other test files at the same time), so
 * "zero Redis commands during a flood" is exact.
 */
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { buildApp, TestClock } from './helpers/app.js'
import { createClient, privateRedis } from './helpers/redis.js'
import { DenyCache } from '../lib/decide/deny-cache.js'

const ok = async () => ({ ok: true })

/**
 * Calls per command since the last reset, without INFO/CONFIG (the probe's
 * own). Commands a script runs count too (a sliding-log refusal is FCALL +
 * ZREMRANGEBYSCORE + ZCARD + ZRANGE).
 */
async function commandCounts (admin: Redis): Promise<Record<string, number>> {
  const info = await admin.info('commandstats')
  const counts: Record<string, number> = {}
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const name = match[1] as string
    if (name === 'info' || name.startsWith('config')) continue
    counts[name] = Number(match[2])
  }
  return counts
}
const total = (counts: Record<string, number>): number => Object.values(counts).reduce((a, b) => a + b, 0)

async function appOn (t: Test, server: { url: string }, options: Parameters<typeof buildApp>[0] = {}): Promise<{ app: FastifyInstance, clock: TestClock }> {
  const redis = createClient(server as never)
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix: 'dc', clock: clock.read, timeout: 5000, ...options })
  t.teardown(async () => {
    await app.close()
    redis.disconnect()
  })
  return { app, clock }
}

async function flood (app: FastifyInstance, n: number, url: string, headers: Record<string, string> = {}): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < n; i++) codes.push((await app.inject({ url, headers })).statusCode)
  return codes
}

test('a flood from a refused identity costs no Redis command; without the cache it costs one per request', async (t) => {
  const { server, admin } = await privateRedis(t)
  const FLOOD = 1000
  const figures: Record<string, number> = {}
  for (const denyCache of [undefined, false] as const) {
    const { app } = await appOn(t, server, denyCache === false ? { denyCache: false, prefix: 'off' } : {})
    app.get('/login', { config: { rateLimit: { limit: 3, window: '15m', algorithm: 'sliding-log', name: 'login' } } }, ok)
    await app.ready()
    t.same(await flood(app, 4, '/login'), [200, 200, 200, 429], 'the fourth is refused by Redis')
    await admin.config('RESETSTAT')
    const codes = await flood(app, FLOOD, '/login')
    const counts = await commandCounts(admin)
    t.ok(codes.every((code) => code === 429), `${FLOOD} flood requests all refused`)
    const label = denyCache === false ? 'without' : 'with'
    figures[`${label}Total`] = total(counts)
    figures[`${label}Fcall`] = counts.fcall ?? 0
    if (denyCache === false) {
      t.equal(counts.fcall, FLOOD, `without the cache: one FCALL per request (${JSON.stringify(counts)})`)
    } else {
      t.same(counts, {}, 'with the cache: zero Redis commands during the flood')
      t.equal(app.rateLimit.stats().limited, FLOOD + 1)
    }
  }
  t.comment(`figures ${JSON.stringify({ floodRequests: FLOOD, redisCommands: figures })}`)
})

test('answers with the headers Redis gave, and never refuses longer than Redis said', async (t) => {
  const { server, admin } = await privateRedis(t)
  const { app, clock } = await appOn(t, server)
  app.get('/x', { config: { rateLimit: { limit: 2, window: '10s', algorithm: 'sliding-log', name: 'x' } } }, ok)
  await app.ready()
  await app.inject('/x')
  clock.advance(3000)
  await app.inject('/x')
  clock.advance(1000)
  const fromRedis = await app.inject('/x')
  t.equal(fromRedis.statusCode, 429)
  t.equal(fromRedis.headers['retry-after'], '6', 'the first entry expires 6 s from now')
  await admin.config('RESETSTAT')

  clock.advance(1500)
  const local = await app.inject('/x')
  t.equal(local.statusCode, 429)
  t.equal(local.headers['retry-after'], '5', 'the local answer counts down: 4.5 s left, rounded up')
  t.equal(local.headers.ratelimit, '"x";r=0;t=5')
  t.equal(local.headers['ratelimit-policy'], '"x";q=2;w=10')
  t.same(local.json()['violated-policies'], ['x'])
  t.match(local.json(), { type: 'https://iana.org/assignments/http-problem-types#quota-exceeded', status: 429 })

  clock.advance(4499)
  t.equal((await app.inject('/x')).statusCode, 429, '1 ms before Redis would admit: still refused locally')
  t.same(await commandCounts(admin), {}, 'no Redis command so far')
  clock.advance(1)
  t.equal((await app.inject('/x')).statusCode, 200, 'at Redis\'s retry time the request goes to Redis and is admitted')
  t.equal((await commandCounts(admin)).fcall, 1)
})

test('a cheaper request than the refused one goes to Redis; reset() clears the local entry', async (t) => {
  const { server, admin } = await privateRedis(t)
  const { app } = await appOn(t, server)
  app.get('/batch', { config: { rateLimit: { limit: 5, window: '1m', algorithm: 'fixed-window', name: 'batch', cost: (req) => Number(req.headers['x-cost'] ?? 1) } } }, ok)
  await app.ready()
  t.same(await flood(app, 1, '/batch', { 'x-cost': '3' }), [200])
  t.same(await flood(app, 1, '/batch', { 'x-cost': '3' }), [429], '3 + 3 > 5: refused')
  await admin.config('RESETSTAT')
  t.same(await flood(app, 3, '/batch', { 'x-cost': '4' }), [429, 429, 429], 'as costly or more: refused locally')
  t.same(await commandCounts(admin), {})
  t.same(await flood(app, 1, '/batch', { 'x-cost': '2' }), [200], 'cheaper: asked Redis, and it fits')
  t.equal((await commandCounts(admin)).fcall, 1)

  t.same(await flood(app, 1, '/batch', { 'x-cost': '1' }), [429], '5 of 5 spent')
  await app.rateLimit.reset('batch', { ip: '127.0.0.1' })
  t.same(await flood(app, 1, '/batch', { 'x-cost': '5' }), [200], 'after reset(): neither Redis nor the local cache refuse')
})

test('bounded: the least recently used entry goes first', async (t) => {
  const { server, admin } = await privateRedis(t)
  const { app } = await appOn(t, server, { denyCache: { max: 2 }, user: (req) => req.headers['x-user'] as string | undefined })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', algorithm: 'fixed-window' } } }, ok)
  await app.ready()
  for (const user of ['a', 'b', 'c']) t.same(await flood(app, 2, '/x', { 'x-user': user }), [200, 429], `${user} refused by Redis`)
  await admin.config('RESETSTAT')
  t.same(await flood(app, 3, '/x', { 'x-user': 'c' }), [429, 429, 429])
  t.same(await flood(app, 3, '/x', { 'x-user': 'b' }), [429, 429, 429])
  t.same(await commandCounts(admin), {}, 'b and c are cached')
  t.same(await flood(app, 1, '/x', { 'x-user': 'a' }), [429])
  t.equal((await commandCounts(admin)).fcall, 1, 'a was evicted (max 2): Redis was asked')

  const cache = new DenyCache(2)
  const run = {}
  const refused = () => ({ until: 100, expiresAt: 100, cost: 1, remaining: 0, run, penalized: false, nextAt: 100 })
  cache.set('k1', refused())
  cache.set('k2', refused())
  t.ok(cache.get('k1', 1, 0, run), 'k1 used: now the most recent')
  cache.set('k3', refused())
  t.equal(cache.size, 2)
  t.equal(cache.get('k2', 1, 0, run), undefined, 'k2 was the least recently used')
  t.ok(cache.get('k1', 1, 99, run))
  t.equal(cache.get('k1', 1, 99, {}), undefined, 'other limits (another tier): not answered from the entry')
  t.equal(cache.get('k1', 1, 100, run), undefined, 'an entry ends exactly at its time')
  t.equal(cache.size, 1, 'and is dropped then')
})

test('a store failure is never cached, and shadow policies never use the cache', async (t) => {
  const { server, admin } = await privateRedis(t)
  const { app } = await appOn(t, server)
  app.get('/shadow', { config: { rateLimit: { limit: 1, window: '1m', mode: 'shadow' } } }, async (req) => ({ rl: req.rateLimit }))
  await app.ready()
  t.same(await flood(app, 3, '/shadow'), [200, 200, 200])
  await admin.config('RESETSTAT')
  const res = await app.inject('/shadow')
  t.equal(res.json().rl.outcome, 'shadow-limited')
  t.equal((await commandCounts(admin)).fcall, 1, 'every shadow decision is taken by Redis (recorded, not cached)')
})
