import { test, type Test } from 'tap'
import { performance } from 'node:perf_hooks'
import { connect } from 'node:net'
import { request } from 'undici'
import Fastify, { type FastifyInstance } from 'fastify'
import fastifyRedis from '@fastify/redis'
import { Redis } from 'ioredis'
import { createClient as createNodeRedis } from 'redis'
import rateLimit, { type RateLimitPluginOptions } from '../lib/index.js'
import { TestClock } from './helpers/app.js'
import { cleanUpPrefix, createClient, freePort, getRedis, privateRedis, uniquePrefix } from './helpers/redis.js'
import { Holds } from '../lib/kinds/delay/holds.js'
import { Waiters } from '../lib/kinds/concurrency/waiters.js'
import { PendingWork } from '../lib/util/pending-work.js'
import { RECOMMENDED_OPTIONS, waitFor } from './helpers/topologies.js'
import { codeBlocks, within } from './helpers/doc-blocks.js'

/*
 * app.close() of a listening instance, for each documented wiring of its
 * client: @fastify/redis (which quits in its own onClose, after the
 * plugin's), the app's own ioredis client quit in an onClose hook registered
 * before the plugin (README), and node-redis closed the same way
 * (docs/clients.md). At close the instance holds delayed requests and
 * schedule() calls, has a request waiting for a slot and one running in it,
 * and one running whose settle answers late; another instance has a waiter
 * behind it. Every held or waiting request is answered 503 as close begins,
 * close() ends once the running requests have, and Redis, read afterwards,
 * holds nothing of the closed instance's: its held turns are given back, its
 * waiter left the queue, the late settle landed, and the other instance's
 * waiter starts.
 *
 * Both instances run on one frozen test clock: turns are whole multiples of
 * the window, and a lease never runs out, so the other waiter can start only
 * because the closed instance's entry left the queue (not after its lease).
 * Wall-clock bounds are hang guards sized for a loaded 2-core machine; the
 * figures seen are reported with t.comment.
 */

type Options = RateLimitPluginOptions & { clock: () => number }

interface Wiring {
  name: string
  /** `logs` gets the app's log lines at warn and above. */
  build: (url: string, options: Options, logs: string[]) => Promise<FastifyInstance>
}

/** An app whose warn-and-above log lines go to `logs`. */
const logged = (logs: string[]): FastifyInstance => Fastify({ logger: { level: 'warn', stream: { write: (line: string) => { logs.push(line) } } } })

const reconnectStrategy = (n: number): number => Math.min(n * 50, 200)

const WIRINGS: Wiring[] = [
  {
    name: '@fastify/redis (quits in its onClose, after the plugin\'s)',
    build: async (url, options, logs) => {
      const app = logged(logs)
      await app.register(fastifyRedis, { url, ...RECOMMENDED_OPTIONS })
      await app.register(rateLimit, options)
      return app
    }
  },
  {
    name: 'the app\'s own ioredis client, quit() in an onClose hook registered before the plugin (README)',
    build: async (url, options, logs) => {
      const app = logged(logs)
      const redis = new Redis(url, RECOMMENDED_OPTIONS)
      redis.on('error', (err) => { app.log.warn({ err }, 'redis') })
      app.addHook('onClose', async () => { await redis.quit().catch(() => { redis.disconnect() }) })
      await app.register(rateLimit, { redis, ...options })
      return app
    }
  },
  {
    name: 'node-redis createClient, a bounded close() in an onClose hook registered before the plugin (docs/clients.md)',
    build: async (url, options, logs) => {
      const app = logged(logs)
      const redis = createNodeRedis({ url, disableOfflineQueue: true, socket: { reconnectStrategy } })
      redis.on('error', (err) => { app.log.warn({ err }, 'redis') })
      await redis.connect()
      app.addHook('onClose', async () => { await Promise.race([redis.close(), new Promise((resolve) => setTimeout(resolve, 1000))]); if (redis.isOpen) redis.destroy() })
      await app.register(rateLimit, { redis, ...options })
      return app
    }
  }
]

interface Answer { status: number, retryAfter: string | undefined, connection: string | undefined, at: number }

/**
 * A request in flight when close begins keeps a keep-alive connection open
 * after its response, and server.close() waits for it (Fastify reaps only the
 * connections idle at that moment: up to keepAliveTimeout, 72 s): the
 * request that runs through close asks for `connection: close`, as
 * docs/operations.md advises for long requests at deploys.
 */
async function get (base: string, path: string, id: string, tag = id, connection?: 'close'): Promise<Answer> {
  const res = await request(`${base}${path}`, { headers: { 'x-id': id, 'x-tag': tag, ...(connection === undefined ? {} : { connection }) } })
  await res.body.text()
  return { status: res.statusCode, retryAfter: res.headers['retry-after'] as string | undefined, connection: res.headers.connection as string | undefined, at: performance.now() }
}

/** The routes both instances declare: a shaping block (held turns), a block with a late `settle` and a concurrency block with `wait`, handlers gated by the test. */
function declareRoutes (app: FastifyInstance, gates: Map<string, () => void>, starts: Map<string, number>): void {
  app.get('/held', { config: { rateLimit: { algorithm: 'token-bucket', limit: 1, window: '10s', delay: '60s', by: 'header:x-id' } } }, async () => 'ok')
  // A settle that answers late (an LLM's token count): the end of a request that ran through close.
  const settle = async (): Promise<number> => await new Promise((resolve) => setTimeout(() => { resolve(3) }, 20))
  app.get('/settle', { config: { rateLimit: { algorithm: 'fixed-window', limit: 10, window: '1h', by: 'header:x-id', settle } } }, async (req) => {
    const tag = String(req.headers['x-tag'])
    starts.set(tag, performance.now())
    await new Promise<void>((resolve) => { gates.set(tag, resolve) })
    return 'done'
  })
  app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '8s', by: 'header:x-id' } } }, async (req) => {
    const tag = String(req.headers['x-tag'])
    starts.set(tag, performance.now())
    await new Promise<void>((resolve) => { gates.set(tag, resolve) })
    return 'done'
  })
}

/** The limit with slack: the 503s are written before any Redis call of the close, so they come in milliseconds; 1 s absorbs a loaded machine. */
const ANSWERED_WITHIN_MS = 1000

async function closeWhileListening (t: Test, wiring: Wiring): Promise<void> {
  const server = await getRedis()
  const prefix = uniquePrefix('close')
  const inspector = createClient(server)
  const clock = new TestClock()
  const options: Options = { prefix, clock: clock.read }
  const gates = new Map<string, () => void>()
  const starts = new Map<string, number>()
  const open = (tag: string): void => { gates.get(tag)?.(); gates.delete(tag) }
  const logs: string[] = []
  const a = await wiring.build(server.url, options, logs)
  declareRoutes(a, gates, starts)
  const other = createClient(server, RECOMMENDED_OPTIONS)
  const b = Fastify()
  await b.register(rateLimit, { redis: other, ...options })
  declareRoutes(b, gates, starts)
  let aClosed = false
  cleanUpPrefix(t, inspector, prefix, async () => {
    for (const tag of [...gates.keys()]) open(tag)
    if (!aClosed) await a.close()
    await b.close()
    other.disconnect()
  })
  const baseA = await a.listen({ port: 0, host: '127.0.0.1' })
  const baseB = await b.listen({ port: 0, host: '127.0.0.1' })

  // A runs the holder; its waiter, then B's, queue behind it (one ms apart on the test clock).
  const holder = get(baseA, '/slot', 'w', 'holder', 'close')
  const settling = get(baseA, '/settle', 'q', 'settling', 'close')
  await waitFor('the holder and the settling request run', () => starts.has('holder') && starts.has('settling'))
  const waiterA = get(baseA, '/slot', 'w', 'waiter-a')
  await waitFor('A\'s waiter waits', () => a.rateLimit.stats().waiting === 1)
  clock.advance(1)
  const waiterB = get(baseB, '/slot', 'w', 'waiter-b')
  await waitFor('B\'s waiter waits', () => b.rateLimit.stats().waiting === 1)
  const queueKey = (await inspector.keys(`${prefix}*`)).find((key) => key.endsWith('ccq')) as string
  const queue = await inspector.zrange(queueKey, '0', '-1')
  t.equal(queue.length, 2, 'two waiters in the fleet\'s queue')
  const entryOfA = queue[0] as string

  // A holds three requests at turns 10, 20 and 30 s away, and two schedule() calls.
  t.equal((await get(baseA, '/held', 'h')).status, 200, 'the first is admitted now')
  const held = [1, 2, 3].map(async () => await get(baseA, '/held', 'h'))
  t.equal((await a.rateLimit.consume('GET /held', { headers: { 'x-id': 's' } })).allowed, true)
  const scheduled = [1, 2].map(async () => await a.rateLimit.schedule('GET /held', { headers: { 'x-id': 's' } }).then(() => 'went on', (error: { code?: string }) => error.code))
  await waitFor('five held', () => a.rateLimit.stats().held === 5)

  const closeAt = performance.now()
  const closing = a.close().then(() => { aClosed = true })
  const answers = await within(Promise.all([waiterA, ...held]), 10_000, 'the held and waiting requests\' answers')
  const slowest = Math.max(...answers.map((answer) => answer.at - closeAt))
  t.comment(`${wiring.name}: held and waiting requests answered ${slowest.toFixed(0)} ms after close began`)
  t.same(answers.map((answer) => answer.status), [503, 503, 503, 503], 'the waiter and the three held requests: 503')
  t.equal(answers[0]?.retryAfter, '1', 'the waiter: Retry-After 1')
  // Turns 10, 20 and 30 s away on the test clock (frozen): Retry-After is the time each was still away.
  t.same(answers.slice(1).map((answer) => Number(answer.retryAfter)).sort((x, y) => x - y), [10, 20, 30], 'each held request: Retry-After the time its turn was still away')
  t.ok(answers.every((answer) => answer.connection === 'close'), 'each with Connection: close (the server is closing)')
  t.ok(slowest < ANSWERED_WITHIN_MS, `all answered as close began (${slowest.toFixed(0)} ms)`)
  t.same(await within(Promise.all(scheduled), 5000, 'schedule()'), ['FST_RRL_LIMITER_UNAVAILABLE', 'FST_RRL_LIMITER_UNAVAILABLE'], 'schedule() calls rejected')
  t.equal(aClosed, false, 'close() waits for the request running in the slot')

  const endAt = performance.now()
  open('holder')
  open('settling')
  t.equal((await holder).status, 200, 'the running requests finish')
  t.equal((await settling).status, 200)
  await within(closing, 5000, 'close()')
  const closeMs = performance.now() - endAt
  t.comment(`close() resolved ${closeMs.toFixed(0)} ms after the running requests' handlers returned`)
  t.ok(closeMs < 2000, 'close() ends promptly once the running request has')
  t.equal(a.rateLimit.stats().delayAborted, 5, 'delayAborted counts the held requests and schedule() calls given back')
  t.same(logs, [], 'nothing logged at warn or above (no store call failed against a closed client)')

  // Redis afterwards: nothing of A's left.
  t.equal(await inspector.zscore(queueKey, entryOfA), null, 'A\'s waiter left the fleet\'s queue')
  const startMs = await waitFor('B\'s waiter starts', () => starts.has('waiter-b'), 5000, 5)
  t.comment(`B's waiter started ${startMs} ms after close() resolved (its lease never runs out on the frozen clock)`)
  for (const id of ['h', 's']) {
    const next = await b.rateLimit.consume('GET /held', { headers: { 'x-id': id } })
    t.same([next.allowed, next.retryAfterMs], [false, 10_000], `${id}: the turns A held are given back: B's next turn is the one after the single admitted request (40 s without the give-backs)`)
  }
  t.equal((await b.rateLimit.peek('GET /settle', { headers: { 'x-id': 'q' } })).remaining, 7, 'the settle of the request that ended during close landed: 3 units, not the 1 reserved')
  open('waiter-b')
  t.equal((await waiterB).status, 200, 'B\'s waiter admitted')
  t.equal(await inspector.zcard(queueKey), 0, 'the queue is empty')
}

for (const wiring of WIRINGS) {
  test(`close with a listening server, ${wiring.name}: held and waiting requests answered 503 as close begins, their give-backs and queue leaves land in Redis`, async (t) => {
    await closeWhileListening(t, wiring)
  })
}

test('the documented own-client wirings close their client gracefully, in an onClose hook registered before the plugin', async (t) => {
  const own = codeBlocks().filter((block) => block.excerptOf === undefined && ['README.md', 'docs/clients.md'].includes(block.file) && /new Redis\(|createClient\(/.test(block.code))
  t.ok(own.length >= 3, `${own.length} blocks make their own client (README's CommonJS and Quick Start, docs/clients.md's node-redis)`)
  for (const { file, line, code } of own) {
    const hook = code.indexOf('app.addHook(\'onClose\'')
    const plugin = code.search(/await app\.register\((rateLimit|fastifyRedisRateLimit),/)
    t.ok(hook >= 0 && plugin > hook, `${file} line ${line}: the client's onClose hook is registered before the plugin`)
    const closing = code.slice(hook, code.indexOf('\n', hook))
    t.match(closing, /await (Promise\.race\(\[)?redis\.(quit|close)\(\)/, `${file} line ${line}: it closes gracefully (${closing.trim()})`)
  }
})

test('the README\'s own-client wiring with Redis absent: close() ends at once and stops the reconnecting client', async (t) => {
  const redis = new Redis({ host: '127.0.0.1', port: await freePort(), ...RECOMMENDED_OPTIONS })
  let attempts = 0
  redis.on('error', () => { attempts++ })
  const app = Fastify()
  app.addHook('onClose', async () => { await redis.quit().catch(() => { redis.disconnect() }) })
  await app.register(rateLimit, { redis, prefix: uniquePrefix('absent') })
  app.get('/x', { config: { rateLimit: { limit: 1, window: '1m' } } }, async () => 'ok')
  await within(app.ready(), 5000, 'ready()')
  t.equal((await app.inject({ url: '/x' })).statusCode, 200, 'fail-open while Redis is absent')
  const started = performance.now()
  await within(app.close(), 5000, 'close()')
  t.comment(`close() took ${(performance.now() - started).toFixed(0)} ms`)
  const after = attempts
  // It tried every 200 ms at most while it reconnected: twice that is enough to see one more.
  await new Promise((resolve) => setTimeout(resolve, 400))
  t.equal(attempts, after, 'quit() could not be sent; disconnect() stopped the reconnecting (no connection attempt since)')
})

test('close with Redis hung (SIGSTOP): held and waiting requests are answered at once, and the plugin\'s close waits for their Redis calls no longer than their timeouts', async (t) => {
  const { server } = await privateRedis(t)
  const redis = new Redis(server.url, RECOMMENDED_OPTIONS)
  redis.on('error', () => {})
  const app = Fastify()
  let pluginClosedAt = 0
  // Registered before the plugin: it runs once the plugin's onClose has returned.
  app.addHook('onClose', async () => { pluginClosedAt = performance.now(); redis.disconnect() })
  await app.register(rateLimit, { redis, prefix: uniquePrefix('hung') })
  const gates = new Map<string, () => void>()
  const starts = new Map<string, number>()
  declareRoutes(app, gates, starts)
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(async () => { server.resume(); for (const open of gates.values()) open(); await app.close() })
  const holder = get(base, '/slot', 'w', 'holder', 'close')
  await waitFor('the holder runs', () => starts.has('holder'))
  const waiter = get(base, '/slot', 'w', 'waiter')
  await waitFor('the waiter waits', () => app.rateLimit.stats().waiting === 1)
  t.equal((await get(base, '/held', 'h')).status, 200)
  const held = [1, 2].map(async () => await get(base, '/held', 'h'))
  await waitFor('two held', () => app.rateLimit.stats().held === 2)
  server.pause()
  // A decision that meets the silence wakes the waiter: its poll is on its way to the hung Redis when close begins.
  t.equal((await app.rateLimit.consume('GET /held', { headers: { 'x-id': 'probe' } })).degraded, true, 'a decision on the hung Redis: degraded')
  const closeAt = performance.now()
  const closing = app.close()
  gates.get('holder')?.()
  const answers = await within(Promise.all([waiter, ...held]), 5000, 'the answers')
  t.same(answers.map((answer) => answer.status), [503, 503, 503], 'answered 503, the waiter whose poll was in flight too (not admitted by onRedisError)')
  t.equal((await holder).status, 200, 'the running request finishes')
  await within(closing, 5000, 'close()')
  const tookMs = pluginClosedAt - closeAt
  t.comment(`the plugin's close took ${tookMs.toFixed(0)} ms with Redis silent (timeout 50 ms)`)
  // The give-backs, the waiter's leave and the holder's release are each abandoned after 50 ms of
  // silence, a slot call tried once more at close: a few hundred ms; 2 s is a hang guard for a loaded machine.
  t.ok(tookMs < 2000, `bounded by the timeouts (${tookMs.toFixed(0)} ms)`)
  t.equal(app.rateLimit.stats().delayAborted, 0, 'nothing counted as given back: Redis never answered')
})

test('a request held or queued by a decision that returns after close began is closed at once; close awaits work added while it waits', async (t) => {
  const holds = new Holds(10)
  holds.closeAll()
  const ends: string[] = []
  holds.hold(60_000, () => { ends.push('turn') }, () => { ends.push('closed') })
  const cancelled = holds.hold(60_000, () => { ends.push('turn 2') }, () => { ends.push('closed 2') })
  cancelled()
  const waiters = new Waiters(60_000, () => undefined)
  await waiters.closeAll()
  waiters.add(['k'], 0, () => { ends.push('poll') }, () => { ends.push('waiter closed') })
  await Promise.resolve()
  t.same(ends, ['closed', 'waiter closed'], 'answered at once, never at a turn or a poll; a cancelled one not at all')
  t.equal(holds.size, 0)
  t.equal(waiters.size, 0)

  const work = new PendingWork()
  const order: string[] = []
  work.add(new Promise<void>((resolve) => setTimeout(() => {
    order.push('first')
    // Started by the first's answer, as a waiter's leave after its poll.
    work.add(new Promise<void>((resolve) => setTimeout(() => { order.push('second'); resolve() }, 10)))
    resolve()
  }, 10)))
  work.add(Promise.reject(new Error('a failure the caller handles')).catch(() => {}))
  await work.settled()
  t.same(order, ['first', 'second'], 'settled() waited for both')
  t.equal(work.size, 0)
})

test('a running request whose client leaves while the server closes: its slot is released before the client closes', async (t) => {
  const server = await getRedis()
  const inspector = createClient(server)
  const prefix = uniquePrefix('leave')
  const redis = new Redis(server.url, RECOMMENDED_OPTIONS)
  redis.on('error', () => {})
  const app = Fastify()
  app.addHook('onClose', async () => { await redis.quit().catch(() => { redis.disconnect() }) })
  await app.register(rateLimit, { redis, prefix })
  let started = false
  app.get('/w', { config: { rateLimit: { concurrency: 1, by: 'header:x-id' } } }, async () => {
    started = true
    await new Promise((resolve) => setTimeout(resolve, 300))
    return 'done'
  })
  const { port } = new URL(await app.listen({ port: 0, host: '127.0.0.1' }))
  cleanUpPrefix(t, inspector, prefix, async () => {})
  const socket = connect(Number(port), '127.0.0.1')
  socket.on('error', () => {})
  socket.write('GET /w HTTP/1.1\r\nHost: x\r\nX-Id: leaver\r\n\r\n')
  await waitFor('the handler runs', () => started)
  const slotKey = (await inspector.keys(`${prefix}*`)).find((key) => key.endsWith('cc')) as string
  t.equal(await inspector.zcard(slotKey), 1, 'the running request holds the slot')
  const closing = app.close()
  setTimeout(() => { socket.destroy() }, 20)
  await within(closing, 5000, 'close()')
  t.equal(await inspector.zcard(slotKey), 0, 'released before close() returned: no slot left for the lease to reclaim')
})

test('close gives back every held turn of a gcra block (latest first: each give-back applies while its turn is the latest)', async (t) => {
  const server = await getRedis()
  const inspector = createClient(server)
  const prefix = uniquePrefix('gcra-close')
  const clients: Redis[] = []
  t.teardown(() => { for (const client of clients) client.disconnect() })
  const build = async (): Promise<FastifyInstance> => {
    const app = Fastify()
    const redis = createClient(server)
    clients.push(redis)
    await app.register(rateLimit, { redis, prefix })
    app.get('/g', { config: { rateLimit: { algorithm: 'gcra', limit: 1, window: '10s', delay: '30s', by: 'header:x-id' } } }, async () => 'ok')
    return app
  }
  const a = await build()
  const b = await build()
  cleanUpPrefix(t, inspector, prefix, async () => { await b.close() })
  const base = await a.listen({ port: 0, host: '127.0.0.1' })
  t.equal((await get(base, '/g', 'g')).status, 200, 'the first admitted now')
  const held = [1, 2, 3].map(async () => await get(base, '/g', 'g'))
  await waitFor('three held', () => a.rateLimit.stats().held === 3)
  await a.close()
  t.same((await Promise.all(held)).map((answer) => answer.status), [503, 503, 503])
  await b.ready()
  const peek = await b.rateLimit.peek('GET /g', { headers: { 'x-id': 'g' } })
  // Only the first admission's turn is left: the next one is about 10 s away, not 40 s (three turns kept).
  t.ok(peek.delayMs !== undefined && peek.delayMs <= 10_000, `the next turn is one interval away (${String(peek.delayMs)} ms), the held turns all given back`)
})

test('the node-redis wiring of docs/clients.md closes with Redis hung: close() is bounded, not held by replies that never come', async (t) => {
  const { server } = await privateRedis(t)
  const hook = codeBlocks().find((block) => block.file === 'docs/clients.md' && block.code.includes('createClient(') && block.code.includes("addHook('onClose'"))
  t.ok(hook?.code.includes('await Promise.race([redis.close(), new Promise((resolve) => setTimeout(resolve, 1000))])') === true && hook.code.includes('if (redis.isOpen) redis.destroy()'), 'the documented hook: a bounded close(), then destroy()')
  const redis = createNodeRedis({ url: server.url, disableOfflineQueue: true, socket: { reconnectStrategy } })
  redis.on('error', () => {})
  await redis.connect()
  const app = Fastify()
  // docs/clients.md's hook, as written there.
  app.addHook('onClose', async () => {
    await Promise.race([redis.close(), new Promise((resolve) => setTimeout(resolve, 1000))])
    if (redis.isOpen) redis.destroy()
  })
  await app.register(rateLimit, { redis, prefix: uniquePrefix('nr-hung') })
  app.get('/held', { config: { rateLimit: { algorithm: 'token-bucket', limit: 1, window: '10s', delay: '60s', by: 'header:x-id' } } }, async () => 'ok')
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => { server.resume() })
  t.equal((await get(base, '/held', 'h')).status, 200)
  const held = [1, 2].map(async () => await get(base, '/held', 'h'))
  await waitFor('two held', () => app.rateLimit.stats().held === 2)
  server.pause()
  const closeAt = performance.now()
  await within(app.close(), 5000, 'close() with Redis hung')
  const tookMs = performance.now() - closeAt
  server.resume()
  t.same((await Promise.all(held)).map((answer) => answer.status), [503, 503])
  t.ok(tookMs < 3000, `close() took ${tookMs.toFixed(0)} ms: the plugin's bounded give-backs and the hook's 1 s bound`)
})
