/**
 * When the decision runs (issue 12, item 1): the `hook` option and block field,
 * and the auth recipe in docs/routes.md with the real @fastify/jwt against a real Redis.
 * Two users behind one address are limited apart only when the decision runs
 * after the hook that authenticates them.
 */
import { test, type Test } from 'tap'
import fastifyJwt from '@fastify/jwt'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import { setupRedisApp } from './helpers/app.js'
import rateLimit, { type RateLimitPluginOptions } from '../lib/index.js'

declare module '@fastify/jwt' {
  interface FastifyJWT {
    payload: { sub: string }
    user: { sub: string }
  }
}

const SECRET = 'a-test-secret-of-at-least-32-bytes!'
const SAME_IP = '203.0.113.50'

/** An app with @fastify/jwt and the plugin (`user` reads the token's subject); `auth` picks the stage that verifies. */
async function jwtApp (t: Test, auth: 'onRequest' | 'preHandler', options: RateLimitPluginOptions = {}): Promise<{ app: FastifyInstance, get: (user: string | undefined, path?: string) => Promise<number> }> {
  const { app } = await setupRedisApp(t, 'auth', { user: (req) => req.user?.sub, ...options })
  await app.register(fastifyJwt, { secret: SECRET })
  app.addHook(auth, async (req: FastifyRequest) => { await req.jwtVerify() })
  app.get('/orders', { config: { rateLimit: { limit: 1, window: '1m', by: 'user' } } }, async (req) => ({ user: req.user.sub }))
  app.get('/orders-late', { config: { rateLimit: { limit: 1, window: '1m', by: 'user', hook: 'preHandler' } } }, async (req) => ({ user: req.user.sub }))
  await app.ready()
  const get = async (user: string | undefined, path = '/orders'): Promise<number> => {
    const headers = user === undefined ? {} : { authorization: `Bearer ${app.jwt.sign({ sub: user })}` }
    return (await app.inject({ url: path, headers, remoteAddress: SAME_IP })).statusCode
  }
  return { app, get }
}

test('auth in a preHandler: the default onRequest decision sees no user yet (what users hit)', async (t) => {
  const { get } = await jwtApp(t, 'preHandler')
  t.equal(await get('alice'), 200)
  t.equal(await get('bob'), 429, 'bob pays for alice: both fell back to the shared address')
})

test('auth in a preHandler + hook: \'preHandler\' (plugin-wide): each user has a bucket of their own', async (t) => {
  const { get } = await jwtApp(t, 'preHandler', { hook: 'preHandler' })
  t.equal(await get('alice'), 200)
  t.equal(await get('bob'), 200, 'bob is not limited by alice')
  t.equal(await get('alice'), 429, 'alice is limited by her own use')
  t.equal(await get('carol'), 200)
  t.equal(await get(undefined), 401, 'no token: authentication answers, the limit never runs')
  t.equal(await get(undefined), 401, 'and refused requests are not counted')
})

test('auth in a preHandler + the block\'s own hook: \'preHandler\'', async (t) => {
  const { get } = await jwtApp(t, 'preHandler')
  t.equal(await get('alice', '/orders-late'), 200)
  t.equal(await get('bob', '/orders-late'), 200)
  t.equal(await get('alice', '/orders-late'), 429)
})

test('auth in onRequest: the default hook already runs after it', async (t) => {
  const { get } = await jwtApp(t, 'onRequest')
  t.equal(await get('alice'), 200)
  t.equal(await get('bob'), 200)
  t.equal(await get('bob'), 429)
})

test('each stage: the decision runs after that stage\'s hooks and before the next stage', async (t) => {
  const stages = ['onRequest', 'preParsing', 'preValidation', 'preHandler'] as const
  for (const stage of stages) {
    const { app } = await setupRedisApp(t, `st${stages.indexOf(stage)}`, { hook: stage })
    const seen: string[] = []
    for (const at of stages) {
      app.addHook(at, async (req: FastifyRequest) => { seen.push(`${at}:${req.rateLimit === null ? 'before' : 'after'}`) })
    }
    app.post('/echo', { config: { rateLimit: { limit: 1, window: '1m' } } }, async (req) => ({ body: req.body, remaining: req.rateLimit?.remaining }))
    await app.ready()
    const first = await app.inject({ method: 'POST', url: '/echo', payload: { hello: stage } })
    t.equal(first.statusCode, 200, `${stage}: admitted`)
    t.same(first.json(), { body: { hello: stage }, remaining: 0 }, `${stage}: the body is parsed as usual after the decision`)
    const at = stages.indexOf(stage)
    t.same(seen, stages.map((name, i) => `${name}:${i <= at ? 'before' : 'after'}`), `${stage}: app hooks of that stage run first`)
    seen.length = 0
    const second = await app.inject({ method: 'POST', url: '/echo', payload: { hello: stage } })
    t.equal(second.statusCode, 429, `${stage}: refused`)
    t.equal(second.headers['content-type'], 'application/problem+json; charset=utf-8')
    t.same(seen, stages.slice(0, at + 1).map((name) => `${name}:before`), `${stage}: a refusal stops the request at that stage`)
  }
})

test('body parts: the plugin-wide hook is raised to preValidation; a block naming an earlier stage fails startup', async (t) => {
  const { app } = await setupRedisApp(t, 'body', { hook: 'preParsing' })
  app.post('/login', { config: { rateLimit: { limit: 1, window: '1m', by: 'body:username' } } }, async () => 'ok')
  app.post('/late', { config: { rateLimit: { limit: 1, window: '1m', by: 'body:username', hook: 'preHandler' } } }, async () => 'ok')
  await app.ready()
  const login = async (url: string, username: string): Promise<number> => (await app.inject({ method: 'POST', url, payload: { username } })).statusCode
  t.equal(await login('/login', 'alice'), 200)
  t.equal(await login('/login', 'bob'), 200, 'the body was read: bob is not alice')
  t.equal(await login('/login', 'alice'), 429)
  t.equal(await login('/late', 'alice'), 200)
  t.equal(await login('/late', 'alice'), 429)

  for (const hook of ['onRequest', 'preParsing'] as const) {
    const { app: bad } = await setupRedisApp(t, 'bodyx')
    t.throws(() => bad.post('/login', { config: { rateLimit: { limit: 1, window: '1m', by: ['ip', 'body:username'], hook } } }, async () => 'ok'), {
      code: 'FST_RRL_INVALID_BLOCK',
      message: new RegExp(`POST /login: \`hook\` is '${hook}', but the identity reads the body`)
    }, `hook ${hook} with a body part`)
  }
})

test('hook and identityTimeout are validated with coded errors', async (t) => {
  // Registration fails before any Redis is asked: the memory store keeps these free of clients.
  const register = async (options: RateLimitPluginOptions): Promise<void> => {
    const app = Fastify()
    t.teardown(() => app.close())
    await app.register(rateLimit, { store: 'memory', ...options })
  }
  const invalid = async (options: RateLimitPluginOptions, message: RegExp): Promise<void> => {
    await t.rejects(register(options), { code: 'FST_RRL_INVALID_OPTION', message })
  }
  await invalid({ hook: 'onSend' as never }, /option `hook` must be 'onRequest', 'preParsing', 'preValidation' or 'preHandler' \(got "onSend"\)/)
  await invalid({ identityTimeout: 0 }, /`identityTimeout` must be an integer from 1 to 60000 \(got 0\)/)
  await invalid({ identityTimeout: 1.5 }, /`identityTimeout`/)

  const { app } = await setupRedisApp(t, 'badb')
  t.throws(() => app.get('/a', { config: { rateLimit: { limit: 1, window: '1m', hook: 'later' as never } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /GET \/a: `hook` must be 'onRequest'/ })
  t.throws(() => app.get('/b', { config: { rateLimit: [{ limit: 1, window: '1s', hook: 'onRequest' }, { limit: 5, window: '1m', hook: 'preHandler' }] } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /`hook` differs between the blocks of one route \(onRequest, preHandler\)/ })
  t.throws(() => app.get('/c', { config: { rateLimit: { limit: 1, window: '1m', requestLimit: 5 as never } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /`requestLimit` must be a function/ })
  // Blocks of one route that agree (or leave it to the plugin) are fine.
  app.get('/d', { config: { rateLimit: [{ limit: 1, window: '1s', hook: 'preHandler' }, { limit: 5, window: '1m' }] } }, async () => 'ok')
  await app.ready()
  t.equal((await app.inject({ url: '/d' })).statusCode, 200)

  await t.rejects(register({ globalLimits: [{ limit: 5, window: '1s', hook: 'preHandler' }] }), {
    code: 'FST_RRL_INVALID_BLOCK',
    message: /globalLimits\[0\]: `hook` is decided by each route/
  })
})
