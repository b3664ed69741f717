import { test, type Test } from 'tap'
import Fastify, { type FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import rateLimit, { type RateLimitApi } from '../lib/index.js'
import { createClient, deletePrefix, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * Fastify encapsulation: registered in a child context the plugin limits that
 * context's routes (and those of contexts below it) only; strict startup and
 * the routes-before-plugin check look at that context alone; registrations in
 * sibling contexts coexist with their own options; the decorator is visible
 * where Fastify's encapsulation says.
 */

async function shared (t: Test): Promise<{ redis: Redis, prefix: (label: string) => string }> {
  const redis = createClient(await getRedis())
  const prefixes: string[] = []
  t.teardown(async () => {
    for (const prefix of prefixes) await deletePrefix(redis, prefix)
    redis.disconnect()
  })
  return { redis, prefix: (label) => { const prefix = uniquePrefix(label); prefixes.push(prefix); return prefix } }
}

const statuses = async (app: FastifyInstance, url: string, count: number): Promise<number[]> => {
  const out: number[] = []
  for (let i = 0; i < count; i++) out.push((await app.inject(url)).statusCode)
  return out
}

test('a child registration limits its own routes; siblings and the parent are not its business', async (t) => {
  const { redis, prefix } = await shared(t)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  app.get('/outside', async () => 'free')
  await app.register(async (api) => {
    // Strict (no defaultLimit): only this context's routes must declare.
    await api.register(rateLimit, { redis, prefix: prefix('ea') })
    api.get('/orders', { config: { rateLimit: { limit: 2, window: '1h' } } }, async () => 'orders')
    await api.register(async (nested) => {
      nested.get('/deep', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'deep')
    }, { prefix: '/nested' })
  }, { prefix: '/api' })
  await app.register(async (sibling) => {
    sibling.get('/sibling', async () => 'free')
  })
  app.get('/after', async () => 'free')
  await app.ready()
  t.same(await statuses(app, '/api/orders', 3), [200, 200, 429], 'the context\'s own route is limited')
  t.same(await statuses(app, '/api/nested/deep', 2), [200, 429], 'a context below it too')
  for (const url of ['/outside', '/sibling', '/after']) {
    const reply = await app.inject(url)
    t.equal(reply.statusCode, 200)
    t.notOk(reply.headers['ratelimit-policy'], `${url}: not limited`)
  }
  t.notOk(app.hasDecorator('rateLimit'), 'the parent does not see the decorator')
  t.notOk(app.hasRequestDecorator('rateLimit'), 'nor the request decorator')
})

test('strict startup and the route guard look at the plugin\'s own context', async (t) => {
  const { redis, prefix } = await shared(t)
  const strict = Fastify()
  await strict.register(async (sibling) => { sibling.get('/sibling-undeclared', async () => 'x') })
  await strict.register(async (api) => {
    await api.register(rateLimit, { redis, prefix: prefix('eb') })
    api.get('/declared', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x')
    await api.register(async (nested) => { nested.get('/nested-undeclared', async () => 'x') })
  })
  await t.rejects(async () => { await strict.ready() }, { code: 'FST_RRL_MISSING_LIMIT', message: /GET \/nested-undeclared$/ }, 'names the undeclared route below it, not the sibling\'s')

  const early = Fastify()
  await early.register(async (sibling) => { sibling.get('/sibling-route', async () => 'x') })
  await early.register(async (api) => {
    api.get('/too-early', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x')
    await api.register(async (before) => { before.get('/child-before', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x') })
    await api.register(rateLimit, { redis, prefix: prefix('ec') })
    api.get('/fine', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x')
    await api.register(async (after) => { after.get('/child-after', { config: { rateLimit: { limit: 1, window: '1h' } } }, async () => 'x') })
  })
  await early.ready()
  for (const url of ['/too-early', '/child-before']) {
    const reply = await early.inject(url)
    t.equal(reply.statusCode, 500, `${url}: refused`)
    t.equal(JSON.parse(reply.body).code, 'FST_RRL_ROUTE_NOT_SEEN', `${url}: coded`)
  }
  // Fastify adds a context's hooks to the child contexts it already has: the guard reaches
  // a child loaded before the plugin, whose routes onRoute never showed.
  t.same(await statuses(early, '/fine', 2), [200, 429], 'the route it saw is limited')
  t.same(await statuses(early, '/child-after', 2), [200, 429], 'so is one of a child context loaded after it')
  const sibling = await early.inject('/sibling-route')
  t.equal(sibling.statusCode, 200, 'a sibling\'s route is not refused')
  t.notOk(sibling.headers['ratelimit-policy'], 'nor limited: not this registration\'s business')
  await strict.close()
  await early.close()
})

test('two sibling registrations with different options and prefixes coexist, each with its own decorator', async (t) => {
  const { redis, prefix } = await shared(t)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  const apis: Record<string, RateLimitApi> = {}
  const prefixes = { public: prefix('ep'), partner: prefix('eq') }
  await app.register(async (pub) => {
    await pub.register(rateLimit, { redis, prefix: prefixes.public, defaultLimit: { limit: 1, window: '1h' }, headers: 'legacy' })
    pub.get('/items', async () => 'public')
    apis.public = pub.rateLimit
  }, { prefix: '/public' })
  await app.register(async (partner) => {
    await partner.register(rateLimit, { redis, prefix: prefixes.partner, defaultLimit: { limit: 3, window: '1h' } })
    partner.get('/items', async () => 'partner')
    apis.partner = partner.rateLimit
  }, { prefix: '/partner' })
  await app.ready()
  t.same(await statuses(app, '/public/items', 2), [200, 429])
  t.same(await statuses(app, '/partner/items', 4), [200, 200, 200, 429])
  t.ok((await app.inject('/public/items')).headers['x-ratelimit-limit'], 'legacy headers where asked')
  t.ok((await app.inject('/partner/items')).headers.ratelimit, 'ietf headers in the other')
  t.not(apis.public, apis.partner)
  t.same(apis.public?.policies().map((p) => p.url), ['/public/items', '/public/items'], 'each lists its own routes (GET and HEAD)')
  t.same(apis.partner?.policies().map((p) => p.url), ['/partner/items', '/partner/items'])
  t.equal(apis.public?.stats().limited, 2)
  t.equal(apis.partner?.stats().limited, 2)
  t.ok((await redis.keys(`${prefixes.public}:*`)).length > 0 && (await redis.keys(`${prefixes.partner}:*`)).length > 0, 'each under its own key prefix')
})

test('nested registrations need their own configKey; each reads its own route config', async (t) => {
  const { redis, prefix } = await shared(t)
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  await app.register(rateLimit, { redis, prefix: prefix('en'), defaultLimit: { limit: 100, window: '1h' } })
  const conflict = Fastify()
  await conflict.register(rateLimit, { redis, prefix: prefix('eo'), defaultLimit: { limit: 1, window: '1h' } })
  conflict.register(async (child) => { await child.register(rateLimit, { redis, prefix: prefix('eo') }) })
  const failed = await new Promise<Error | null>((resolve) => { conflict.ready(resolve) })
  t.match(failed, { code: 'FST_RRL_INVALID_OPTION', message: /configKey/ }, 'the same configKey below another registration')
  await conflict.close()
  await app.register(async (child) => {
    await child.register(rateLimit, { redis, prefix: prefix('er'), configKey: 'strictLimit' })
    child.get('/both', { config: { strictLimit: { limit: 1, window: '1h' } } as never }, async () => 'x')
  })
  await app.ready()
  const both = await statuses(app, '/both', 2)
  t.same(both, [200, 429], 'the inner limit applies')
  t.equal(app.rateLimit.stats().allowed, 2, 'and the outer one counted both requests')
})
