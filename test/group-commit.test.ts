import { test, type Test } from 'tap'
import diagnostics from 'node:diagnostics_channel'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { CHANNELS, type RateLimitPluginOptions, type StoreErrorMessage } from '../lib/index.js'
import { buildApp } from './helpers/app.js'
import { scriptCalls } from './helpers/redis.js'
import { adminClient, pluginClient, startProxy, startServer, waitFor, type Proxy } from './helpers/topologies.js'

/*
 * Group commit (docs/operations.md): at most `maxInFlight` script calls (1 by
 * default) per connection, or per hash tag on a Cluster; decisions that
 * arrive meanwhile wait and leave together in the next call. The plugin
 * talks to a private redis-server through a proxy that can hold Redis's
 * replies: Redis runs what was written at once (counted on a direct
 * connection, INFO commandstats), and the test chooses when the reply comes
 * back, so "in flight" is a state the test holds, not a race.
 */

interface Rig { app: FastifyInstance, admin: Redis, proxy: Proxy, gates: Array<() => void> }

async function rig (t: Test, options: RateLimitPluginOptions = {}): Promise<Rig> {
  const server = await startServer([], { label: 'group-commit' })
  const proxy = await startProxy(server.port)
  const admin = adminClient(server.port)
  const redis = pluginClient('recommended', proxy.port)
  const app = await buildApp({ redis, prefix: 'gc', denyCache: false, user: (req) => req.headers['x-user'] as string | undefined, ...options })
  app.get('/count', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1_000_000, window: '1h', by: 'user' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { limit: 100, window: '1h', by: 'user', onRedisError: 'closed' } } }, async (req) => req.rateLimit)
  // A concurrency slot held until the test opens its gate.
  const gates: Array<() => void> = []
  app.get('/slot', { config: { rateLimit: { concurrency: 1, by: 'user' } } }, async () => { await new Promise<void>((resolve) => { gates.push(resolve) }); return 'done' })
  await app.ready()
  t.teardown(async () => {
    proxy.mode = 'pass'
    await app.close()
    redis.disconnect()
    admin.disconnect()
    await proxy.close()
    await server.stop()
  })
  // The library loaded and the connection warm: the calls counted below are decisions.
  await app.inject({ url: '/count', headers: { 'x-user': 'warm' } })
  return { app, admin, proxy, gates }
}

const turn = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

function inject (app: FastifyInstance, url: string, user: string): Promise<{ statusCode: number, json: () => { remaining: number } }> {
  return app.inject({ url, headers: { 'x-user': user } }) as never
}

/**
 * With Redis's replies held: one decision for `users[0]` written and run in
 * Redis, then one for each other user, a turn apart (they arrive while that
 * call is in flight). The script calls counted before it, and the answers.
 */
async function behindHeldCall (rig: Rig, url: string, users: string[]): Promise<{ before: number, first: ReturnType<typeof inject>, later: Array<ReturnType<typeof inject>> }> {
  const { app, admin, proxy } = rig
  const before = await scriptCalls(admin)
  proxy.mode = 'hold-replies'
  const first = inject(app, url, users[0] as string)
  await waitFor('the first call ran in Redis', async () => await scriptCalls(admin) - before === 1)
  const later: Array<ReturnType<typeof inject>> = []
  for (const user of users.slice(1)) {
    later.push(inject(app, url, user))
    await turn()
  }
  return { before, first, later }
}

test('light load: each decision leaves at once in its own call, nothing waits', async (t) => {
  const { app, admin } = await rig(t)
  const before = await scriptCalls(admin)
  for (let i = 0; i < 20; i++) t.equal((await inject(app, '/count', 'u1')).statusCode, 200)
  t.equal(await scriptCalls(admin) - before, 20, 'one call per decision when none is in flight')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('a call in flight: decisions of later turns wait for its reply and leave together in one call', async (t) => {
  const setup = await rig(t, { timeout: 5000 })
  const { app, admin, proxy } = setup
  const { before, first, later } = await behindHeldCall(setup, '/count', Array(11).fill('u1'))
  await new Promise((resolve) => setTimeout(resolve, 50))
  t.equal(await scriptCalls(admin) - before, 1, 'while its reply is held, no other call reaches Redis (ten decisions over ten turns wait)')
  proxy.mode = 'pass'
  const answers = await Promise.all([first, ...later])
  t.same(answers.map((a) => a.statusCode), Array(11).fill(200), 'all admitted')
  t.equal(await scriptCalls(admin) - before, 2, 'the ten left in one call after the reply')
  const remaining = answers.map((a) => a.json().remaining).sort((a, b) => b - a)
  t.same(remaining, Array.from({ length: 11 }, (_, i) => 1_000_000 - (i + 1)), 'each decided once, in order (the warm-up was another caller)')
  t.equal(app.rateLimit.stats().degraded, 0)
})

test('a call abandoned at the timeout takes the decisions waiting behind it: they were waiting on the same silence, and none is sent into it', async (t) => {
  const setup = await rig(t)
  const { app, admin, proxy } = setup
  const errors: string[] = []
  const onError = (message: unknown): void => { errors.push((message as StoreErrorMessage).cause) }
  diagnostics.subscribe(CHANNELS.storeError, onError)
  t.teardown(() => { diagnostics.unsubscribe(CHANNELS.storeError, onError) })
  // Four failures in all: a fifth in a row would open the circuit breaker (its default), which is another test's subject.
  const { before, first, later } = await behindHeldCall(setup, '/closed', ['u1', 'w0', 'w1', 'w2'])
  const answers = await Promise.all([first, ...later])
  t.same(answers.map((a) => a.statusCode), [503, 503, 503, 503], 'the route fails closed for all four')
  t.same(errors, ['timeout', 'timeout', 'timeout', 'timeout'], 'each judged by the silence of the call ahead of it')
  t.equal(await scriptCalls(admin) - before, 1, 'the waiting decisions never reached Redis')
  proxy.mode = 'pass'
  t.equal((await inject(app, '/closed', 'u2')).statusCode, 200, 'Redis answering again: the next decision goes through')
})

test('slot releases do not wait behind a decision in flight', async (t) => {
  const { app, admin, proxy, gates } = await rig(t, { timeout: 5000 })
  const holder = inject(app, '/slot', 's1')
  await waitFor('the slot is held', () => gates.length === 1)
  const slots = async (): Promise<number> => {
    const keys = await admin.keys('gc:*')
    let held = 0
    for (const key of keys) if ((await admin.type(key)) === 'zset') held += await admin.zcard(key)
    return held
  }
  t.equal(await slots(), 1, 'one slot held in Redis')
  const before = await scriptCalls(admin)
  proxy.mode = 'hold-replies'
  const decision = inject(app, '/count', 'u1')
  await waitFor('the decision ran in Redis', async () => await scriptCalls(admin) - before === 1)
  gates[0]?.()
  await waitFor('the release ran in Redis while the decision\'s reply is held', async () => await slots() === 0)
  proxy.mode = 'pass'
  t.same([(await holder).statusCode, (await decision).statusCode], [200, 200])
})

test('maxInFlight is validated at register', async (t) => {
  for (const value of [0, 2000, 1.5, '2']) {
    await t.rejects(buildApp({ store: 'memory', maxInFlight: value } as never), { code: 'FST_RRL_INVALID_OPTION', message: /maxInFlight/ }, `maxInFlight: ${String(value)}`)
  }
})
