import { test, type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { type RateLimitPluginOptions } from '../lib/index.js'
import { HOST_CLOCK } from '../lib/options/index.js'
import { TestClock } from './helpers/app.js'
import { createClient, deletePrefix, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * Fleet records (bans, overrides) are judged by Redis time, never by an
 * instance's clock: instance B runs with its host clock (HOST_CLOCK, what
 * Date.now is in production) two hours fast, A with the real one, both on
 * one Redis and one prefix. Without the `clock` option the scripts and the
 * records read Redis TIME, so the lapse here is real time (a short ttl).
 */

const TWO_HOURS = 2 * 3_600_000
/** Short enough to wait for, long enough that the checks before it run well inside it on a loaded machine. */
const SHORT_TTL = 2500

async function instance (t: Test, prefix: string, options: RateLimitPluginOptions = {}): Promise<FastifyInstance> {
  const redis = createClient(await getRedis())
  const app = Fastify()
  await app.register(rateLimit, { redis, prefix, timeout: 5000, ...options })
  app.get('/orders', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'ok')
  app.addHook('onClose', async () => { await deletePrefix(redis, prefix); redis.disconnect() })
  await app.ready()
  t.teardown(async () => { await app.close() })
  return app
}

async function redisMs (redis: Redis): Promise<number> {
  const [seconds, micros] = await redis.time()
  return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)
}

const hit = async (app: FastifyInstance, ip: string) => await app.inject({ url: '/orders', remoteAddress: ip })
/** The limit a caller is decided under (an override shows here). */
const limitOf = async (app: FastifyInstance, ip: string) => (await app.rateLimit.peek('GET /orders', { ip })).limit

test('a host clock 2 h fast neither lifts nor deletes a ban or an override: both instances honour them until the Redis-time expiry', async (t) => {
  const prefix = uniquePrefix('fleetclock')
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const a = await instance(t, prefix)
  const b = await instance(t, prefix, { [HOST_CLOCK]: () => Date.now() + TWO_HOURS } as object)

  const before = await redisMs(redis)
  const long = await a.rateLimit.ban({ identity: { ip: '203.0.113.7' }, ttl: 600_000, statusCode: 429, actor: 'ops', reason: 'scraper' })
  const short = await a.rateLimit.ban({ identity: { ip: '203.0.113.9' }, ttl: SHORT_TTL, actor: 'ops', reason: 'probe' })
  const override = await a.rateLimit.setOverride({ target: 'GET /orders', identity: { ip: '203.0.113.8' }, limit: 1, ttl: SHORT_TTL, actor: 'ops', reason: 'noisy' })
  const after = await redisMs(redis)
  t.ok(long.setAt >= before && long.setAt <= after, 'setAt is Redis time')
  t.equal(long.expiresAt, long.setAt + 600_000, 'expiresAt: Redis time + ttl')
  t.ok(override.setAt >= before && override.setAt <= after && override.expiresAt === override.setAt + SHORT_TTL, 'the override too')

  for (let poll = 0; poll < 3; poll++) {
    t.same((await b.rateLimit.listBans()).map((ban) => ban.id).sort(), [long.id, short.id].sort(), `B's poll ${poll + 1}: both bans in force`)
    t.same((await b.rateLimit.listOverrides()).map((record) => record.id), [override.id], `B's poll ${poll + 1}: the override in force`)
  }
  t.equal(await redis.hlen(`${prefix}:bans`), 2, 'the bans are still in Redis after B\'s polls')
  t.equal(await redis.hlen(`${prefix}:overrides`), 1, 'and the override')
  for (const [name, app] of [['A', a], ['B', b]] as const) {
    const refused = await hit(app, '203.0.113.7')
    t.equal(refused.statusCode, 429, `${name} refuses the banned caller`)
    t.ok(['599', '600'].includes(refused.headers['retry-after'] as string), `${name}: Retry-After is the time left by Redis time (${String(refused.headers['retry-after'])})`)
    t.equal((await hit(app, '203.0.113.9')).statusCode, 403, `${name} refuses the short ban's caller`)
    t.equal(await limitOf(app, '203.0.113.8'), 1, `${name} applies the override`)
  }

  // Until Redis's clock passes the short records' expiry (plus the lag of an instance's last read).
  const lapse = Math.max(short.expiresAt as number, override.expiresAt as number)
  while (await redisMs(redis) < lapse + 50) await new Promise((resolve) => setTimeout(resolve, 50))
  for (const [name, app] of [['A', a], ['B', b]] as const) {
    t.equal((await hit(app, '203.0.113.9')).statusCode, 200, `${name}: the short ban lapsed at its Redis-time expiry`)
    t.equal(await limitOf(app, '203.0.113.8'), 3, `${name}: the override lapsed`)
    t.equal((await hit(app, '203.0.113.7')).statusCode, 429, `${name}: the long ban holds`)
  }
  await b.rateLimit.listBans()
  await b.rateLimit.listOverrides()
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.same(Object.keys(await redis.hgetall(`${prefix}:bans`)), [long.id], 'the lapsed ban was deleted, the one in force kept')
  t.equal(await redis.hlen(`${prefix}:overrides`), 0, 'the lapsed override was deleted')
})

test('with the clock option (standing in for Redis TIME) a skewed host clock changes nothing either: lapse at expiresAt exactly, deleted only then', async (t) => {
  const prefix = uniquePrefix('fleetclock')
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const clock = new TestClock()
  const a = await instance(t, prefix, { clock: clock.read })
  const b = await instance(t, prefix, { clock: clock.read, [HOST_CLOCK]: () => Date.now() + TWO_HOURS } as object)
  const ban = await a.rateLimit.ban({ identity: { ip: '203.0.113.9' }, ttl: 30_000, actor: 'ops', reason: 'probe' })
  const override = await a.rateLimit.setOverride({ target: 'GET /orders', identity: { ip: '203.0.113.8' }, limit: 1, ttl: 30_000, actor: 'ops', reason: 'noisy' })
  t.same([ban.expiresAt, override.expiresAt], [clock.now + 30_000, clock.now + 30_000], 'expiresAt by the clock option')

  clock.advance(29_999)
  t.same((await b.rateLimit.listBans()).map((record) => record.id), [ban.id], 'B reads the ban 1 ms before it lapses')
  t.same((await b.rateLimit.listOverrides()).map((record) => record.id), [override.id])
  for (const app of [a, b]) {
    t.equal((await hit(app, '203.0.113.9')).statusCode, 403)
    t.equal(await limitOf(app, '203.0.113.8'), 1)
  }
  t.equal(await redis.hlen(`${prefix}:bans`), 1, 'nothing deleted before the expiry')

  clock.advance(1)
  for (const app of [a, b]) {
    t.equal((await hit(app, '203.0.113.9')).statusCode, 200, 'lapsed at expiresAt')
    t.equal(await limitOf(app, '203.0.113.8'), 3)
  }
  t.same(await b.rateLimit.listBans(), [])
  t.same(await b.rateLimit.listOverrides(), [])
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.equal(await redis.hlen(`${prefix}:bans`) + await redis.hlen(`${prefix}:overrides`), 0, 'deleted by the script at the expiry')
})

test('the memory store: records and their expiry are the process\'s, by its host clock', async (t) => {
  let host = Date.UTC(2030, 0, 1)
  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', [HOST_CLOCK]: () => host } as object)
  app.get('/orders', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  const ban = await app.rateLimit.ban({ identity: { ip: '203.0.113.9' }, ttl: 5000, statusCode: 429, actor: 'ops', reason: 'probe' })
  await app.rateLimit.setOverride({ target: 'GET /orders', identity: { ip: '203.0.113.8' }, limit: 1, ttl: 5000, actor: 'ops', reason: 'noisy' })
  t.same({ setAt: ban.setAt, expiresAt: ban.expiresAt }, { setAt: host, expiresAt: host + 5000 })
  host += 4000
  t.equal((await hit(app, '203.0.113.9')).headers['retry-after'], '1')
  t.equal(await limitOf(app, '203.0.113.8'), 1)
  host += 1000
  t.equal((await hit(app, '203.0.113.9')).statusCode, 200, 'lapsed by the host clock')
  t.equal(await limitOf(app, '203.0.113.8'), 3)
  t.same(await app.rateLimit.listBans(), [])
})
