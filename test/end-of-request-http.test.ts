/**
 * The end of a request over real HTTP, for a POST whose body was read before
 * the decision (`hook: 'preValidation'`, or a `body:` identity). Node destroys
 * an IncomingMessage once its body is consumed, so "the request stream is
 * destroyed" does not mean "the client left": refunds, settles and slot
 * releases must still wait for the response to close. The routes here decide
 * at `preHandler` after an async `preValidation` hook (an auth check doing
 * I/O, say), by which time Node has destroyed the consumed body stream. (`inject` never
 * destroys its request, so the other suites could not see it; the docs'
 * token-budget example, run over HTTP by test/docs/blocks-run.test.ts, did.)
 */
import { once } from 'node:events'
import { request as httpRequest } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { RateLimitPluginOptions, RouteRateLimit } from '../lib/index.js'
import { buildApp, setupRedisApp, TestClock } from './helpers/app.js'

const STORES = ['redis', 'memory'] as const
const IP = { ip: '127.0.0.1' }
/** An auth check doing I/O: the decision (at preHandler) comes a few turns after the body was read. */
const turn = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }
const AUTH = { preValidation: turn }

async function listening (t: Test, store: 'redis' | 'memory', options: RateLimitPluginOptions = {}): Promise<FastifyInstance> {
  if (store === 'redis') return (await setupRedisApp(t, 'eoh', options)).app
  const app = await buildApp({ store: 'memory', clock: new TestClock().read, ...options })
  t.teardown(async () => { await app.close() })
  return app
}

/** A POST with a JSON body over a real socket; resolves to the status once the response has ended. */
async function post (app: FastifyInstance, path: string, body: unknown): Promise<number> {
  const { port } = app.server.address() as AddressInfo
  const req = httpRequest({ host: '127.0.0.1', port, path, method: 'POST', headers: { 'content-type': 'application/json' } })
  req.end(JSON.stringify(body))
  const [res] = await once(req, 'response') as [import('node:http').IncomingMessage]
  res.resume()
  await once(res, 'end')
  return res.statusCode ?? 0
}

async function remaining (app: FastifyInstance, target: string): Promise<number> {
  return (await app.rateLimit.peek(target, IP)).remaining
}

/** Polls until `check` holds, at most 2 s (the end of a request is sent after the response closes). */
async function eventually (check: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 200; i++) {
    if (await check()) return true
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return false
}

for (const store of STORES) {
  test(`${store}: settle over HTTP, body read before the decision: charged what the handler used, after it ran`, async (t) => {
    const app = await listening(t, store)
    const used = new WeakMap<object, number>()
    const settle = (request: object): number => used.get(request) ?? 0
    const rateLimit: RouteRateLimit = { algorithm: 'token-bucket', limit: 100, burst: 100, window: '1h', hook: 'preHandler', cost: 10, settle }
    app.post('/complete', { ...AUTH, config: { rateLimit } }, async (request) => {
      await turn() // the model call
      used.set(request, 3)
      return { ok: true }
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    t.equal(await post(app, '/complete', { prompt: 'hi' }), 200)
    t.ok(await eventually(async () => app.rateLimit.stats().settled === 1), 'settled once')
    t.equal(await remaining(app, 'POST /complete'), 97, 'the 3 units the handler used, not the 0 known at admission')
  })

  test(`${store}: refundOn over HTTP, body read before the decision: judged on the final reply`, async (t) => {
    const app = await listening(t, store)
    const rateLimit: RouteRateLimit = { limit: 10, window: '1h', by: ['ip', 'body:tenant'], hook: 'preHandler', refundOn: (reply) => reply.statusCode >= 500 }
    app.post('/export', { ...AUTH, config: { rateLimit } }, async (_request, reply) => {
      await turn() // the upstream call that fails
      return await reply.code(503).send({ error: 'upstream down' })
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    t.equal(await post(app, '/export', { tenant: 'a' }), 503)
    t.ok(await eventually(async () => app.rateLimit.stats().refunded === 1), 'refunded: the reply was a 503')
  })

  test(`${store}: a concurrency slot over HTTP, body read before the decision: held while the handler runs`, async (t) => {
    const app = await listening(t, store)
    let finish = (): void => {}
    const held = new Promise<void>((resolve) => { finish = resolve })
    app.post('/jobs', { ...AUTH, config: { rateLimit: { concurrency: 1, by: 'body:tenant', hook: 'preHandler' } } }, async () => { await held; return { ok: true } })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const first = post(app, '/jobs', { tenant: 'a' })
    t.ok(await eventually(async () => app.rateLimit.stats().allowed === 1), 'the first job is running')
    const second = post(app, '/jobs', { tenant: 'a' })
    t.ok(await eventually(async () => app.rateLimit.stats().allowed + app.rateLimit.stats().limited === 2), 'the second job decided')
    finish()
    t.equal(await first, 200)
    t.equal(await second, 429, 'a second job of the tenant waited for the slot')
    t.ok(await eventually(async () => await post(app, '/jobs', { tenant: 'a' }) === 200), 'the slot is free once the first job answered')
  })
}
