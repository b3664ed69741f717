/*
 * Migrating from @fastify/rate-limit route by route: both plugins in one app,
 * on one real Redis, each reading its own route config key.
 */
import { test, type Test } from 'tap'
import Fastify, { type FastifyInstance, type FastifyPluginCallback } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { errors, type RateLimitApi, type RateLimitPluginOptions, type RouteRateLimit } from '../lib/index.js'
import { TestClock } from './helpers/app.js'
import { createClient, getRedis, uniquePrefix } from './helpers/redis.js'

// What a migrating app declares for the key it picks (docs/migration.md, Route by route).
declare module 'fastify' {
  interface FastifyContextConfig {
    redisRateLimit?: RouteRateLimit
  }
  interface FastifyInstance {
    redisRateLimit: RateLimitApi
  }
}

// Loaded by a name TypeScript does not follow: both packages declare `config.rateLimit`
// and `fastify.rateLimit` with their own types, and this project compiles ours from source.
const PEER: string = '@fastify/rate-limit'
const { default: fastifyRateLimit } = await import(PEER) as { default: FastifyPluginCallback<Record<string, unknown>> }
/** @fastify/rate-limit's route block, typed loosely for the reason above. */
const peerBlock = (block: Record<string, unknown>): never => block as never

const ok = async (): Promise<string> => 'ok'

interface Both {
  app: FastifyInstance
  prefix: string
  clock: TestClock
}

/** Registers the two plugins on one app in the given order, each with its own client and key prefix. */
async function both (t: Test, order: 'peer-first' | 'ours-first', ours: RateLimitPluginOptions = { configKey: 'redisRateLimit' }): Promise<Both> {
  const server = await getRedis()
  const clients: Redis[] = [createClient(server), createClient(server)]
  const prefix = uniquePrefix('mig')
  const clock = new TestClock()
  const app = Fastify({ logger: false })
  t.teardown(async () => {
    await app.close()
    const [client] = clients as [Redis]
    const keys = [...await client.keys(`${prefix}:*`), ...await client.keys(`${prefix}-frl:*`)]
    if (keys.length > 0) await client.del(...keys)
    for (const each of clients) each.disconnect()
  })
  const peer = async (): Promise<void> => { await app.register(fastifyRateLimit, { redis: clients[0], nameSpace: `${prefix}-frl:`, max: 1000, timeWindow: '1 minute' }) }
  const mine = async (): Promise<void> => { await app.register(rateLimit, { redis: clients[1], prefix, clock: clock.read, timeout: 5000, ...ours }) }
  if (order === 'peer-first') {
    await peer()
    await mine()
  } else {
    await mine()
    await peer()
  }
  return { app, prefix, clock }
}

function routes (app: FastifyInstance): void {
  // Not migrated yet: the old plugin limits it; this plugin is told to leave it alone.
  app.get('/old', { config: { rateLimit: peerBlock({ max: 2, timeWindow: '1 minute' }), redisRateLimit: false } }, ok)
  // Migrated: this plugin limits it; the old one (global by default) is told to leave it alone.
  app.get('/new', { config: { rateLimit: peerBlock(false as never), redisRateLimit: { limit: 3, window: '1 minute', name: 'new' } } }, ok)
}

for (const order of ['peer-first', 'ours-first'] as const) {
  test(`side by side (${order}): each route limited by its own plugin, with its own headers`, async (t) => {
    const { app, prefix } = await both(t, order)
    routes(app)
    await app.ready()

    const old: Array<[number, unknown, unknown, unknown]> = []
    for (let i = 0; i < 3; i++) {
      const reply = await app.inject('/old')
      old.push([reply.statusCode, reply.headers['x-ratelimit-limit'], reply.headers['x-ratelimit-remaining'], reply.headers['ratelimit-policy']])
    }
    t.same(old, [[200, '2', '1', undefined], [200, '2', '0', undefined], [429, '2', '0', undefined]], '/old: @fastify/rate-limit only, 2 per minute')

    const fresh: Array<[number, unknown, unknown, unknown]> = []
    for (let i = 0; i < 4; i++) {
      const reply = await app.inject('/new')
      fresh.push([reply.statusCode, reply.headers['ratelimit-policy'], reply.headers.ratelimit?.toString().replace(/;t=\d+$/, ''), reply.headers['x-ratelimit-limit']])
    }
    t.same(fresh, [
      [200, '"new";q=3;w=60', '"new";r=2', undefined],
      [200, '"new";q=3;w=60', '"new";r=1', undefined],
      [200, '"new";q=3;w=60', '"new";r=0', undefined],
      [429, '"new";q=3;w=60', '"new";r=0', undefined]
    ], '/new: this plugin only, 3 per minute')
    const refused = await app.inject('/new')
    t.equal(refused.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.same(refused.json()['violated-policies'], ['new'])

    // Each plugin's decorator is its own.
    t.type(app.rateLimit, 'function', 'fastify.rateLimit is still @fastify/rate-limit\'s hook factory')
    t.type(app.redisRateLimit.policies, 'function', 'this plugin\'s API is fastify.redisRateLimit')
    t.same(app.redisRateLimit.policies().filter((p) => p.method === 'GET').map((p) => [p.url, p.limit === false ? false : p.limit.limit]), [['/old', false], ['/new', 3]])
    t.match(await app.redisRateLimit.peek('GET /new', { ip: '127.0.0.1' }), { remaining: 0, allowed: false })

    // Each kept its state under its own keys in the one Redis.
    const client = createClient(await getRedis())
    t.teardown(() => { client.disconnect() })
    t.ok((await client.keys(`${prefix}:*`)).some((key) => key.includes('GET:/new')), 'this plugin keyed /new')
    t.ok((await client.keys(`${prefix}:*`)).every((key) => !key.includes('/old')), 'and never /old')
    t.equal((await client.keys(`${prefix}-frl:*`)).length, 1, '@fastify/rate-limit keyed /old only')
  })
}

test('a route can be limited by both during the switch: each counts every request that reaches it', async (t) => {
  const { app } = await both(t, 'peer-first')
  app.get('/both', { config: { rateLimit: peerBlock({ max: 5, timeWindow: '1 minute' }), redisRateLimit: { limit: 2, window: '1 minute', name: 'both' } } }, ok)
  await app.ready()
  const replies = [await app.inject('/both'), await app.inject('/both'), await app.inject('/both')]
  t.same(replies.map((r) => r.statusCode), [200, 200, 429])
  t.same(replies.map((r) => r.headers['x-ratelimit-remaining']), ['4', '3', '2'], '@fastify/rate-limit (registered first, so its onRequest hook runs first) counted all three')
  t.equal(replies[2]?.headers['ratelimit-policy'], '"both";q=2;w=60')
})

test('the default key beside @fastify/rate-limit is refused with a coded error, in either order', async (t) => {
  const server = await getRedis()
  const client = createClient(server)
  t.teardown(() => { client.disconnect() })

  const peerFirst = Fastify({ logger: false })
  t.teardown(async () => { await peerFirst.close() })
  await peerFirst.register(fastifyRateLimit, { global: false })
  const first = await peerFirst.register(rateLimit, { redis: client }).then(() => undefined, (error: unknown) => error)
  t.ok(first instanceof errors.FST_RRL_INVALID_OPTION, 'FST_RRL_INVALID_OPTION at register')
  t.match((first as Error).message, /`configKey` is 'rateLimit', which @fastify\/rate-limit \(registered in this app\) also reads .*configKey: 'redisRateLimit'/)

  const oursFirst = Fastify({ logger: false })
  t.teardown(async () => { await oursFirst.close() })
  await oursFirst.register(rateLimit, { redis: client, defaultLimit: { limit: 5, window: '1m' } })
  await oursFirst.register(fastifyRateLimit, { global: false })
  await t.rejects(async () => { await oursFirst.ready() }, { code: 'FST_RRL_INVALID_OPTION', message: /@fastify\/rate-limit \(registered in this app\)/ }, 'and at ready when it comes second')
})

test('configKey: validated, read from route config, and names the decorator', async (t) => {
  for (const bad of ['', '1abc', 'rate-limit', 'a.b', 'x'.repeat(65), '__proto__', 'constructor', 'hasOwnProperty', 42, {}]) {
    const app = Fastify({ logger: false })
    t.teardown(async () => { await app.close() })
    await t.rejects(async () => { await app.register(rateLimit, { store: 'memory', configKey: bad as string }).ready() }, { code: 'FST_RRL_INVALID_OPTION', message: /`configKey` must be a property name/ }, JSON.stringify(bad))
  }
  const taken = Fastify({ logger: false })
  t.teardown(async () => { await taken.close() })
  taken.decorate('limits', 1)
  await t.rejects(async () => { await taken.register(rateLimit, { store: 'memory', configKey: 'limits' }).ready() }, { code: 'FST_RRL_INVALID_OPTION', message: /`configKey` names the decorator fastify.limits, which is already taken/ })
  const core = Fastify({ logger: false })
  t.teardown(async () => { await core.close() })
  await t.rejects(async () => { await core.register(rateLimit, { store: 'memory', configKey: 'register' }).ready() }, { code: 'FST_RRL_INVALID_OPTION', message: /fastify.register, which is already taken/ }, 'a Fastify method is taken too')

  // Strict mode speaks of the configured key: a route with only `rateLimit` declares nothing to this plugin.
  const strict = Fastify({ logger: false })
  t.teardown(async () => { await strict.close() })
  await strict.register(rateLimit, { store: 'memory', configKey: 'quota' })
  strict.get('/a', { config: { rateLimit: { limit: 1, window: '1s' } } }, ok)
  await t.rejects(async () => { await strict.ready() }, { code: 'FST_RRL_MISSING_LIMIT', message: 'These routes declare no rate limit (add config.quota, `quota: false` to opt out, or a plugin-level defaultLimit): GET /a' })

  const app = Fastify({ logger: false })
  t.teardown(async () => { await app.close() })
  await app.register(rateLimit, { store: 'memory', configKey: 'quota' })
  app.get('/q', { config: { quota: { limit: 1, window: '1m', name: 'q' } } as never }, ok)
  app.get('/free', { config: { quota: false } as never }, ok)
  await app.ready()
  t.equal((await app.inject('/q')).statusCode, 200)
  t.equal((await app.inject('/q')).statusCode, 429)
  t.equal((await app.inject('/free')).statusCode, 200)
  t.equal((await app.inject('/free')).statusCode, 200)
  const api = (app as unknown as { quota: RateLimitApi }).quota
  t.same(api.policies().map((p) => `${p.method} ${p.url}`), ['GET /q', 'HEAD /q', 'GET /free', 'HEAD /free'])
  t.notOk(app.hasDecorator('rateLimit'), 'nothing decorated under the default name')
})

test('the migration table (docs/migration.md) has a row for every option @fastify/rate-limit documents', async (t) => {
  const { readFileSync } = await import('node:fs')
  const { createRequire } = await import('node:module')
  const theirs = readFileSync(createRequire(import.meta.url).resolve(`${PEER}/README.md`), 'utf8')
  const ours = readFileSync(new URL('../docs/migration.md', import.meta.url), 'utf8')
  const section = theirs.slice(theirs.indexOf('### Options'), theirs.indexOf('### Options on the endpoint itself'))
  // `routeInfo` is listed there too, but it is a field a custom store's child() receives, not an option.
  const documented = [...section.matchAll(/^- `(\w+)`/gm)].map((match) => match[1] as string).filter((name) => name !== 'routeInfo')
  t.ok(documented.length >= 20, `${documented.length} options in their README: ${documented.join(', ')}`)
  const table = ours.slice(ours.indexOf('## Option by option'), ours.indexOf('## Route by route'))
  const rows = table.split('\n').filter((line) => line.startsWith('| ')).map((line) => line.split(' | ')[0] as string)
  for (const option of [...documented, 'hook']) t.ok(rows.some((row) => row.includes(`\`${option}\``)), `row for ${option}`)
})
