import { test, type Test } from 'tap'
import diagnostics from 'node:diagnostics_channel'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import rateLimit, { CHANNELS, errors, type DecisionMessage, type RateLimitDecision, type RateLimitPluginOptions, type RateLimitRefusal } from '../lib/index.js'
import { FLEET_POLL_MS } from '../lib/limits.js'
import { TestClock } from './helpers/app.js'
import { createClient, deletePrefix, getRedis, uniquePrefix } from './helpers/redis.js'
import { waitFor } from './helpers/topologies.js'

/*
 * Operator bans across two instances: two Fastify apps on separate ioredis
 * clients, one prefix, one real Redis, one injected clock (the fleet's shared
 * clock), default options otherwise. A ban set on one instance refuses there
 * at once and on the other within its poll plus one round trip.
 */

type Line = Record<string, unknown>

/** The poll interval plus a round trip and a loaded machine's slack. */
const FLEET_MS = 1500

const userOf = (req: FastifyRequest): string | undefined => req.headers['x-user'] as string | undefined
const keyOf = (req: FastifyRequest): string | undefined => req.headers['x-api-key'] as string | undefined

async function instance (prefix: string, clock: TestClock, lines: Line[] = [], options: RateLimitPluginOptions = {}): Promise<FastifyInstance> {
  const redis = createClient(await getRedis())
  const app = Fastify({ logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } })
  await app.register(rateLimit, { redis, prefix, clock: clock.read, user: userOf, apiKey: keyOf, ...options })
  app.get('/orders', { config: { rateLimit: { limit: 100, window: '1m' } } }, async () => 'ok')
  app.get('/other', { config: { rateLimit: { limit: 100, window: '1m', by: 'user' } } }, async () => 'ok')
  app.get('/keyed', { config: { rateLimit: { limit: 100, window: '1m', by: 'api-key' } } }, async () => 'ok')
  app.get('/free', { config: { rateLimit: false } }, async () => 'ok')
  app.addHook('onClose', async () => { await deletePrefix(redis, prefix); redis.disconnect() })
  await app.ready()
  return app
}

async function hit (app: FastifyInstance, url: string, from: { ip?: string, user?: string, apiKey?: string } = {}) {
  const headers: Record<string, string> = {}
  if (from.user !== undefined) headers['x-user'] = from.user
  if (from.apiKey !== undefined) headers['x-api-key'] = from.apiKey
  return await app.inject({ url, remoteAddress: from.ip ?? '203.0.113.7', headers })
}

async function pair (t: Test, linesA: Line[] = [], linesB: Line[] = []) {
  const prefix = uniquePrefix('ban')
  const clock = new TestClock()
  const a = await instance(prefix, clock, linesA)
  const b = await instance(prefix, clock, linesB)
  t.teardown(async () => { await a.close(); await b.close() })
  return { a, b, clock, prefix }
}

test('a ban set on one instance refuses there at once and on the other within the poll: 403 problem+json, no RateLimit fields', async (t) => {
  const linesA: Line[] = []
  const linesB: Line[] = []
  const { a, b, clock } = await pair(t, linesA, linesB)
  t.equal((await hit(b, '/orders')).statusCode, 200, 'B admits the caller before the ban')

  const ban = await a.rateLimit.ban({ identity: { ip: '203.0.113.7' }, ttl: 600_000, actor: 'ops:alice', reason: 'INC-7 scraper' })
  t.same(ban, { id: '*|ip=203.0.113.7', route: '*', kind: 'ip', identity: { ip: '203.0.113.7' }, statusCode: 403, expiresAt: clock.now + 600_000, actor: 'ops:alice', reason: 'INC-7 scraper', setAt: clock.now })
  t.match(linesA.find((line) => line.msg === 'rate limit ban set'), { level: 30, change: 'set', actor: 'ops:alice', reason: 'INC-7 scraper', at: new Date(clock.now).toISOString(), ban: { id: ban.id } }, 'the ban is logged: what, by whom, why, when')

  const refused = await hit(a, '/orders')
  t.equal(refused.statusCode, 403, 'at once on the instance that set it')
  t.equal(refused.headers['content-type'], 'application/problem+json; charset=utf-8')
  t.same(refused.json(), { type: 'https://iana.org/assignments/http-problem-types#abnormal-usage-detected', title: 'Forbidden', status: 403, detail: 'Requests from this client are refused.', instance: '/orders' })
  t.equal(refused.headers['retry-after'], undefined, 'no Retry-After on a 403')
  t.equal(refused.headers['ratelimit-policy'], undefined, 'no RateLimit-Policy')
  t.equal(refused.headers.ratelimit, undefined, 'no RateLimit')

  const waited = await waitFor('instance B refuses the banned caller', async () => (await hit(b, '/orders')).statusCode === 403, FLEET_MS, 20)
  t.ok(waited <= FLEET_MS, `B refused within the poll plus a round trip (${waited} ms, poll ${FLEET_POLL_MS} ms)`)
  t.equal((await hit(b, '/other')).statusCode, 403, 'no target: every limited route')
  t.equal((await hit(b, '/free')).statusCode, 200, 'a route with rateLimit: false has no hook: not covered')
  t.equal((await hit(b, '/orders', { ip: '203.0.113.8' })).statusCode, 200, 'other callers are left alone')
  t.match(linesB.find((line) => line.msg === 'rate limit ban refused a request'), { route: 'GET /orders', identityKind: 'ip', ban: { route: '*', statusCode: 403, actor: 'ops:alice' } }, 'B logs the refusal, without the address')
  t.notOk(JSON.stringify(linesB.filter((line) => line.msg === 'rate limit ban refused a request')).includes('203.0.113.7'), 'the refusal log carries no identity value')

  t.same(await b.rateLimit.listBans(), [ban], 'listed on the other instance, with actor and reason')
  const summaries = b.rateLimit.policies()
  t.equal(summaries.find((route) => route.url === '/orders')?.bans, 1, 'policies(): a ban applies to /orders')
  t.equal(summaries.find((route) => route.url === '/free')?.bans, undefined, 'and none to an unlimited route')
  t.ok(b.rateLimit.stats().banned >= 2, 'counted as banned')
  t.equal(b.rateLimit.stats().limited, 0, 'not as limited')
})

test('a ban on one target leaves the other routes alone; the 429 variant sends Retry-After = the time left; it lapses on every instance', async (t) => {
  const { a, b, clock, prefix } = await pair(t)
  const ban = await b.rateLimit.ban({ target: 'GET /orders', identity: { user: 'mallory' }, ttl: 30_000, actor: 'ops', reason: 'abuse', statusCode: 429 })
  t.match(ban, { route: 'GET /orders', kind: 'user', identity: { user: 'mallory' }, statusCode: 429 })
  await waitFor('instance A refuses mallory on /orders', async () => (await hit(a, '/orders', { user: 'mallory' })).statusCode === 429, FLEET_MS, 20)

  const refused = await hit(a, '/orders', { user: 'mallory' })
  t.equal(refused.headers['retry-after'], '30', 'Retry-After: the ban\'s 30 s left')
  t.same(refused.json(), { type: 'https://iana.org/assignments/http-problem-types#abnormal-usage-detected', title: 'Too Many Requests', status: 429, detail: 'Requests from this client are refused; retry in 30 seconds.', instance: '/orders' })
  t.equal(refused.headers['ratelimit-policy'], undefined, 'no RateLimit fields on a ban refusal')
  clock.advance(10_500)
  t.equal((await hit(a, '/orders', { user: 'mallory' })).headers['retry-after'], '20', 'the time left, rounded up')
  t.equal((await hit(a, '/other', { user: 'mallory' })).statusCode, 200, 'another route admits mallory')
  t.equal((await hit(a, '/orders', { user: 'alice' })).statusCode, 200, 'and /orders admits alice')
  t.equal(a.rateLimit.policies().find((route) => route.url === '/other')?.bans, undefined, 'policies(): the ban is not shown on /other')
  t.equal(a.rateLimit.policies().find((route) => route.url === '/orders')?.bans, 1)

  clock.advance(19_500)
  t.equal((await hit(a, '/orders', { user: 'mallory' })).statusCode, 200, 'lapsed at expiresAt (plugin clock) on A')
  t.equal((await hit(b, '/orders', { user: 'mallory' })).statusCode, 200, 'and on B')
  t.same(await a.rateLimit.listBans(), [], 'lapsed: not listed')
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  await waitFor('the lapsed record is deleted', async () => await redis.hlen(`${prefix}:bans`) === 0, 2000)
})

test('a permanent apiKey ban matches the hashed key and stores no secret; unban reaches the other instance; reset() does not lift a ban', async (t) => {
  const linesA: Line[] = []
  const { a, b, clock, prefix } = await pair(t, linesA)
  const secret = 'sk_live_very_secret_42'
  t.equal((await hit(a, '/keyed', { apiKey: secret })).statusCode, 200, 'the caller\'s key is written')
  const ban = await a.rateLimit.ban({ identity: { apiKey: secret }, ttl: 'permanent', actor: 'ops:bob', reason: 'leaked key' })
  t.same(ban.identity, { apiKey: '(given)' }, 'an API key is never shown')
  t.equal(ban.expiresAt, null)

  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const stored = await redis.hgetall(`${prefix}:bans`)
  t.same(Object.keys(stored), [ban.id], 'one record, under its id')
  t.notOk(JSON.stringify(stored).includes(secret), 'the raw key is not stored')
  const rendered = ban.id.slice(ban.id.indexOf('|') + 1)
  t.match(rendered, /^k=[A-Za-z0-9_-]{22}$/, 'the id carries the key part as keys do: k=<hash>')
  const keys = await redis.keys(`${prefix}:*`)
  t.ok(keys.some((key) => key.includes(`|${rendered}}`)), 'the same hash names the caller\'s counting key')
  t.notOk(keys.some((key) => key.includes(secret)), 'no key name holds the secret either')

  await waitFor('B refuses the key', async () => (await hit(b, '/orders', { apiKey: secret, ip: '198.51.100.20' })).statusCode === 403, FLEET_MS, 20)
  t.equal((await hit(b, '/orders', { apiKey: 'another-key', ip: '198.51.100.20' })).statusCode, 200, 'the same address with another key is admitted')
  clock.advance(86_400_000)
  t.equal((await hit(a, '/keyed', { apiKey: secret })).statusCode, 403, 'permanent: still refused a day later')

  await a.rateLimit.reset('GET /keyed', { apiKey: secret })
  t.equal((await hit(a, '/keyed', { apiKey: secret })).statusCode, 403, 'reset() clears counts, not bans')

  t.equal(await b.rateLimit.unban(ban.id, { actor: 'ops:bob', reason: 'key rotated' }), true)
  t.equal(await b.rateLimit.unban(ban.id, { actor: 'ops:bob', reason: 'again' }), false, 'already lifted: false')
  await waitFor('A admits the key again', async () => (await hit(a, '/keyed', { apiKey: secret })).statusCode === 200, FLEET_MS, 20)
  t.same(await a.rateLimit.listBans(), [])
})

test('a user ban matches the user hashed as in keys (and with hashSecret); an async user function is awaited', async (t) => {
  const clock = new TestClock()
  const prefix = uniquePrefix('ban')
  const hashed = await instance(prefix, clock, [], { hashSecret: 'a-secret-of-sixteen-bytes+' })
  t.teardown(async () => { await hashed.close() })
  t.equal((await hit(hashed, '/other', { user: 'eve' })).statusCode, 200)
  const ban = await hashed.rateLimit.ban({ identity: { user: 'eve' }, ttl: 60_000, actor: 'ops', reason: 'fraud' })
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const rendered = ban.id.slice(ban.id.indexOf('|') + 1)
  t.ok((await redis.keys(`${prefix}:*`)).some((key) => key.includes(`|${rendered}}`)), 'the ban\'s u=<hmac> is the caller\'s key part')
  t.equal((await hit(hashed, '/other', { user: 'eve' })).statusCode, 403)
  t.equal((await hit(hashed, '/orders', { user: 'eve', ip: '192.0.2.50' })).statusCode, 403, 'also where the route\'s by does not read the user (computed for the check)')
  t.equal((await hit(hashed, '/orders', { ip: '192.0.2.50' })).statusCode, 200, 'no user: no match')

  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', clock: clock.read, user: async (req) => await Promise.resolve(userOf(req)) })
  app.get('/', { config: { rateLimit: { limit: 5, window: '1m', by: 'ip' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  await app.rateLimit.ban({ identity: { user: 'eve' }, ttl: 60_000, actor: 'ops', reason: 'fraud' })
  t.equal((await hit(app, '/', { user: 'eve' })).statusCode, 403, 'async user: the ban check awaits it')
  t.equal((await hit(app, '/', { user: 'adam' })).statusCode, 200)
})

test('useErrorHandler: a 403 is FST_RRL_BANNED, a ban\'s 429 is FST_RRL_RATE_LIMITED with outcome banned', async (t) => {
  const clock = new TestClock()
  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', clock: clock.read, useErrorHandler: true })
  const seen: Array<{ code: string, statusCode: number, outcome: string, retryAfter: number }> = []
  app.setErrorHandler(async (error, _request, reply) => {
    const { rateLimit: decision, retryAfter } = error as unknown as { rateLimit: RateLimitDecision, retryAfter: number }
    seen.push({ code: (error as { code: string }).code, statusCode: (error as { statusCode: number }).statusCode, outcome: decision.outcome, retryAfter })
    if (error instanceof errors.FST_RRL_BANNED) return await reply.code(403).send({ error: 'banned' })
    return await reply.code(429).send({ error: 'slow down', retryAfterMs: decision.retryAfterMs })
  })
  app.get('/', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })

  await app.rateLimit.ban({ identity: { ip: '198.51.100.1' }, ttl: 'permanent', actor: 'ops', reason: 'r' })
  const forbidden = await hit(app, '/', { ip: '198.51.100.1' })
  t.equal(forbidden.statusCode, 403)
  t.same(forbidden.json(), { error: 'banned' })
  t.equal(forbidden.headers['retry-after'], undefined)
  t.same(seen[0], { code: 'FST_RRL_BANNED', statusCode: 403, outcome: 'banned', retryAfter: 0 })

  await app.rateLimit.ban({ identity: { ip: '198.51.100.2' }, ttl: 5000, actor: 'ops', reason: 'r', statusCode: 429 })
  const slow = await hit(app, '/', { ip: '198.51.100.2' })
  t.equal(slow.statusCode, 429)
  t.equal(slow.headers['retry-after'], '5')
  t.same(slow.json(), { error: 'slow down', retryAfterMs: 5000 })
  t.same(seen[1], { code: 'FST_RRL_RATE_LIMITED', statusCode: 429, outcome: 'banned', retryAfter: 5 })
})

test('the memory store keeps bans in the process: expiry by the plugin clock, unban, listBans, IPv6 by subnet', async (t) => {
  const clock = new TestClock()
  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', clock: clock.read })
  app.get('/', { config: { rateLimit: { limit: 5, window: '1m' } } }, async (req) => ({ outcome: req.rateLimit?.outcome }))
  await app.ready()
  t.teardown(async () => { await app.close() })
  const timed = await app.rateLimit.ban({ identity: { ip: '192.0.2.9' }, ttl: 1000, actor: 'a', reason: 'r' })
  const v6 = await app.rateLimit.ban({ target: 'get-root', identity: { ip: '2001:db8:1:2::1' }, ttl: 'permanent', actor: 'a', reason: 'r' })
  t.equal(v6.id, 'GET /|ip=2001:db8:1:2::/64', 'a block name targets its route; IPv6 grouped as keys group it')
  t.equal((await hit(app, '/', { ip: '2001:db8:1:2::ffff' })).statusCode, 403, 'the whole /64')
  t.equal((await hit(app, '/', { ip: '192.0.2.9' })).statusCode, 403)
  t.same(await app.rateLimit.listBans(), [timed, v6])
  clock.advance(1000)
  t.equal(app.rateLimit.stats().allowed, 0, 'a refused request is not decided')
  t.equal((await app.rateLimit.peek('GET /', { ip: '192.0.2.9' })).remaining, 5, 'and charges nothing')
  t.same((await hit(app, '/', { ip: '192.0.2.9' })).json(), { outcome: 'allowed' }, 'lapsed')
  t.same(await app.rateLimit.listBans(), [v6], 'and pruned')
  t.equal(await app.rateLimit.unban(timed.id, { actor: 'a', reason: 'r' }), false, 'already gone')
  t.equal(await app.rateLimit.unban(v6.id, { actor: 'a', reason: 'r' }), true)
  t.equal((await hit(app, '/', { ip: '2001:db8:1:2::ffff' })).statusCode, 200)
})

test('a ban wins over allowList, covers the HEAD twin and the notFound limit, reaches replyBuilder and the decision channel', async (t) => {
  const refusals: RateLimitRefusal[] = []
  const app = Fastify()
  await app.register(rateLimit, {
    store: 'memory',
    clock: new TestClock().read,
    allowList: ['192.0.2.0/24'],
    notFound: { limit: 20, window: '1m' },
    replyBuilder: (_request, refusal) => { refusals.push(refusal); return { body: { status: refusal.statusCode } } }
  })
  app.get('/page', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  const messages: DecisionMessage[] = []
  const listen = (message: unknown): void => { messages.push(message as DecisionMessage) }
  diagnostics.subscribe(CHANNELS.decision, listen)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.decision, listen) })

  t.equal((await hit(app, '/page', { ip: '192.0.2.1' })).headers.ratelimit, undefined, 'allow-listed: not limited')
  await app.rateLimit.ban({ target: 'GET /page', identity: { ip: '192.0.2.1' }, ttl: 60_000, actor: 'ops', reason: 'r' })
  const refused = await hit(app, '/page', { ip: '192.0.2.1' })
  t.equal(refused.statusCode, 403, 'the ban wins over allowList')
  t.same(refused.json(), { status: 403 }, 'replyBuilder built the body')
  t.equal(refused.headers['retry-after'], undefined, 'no Retry-After on a 403, with a builder too')
  t.match(refusals[0], { statusCode: 403, retryAfter: 0, violatedPolicies: [], decision: { allowed: false, outcome: 'banned', retryAfterMs: 60_000, policy: 'get-page' } })
  t.match(messages.at(-1), { route: 'GET /page', outcome: 'banned', source: 'ban', policy: 'get-page' }, 'published on the decision channel, and nothing after it: the hook stops there')
  t.equal((await app.inject({ method: 'HEAD', url: '/page', remoteAddress: '192.0.2.1' })).statusCode, 403, 'the HEAD twin of the GET')
  t.equal(app.rateLimit.policies().find((route) => route.method === 'HEAD' && route.url === '/page')?.bans, 1)
  t.equal((await hit(app, '/nowhere', { ip: '192.0.2.1' })).statusCode, 404, 'a ban on one route leaves the notFound limit alone')

  await app.rateLimit.ban({ identity: { ip: '198.51.100.77' }, ttl: 60_000, actor: 'ops', reason: 'r' })
  t.equal((await hit(app, '/nowhere', { ip: '198.51.100.77' })).statusCode, 403, 'an every-route ban covers the notFound limit')
  t.equal(app.rateLimit.policies().find((route) => route.url === '(not-found)')?.bans, 1)
})

test('records a reader cannot use are skipped: garbage, another version\'s, a user ban on an instance without `user`', async (t) => {
  const prefix = uniquePrefix('ban')
  const clock = new TestClock()
  const a = await instance(prefix, clock)
  const redis = createClient(await getRedis())
  const b = Fastify()
  await b.register(rateLimit, { redis, prefix, clock: clock.read })
  b.get('/orders', { config: { rateLimit: { limit: 100, window: '1m' } } }, async () => 'ok')
  await b.ready()
  t.teardown(async () => { await b.close(); await a.close(); redis.disconnect() })
  await redis.hset(`${prefix}:bans`, 'garbage', '{not json', 'old', JSON.stringify({ id: 'old', kind: 'cookie', statusCode: 403 }), 'teapot', JSON.stringify({ id: 'teapot', kind: 'ip', statusCode: 418 }))
  const ban = await a.rateLimit.ban({ identity: { user: 'mallory' }, ttl: 60_000, actor: 'ops', reason: 'r' })
  t.same(await b.rateLimit.listBans(), [ban], 'only the usable record is listed')
  t.equal((await hit(b, '/orders', { user: 'mallory' })).statusCode, 200, 'B reads no user (no `user` option): the ban cannot match there, and nothing fails')
  t.equal((await hit(a, '/orders', { user: 'mallory' })).statusCode, 403, 'A, which has the option, refuses')
})

test('bad calls are refused with FST_RRL_INVALID_API_CALL', async (t) => {
  const app = Fastify()
  await app.register(rateLimit, { store: 'memory', globalLimits: [{ name: 'everyone', limit: 100, window: '1m' }], policies: { jobs: { limit: 3, window: '1m' } } })
  app.get('/', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close() })
  const base = { identity: { ip: '192.0.2.1' }, ttl: 1000, actor: 'a', reason: 'r' }
  const api = app.rateLimit
  await t.rejects(api.ban({ ...base, identity: { ip: '192.0.2.1', user: 'x' } as never }), { code: 'FST_RRL_INVALID_API_CALL', message: /exactly one of ip, user, apiKey or keyHash/ })
  await t.rejects(api.ban({ ...base, identity: { tier: 'x' } as never }), /exactly one of/)
  await t.rejects(api.ban({ ...base, identity: { ip: '' } }), /identity.ip must be a non-empty string/)
  await t.rejects(api.ban({ ...base, identity: { ip: 'not-an-ip' } }), /identity.ip is not an IP address/)
  await t.rejects(api.ban({ ...base, identity: { user: 'alice' } }), /a user ban needs the plugin option `user`/)
  await t.rejects(api.ban({ ...base, ttl: 0 }), /ttl must be/)
  await t.rejects(api.ban({ ...base, statusCode: 404 as never }), /statusCode must be 403 or 429/)
  await t.rejects(api.ban({ ...base, ttl: 'permanent', statusCode: 429 }), /statusCode 429 needs a ttl/)
  await t.rejects(api.ban({ ...base, actor: '' }), /actor must be/)
  await t.rejects(api.ban({ ...base, target: 'GET /nope' }), { code: 'FST_RRL_UNKNOWN_POLICY' })
  await t.rejects(api.ban({ ...base, target: 'everyone' }), /is not a route's limit/)
  await t.rejects(api.ban({ ...base, target: 'jobs' }), /is not a route's limit/)
  await t.rejects(api.ban(null as never), /takes \{ identity/)
  await t.rejects(api.unban(1 as never, { actor: 'a', reason: 'r' }), /id must be a string/)
  await t.rejects(api.unban('x', undefined as never), /actor must be/)
  t.same(await api.listBans(), [], 'nothing was stored')
})
