import { test, type Test } from 'tap'
import { createHmac } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { type RateLimitPluginOptions, type RouteRateLimit } from '../../lib/index.js'
import { PICTURE_PUBLISH } from '../../lib/options/index.js'
import { hashValue } from '../../lib/util/hash.js'
import { TopCallers } from '../../lib/picture/counters.js'
import { TestClock } from '../helpers/app.js'
import { createClient, privateRedis } from '../helpers/redis.js'
import { startCluster } from '../helpers/topologies.js'
import { cliHere } from '../helpers/cli.js'

/*
 * The fleet's picture (docs/console.md): instances on one private Redis,
 * default options but for the picture's publish-now (a test-only hook, so no
 * test waits out an interval) and the injected clock that stands in for
 * Redis TIME (the lapse of a dead instance's picture).
 */

interface Member { app: FastifyInstance, publish: () => Promise<void>, redis: Redis, id: string }

const ORDERS: RouteRateLimit = { limit: 2, window: '1m' }

async function member (t: Test, redis: Redis, options: RateLimitPluginOptions = {}, orders: RouteRateLimit = ORDERS): Promise<Member> {
  let publish: (() => Promise<void>) | undefined
  let id = ''
  const app = Fastify()
  await app.register(rateLimit, { redis, prefix: 'pic', user: (req) => req.headers['x-user'] as string | undefined, ...options, [PICTURE_PUBLISH]: (now: () => Promise<void>, name: string) => { publish = now; id = name } } as RateLimitPluginOptions)
  app.get('/orders', { config: { rateLimit: orders } }, async () => 'ok')
  app.get('/users', { config: { rateLimit: { limit: 1, window: '1m', by: 'user' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => {
    await app.close()
    redis.disconnect()
  })
  if (publish === undefined) throw new Error('no publisher')
  return { app, publish, redis, id }
}

test('three instances: fleet() merges their counts, their top callers by key hash, their breakers; a differing declaration shows; close withdraws', async (t) => {
  const { server, admin } = await privateRedis(t)
  const clients = [0, 1, 2].map(() => createClient(server))
  const fleet = await Promise.all(clients.map(async (redis, i) => await member(t, redis, {}, i === 2 ? { limit: 3, window: '1m' } : ORDERS)))
  const [a, b, c] = fleet as [Member, Member, Member]
  // 203.0.113.1 is refused on every instance (its count is the fleet's); 203.0.113.2 once, on one.
  // The third instance declares 3 where the others declare 2 (a deploy in progress): the keys are the same.
  const hits: Array<[Member, string]> = [[a, '203.0.113.1'], [b, '203.0.113.1'], [c, '203.0.113.1'], [a, '203.0.113.1'], [b, '203.0.113.1'], [c, '203.0.113.1'], [a, '203.0.113.2'], [a, '203.0.113.2'], [b, '203.0.113.2']]
  const codes: number[] = []
  for (const [m, ip] of hits) codes.push((await m.app.inject({ url: '/orders', remoteAddress: ip })).statusCode)
  t.same(codes, [200, 200, 200, 429, 429, 429, 200, 200, 429], 'the fleet refused 3 of the first caller and 1 of the second')
  for (const m of fleet) await m.publish()

  const view = await a.app.rateLimit.fleet()
  t.equal(view.instances.length, 3, 'three live instances')
  t.equal(view.unreadable, 0)
  t.ok(view.instances.every((picture) => picture.version === '0.1.0' && picture.uptimeMs >= 0 && picture.store.kind === 'redis' && !picture.store.cluster))
  const orders = view.routes.filter((row) => row.route === 'GET /orders')
  t.equal(orders.reduce((sum, row) => sum + row.admitted, 0), 5, 'admitted summed over the fleet')
  t.equal(orders.reduce((sum, row) => sum + row.refused, 0), 4, 'refused summed over the fleet')
  t.ok(orders.every((row) => row.series.refused.length >= 1), 'each row carries its series')
  const top = view.top.find((entry) => entry.route === 'GET /orders')?.callers ?? []
  // With the `user` option the default identity is the user, and a caller without one is keyed by its IP (`u~<ip>`).
  t.equal(top[0]?.hash, hashValue('u~203.0.113.1'), 'the most refused caller first, named by the hash of its key identity part')
  t.equal(top[0]?.count, 3, 'its refusals on three instances added up')
  t.equal(top[0]?.identity, undefined, 'no raw identity unless the app opts in')
  t.equal(top[1]?.count, 1)
  t.equal(view.nodes.length, 3, 'one breaker per instance and node')
  t.ok(view.nodes.every((node) => node.breaker === 'closed' && node.node.length > 0))
  t.equal(view.disagreements.length, 1, `only /orders differs: ${JSON.stringify(view.disagreements.map((d) => d.route))}`)
  t.same(view.disagreements[0]?.variants.map((variant) => [variant.instances.length, variant.limits[0]?.limit]).sort(), [[1, 3], [2, 2]], 'two instances declare 2, one declares 3')

  // The next interval starts from zero; the series keeps the last one.
  await a.publish()
  const rowOfA = (await b.app.rateLimit.fleet()).instances.find((picture) => picture.pid === process.pid && picture.routes.length > 0 && picture.routes.every((row) => row.refused === 0 && row.admitted === 0))
  t.ok(rowOfA, 'an instance that published twice shows an empty interval and keeps its series')

  await c.app.close()
  t.equal((await a.app.rateLimit.fleet()).instances.length, 2, 'a closed instance withdrew its picture at once')
  t.equal(await admin.exists('pic/console:{picture}:instances'), 1)
})

test('a dead instance drops out after three intervals by the store\'s clock; the last one out leaves no key behind', async (t) => {
  const { server, admin } = await privateRedis(t)
  const clock = new TestClock()
  const alive = await member(t, createClient(server), { clock: clock.read, picture: { interval: '2s' } })
  const deadClient = createClient(server)
  const dead = await member(t, deadClient, { clock: clock.read, picture: { interval: '2s' } })
  await dead.publish()
  t.equal((await alive.app.rateLimit.fleet()).instances.length, 2)
  // It dies without its close reaching Redis.
  deadClient.disconnect()
  clock.advance(3_000)
  await alive.publish()
  clock.advance(2_999)
  t.equal((await alive.app.rateLimit.fleet()).instances.length, 2, 'within three intervals it still shows')
  clock.advance(1)
  t.equal((await alive.app.rateLimit.fleet()).instances.length, 1, 'three intervals after its last picture, it is gone')
  await alive.publish()
  t.same(await admin.call('ZRANGE', 'pic/console:{picture}:lapses', '0', '-1'), [alive.id], 'the next publish deleted its lapsed entry')
  t.ok(await admin.pttl('pic/console:{picture}:instances') > 0 && await admin.pttl('pic/console:{picture}:instances') <= 6000, 'both keys expire three intervals after the last write')
  await alive.app.close()
  t.equal(await admin.exists('pic/console:{picture}:instances', 'pic/console:{picture}:lapses'), 0, 'the last instance out withdrew: nothing left')
})

test('the keys live until the last picture lapses: an instance with a short interval that stops takes no other picture with it', async (t) => {
  const { server, admin } = await privateRedis(t)
  const slow = await member(t, createClient(server), { picture: { interval: '60s' } })
  const fast = await member(t, createClient(server), { picture: { interval: '1s' } })
  await fast.publish()
  const pttl = async (): Promise<number> => Math.min(await admin.pttl('pic/console:{picture}:instances'), await admin.pttl('pic/console:{picture}:lapses'))
  t.ok(await pttl() > 170_000, `after the 1 s instance's publish, the keys still outlive the 60 s instance's picture (${await pttl()} ms)`)
  await fast.app.close()
  t.ok(await pttl() > 170_000, 'and after its withdrawal')
  t.same((await slow.app.rateLimit.fleet()).instances.map((picture) => picture.intervalMs), [60_000])
})

test('two registrations in one app: a picture each, one app\'s declarations, no disagreement; the CLI rebuilds the routes of both', async (t) => {
  const { server } = await privateRedis(t)
  const redis = createClient(server)
  const app = Fastify()
  const publishes: Array<() => Promise<void>> = []
  const scopes: FastifyInstance[] = []
  for (const path of ['/left', '/right']) {
    await app.register(async (scope) => {
      scopes.push(scope)
      await scope.register(rateLimit, { redis, prefix: 'two', [PICTURE_PUBLISH]: (now: () => Promise<void>) => { publishes.push(now) } } as RateLimitPluginOptions)
      scope.get(path, { config: { rateLimit: { limit: 1, window: '1m' } } }, async () => 'ok')
    })
  }
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  for (const publish of publishes) await publish()
  await app.inject({ url: '/right', remoteAddress: '192.0.2.5' })
  const view = await (scopes[0] as FastifyInstance).rateLimit.fleet()
  t.equal(view.instances.length, 2, 'one picture per registration')
  t.equal(new Set(view.instances.map((picture) => picture.app)).size, 1, 'of one app')
  t.same(view.disagreements, [], 'its two registrations are one process: no route differs')
  for (const route of ['GET /left', 'GET /right']) {
    const run = await cliHere(['peek', route, '--ip', '192.0.2.5', '--json', '--prefix', 'two'], { REDIS_URL: server.url })
    t.equal(run.code, 0, `${route}: ${run.err}`)
  }
})

test('fleet() and auditTrail() end with FST_RRL_REDIS_TIMEOUT when Redis hangs (no client commandTimeout)', async (t) => {
  const { server } = await privateRedis(t)
  const m = await member(t, createClient(server), { timeout: 20 })
  server.pause()
  t.teardown(() => { server.resume() })
  const started = Date.now()
  await t.rejects(m.app.rateLimit.fleet(), { code: 'FST_RRL_REDIS_TIMEOUT' })
  await t.rejects(m.app.rateLimit.auditTrail(), { code: 'FST_RRL_REDIS_TIMEOUT' })
  t.ok(Date.now() - started < 5000, 'each within 30 timeouts, at least 1 s')
  server.resume()
})

test('no store call on the request path: between publishes, requests send only their decisions', async (t) => {
  const { server, admin } = await privateRedis(t)
  const m = await member(t, createClient(server))
  await m.publish()
  await admin.config('RESETSTAT')
  for (let i = 0; i < 40; i++) await m.app.inject({ url: '/orders', remoteAddress: `198.51.100.${i % 4}` })
  const stats = await admin.info('commandstats')
  const commands = [...stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].map(([, name, calls]) => `${name ?? ''}=${calls ?? ''}`)
  // Commands a script runs count as calls too: the decisions' GET, SET and TIME are inside their FCALLs.
  t.same(commands.filter((entry) => /^(eval|evalsha|hset|hget|zadd|zrangebyscore|xadd|pexpire)=/.test(entry)), [], `no picture or audit command among: ${commands.join(' ')}`)
  t.match(stats, /cmdstat_fcall:calls=[1-9]/)
})

test('rawIdentities shows the identity part beside its hash; with hashSecret the hash is keyed; a ban by key hash refuses that caller on every instance', async (t) => {
  const { server } = await privateRedis(t)
  const secret = 'an-app-secret-of-32-characters!!'
  const a = await member(t, createClient(server), { hashSecret: secret, picture: { rawIdentities: true } })
  const b = await member(t, createClient(server), { hashSecret: secret })
  for (let i = 0; i < 3; i++) await a.app.inject({ url: '/users', headers: { 'x-user': 'mallory' } })
  await a.app.inject({ url: '/users', headers: { 'x-user': 'alice' } })
  await a.publish()
  const [caller] = (await b.app.rateLimit.fleet()).top.find((entry) => entry.route === 'GET /users')?.callers ?? []
  const identity = caller?.identity ?? ''
  t.match(identity, /^u=[A-Za-z0-9_-]+$/, 'the identity part as in keys: the user hashed, never the raw id')
  t.equal(caller?.hash, createHmac('sha256', secret).update(identity).digest('base64url').slice(0, 22), 'the caller hash is keyed by hashSecret')

  const ban = await b.app.rateLimit.ban({ identity: { keyHash: caller?.hash ?? '' }, target: 'GET /users', ttl: 60_000, actor: 'ops', reason: 'top of the list' })
  t.match(ban, { kind: 'keyHash', route: 'GET /users', identity: { keyHash: caller?.hash } })
  t.equal((await b.app.inject({ url: '/users', headers: { 'x-user': 'mallory' } })).statusCode, 403, 'the banned caller refused at once where the ban was set')
  t.equal((await b.app.inject({ url: '/users', headers: { 'x-user': 'bob' } })).statusCode, 200, 'another caller is not')
  t.equal((await b.app.inject({ url: '/orders', headers: { 'x-user': 'mallory' } })).statusCode, 200, 'another route is not banned')
  await a.app.rateLimit.listBans() // reads the records now, as the 1 s poll would
  t.equal((await a.app.inject({ url: '/users', headers: { 'x-user': 'mallory' } })).statusCode, 403, 'and on the other instance')
  t.match(await a.app.rateLimit.auditTrail(), [{ change: 'set', noun: 'ban', actor: 'ops', reason: 'top of the list' }], 'the ban is in the audit trail')
  await t.rejects(b.app.rateLimit.ban({ identity: { keyHash: 'not a hash' }, ttl: 1000, actor: 'ops', reason: 'x' }), { code: 'FST_RRL_INVALID_API_CALL', message: /keyHash must be a key hash/ })
  await t.rejects(b.app.rateLimit.auditTrail(0), { code: 'FST_RRL_INVALID_API_CALL' })
})

test('on a 3-master Cluster: every instance\'s picture in one slot, read in one call; the breakers of each master an instance decided on', async (t) => {
  const cluster = await startCluster()
  t.teardown(async () => { await cluster.stop() })
  const { Cluster } = await import('ioredis')
  const clients = [0, 1, 2].map(() => new Cluster(cluster.startupNodes))
  const fleet = await Promise.all(clients.map(async (redis) => await member(t, redis as unknown as Redis)))
  for (const [i, m] of fleet.entries()) {
    for (let n = 0; n < 30; n++) await m.app.inject({ url: '/orders', remoteAddress: `10.${i}.0.${n}` })
    await m.publish()
  }
  const view = await (fleet[0] as Member).app.rateLimit.fleet()
  t.equal(view.instances.length, 3)
  t.ok(view.instances.every((picture) => picture.store.cluster), 'each says it runs on a Cluster')
  const masters = new Set(view.nodes.map((node) => node.node))
  t.equal(masters.size, 3, `callers on every master: one breaker per master (${[...masters].join(', ')})`)
  t.equal(view.routes.find((row) => row.route === 'GET /orders')?.admitted, 90)
})

test('the picture option is checked at register', async (t) => {
  for (const [value, message] of [[{ interval: 10 }, /picture.interval.*from 1000 ms/], [{ interval: '10m' }, /picture.interval/], [{ top: -1 }, /picture.top/], [{ top: 1.5 }, /picture.top/], [{ rawIdentities: 'yes' }, /picture.rawIdentities/], ['on', /picture/], [{ every: 5 }, /picture/]] as const) {
    const app = Fastify()
    await t.rejects(async () => { await app.register(rateLimit, { store: 'memory', picture: value as never }) }, { code: 'FST_RRL_INVALID_OPTION', message }, JSON.stringify(value))
  }
})

test('Space-Saving: a caller above total/capacity is held; each count overestimates by at most its error; decay halves', async (t) => {
  const top = new TopCallers(4)
  const truth = new Map<string, number>()
  let seed = 7
  for (let i = 0; i < 2000; i++) {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    const caller = i % 3 === 0 ? 'heavy' : `c${seed % 50}`
    truth.set(caller, (truth.get(caller) ?? 0) + 1)
    top.add(caller)
  }
  const list = top.list()
  t.equal(list.length, 4, 'bounded by its capacity')
  t.equal(list[0]?.identity, 'heavy', 'the heavy hitter (a third of all) is held, first')
  for (const entry of list) {
    const real = truth.get(entry.identity) ?? 0
    t.ok(entry.count >= real && entry.count - entry.error <= real, `${entry.identity}: ${real} ≤ ${entry.count} ≤ ${real} + ${entry.error}`)
  }
  const before = list[0]?.count ?? 0
  top.decay()
  t.equal(top.list()[0]?.count, before / 2)
})
