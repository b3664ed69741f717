/**
 * The circuit breaker's probe, through Fastify against a private
 * redis-server: whatever the one probe decision meets after a cooldown, the
 * breaker never stays open while Redis answers. The state machine alone, on
 * the injected clock, is in test/internals/circuit-breaker.test.ts.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { CHANNELS, type StoreErrorMessage } from '../lib/index.js'
import { buildApp, TestClock, listenChannel } from './helpers/app.js'
import { adminClient, pluginClient, startServer, type ManagedServer } from './helpers/topologies.js'
import { PERIOD_CLOCK } from '../lib/kinds/period/calendar.js'
import { HOST_CLOCK } from '../lib/options/index.js'

const COOLDOWN = 250

interface Rig { app: FastifyInstance, admin: Redis, server: ManagedServer, clock: TestClock, errors: StoreErrorMessage[] }

/**
 * An app with a fail-open and a fail-closed route of limit 2 per `x-id`, on a
 * private server and the test clock, and `/period`, whose day boundaries are
 * computed 9 days away from that clock: Redis answers each of its decisions
 * with an error (no period holds its `now`).
 */
async function rig (t: Test, label: string, options: { maxPending?: number, timeout?: number } = {}): Promise<Rig> {
  const server = await startServer([], { label })
  const admin = adminClient(server.port)
  const clock = new TestClock()
  const redis = pluginClient('recommended', server.port)
  const app = await buildApp({ redis, prefix: label, clock: clock.read, ...options, [PERIOD_CLOCK]: () => clock.now + 9 * 86_400_000 } as object)
  for (const onRedisError of ['open', 'closed'] as const) {
    app.get(`/${onRedisError}`, { config: { rateLimit: { algorithm: 'fixed-window', limit: 2, window: '1h', by: 'header:x-id', onRedisError } } }, async () => 'ok')
  }
  app.get('/period', { config: { rateLimit: { limit: 2, period: 'day', by: 'header:x-id' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => {
    server.resume()
    await app.close()
    redis.disconnect()
    admin.disconnect()
    await server.stop()
  })
  return { app, admin, server, clock, errors: listenChannel<StoreErrorMessage>(t, CHANNELS.storeError) }
}

async function statuses (app: FastifyInstance, url: string, id: string, count: number): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < count; i++) out.push((await app.inject({ url, headers: { 'x-id': id } })).statusCode)
  return out
}

/** Hangs Redis until five decisions have timed out: the breaker is open. */
async function openBreaker (t: Test, { app, server, errors }: Rig): Promise<void> {
  server.pause()
  errors.length = 0
  await statuses(app, '/open', 'during-the-hang', 5)
  server.resume()
  t.same(errors.map((e) => e.cause), new Array(5).fill('timeout'), 'five timeouts open the breaker')
  errors.length = 0
  await statuses(app, '/open', 'during-the-hang', 1)
  t.same(errors.map((e) => e.cause), ['circuit-open'], 'it is open')
}

test('a probe answered with WRONGTYPE (a key of a foreign type) closes the breaker: both routes limit again', async (t) => {
  const r = await rig(t, 'cbwrong')
  const { app, admin, clock, errors } = r
  t.same(await statuses(app, '/open', 'foreign', 1), [200])
  const [key] = await admin.keys('cbwrong:*')
  t.ok(key !== undefined, 'the caller\'s key exists')
  // Another tool writes a list under exactly the key the probe decision uses.
  await admin.del(key as string)
  await admin.lpush(key as string, 'not a counter')

  await openBreaker(t, r)
  clock.advance(COOLDOWN)
  errors.length = 0
  t.same(await statuses(app, '/open', 'foreign', 1), [200], 'the probe meets WRONGTYPE: fail-open admits it')
  t.same(errors.map((e) => e.cause), ['script-error'], 'Redis answered it, with an error for that key')

  clock.advance(COOLDOWN)
  errors.length = 0
  t.same(await statuses(app, '/open', 'later-open', 3), [200, 200, 429], 'a caller with limit 2 is limited again on the fail-open route')
  t.same(await statuses(app, '/closed', 'later-closed', 3), [200, 200, 429], 'and no 503 on the fail-closed route')
  t.same(errors, [], 'no decision degraded after the probe')
})

test('a probe answered with a period error (an error reply for its decision alone) closes the breaker', async (t) => {
  const r = await rig(t, 'cbperiod')
  const { app, clock, errors } = r
  await openBreaker(t, r)
  clock.advance(COOLDOWN)
  errors.length = 0
  t.same(await statuses(app, '/period', 'any', 1), [200], 'the probe: fail-open')
  t.same(errors.map((e) => e.cause), ['script-error'], 'Redis answered it with an error for that decision')
  errors.length = 0
  t.same(await statuses(app, '/closed', 'after-period', 3), [200, 200, 429], 'Redis decides again at once, no cooldown')
  t.same(errors, [])
})

test('a probe that never reached Redis (store overloaded) lets the next decision probe, which closes the breaker', async (t) => {
  // A timeout long enough that the peek below is still pending when the probe arrives, also on a busy machine.
  const r = await rig(t, 'cbfull', { maxPending: 1, timeout: 300 })
  const { app, server, clock, errors } = r
  await openBreaker(t, r)
  clock.advance(COOLDOWN)
  // A peek (the breaker does not gate it) holds the one pending place while Redis hangs.
  server.pause()
  const peek = app.rateLimit.peek('GET /open', { headers: { 'x-id': 'peeker' } }).catch((error: unknown) => error)
  await sleep(20)
  errors.length = 0
  t.same(await statuses(app, '/closed', 'overloaded', 1), [503], 'the probe is refused by the full store: fail-closed answers 503')
  t.same(errors.map((e) => e.cause), ['overloaded'])
  server.resume()
  await peek
  errors.length = 0
  t.same(await statuses(app, '/closed', 'after-overload', 3), [200, 200, 429], 'the next decision probes, Redis answers, the breaker closes')
  t.same(errors, [])
})

test('a host clock stepped back while the breaker is open does not keep it open: its cooldown is monotonic', async (t) => {
  const label = 'cbstep'
  const server = await startServer([], { label })
  const redis = pluginClient('recommended', server.port)
  // No test clock: the plugin runs on this host's clock, which this test steps back 2 h below.
  let stepMs = 0
  const app = await buildApp({ redis, prefix: label, [HOST_CLOCK]: () => Date.now() - stepMs } as object)
  app.get('/open', { config: { rateLimit: { algorithm: 'fixed-window', limit: 2, window: '1h', by: 'header:x-id' } } }, async () => 'ok')
  await app.ready()
  const errors = listenChannel<StoreErrorMessage>(t, CHANNELS.storeError)
  t.teardown(async () => {
    server.resume()
    await app.close()
    redis.disconnect()
    await server.stop()
  })
  await openBreaker(t, { app, server, errors } as unknown as Rig)
  stepMs = 2 * 3_600_000
  await sleep(COOLDOWN + 50)
  errors.length = 0
  t.same(await statuses(app, '/open', 'after-step', 3), [200, 200, 429], 'a cooldown later the probe closes the breaker and Redis decides')
  t.same(errors, [], 'no decision skipped by an open breaker')
})
