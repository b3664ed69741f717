/**
 * The circuit breaker's probe, through Fastify against a private
 * redis-server: whatever the one probe decision meets after a cooldown, the
 * breaker never stays open while Redis answers. The state machine alone, on
 * the injected clock, is in test/internals/circuit-breaker.test.ts.
 */
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { CHANNELS, type StoreErrorMessage } from '../lib/index.js'
import { buildApp, TestClock, listenChannel } from './helpers/app.js'
import { adminClient, pluginClient, startServer, type ManagedServer } from './helpers/topologies.js'

const COOLDOWN = 250

interface Rig { app: FastifyInstance, admin: Redis, server: ManagedServer, clock: TestClock, errors: StoreErrorMessage[] }

/** An app with a fail-open and a fail-closed route of limit 2 per `x-id`, on a private server and the test clock. */
async function rig (t: Test, label: string): Promise<Rig> {
  const server = await startServer([], { label })
  const admin = adminClient(server.port)
  const clock = new TestClock()
  const redis = pluginClient('recommended', server.port)
  const app = await buildApp({ redis, prefix: label, clock: clock.read })
  for (const onRedisError of ['open', 'closed'] as const) {
    app.get(`/${onRedisError}`, { config: { rateLimit: { algorithm: 'fixed-window', limit: 2, window: '1h', by: 'header:x-id', onRedisError } } }, async () => 'ok')
  }
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
