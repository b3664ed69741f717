/**
 * Between open and closed: onRedisError 'local' decides with this instance's
 * own limiter at its share of the limit while Redis is unavailable, and the
 * circuit breaker stops asking a failing Redis for a cooldown, then probes.
 * Against private redis-servers that the tests stop, hang and restart.
 */
import { test, type Test } from 'tap'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { CHANNELS, type DecisionMessage, type RateLimitPluginOptions, type StoreErrorMessage } from '../lib/index.js'
import { buildApp, TestClock, listenChannel } from './helpers/app.js'
import { pluginClient, startServer, waitFor, type ManagedServer } from './helpers/topologies.js'

const LIMIT = 10
const FLEET = 2

interface Instance { app: FastifyInstance, redis: Redis }

async function fleet (t: Test, server: ManagedServer, options: RateLimitPluginOptions = {}): Promise<Instance[]> {
  const members: Instance[] = []
  for (let i = 0; i < FLEET; i++) {
    const redis = pluginClient('recommended', server.port)
    const app = await buildApp({ redis, prefix: 'local', onRedisError: 'local', fleetSize: FLEET, ...options })
    app.get('/x', { config: { rateLimit: { algorithm: 'fixed-window', limit: LIMIT, window: '1h', by: 'header:x-id' } } }, async (req) => req.rateLimit)
    await app.ready()
    members.push({ app, redis })
  }
  t.teardown(async () => {
    for (const member of members) {
      await member.app.close()
      member.redis.disconnect()
    }
  })
  return members
}

/** 20 requests from one identity to each instance; statuses per instance and the slowest answer. */
async function flood (members: Instance[], id: string): Promise<{ admitted: number[], worstMs: number, refusal: { retryAfter: unknown, degraded: unknown } | undefined }> {
  const admitted: number[] = []
  let worstMs = 0
  let refusal: { retryAfter: unknown, degraded: unknown } | undefined
  for (const member of members) {
    let ok = 0
    for (let i = 0; i < 20; i++) {
      const started = performance.now()
      const res = await member.app.inject({ url: '/x', headers: { 'x-id': id } })
      worstMs = Math.max(worstMs, performance.now() - started)
      if (res.statusCode === 200) ok++
      else if (res.statusCode === 429) refusal ??= { retryAfter: res.headers['retry-after'], degraded: res.headers.ratelimit }
    }
    admitted.push(ok)
  }
  return { admitted, worstMs, refusal }
}

test('two instances, Redis stopped, hung, then back: each admits its share locally, nothing hangs, then Redis decides again', async (t) => {
  const server = await startServer([], { label: 'local-limit' })
  t.teardown(async () => { server.resume(); await server.stop() })
  const members = await fleet(t, server)
  const decisions = listenChannel<DecisionMessage>(t, CHANNELS.decision)

  const healthy = await flood(members, 'healthy')
  t.same(healthy.admitted, [LIMIT, 0], 'healthy: Redis holds the fleet-wide limit of 10')

  await server.stop()
  await waitFor('clients noticed', () => members.every((m) => m.redis.status !== 'ready'), 5000, 5)
  decisions.length = 0
  const stopped = await flood(members, 'stopped')
  t.same(stopped.admitted, [LIMIT / FLEET, LIMIT / FLEET], 'stopped: each instance admits limit / fleetSize = 5, 10 in all')
  const retryAfter = Number(stopped.refusal?.retryAfter)
  t.ok(retryAfter >= 1 && retryAfter <= 3600, `a local refusal is a 429 with Retry-After (${retryAfter} s: the rest of the aligned hour)`)
  t.equal(stopped.refusal?.degraded, undefined, 'no RateLimit header: the fleet-wide quota is unknown')
  t.ok(decisions.length === 40 && decisions.every((d) => d.source === 'local'), 'every decision reports source local')
  t.ok(stopped.worstMs < 100, `stopped: worst ${stopped.worstMs.toFixed(1)} ms`)

  await server.start()
  await waitFor('clients reconnected', () => members.every((m) => m.redis.status === 'ready'), 5000, 5)
  // Each instance's breaker may still be cooling down (250 ms): wait until Redis decides for every one.
  await waitFor('Redis decides again', async () => {
    decisions.length = 0
    for (const member of members) await member.app.inject({ url: '/x', headers: { 'x-id': 'probe' } })
    return decisions.length === members.length && decisions.every((d) => d.source === 'store')
  }, 3000, 20)
  const back = await flood(members, 'back')
  t.same(back.admitted, [LIMIT, 0], 'back: Redis holds the fleet-wide limit again')

  server.pause()
  decisions.length = 0
  const hung = await flood(members, 'hung')
  server.resume()
  t.same(hung.admitted, [LIMIT / FLEET, LIMIT / FLEET], 'hung: each instance admits its share')
  t.ok(hung.worstMs < 50 + 150, `hung: worst ${hung.worstMs.toFixed(1)} ms (timeout 50)`)
  const waited = decisions.filter((d) => d.durationMs >= 40).length
  t.ok(waited <= 2 * 5 + 2, `the breaker opened after 5 failures per instance: ${waited} of 40 decisions waited out the timeout`)
  for (const member of members) t.ok(member.app.rateLimit.stats().degraded >= 40, 'degraded decisions are counted')
})

test('an override moves the local share too: limit 4 over a fleet of 2 admits 2 per instance while Redis is down', async (t) => {
  const server = await startServer([], { label: 'local-override' })
  t.teardown(async () => { await server.stop() })
  const [member] = await fleet(t, server)
  const { app, redis } = member as Instance
  await app.rateLimit.setOverride({ target: 'GET /x', limit: 4, ttl: 'permanent', actor: 'ops', reason: 'incident' })
  await server.stop()
  await waitFor('client noticed', () => redis.status !== 'ready', 5000, 5)
  const { admitted } = await flood([member as Instance], 'overridden')
  t.same(admitted, [4 / FLEET], 'the share is the overridden limit / fleetSize, not the declared limit\'s (5)')
})

test('the circuit breaker: open after 5 failures in a row, one probe after the cooldown, closed again by a success', async (t) => {
  const server = await startServer([], { label: 'breaker' })
  t.teardown(async () => { server.resume(); await server.stop() })
  const clock = new TestClock()
  const redis = pluginClient('recommended', server.port)
  const app = await buildApp({ redis, prefix: 'cb', clock: clock.read, onRedisError: 'closed' })
  app.get('/x', { config: { rateLimit: { limit: 1000, window: '1h' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  const errors = listenChannel<StoreErrorMessage>(t, CHANNELS.storeError)

  server.pause()
  const causes = async (count: number): Promise<string[]> => {
    errors.length = 0
    for (let i = 0; i < count; i++) t.equal((await app.inject('/x')).statusCode, 503)
    return errors.map((e) => e.cause)
  }
  t.same(await causes(5), ['timeout', 'timeout', 'timeout', 'timeout', 'timeout'], 'five decisions wait out the timeout')
  const started = performance.now()
  t.same(await causes(20), new Array(20).fill('circuit-open'), 'then the breaker answers at once')
  t.ok(performance.now() - started < 200, 'twenty answers without waiting on Redis')
  clock.advance(250)
  t.same(await causes(1), ['timeout'], 'after the cooldown, one probe asks Redis (still hung)')
  t.same(await causes(3), ['circuit-open', 'circuit-open', 'circuit-open'], 'the failed probe opens it again')
  server.resume()
  clock.advance(250)
  t.equal((await app.inject('/x')).statusCode, 200, 'a successful probe closes it')
  t.same(await causes(0), [])
  t.equal((await app.inject('/x')).statusCode, 200, 'and Redis decides again')
})

test('configuration: local needs a share; bad values are coded errors', async (t) => {
  const app = await buildApp({ store: 'memory', onRedisError: 'local' })
  t.throws(() => app.get('/x', { config: { rateLimit: { limit: 10, window: '1m' } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /onRedisError.*'local'.*localLimit.*fleetSize/ })
  app.get('/y', { config: { rateLimit: { limit: 10, window: '1m', localLimit: 3 } } }, async () => 'ok')
  await app.close()
  for (const [options, message] of [
    [{ fleetSize: 0 }, /fleetSize/],
    [{ maxKeys: -1 }, /maxKeys/],
    [{ circuitBreaker: { failures: 0 } }, /circuitBreaker\.failures/],
    [{ circuitBreaker: { cooldown: 'later' } }, /circuitBreaker\.cooldown/],
    [{ circuitBreaker: true }, /circuitBreaker/],
    [{ onRedisError: 'maybe' }, /'open', 'closed' or 'local'/]
  ] as const) {
    await t.rejects(buildApp({ store: 'memory', ...options } as never), { code: 'FST_RRL_INVALID_OPTION', message }, JSON.stringify(options))
  }
  const block = await buildApp({ store: 'memory' })
  t.throws(() => block.get('/z', { config: { rateLimit: { limit: 10, window: '1m', localLimit: 0 } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message: /localLimit.*got 0/ })
  await block.close()
})

test('the memory store keeps at most maxKeys keys: the least recently used caller starts afresh', async (t) => {
  const app = await buildApp({ store: 'memory', maxKeys: 2 })
  app.get('/x', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1, window: '1h', by: 'header:x-id' } } }, async () => 'ok')
  await app.ready()
  t.teardown(() => app.close())
  const hit = async (id: string): Promise<number> => (await app.inject({ url: '/x', headers: { 'x-id': id } })).statusCode
  t.same([await hit('a'), await hit('b')], [200, 200])
  t.same([await hit('a'), await hit('b')], [429, 429], 'both remembered')
  t.equal(await hit('c'), 200, 'a third caller evicts the least recently used (a)')
  t.equal(await hit('b'), 429, 'b was used more recently: still remembered')
  t.equal(await hit('a'), 200, 'a was evicted: it starts afresh (the documented cost of the bound)')
})
