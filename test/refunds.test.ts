/**
 * refundOn: units spent by a request whose reply matches are given back when
 * the raw response closes (also on a client abort), in one store call, once; for fixed-window, sliding-window,
 * token-bucket and gcra (sliding-log refuses the option at startup). Held on
 * Redis and on the memory store, which must agree.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { PassThrough } from 'node:stream'
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, setupStoreApp } from './helpers/app.js'

const REFUNDABLE = ['fixed-window', 'sliding-window', 'token-bucket', 'gcra'] as const

const setup = async (t: Test, store: 'redis' | 'memory', options: Parameters<typeof buildApp>[0] = {}) => await setupStoreApp(t, store, 'rf', options)

/** Replies 500 when asked to fail: those requests are refunded. */
function routes (app: FastifyInstance): void {
  for (const algorithm of REFUNDABLE) {
    app.get(`/${algorithm}`, {
      config: { rateLimit: { algorithm, limit: 3, window: '1m', refundOn: (reply) => reply.statusCode >= 500 } }
    }, async (req, reply) => {
      if (req.headers['x-fail'] === '1') return await reply.code(500).send({ failed: true })
      return { ok: true }
    })
  }
}

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: failed requests are given back, successful ones are not`, async (t) => {
    const { app } = await setup(t, store)
    routes(app)
    await app.ready()
    for (const algorithm of REFUNDABLE) {
      const codes = []
      for (let i = 0; i < 10; i++) codes.push((await app.inject({ url: `/${algorithm}`, headers: { 'x-fail': '1' } })).statusCode)
      t.same(codes, Array(10).fill(500), `${algorithm}: 10 failures in a row, none refused (each was given back)`)
      t.match(await app.rateLimit.peek(`GET /${algorithm}`, { ip: '127.0.0.1' }), { remaining: 3 }, `${algorithm}: the full quota is left`)
      const ok = []
      for (let i = 0; i < 4; i++) ok.push((await app.inject(`/${algorithm}`)).statusCode)
      t.same(ok, [200, 200, 200, 429], `${algorithm}: successes are charged`)
    }
    t.equal(app.rateLimit.stats().refunded, 40)
  })
}

test('a refund is given once, to the window it was spent in, and only to blocks that charged', async (t) => {
  const { app, clock } = await setup(t, 'redis')
  app.get('/x', {
    config: {
      rateLimit: [
        { name: 'refunded', algorithm: 'fixed-window', limit: 2, window: '10s', refundOn: (reply) => reply.statusCode === 503 },
        { name: 'kept', algorithm: 'fixed-window', limit: 100, window: '1h' }
      ]
    }
  }, async (req, reply) => {
    const delay = Number(req.headers['x-delay'] ?? 0)
    clock.advance(delay)
    return await reply.code(503).send('busy')
  })
  await app.ready()
  clock.now = Math.ceil(clock.now / 3_600_000) * 3_600_000
  await app.inject('/x')
  await app.inject('/x')
  t.match(await app.rateLimit.peek('GET /x', { ip: '127.0.0.1' }), { policies: [{ policy: 'refunded', remaining: 2 }, { policy: 'kept', remaining: 98 }] }, 'only the block with refundOn gives back')

  // spent in one fixed window, answered in the next: nothing to give back (that window is gone)
  clock.advance(9_000)
  await app.inject({ url: '/x', headers: { 'x-delay': '2000' } })
  t.match(await app.rateLimit.peek('GET /x', { ip: '127.0.0.1' }), { policies: [{ policy: 'refunded', remaining: 2 }, { policy: 'kept', remaining: 97 }] }, 'the new window was not credited for a unit spent in the old one')
})

test('a refused request is never refunded; sliding-log refuses refundOn at startup', async (t) => {
  const { app } = await setup(t, 'redis')
  app.get('/all', { config: { rateLimit: { algorithm: 'token-bucket', limit: 1, window: '1m', refundOn: () => true } } }, async () => 'ok')
  app.get('/429', { config: { rateLimit: { algorithm: 'token-bucket', limit: 1, window: '1m', refundOn: (reply) => reply.statusCode === 429 } } }, async () => 'ok')
  await app.ready()
  t.equal((await app.inject('/all')).statusCode, 200)
  t.match(await app.rateLimit.peek('GET /all', { ip: '127.0.0.1' }), { remaining: 1 }, 'refundOn: () => true gives every admitted unit back')
  t.equal((await app.inject('/429')).statusCode, 200)
  t.equal((await app.inject('/429')).statusCode, 429)
  t.equal((await app.inject('/429')).statusCode, 429)
  t.match(await app.rateLimit.peek('GET /429', { ip: '127.0.0.1' }), { remaining: 0 }, 'the 429s spent nothing, so nothing was given back')
  t.equal(app.rateLimit.stats().refunded, 1)

  const other = await buildApp({ store: 'memory' })
  t.teardown(() => other.close())
  t.throws(() => other.get('/l', { config: { rateLimit: { algorithm: 'sliding-log', limit: 1, window: '1m', refundOn: () => true } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /refundOn/ })
})

/** Polls until `done` holds (the store call after a close runs on its own schedule); fails after 5 s. */
async function eventually (done: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + 5000
  while (Date.now() < deadline) {
    if (await done()) return true
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return false
}

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: a client that aborts a streaming response is refunded once, when the socket closes`, async (t) => {
    const { app } = await setup(t, store)
    let streams = 0
    app.get('/stream', { config: { rateLimit: { algorithm: 'fixed-window', limit: 3, window: '1m', refundOn: (reply) => !reply.raw.writableFinished } } }, async (req, reply) => {
      streams++
      const body = new PassThrough()
      body.write('first chunk\n')
      // never ends: the client goes away mid-response
      req.raw.once('close', () => { body.destroy() })
      return await reply.type('text/plain').send(body)
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    const port = (app.server.address() as AddressInfo).port
    await new Promise<void>((resolve, reject) => {
      const request = http.get({ port, host: '127.0.0.1', path: '/stream' }, (response) => {
        response.once('data', () => { request.destroy(); resolve() })
      })
      request.on('error', () => {})
      request.setTimeout(5000, () => { reject(new Error('no first chunk')) })
    })
    t.equal(streams, 1)
    t.ok(await eventually(async () => app.rateLimit.stats().refunded === 1), 'the aborted request was refunded')
    t.match(await app.rateLimit.peek('GET /stream', { ip: '127.0.0.1' }), { remaining: 3 }, 'its unit is back')
    t.equal(app.rateLimit.stats().refunded, 1, 'once')
  })
}
