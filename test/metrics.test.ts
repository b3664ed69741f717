/**
 * Observability: every decision on node:diagnostics_channel, OpenTelemetry
 * instruments through the global MeterProvider (a recording provider stands
 * in for an SDK: it is the application's side, not Redis, that is replaced),
 * and rejection logs once per identity per window.
 */
import { test, type Test } from 'tap'
import { metrics, type MeterProvider } from '@opentelemetry/api'
import { Redis } from 'ioredis'
import { CHANNELS, METRICS, type DecisionMessage, type StoreErrorMessage } from '../lib/index.js'
import { buildApp, setupModelStore, setupRedisApp, listenChannel, storeRequest, testRun, TestClock } from './helpers/app.js'
import { RedisStore } from '../lib/store/redis/store.js'
import { freePort, uniquePrefix } from './helpers/redis.js'

interface Recorded { name: string, value: number, attributes: Record<string, string> }
const recorded: Recorded[] = []
// An instrument that throws, as a broken SDK's would: the one named, or every one ('*'). Some tests set it.
let failing: string | undefined
const recordOrThrow = (name: string, value: number, attributes: Record<string, string>): void => {
  if (failing === name || failing === '*') throw new Error(`meter failed: ${name}`)
  recorded.push({ name, value, attributes })
}
const provider = {
  getMeter: () => ({
    createCounter: (name: string) => ({ add: (value: number, attributes: Record<string, string> = {}) => { recordOrThrow(name, value, attributes) } }),
    createHistogram: (name: string) => ({ record: (value: number, attributes: Record<string, string> = {}) => { recordOrThrow(name, value, attributes) } })
  })
} as unknown as MeterProvider
metrics.setGlobalMeterProvider(provider)

const setup = async (t: Test, options: Parameters<typeof buildApp>[0] = {}, serverOptions = {}) => await setupRedisApp(t, 'mx', options, serverOptions)

test('every decision is published on the decision channel and counted by OpenTelemetry', async (t) => {
  recorded.length = 0
  const messages = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  const { app } = await setup(t, { user: (req) => req.headers['x-user'] as string | undefined })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', name: 'x', by: 'user' } } }, async () => 'ok')
  app.get('/s', { config: { rateLimit: { limit: 1, window: '1m', name: 's', mode: 'shadow' } } }, async () => 'ok')
  await app.ready()
  const headers = { 'x-user': 'secret-user-name' }
  await app.inject({ url: '/x', headers })
  await app.inject({ url: '/x', headers })
  await app.inject({ url: '/x', headers })
  await app.inject('/s')
  await app.inject('/s')

  t.same(messages.map((m) => [m.route, m.policy, m.outcome, m.source]), [
    ['GET /x', 'x', 'allowed', 'store'],
    ['GET /x', 'x', 'limited', 'store'],
    ['GET /x', 'x', 'limited', 'deny-cache'],
    ['GET /s', 's', 'allowed', 'store'],
    ['GET /s', 's', 'shadow-limited', 'store']
  ])
  t.match(messages[1], { violated: ['x'], shadowViolated: [], tier: undefined, identityKinds: ['user'] })
  t.same(messages[4]?.shadowViolated, ['s'])
  t.ok(messages.every((m) => typeof m.durationMs === 'number' && m.durationMs >= 0 && m.durationMs < 5000), 'durations in ms')
  t.notMatch(JSON.stringify(messages), /secret-user-name/, 'never an identity value')

  const decisions = recorded.filter((r) => r.name === METRICS.decisions)
  t.same(decisions.map((r) => r.attributes), [
    { route: 'GET /x', policy: 'x', outcome: 'allowed' },
    { route: 'GET /x', policy: 'x', outcome: 'limited' },
    { route: 'GET /x', policy: 'x', outcome: 'limited' },
    { route: 'GET /s', policy: 's', outcome: 'allowed' },
    { route: 'GET /s', policy: 's', outcome: 'shadow-limited' }
  ])
  t.equal(recorded.filter((r) => r.name === METRICS.duration).length, 5, 'one latency sample per decision')
  t.same(recorded.filter((r) => r.name === METRICS.denyCacheHits).map((r) => r.attributes), [{ route: 'GET /x', policy: 'x' }])
})

test('a request admitted at a reserved turn: outcome delayed on the channel and the counter, its hold in rate_limit.delay', async (t) => {
  recorded.length = 0
  const messages = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  const { app } = await setup(t)
  app.get('/d', { config: { rateLimit: { algorithm: 'gcra', limit: 1, window: '1s', delay: '2s', name: 'd' } } }, async () => 'ok')
  await app.ready()
  t.equal((await app.inject('/d')).statusCode, 200)
  t.equal((await app.inject('/d')).statusCode, 200)
  t.same(messages.map((m) => [m.outcome, m.delayMs]), [['allowed', 0], ['delayed', 1000]])
  t.same(recorded.filter((r) => r.name === METRICS.decisions).map((r) => r.attributes.outcome), ['allowed', 'delayed'])
  t.same(recorded.filter((r) => r.name === METRICS.delay).map((r) => [r.value, r.attributes]), [[1000, { route: 'GET /d', policy: 'd' }]])
  t.same(app.rateLimit.stats().delayed, 1)
})

test('store failures: degraded decisions and errors by cause', async (t) => {
  recorded.length = 0
  const decisions = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  const errors = listenChannel<StoreErrorMessage>(t, CHANNELS.storeError)
  const redis = new Redis({ port: await freePort(), lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  redis.on('error', () => {})
  const app = await buildApp({ redis, prefix: uniquePrefix('mx') })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', name: 'x' } } }, async () => 'ok')
  await app.ready()
  t.equal((await app.inject('/x')).statusCode, 200)
  t.match(decisions, [{ route: 'GET /x', outcome: 'degraded' }])
  t.match(errors, [{ route: 'GET /x', cause: 'unavailable' }])
  t.same(recorded.filter((r) => r.name === METRICS.storeErrors).map((r) => r.attributes), [{ route: 'GET /x', cause: 'unavailable' }])
  t.same(recorded.filter((r) => r.name === METRICS.decisions).map((r) => r.attributes.outcome), ['degraded'])
})

test('metrics: false records nothing; the channel still publishes', async (t) => {
  recorded.length = 0
  const messages = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  const { app } = await setup(t, { metrics: false })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m' } } }, async () => 'ok')
  await app.ready()
  await app.inject('/x')
  t.equal(recorded.length, 0)
  t.equal(messages.length, 1)
})

test('a flood logs one rejection line per identity per window', async (t) => {
  const lines: Array<Record<string, unknown>> = []
  const stream = { write: (line: string) => { lines.push(JSON.parse(line)) } }
  const { app, clock } = await setup(t, { denyCache: false }, { logger: { level: 'info', stream } })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '10s', algorithm: 'fixed-window' } } }, async () => 'ok')
  await app.ready()
  const count = (): number => lines.filter((line) => line.msg === 'rate limit exceeded').length
  for (let i = 0; i < 200; i++) await app.inject('/x')
  t.equal(count(), 1, '199 rejections, one line')
  for (let i = 0; i < 20; i++) await app.inject({ url: '/x', remoteAddress: '10.0.0.2' })
  t.equal(count(), 2, 'another identity: its own line')
  clock.advance(10_000)
  for (let i = 0; i < 20; i++) await app.inject('/x')
  t.equal(count(), 3, 'the next window: one more line')
})

test('each script call records its batch size and its latency; the event-loop delay is sampled', async (t) => {
  recorded.length = 0
  const { app } = await setup(t, { denyCache: false, user: (req) => req.headers['x-user'] as string | undefined })
  app.get('/b', { config: { rateLimit: { limit: 100, window: '1m', by: 'user' } } }, async () => 'ok')
  await app.ready()
  await Promise.all(Array.from({ length: 40 }, async (_, i) => await app.inject({ url: '/b', headers: { 'x-user': `u${i}` } })))
  const sizes = recorded.filter((r) => r.name === METRICS.batchSize).map((r) => r.value)
  const latencies = recorded.filter((r) => r.name === METRICS.storeLatency).map((r) => r.value)
  t.same(sizes, [40], 'the 40 decisions of one turn: one call of 40')
  t.equal(latencies.length, 1)
  t.ok((latencies[0] ?? -1) >= 0, `store latency ${latencies[0]?.toFixed(2)} ms`)
  await new Promise((resolve) => setTimeout(resolve, 1100))
  t.ok(recorded.some((r) => r.name === METRICS.eventLoopDelay && r.value >= 0), 'event-loop delay sampled once a second')
})

test('skipped requests (allowList, skip) are counted as skipped on the channel and in OpenTelemetry', async (t) => {
  recorded.length = 0
  const messages = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  const { app } = await setup(t, { allowList: (req) => req.headers['x-internal'] === 'yes' })
  app.get('/k', { config: { rateLimit: { limit: 1, window: '1m', name: 'k', skip: async (req) => req.headers['x-admin'] === '1' } } }, async () => 'ok')
  await app.ready()
  await app.inject({ url: '/k', headers: { 'x-internal': 'yes' } })
  await app.inject({ url: '/k', headers: { 'x-admin': '1' } })
  t.same(messages.map((m) => [m.route, m.policy, m.outcome, m.source]), [['GET /k', 'k', 'skipped', 'allow-list'], ['GET /k', 'k', 'skipped', 'skip']])
  const counted = recorded.filter((r) => r.name === METRICS.decisions)
  t.same(counted.map((r) => r.attributes), [{ route: 'GET /k', policy: 'k', outcome: 'skipped' }, { route: 'GET /k', policy: 'k', outcome: 'skipped' }])
  t.equal(app.rateLimit.stats().skipped, 2)
})

/** Log lines as objects, for the once-per-burst checks. */
function logLines (): { lines: Array<Record<string, unknown>>, logger: { level: string, stream: { write: (line: string) => void } } } {
  const lines: Array<Record<string, unknown>> = []
  return { lines, logger: { level: 'info', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } } }
}
const TELEMETRY_LINE = /telemetry threw/

/** Answers, or gives up after `ms` (a request left unanswered must fail the test, not hang it). */
async function within<T> (ms: number, work: Promise<T>): Promise<T | 'unanswered'> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<'unanswered'>((resolve) => { timer = setTimeout(() => { resolve('unanswered') }, ms) })
  try {
    return await Promise.race([work, late])
  } finally {
    clearTimeout(timer)
  }
}

test('instruments that throw on every call: a flood is answered with the right statuses and headers, the throw logged once', async (t) => {
  const { lines, logger } = logLines()
  const { app } = await setup(t, { denyCache: false }, { logger })
  t.teardown(() => { failing = undefined })
  app.get('/f', { config: { rateLimit: { limit: 5, window: '1m', name: 'f', algorithm: 'fixed-window' } } }, async () => 'ok')
  await app.ready()
  failing = '*'
  const flood = await within(3000, Promise.all(Array.from({ length: 40 }, async () => await app.inject('/f'))))
  if (flood === 'unanswered') {
    t.fail('the flood was left unanswered')
    return
  }
  t.equal(flood.filter((res) => res.statusCode === 200).length, 5, 'the limit admitted')
  t.equal(flood.filter((res) => res.statusCode === 429).length, 35, 'the rest refused')
  t.ok(flood.every((res) => res.statusCode !== 200 || /^"f";r=\d;t=\d+$/.test(String(res.headers.ratelimit))), 'admitted: RateLimit fields')
  t.ok(flood.every((res) => res.statusCode !== 429 || Number(res.headers['retry-after']) >= 1), 'refused: Retry-After')
  const consumed = await within(3000, app.rateLimit.consume('f', { ip: '203.0.113.9' }))
  t.match(consumed, { allowed: true, degraded: false }, 'consume() decides too')
  t.equal(lines.filter((line) => TELEMETRY_LINE.test(String(line.msg))).length, 1, 'the throw logged once, not per request')
  t.match(lines.find((line) => TELEMETRY_LINE.test(String(line.msg))), { err: { message: /^meter failed: / } })
})

test('a meter that throws while Redis is down: requests are decided by onRedisError as if it did not, nothing left unhandled', async (t) => {
  const unhandled: unknown[] = []
  const onUnhandled = (reason: unknown): void => { unhandled.push(reason) }
  process.on('unhandledRejection', onUnhandled)
  const { lines, logger } = logLines()
  const redis = new Redis({ port: await freePort(), lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null })
  redis.on('error', () => {})
  const app = await buildApp({ redis, prefix: uniquePrefix('mx'), clock: new TestClock().read }, { logger })
  t.teardown(async () => { failing = undefined; process.off('unhandledRejection', onUnhandled); await app.close(); redis.disconnect() })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m', name: 'x' } } }, async () => 'ok')
  app.get('/y', { config: { rateLimit: { limit: 1, window: '1m', name: 'y', onRedisError: 'closed' } } }, async () => 'ok')
  await app.ready()
  failing = '*'
  t.equal((await app.inject('/x')).statusCode, 200, 'fail-open: admitted')
  t.equal((await app.inject('/y')).statusCode, 503, 'fail-closed: 503')
  t.match(await app.rateLimit.consume('x', { ip: '203.0.113.9' }), { allowed: true, degraded: true })
  await new Promise((resolve) => setImmediate(resolve))
  t.same(unhandled, [], 'no unhandled rejection')
  t.equal(lines.filter((line) => TELEMETRY_LINE.test(String(line.msg))).length, 1, 'the throw logged once, not per request')
})

test('a store whose per-call callback (onBatch) throws: every decision answered, nothing left pending', async (t) => {
  const { redisStore: quiet, prefix } = await setupModelStore(t, 'mxb')
  const store = new RedisStore(quiet.client, { timeout: 1000, maxBatch: 128, maxInFlight: 1, maxPending: 100, coalesce: true, onBatch: () => { throw new Error('meter failed') } })
  const run = testRun({ algorithm: 'fixed-window', limit: 3, windowMs: 60_000, shadow: false })
  const decisions = await within(3000, Promise.all(Array.from({ length: 5 }, async (_, i) => await store.decide(storeRequest([run], [`${prefix}:{b${i % 2}}:w`], [1]), 'charge'))))
  t.not(decisions, 'unanswered', 'every decision answered')
  t.equal(store.pending, 0, 'nothing pending')
})

test('usage changed after the fact is counted once per request and source, and once per adjust() call; a meter that throws there changes nothing', async (t) => {
  recorded.length = 0
  const { app } = await setup(t)
  app.get('/refund', { config: { rateLimit: { limit: 5, window: '1m', refundOn: (reply) => reply.statusCode === 503 } } }, async (req, reply) => await reply.code(503).send('busy'))
  app.get('/settle', { config: { rateLimit: { limit: 5, window: '1m', cost: 3, settle: () => 1 } } }, async () => 'ok')
  await app.ready()
  await app.inject('/refund')
  await app.inject('/settle')
  const changes = (): Array<Record<string, string>> => recorded.filter((r) => r.name === METRICS.usageChanges).map((r) => r.attributes)
  const deadline = Date.now() + 5000
  while (changes().length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5))
  await app.rateLimit.adjust('GET /settle', { ip: '127.0.0.1' }, -1)
  t.same(changes(), [{ route: 'GET /refund', source: 'refund' }, { route: 'GET /settle', source: 'settle' }, { route: 'api GET /settle', source: 'adjust' }])
  t.match(app.rateLimit.stats(), { refunded: 1, settled: 1 })
  failing = METRICS.usageChanges
  t.teardown(() => { failing = undefined })
  t.same(await app.rateLimit.adjust('GET /settle', { ip: '127.0.0.1' }, -1), ['get-settle'], 'the change is made and adjust() resolves')
  t.match(await app.rateLimit.peek('GET /settle', { ip: '127.0.0.1' }), { remaining: 5 }, 'both give-backs applied')
})
