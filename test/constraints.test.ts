import { test, type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import rateLimit from '../lib/index.js'
import { policyTable } from '../lib/api/api.js'
import { setupRedisApp, type RedisApp } from './helpers/app.js'

/*
 * Routes that share method and URL but differ in their constraints (host,
 * version, a custom strategy) are distinct routes: their own counters, ban
 * scopes, API targets and policies() rows. Routes without constraints keep
 * today's keys and ids (rolling deploys).
 */

const ok = async (): Promise<string> => 'ok'
const A = 'a.example.com'
const B = 'b.example.com'

async function tenants (t: Test): Promise<RedisApp> {
  const setup = await setupRedisApp(t, 'cons')
  const { app } = setup
  app.get('/api', { constraints: { host: A }, config: { rateLimit: { limit: 100, window: '1m' } } }, async () => 'a')
  app.get('/api', { constraints: { host: B }, config: { rateLimit: { limit: 3, window: '1m' } } }, async () => 'b')
  app.get('/plain', { config: { rateLimit: { limit: 5, window: '1m' } } }, ok)
  await app.ready()
  return setup
}

async function get (app: FastifyInstance, url: string, headers: Record<string, string> = {}): Promise<number> {
  return (await app.inject({ url, headers, remoteAddress: '203.0.113.7' })).statusCode
}

test('two tenants on GET /api by host: each has its own counter', async (t) => {
  const { app, redis, prefix } = await tenants(t)
  for (let i = 0; i < 3; i++) t.equal(await get(app, '/api', { host: A }), 200, `tenant A request ${i + 1}`)
  t.equal(await get(app, '/api', { host: B }), 200, 'tenant B\'s first request is admitted: A\'s requests are not B\'s')
  t.equal(await get(app, '/api', { host: B }), 200)
  t.equal(await get(app, '/api', { host: B }), 200)
  t.equal(await get(app, '/api', { host: B }), 429, 'B\'s own limit of 3 holds')
  t.equal(await get(app, '/api', { host: A }), 200, 'A (100/min) goes on')
  const keys = (await redis.keys(`${prefix}:*`)).sort()
  t.equal(keys.length, 2, 'one key per tenant route')
  for (const key of keys) {
    t.ok(Buffer.byteLength(key) <= 128, `${key} is within the key bound`)
    t.match(key, /^[^{]*\{GET:\/api%C[A-Za-z0-9_-]{22}\|ip=203\.0\.113\.7\}:SW60000$/, 'the constraints are hashed into the route segment')
  }
})

test('a version-constrained pair, and a custom strategy, count apart', async (t) => {
  const tenant = {
    name: 'tenant',
    storage () {
      const handlers = new Map<string, never>()
      return { get: (value: string) => handlers.get(value) ?? null, set: (value: string, store: never) => { handlers.set(value, store) } }
    },
    validate: () => {},
    deriveConstraint: (request: { headers: Record<string, string | string[] | undefined> }) => request.headers['x-tenant'] as string,
    mustMatchWhenDerived: true
  }
  const { app } = await setupRedisApp(t, 'conv', {}, { routerOptions: { constraints: { tenant } } })
  app.get('/v', { constraints: { version: '1.0.0' }, config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
  app.get('/v', { constraints: { version: '2.0.0' }, config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
  app.get('/t', { constraints: { tenant: 'x' }, config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
  app.get('/t', { constraints: { tenant: 'y' }, config: { rateLimit: { limit: 1, window: '1m' } } }, ok)
  await app.ready()
  t.equal(await get(app, '/v', { 'accept-version': '1.0.0' }), 200)
  t.equal(await get(app, '/v', { 'accept-version': '1.0.0' }), 429, 'v1 spent its one')
  t.equal(await get(app, '/v', { 'accept-version': '2.0.0' }), 200, 'v2 has its own counter')
  t.equal(await get(app, '/t', { 'x-tenant': 'x' }), 200)
  t.equal(await get(app, '/t', { 'x-tenant': 'y' }), 200, 'a custom strategy\'s values count apart too')
  t.equal(await get(app, '/t', { 'x-tenant': 'y' }), 429)
})

test('a ban scoped to one constrained route leaves the other alone', async (t) => {
  const { app } = await tenants(t)
  const ban = await app.rateLimit.ban({
    target: { method: 'GET', url: '/api', constraints: { host: A } },
    identity: { ip: '203.0.113.7' },
    ttl: 600_000,
    actor: 'ops',
    reason: 'test'
  })
  t.equal(ban.route, `GET /api {"host":"${A}"}`, 'the scope names the constraints')
  t.equal(ban.id, `GET /api {"host":"${A}"}|ip=203.0.113.7`)
  t.equal(await get(app, '/api', { host: A }), 403, 'the banned route refuses')
  t.equal(await get(app, '/api', { host: B }), 200, 'the other tenant\'s route does not')
  const [rowA, rowB] = app.rateLimit.policies().filter((row) => row.method === 'GET')
  t.equal(rowA?.bans, 1, 'policies() counts the ban on its route')
  t.equal(rowB?.bans, undefined, 'and not on the other')
  const byLabel = await app.rateLimit.ban({ target: `GET /api {"host":"${B}"}`, identity: { ip: '198.51.100.1' }, ttl: 600_000, actor: 'ops', reason: 'test' })
  t.equal(byLabel.route, `GET /api {"host":"${B}"}`, 'the label string names one route too')
})

test('policies() lists both routes with their constraints; an override reaches one', async (t) => {
  const { app } = await setupRedisApp(t, 'conp')
  app.get('/api', { constraints: { host: A }, config: { rateLimit: { limit: 100, window: '1m', name: 'tenant-a' } } }, ok)
  app.get('/api', { constraints: { host: /^b\./ }, config: { rateLimit: { limit: 3, window: '1m', name: 'tenant-b' } } }, ok)
  app.get('/plain', { config: { rateLimit: { limit: 5, window: '1m' } } }, ok)
  await app.ready()
  const rows = app.rateLimit.policies().filter((row) => row.method === 'GET')
  t.match(rows, [
    { url: '/api', constraints: { host: A }, limit: { name: 'tenant-a', limit: 100 } },
    { url: '/api', constraints: { host: /^b\./ }, limit: { name: 'tenant-b', limit: 3 } },
    { url: '/plain', limit: { limit: 5 } }
  ])
  t.notOk('constraints' in (rows[2] ?? {}), 'an unconstrained row has no constraints field')
  const table = policyTable(app.rateLimit.policies())
  t.ok(table.some((line) => line.startsWith('GET /api {"host":"a.example.com"}  tenant-a')), 'printPolicies shows each route with its constraints')
  t.notOk(table.some((line) => line.startsWith('HEAD /api')), 'and folds each HEAD twin into its own GET')
  await t.rejects(app.rateLimit.peek('GET /api', { ip: '203.0.113.7' }), { code: 'FST_RRL_AMBIGUOUS_TARGET', message: /'GET \/api \{"host":"a\.example\.com"\}' \(or "tenant-a"\), 'GET \/api \{"host":\/\^b\\\.\/\}' \(or "tenant-b"\)/ }, 'a block name of its own is offered too')
  const override = await app.rateLimit.setOverride({ target: 'tenant-b', limit: 1, ttl: 60_000, actor: 'ops', reason: 'test' })
  t.equal(override.route, 'GET /api {"host":/^b\\./}', 'a RegExp is shown by its source and flags')
  t.equal(await get(app, '/api', { host: 'b.example.com' }), 200)
  t.equal(await get(app, '/api', { host: 'b.example.com' }), 429, 'the override applies to tenant B')
  t.equal(await get(app, '/api', { host: A }), 200, 'and not to tenant A')
  const [rowA, rowB] = app.rateLimit.policies().filter((row) => row.method === 'GET')
  t.equal(rowA?.limits[0]?.override, undefined)
  t.equal(rowB?.limits[0]?.override?.limit, 1, 'policies() shows the override on its own row')
})

test('an API target several constrained routes share is refused with a coded error that says how to reach each', async (t) => {
  const { app } = await tenants(t)
  const identity = { ip: '203.0.113.7' }
  const refusal = { code: 'FST_RRL_AMBIGUOUS_TARGET', message: /"GET \/api" names 2 routes.*'GET \/api \{"host":"a\.example\.com"\}'.*'GET \/api \{"host":"b\.example\.com"\}'.*\{ method, url, constraints \}/ }
  await t.rejects(app.rateLimit.peek('GET /api', identity), refusal)
  await t.rejects(app.rateLimit.consume('get-api', identity), { code: 'FST_RRL_AMBIGUOUS_TARGET' }, 'the shared default block name too')
  await t.rejects(app.rateLimit.reset('GET /api', identity), refusal)
  await t.rejects(app.rateLimit.adjust('GET /api', identity, 1), refusal)
  await t.rejects(app.rateLimit.ban({ target: 'GET /api', identity, ttl: 1000, actor: 'ops', reason: 'test' }), refusal)
  await t.rejects(app.rateLimit.setOverride({ target: 'GET /api', limit: 1, ttl: 1000, actor: 'ops', reason: 'test' }), refusal)
  for (let i = 0; i < 3; i++) await get(app, '/api', { host: B })
  const b = await app.rateLimit.peek({ method: 'GET', url: '/api', constraints: { host: B } }, identity)
  t.match(b, { allowed: false, limit: 3, remaining: 0 }, 'the object form reaches tenant B')
  const a = await app.rateLimit.peek(`GET /api {"host":"${A}"}`, identity)
  t.match(a, { allowed: true, limit: 100, remaining: 100 }, 'the label reaches tenant A')
  await app.rateLimit.reset({ method: 'GET', url: '/api', constraints: { host: B } }, identity)
  t.equal(await get(app, '/api', { host: B }), 200, 'reset through the object form')
  await t.rejects(app.rateLimit.peek({ method: 'GET', url: '/api', constraints: { host: 'c.example.com' } }, identity), { code: 'FST_RRL_UNKNOWN_POLICY' })
  await t.rejects(app.rateLimit.peek({ method: 'GET' } as never, identity), { code: 'FST_RRL_INVALID_API_CALL' })
})

test('an unconstrained route keeps its key, ban id and override id; one beside a constrained twin is reached by the object form', async (t) => {
  const { app, redis, prefix } = await setupRedisApp(t, 'conu')
  app.get('/plain', { config: { rateLimit: { limit: 5, window: '1m' } } }, ok)
  app.get('/v', { config: { rateLimit: { limit: 5, window: '1m' } } }, ok)
  app.get('/v', { constraints: { version: '1.0.0' }, config: { rateLimit: { limit: 5, window: '1m', name: 'v1' } } }, ok)
  await app.ready()
  t.equal(await get(app, '/plain'), 200)
  t.same(await redis.keys(`${prefix}:*`), [`${prefix}:{GET:/plain|ip=203.0.113.7}:SW60000`], 'the key of today\'s layout')
  const ban = await app.rateLimit.ban({ target: 'GET /plain', identity: { ip: '198.51.100.1' }, ttl: 60_000, actor: 'ops', reason: 'test' })
  t.equal(ban.id, 'GET /plain|ip=198.51.100.1')
  const override = await app.rateLimit.setOverride({ target: 'GET /plain', limit: 2, ttl: 60_000, actor: 'ops', reason: 'test' })
  t.equal(override.id, `${prefix}:{GET:/plain|*}:SW60000`)
  t.equal(override.route, 'GET /plain')
  await t.rejects(app.rateLimit.peek('GET /v', { ip: '1.2.3.4' }), { code: 'FST_RRL_AMBIGUOUS_TARGET', message: /\{ method: 'GET', url: '\/v' \}/ })
  t.match(await app.rateLimit.consume({ method: 'GET', url: '/v' }, { ip: '1.2.3.4' }), { allowed: true, remaining: 4 }, 'no constraints: the unconstrained route')
  t.match(await app.rateLimit.peek('v1', { ip: '1.2.3.4' }), { remaining: 5 }, 'the versioned route counts apart')
  t.equal(await get(app, '/v'), 200)
  t.equal(await redis.exists(`${prefix}:{GET:/v|ip=203.0.113.7}:SW60000`), 1, 'the unconstrained /v key is today\'s')
})

test('a constrained route declared before the plugin is refused beside one declared after, which is limited', async (t) => {
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  app.get('/api', { constraints: { host: A } }, ok)
  // Not awaited: Fastify runs the plugin later, after the second route is declared too.
  app.register(rateLimit, { store: 'memory', defaultLimit: { limit: 5, window: '1s' } })
  app.get('/api', { constraints: { host: B } }, ok)
  await app.ready()
  const early = await app.inject({ url: '/api', headers: { host: A } })
  t.equal(early.statusCode, 500, 'the host A route, declared before the plugin, is refused')
  t.equal(JSON.parse(early.body).code, 'FST_RRL_ROUTE_NOT_SEEN')
  t.equal(await get(app, '/api', { host: B }), 500, 'the host B route was declared before the plugin ran too (not awaited)')

  const mixed = Fastify()
  t.teardown(async () => { await mixed.close() })
  mixed.get('/api', { constraints: { host: A } }, ok)
  await mixed.register(rateLimit, { store: 'memory', defaultLimit: { limit: 5, window: '1s' } })
  mixed.get('/api', { constraints: { host: B } }, ok)
  await mixed.ready()
  t.equal(await get(mixed, '/api', { host: A }), 500, 'same method and URL, declared before: refused')
  const late = await mixed.inject({ url: '/api', headers: { host: B } })
  t.equal(late.statusCode, 200, 'declared after: served')
  t.equal(late.headers['ratelimit-policy'], '"get-api";q=5;w=1', 'and limited by its block')

  const fine = Fastify()
  t.teardown(async () => { await fine.close() })
  await fine.register(rateLimit, { store: 'memory', defaultLimit: { limit: 5, window: '1s' } })
  fine.get('/api', { constraints: { host: A } }, ok)
  fine.get('/api', { constraints: { host: /^b\./ } }, ok)
  fine.get('/api', ok)
  await fine.ready()
  t.equal(fine.rateLimit.policies().length, 6, 'every route and HEAD twin seen')
  for (const host of [A, B, 'c.example.com']) t.equal(await get(fine, '/api', { host }), 200, `${host}: served`)
})
