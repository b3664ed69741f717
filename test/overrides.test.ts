import { test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import rateLimit from '../lib/index.js'
import { OVERRIDE_POLL_MS } from '../lib/fleet/overrides.js'
import { TestClock } from './helpers/app.js'
import { Cluster, Redis } from 'ioredis'
import { createClient, deletePrefix, freePort, getRedis, uniquePrefix } from './helpers/redis.js'
import { startCluster, waitFor } from './helpers/topologies.js'

/*
 * Runtime overrides across two instances: two Fastify apps on separate
 * ioredis clients, one prefix, one real Redis, one injected clock (the
 * fleet's shared Redis TIME). A change made on one instance applies there at
 * once and on the other within its poll (OVERRIDE_POLL_MS).
 */

type Line = Record<string, unknown>

async function instance (prefix: string, clock: TestClock, lines: Line[]): Promise<FastifyInstance> {
  const redis = createClient(await getRedis())
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  await app.register(rateLimit, { redis, prefix, clock: clock.read, timeout: 5000 })
  app.get('/orders', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'ok')
  app.get('/two', { config: { rateLimit: [{ name: 'burst', limit: 2, window: '1s' }, { name: 'hourly', limit: 100, window: '1h' }] } }, async () => 'ok')
  app.addHook('onClose', async () => { await deletePrefix(redis, prefix); redis.disconnect() })
  await app.ready()
  return app
}

async function hit (app: FastifyInstance, ip = '203.0.113.7'): Promise<{ status: number, policy: string | undefined }> {
  const reply = await app.inject({ url: '/orders', remoteAddress: ip })
  return { status: reply.statusCode, policy: reply.headers['ratelimit-policy'] as string | undefined }
}

test('an override set on one instance applies there at once and on the other within the poll', async (t) => {
  const prefix = uniquePrefix('ov')
  const clock = new TestClock()
  const linesA: Line[] = []
  const a = await instance(prefix, clock, linesA)
  const b = await instance(prefix, clock, [])
  t.teardown(async () => { await a.close(); await b.close() })

  for (let i = 0; i < 3; i++) t.equal((await hit(i % 2 === 0 ? a : b)).status, 200)
  t.same(await hit(a), { status: 429, policy: '"get-orders";q=3;w=60' }, 'the declared limit, fleet-wide')

  const record = await a.rateLimit.setOverride({ target: 'GET /orders', limit: 5, ttl: 60_000, actor: 'alice', reason: 'incident 42' })
  t.match(record, { block: 'get-orders', route: 'GET /orders', identity: null, limit: 5, expiresAt: clock.now + 60_000, actor: 'alice', reason: 'incident 42', setAt: clock.now })
  t.equal(record.id, `${prefix}:{GET:/orders|*}:SW60000`, 'the id is the block key with * for the caller')
  const logged = linesA.find((line) => line.msg === 'rate limit override set')
  t.match(logged, { level: 30, change: 'set', actor: 'alice', reason: 'incident 42', at: new Date(clock.now).toISOString(), override: { limit: 5, id: record.id } }, 'the change is logged: what, by whom, why, when')

  t.same(await hit(a), { status: 200, policy: '"get-orders";q=5;w=60' }, 'at once on the instance that set it; the caller keeps its count (4th of 5)')
  const waited = await waitFor('instance B applies the override', async () => (await b.rateLimit.peek('GET /orders', { ip: '203.0.113.8' })).limit === 5, OVERRIDE_POLL_MS + 1000, 20)
  t.ok(waited <= OVERRIDE_POLL_MS + 200, `B applied it within the poll (${waited} ms)`)
  t.same(await hit(b), { status: 200, policy: '"get-orders";q=5;w=60' }, 'B: the 5th')
  t.same(await hit(b), { status: 429, policy: '"get-orders";q=5;w=60' }, 'B: the 6th is refused, with the override in the headers')

  const listed = await b.rateLimit.listOverrides()
  t.same(listed, [record], 'listed on the other instance, with actor and reason')
  const summary = b.rateLimit.policies().find((route) => route.url === '/orders')
  t.match(summary?.limit, { limit: 3, override: { limit: 5, actor: 'alice' } }, 'policies() shows the declared limit and the override in force')

  // The override lapses with its ttl on both instances, and the record is deleted from Redis.
  clock.advance(60_001)
  t.same(await hit(a), { status: 429, policy: '"get-orders";q=3;w=60' }, 'lapsed: the declared limit again (the sliding window still weighs the last window\'s 5)')
  t.same(await b.rateLimit.listOverrides(), [], 'lapsed: not listed')
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  await waitFor('the lapsed record is deleted', async () => await redis.hlen(`${prefix}:overrides`) === 0, 2000)
})

test('one caller\'s override, permanent until cleared; clearing is logged and reaches the other instance', async (t) => {
  const prefix = uniquePrefix('ov')
  const clock = new TestClock()
  const linesB: Line[] = []
  const a = await instance(prefix, clock, [])
  const b = await instance(prefix, clock, linesB)
  t.teardown(async () => { await a.close(); await b.close() })

  const record = await b.rateLimit.setOverride({ target: 'get-orders', identity: { ip: '198.51.100.1' }, limit: 1, ttl: 'permanent', actor: 'bob', reason: 'abusive scraper' })
  t.match(record, { identity: { ip: '198.51.100.1' }, expiresAt: null, blockId: `${prefix}:{GET:/orders|*}:SW60000` })
  t.equal(record.id, `${prefix}:{GET:/orders|ip=198.51.100.1}:SW60000`, 'the caller\'s own key')
  await waitFor('instance A applies it', async () => (await a.rateLimit.peek('GET /orders', { ip: '198.51.100.1' })).limit === 1, OVERRIDE_POLL_MS + 1000, 20)
  t.same(await hit(a, '198.51.100.1'), { status: 200, policy: '"get-orders";q=1;w=60' })
  t.equal((await hit(a, '198.51.100.1')).status, 429, 'that caller gets 1')
  t.same(await hit(a, '198.51.100.2'), { status: 200, policy: '"get-orders";q=3;w=60' }, 'other callers keep the declared limit')
  t.match(a.rateLimit.policies().find((route) => route.url === '/orders')?.limit, { identityOverrides: 1 }, 'policies() counts callers with their own override')
  clock.advance(3_600_000)
  t.equal((await a.rateLimit.listOverrides()).length, 1, 'permanent: still there an hour later')

  t.equal(await a.rateLimit.clearOverride('nope', { actor: 'bob', reason: 'typo' }), false, 'unknown id: false')
  t.equal(await b.rateLimit.clearOverride(record.id, { actor: 'bob', reason: 'scraper gone' }), true)
  t.match(linesB.find((line) => line.msg === 'rate limit override cleared'), { change: 'clear', actor: 'bob', reason: 'scraper gone', override: { id: record.id } })
  await waitFor('instance A drops it', async () => (await a.rateLimit.peek('GET /orders', { ip: '198.51.100.1' })).limit === 3, OVERRIDE_POLL_MS + 1000, 20)
  t.equal((await hit(a, '198.51.100.1')).status, 200, 'back to the declared limit')
})

test('bad calls are refused with FST_RRL_INVALID_API_CALL', async (t) => {
  const prefix = uniquePrefix('ov')
  const app = await instance(prefix, new TestClock(), [])
  t.teardown(async () => { await app.close() })
  const base = { target: 'GET /orders', limit: 5, ttl: 1000, actor: 'a', reason: 'r' }
  const api = app.rateLimit
  await t.rejects(api.setOverride({ ...base, limit: 0 }), { code: 'FST_RRL_INVALID_API_CALL', message: /limit must be an integer/ })
  await t.rejects(api.setOverride({ ...base, ttl: -1 }), /ttl must be/)
  await t.rejects(api.setOverride({ ...base, actor: ' ' }), /actor must be a non-empty string/)
  await t.rejects(api.setOverride({ ...base, reason: undefined as unknown as string }), /reason must be/)
  await t.rejects(api.setOverride({ ...base, target: 'GET /two' }), /has 2 blocks of its own: name one \(burst, hourly\)/)
  await t.rejects(api.setOverride({ ...base, target: 'GET /nope' }), { code: 'FST_RRL_UNKNOWN_POLICY' })
  await t.rejects(api.setOverride(null as never), /takes \{ target/)
  await t.rejects(api.setOverride({ ...base, identity: 'x' as never }), /identity must be an object/)
  await t.rejects(api.clearOverride(1 as never, { actor: 'a', reason: 'r' }), /id must be a string/)
  await t.rejects(api.clearOverride('x', undefined as never), /actor must be/)
  const record = await api.setOverride({ ...base, target: 'hourly', identity: { ip: '192.0.2.1', apiKey: 'secret-key' } })
  t.same(record.identity, { ip: '192.0.2.1', apiKey: '(given)' }, 'a block of a multi-block route, by name; secrets are never stored or shown')
  t.equal((await app.inject({ url: '/two', remoteAddress: '192.0.2.1' })).headers['ratelimit-policy'], '"burst";q=2;w=1, "hourly";q=5;w=3600', 'only the named block changes')
})

test('the memory store keeps overrides in the process', async (t) => {
  const clock = new TestClock()
  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', clock: clock.read })
  app.get('/', { config: { rateLimit: { limit: 2, window: '1m', algorithm: 'token-bucket' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  const record = await app.rateLimit.setOverride({ target: 'GET /', limit: 4, ttl: 1000, actor: 'a', reason: 'r' })
  t.equal((await app.inject('/')).headers['ratelimit-policy'], '"get-root";q=4;w=60', 'burst follows the limit')
  t.same(await app.rateLimit.listOverrides(), [record])
  clock.advance(1000)
  t.same(await app.rateLimit.listOverrides(), [], 'lapsed and pruned')
  t.equal(await app.rateLimit.clearOverride(record.id, { actor: 'a', reason: 'r' }), false, 'already gone')
})

test('on a Cluster: the overrides hash sits in one slot; the other instance applies it within the poll', async (t) => {
  const cluster = await startCluster()
  const clients: Cluster[] = []
  t.teardown(async () => { for (const client of clients) client.disconnect(); await cluster.stop() })
  const clock = new TestClock()
  const apps: FastifyInstance[] = []
  for (let i = 0; i < 2; i++) {
    const client = new Cluster(cluster.startupNodes, { enableOfflineQueue: false, redisOptions: { autoResendUnfulfilledCommands: false, maxRetriesPerRequest: 1 } })
    client.on('error', () => {})
    clients.push(client)
    const app = Fastify()
    await app.register(rateLimit, { redis: client, prefix: 'ovc', clock: clock.read, timeout: 5000 })
    app.get('/orders', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'ok')
    await app.ready()
    t.teardown(async () => { await app.close() })
    apps.push(app)
  }
  const [a, b] = apps as [FastifyInstance, FastifyInstance]
  await a.rateLimit.setOverride({ target: 'GET /orders', identity: { ip: '203.0.113.9' }, limit: 7, ttl: 60_000, actor: 'ops', reason: 'cluster' })
  await waitFor('B applies it', async () => (await b.rateLimit.peek('GET /orders', { ip: '203.0.113.9' })).limit === 7, OVERRIDE_POLL_MS + 2000, 20)
  t.same(await hit(b, '203.0.113.9'), { status: 200, policy: '"get-orders";q=7;w=60' }, 'the decision (another slot) runs at the override')
  t.same(await hit(b, '203.0.113.10'), { status: 200, policy: '"get-orders";q=3;w=60' })
})

test('a Redis that cannot be read: ready() still resolves, a failed poll is one debug line, listOverrides and setOverride reject', async (t) => {
  const client = new Redis({ host: '127.0.0.1', port: await freePort(), lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 1000 })
  client.on('error', () => {})
  const lines: Line[] = []
  const app = Fastify({ logger: { level: 'debug', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  await app.register(rateLimit, { redis: client, prefix: uniquePrefix('ov') })
  app.get('/', { config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'ok')
  t.teardown(async () => { await app.close(); client.disconnect() })
  await app.ready()
  await waitFor('the failed poll is logged', () => lines.some((line) => line.msg === 'rate limit overrides not read; keeping the last known'), 2000)
  t.equal(lines.find((line) => line.msg === 'rate limit overrides not read; keeping the last known')?.level, 20, 'at debug')
  await t.rejects(app.rateLimit.listOverrides(), 'listing needs the store')
  await t.rejects(app.rateLimit.setOverride({ target: 'GET /', limit: 5, ttl: 1000, actor: 'a', reason: 'r' }), 'so does setting')
})
