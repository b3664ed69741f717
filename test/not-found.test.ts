import { test } from 'tap'
import Fastify from 'fastify'
import rateLimit from '../lib/index.js'
import { setupRedisApp } from './helpers/app.js'
import { createClient, deletePrefix, getRedis, uniquePrefix } from './helpers/redis.js'

/*
 * `notFound`: the not-found handler is limited by a block, every 404 of the
 * context sharing one bucket per caller (the key's route segment is fixed),
 * against a real Redis.
 */

test('404s share one bucket per caller, whatever the method and URL; routes keep theirs', async (t) => {
  const { app, redis, prefix } = await setupRedisApp(t, 'nf', { notFound: { limit: 2, window: '1h' } })
  app.get('/ok', { config: { rateLimit: { limit: 100, window: '1h' } } }, async () => 'ok')
  await app.ready()
  const first = await app.inject('/nope')
  t.equal(first.statusCode, 404)
  t.equal(first.headers['ratelimit-policy'], '"not-found";q=2;w=3600', 'the 404 carries the quota headers')
  t.equal((await app.inject({ method: 'POST', url: '/other/path?x=1' })).statusCode, 404)
  const refused = await app.inject({ method: 'DELETE', url: '/third' })
  t.equal(refused.statusCode, 429, 'the third 404, on another method and URL, is refused')
  t.match(refused.json(), { 'violated-policies': ['not-found'], instance: '/third' })
  t.equal((await app.inject({ url: '/nope', headers: { 'x-forwarded-for': '1.2.3.4' } })).statusCode, 429, 'same socket address, same caller')
  t.equal((await app.inject({ url: '/nope', remoteAddress: '10.9.9.9' })).statusCode, 404, 'another caller has its own bucket')
  for (let i = 0; i < 3; i++) t.equal((await app.inject('/ok')).statusCode, 200, 'a route is not charged for 404s')
  const keys = await redis.keys(`${prefix}:*`)
  t.ok(keys.some((key) => key.startsWith(`${prefix}:{ANY:(not-found)|`)), `fixed route segment in ${keys.join(', ')}`)
  const listed = app.rateLimit.policies().find((policy) => policy.url === '(not-found)')
  t.match(listed, { method: 'ANY', limit: { name: 'not-found', limit: 2 } }, 'policies() lists it')
  t.match(await app.rateLimit.peek('not-found', { ip: '127.0.0.1' }), { allowed: false, policy: 'not-found' }, 'peek by name')
})

test('a custom not-found handler of the context is limited too; arrays of blocks are named not-found-<n>', async (t) => {
  const { app } = await setupRedisApp(t, 'nh', { notFound: [{ limit: 5, window: '1h' }, { limit: 1, window: '1m' }] })
  app.setNotFoundHandler(async (_request, reply) => await reply.code(404).send({ custom: true }))
  await app.ready()
  const first = await app.inject('/a')
  t.same(first.json(), { custom: true })
  t.equal(first.headers['ratelimit-policy'], '"not-found";q=5;w=3600, "not-found-1";q=1;w=60')
  const refused = await app.inject('/b')
  t.equal(refused.statusCode, 429)
  t.match(refused.json(), { 'violated-policies': ['not-found-1'] })
})

test('without notFound, 404s are not limited; a bad notFound fails register', async (t) => {
  const { app } = await setupRedisApp(t, 'nn', { defaultLimit: { limit: 1, window: '1h' } })
  await app.ready()
  for (let i = 0; i < 3; i++) {
    const reply = await app.inject('/missing')
    t.equal(reply.statusCode, 404)
    t.notOk(reply.headers['ratelimit-policy'])
  }
  await t.rejects(async () => { await Fastify().register(rateLimit, { store: 'memory', notFound: 5 as never }) }, { code: 'FST_RRL_INVALID_OPTION', message: /notFound/ })
  await t.rejects(async () => { await Fastify().register(rateLimit, { store: 'memory', notFound: { limit: 0, window: '1m' } }) }, { code: 'FST_RRL_INVALID_BLOCK', message: /ANY \(not-found\).*limit/ })
})

test('in a child context, the not-found handler set in that context is limited; the parent\'s is not', async (t) => {
  const app = Fastify()
  t.teardown(async () => { await app.close() })
  const redis = createClient(await getRedis())
  t.teardown(() => { redis.disconnect() })
  const prefix = uniquePrefix('nc')
  await app.register(async (api) => {
    await api.register(rateLimit, { redis, prefix, notFound: { limit: 1, window: '1h' }, defaultLimit: { limit: 5, window: '1h' } })
    api.setNotFoundHandler(async (_request, reply) => await reply.code(404).send('no such api'))
    api.get('/x', async () => 'x')
  }, { prefix: '/api' })
  await app.ready()
  const statuses = []
  for (const url of ['/api/nope', '/api/other', '/elsewhere', '/elsewhere']) statuses.push((await app.inject(url)).statusCode)
  t.same(statuses, [404, 429, 404, 404])
  await deletePrefix(redis, prefix)
})
