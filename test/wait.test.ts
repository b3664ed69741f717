import { test, type Test } from 'tap'
import { performance } from 'node:perf_hooks'
import { Pool, request } from 'undici'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { buildApp, largestWhile, TestClock } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './helpers/redis.js'
import { listeningFleet } from './helpers/fleet.js'
import { startServer, waitFor } from './helpers/topologies.js'

/*
 * `wait` on concurrency blocks (docs/shaping.md): a request with no free slot
 * waits in the fleet's queue for one, in arrival order (Redis TIME), woken by
 * the plugin's own subscriber. Handlers hold their slot until the test opens
 * their gate, so who runs when is the test's choice, not a sleep's; the
 * queue's state is read in Redis. Wake-up latencies are reported (t.comment),
 * never asserted.
 */

interface Fleet {
  bases: string[]
  apps: FastifyInstance[]
  inspector: Redis
  prefix: string
  /** Handler starts, in order: the request's tag, the slots held in Redis at that moment, performance.now(). */
  starts: Array<{ tag: string, held: number, at: number }>
  /** Opens the gate of the running request `tag`: its handler returns. */
  finish: (tag: string) => void
}

async function fleet (t: Test, size: number, block: Record<string, unknown>, options: Record<string, unknown> = {}): Promise<Fleet> {
  const starts: Fleet['starts'] = []
  const gates = new Map<string, () => void>()
  const built = await listeningFleet(t, 'wait', size, async (redis, prefix) => {
    const app = await buildApp({ redis, prefix, user: () => 'one-identity', ...options })
    app.get('/slot', { config: { rateLimit: { by: 'user', ...block } } as never }, async (req) => {
      const tag = String(req.headers['x-tag'])
      const held = await slotsHeld(built.inspector, prefix)
      starts.push({ tag, held, at: performance.now() })
      await new Promise<void>((resolve) => { gates.set(tag, resolve) })
      return { tag, delayMs: req.rateLimit?.delayMs, outcome: req.rateLimit?.outcome }
    })
    return app
  }, () => { for (const open of gates.values()) open() })
  const finish = (tag: string): void => {
    const open = gates.get(tag)
    if (open === undefined) throw new Error(`${tag} is not running`)
    gates.delete(tag)
    open()
  }
  return { ...built, starts, finish }
}

/** The concurrency block's keys: its slots (…cc) and its queue (…ccq). */
async function keyOf (inspector: Redis, prefix: string, suffix: string): Promise<string | undefined> {
  return (await inspector.keys(`${prefix}*`)).find((key) => key.endsWith(suffix))
}

async function slotsHeld (inspector: Redis, prefix: string): Promise<number> {
  const key = await keyOf(inspector, prefix, 'cc')
  return key === undefined ? 0 : await inspector.zcount(key, `(${Date.now()}`, '+inf')
}

async function queued (inspector: Redis, prefix: string): Promise<number> {
  const key = await keyOf(inspector, prefix, 'ccq')
  return key === undefined ? 0 : await inspector.zcard(key)
}

interface Answer { tag: string, status: number, delayMs: number, outcome: string | undefined, retryAfter: string | undefined }

async function send (base: string, tag: string, signal?: AbortSignal): Promise<Answer> {
  const res = await request(`${base}/slot`, { headers: { 'x-tag': tag }, signal })
  const body = await res.body.text()
  const json = res.statusCode === 200 ? JSON.parse(body) as { delayMs: number, outcome: string } : undefined
  return { tag, status: res.statusCode, delayMs: json?.delayMs ?? -1, outcome: json?.outcome, retryAfter: res.headers['retry-after'] as string | undefined }
}

test('concurrency 2, wait 5s, six slow requests over 2 instances: all admitted, never more than 2 running, waiters admitted in arrival order', async (t) => {
  const { bases, apps, inspector, prefix, starts, finish } = await fleet(t, 2, { concurrency: 2, wait: '5s' })
  const tags = ['r0', 'r1', 'r2', 'r3', 'r4', 'r5']
  const answers: Array<Promise<Answer>> = []
  for (const [i, tag] of tags.entries()) {
    answers.push(send(bases[i % 2] as string, tag))
    // Arrival order is the order the queue saw them: each waits for its place before the next is sent.
    if (i < 2) await waitFor(`${tag} running`, () => starts.length === i + 1)
    else await waitFor(`${tag} queued`, async () => await queued(inspector, prefix) === i - 1)
  }
  t.equal(apps.reduce((sum, app) => sum + app.rateLimit.stats().waiting, 0), 4, 'four wait, spread over both instances')
  const latencies: number[] = []
  for (let k = 0; k < tags.length; k++) {
    const running = starts.length
    const releasedAt = performance.now()
    finish(tags[k] as string)
    if (running < tags.length) {
      await waitFor(`the next waiter starts after ${tags[k] as string}`, () => starts.length === running + 1)
      latencies.push((starts[running]?.at ?? 0) - releasedAt)
    }
  }
  const done = await Promise.all(answers)
  t.same(done.map((a) => a.status), [200, 200, 200, 200, 200, 200], 'all six admitted')
  t.same(starts.map((s) => s.tag), tags, 'handlers started in arrival order, across both instances')
  t.ok(starts.every((s) => s.held <= 2), `never more than 2 slots held in Redis when a handler started (${starts.map((s) => s.held).join(', ')})`)
  t.same(done.map((a) => a.outcome), ['allowed', 'allowed', 'delayed', 'delayed', 'delayed', 'delayed'], 'the waiters were admitted as delayed')
  t.ok(done.slice(2).every((a) => a.delayMs > 0), 'request.rateLimit.delayMs says how long each waited')
  t.equal(await queued(inspector, prefix), 0, 'the queue is empty')
  const sorted = [...latencies.slice(0, 4)].sort((a, b) => a - b)
  t.comment(`release to next handler start (the other instance half the time): ${sorted.map((ms) => ms.toFixed(1)).join(', ')} ms`)
})

test('a wait shorter than the handler: the waiter is refused with a 429 when its wait runs out, and leaves the queue', async (t) => {
  const { bases, apps, inspector, prefix, starts, finish } = await fleet(t, 2, { concurrency: 1, wait: 300 })
  const first = send(bases[0] as string, 'slow')
  await waitFor('the slow request runs', () => starts.length === 1)
  const startedAt = performance.now()
  const waiter = await send(bases[1] as string, 'late')
  const waitedMs = performance.now() - startedAt
  t.equal(waiter.status, 429, 'refused when its wait ran out')
  t.equal(waiter.retryAfter, '1', 'Retry-After as a slot refusal')
  t.ok(waitedMs >= 290, `it waited out its wait first (${waitedMs.toFixed(0)} ms)`)
  t.equal(apps[1]?.rateLimit.stats().waitExpired, 1, 'counted waitExpired')
  t.equal(apps[1]?.rateLimit.stats().limited, 1, 'and limited')
  await waitFor('the waiter left the queue', async () => await queued(inspector, prefix) === 0)
  finish('slow')
  t.equal((await first).status, 200)
})

test('a waiter whose client goes away leaves the queue; the next waiter keeps its place', async (t) => {
  const { bases, apps, inspector, prefix, starts, finish } = await fleet(t, 1, { concurrency: 1, wait: '5s' })
  const base = bases[0] as string
  const first = send(base, 'a')
  await waitFor('a runs', () => starts.length === 1)
  const controller = new AbortController()
  const gone = send(base, 'gone', controller.signal).catch((error: unknown) => error)
  await waitFor('gone queued', async () => await queued(inspector, prefix) === 1)
  const next = send(base, 'next')
  await waitFor('next queued', async () => await queued(inspector, prefix) === 2)
  const t0 = performance.now()
  controller.abort()
  await gone
  t.comment(`abort settled in ${(performance.now() - t0).toFixed(0)} ms`)
  await waitFor('the aborted waiter left the queue', async () => await queued(inspector, prefix) === 1)
  t.comment(`left in ${(performance.now() - t0).toFixed(0)} ms`)
  t.equal(apps[0]?.rateLimit.stats().delayAborted, 1, 'counted delayAborted')
  finish('a')
  await waitFor('next runs', () => starts.length === 2)
  t.equal(starts[1]?.tag, 'next', 'the slot went to the waiter still there')
  finish('next')
  t.same([(await first).status, (await next).status], [200, 200])
  t.equal(apps[0]?.rateLimit.stats().waiting, 0, 'no waiter left')
})

test('an instance SIGKILLed with waiters (lease 2s): they drop out after their lease and the next waiter is served', async (t) => {
  const server = await getRedis()
  t.ok(server.port !== undefined)
  const { bases, inspector, prefix, starts, finish } = await fleet(t, 1, { concurrency: 1, wait: '20s' }, { lease: '2s', user: () => 'waiter' })
  const holder = send(bases[0] as string, 'holder')
  await waitFor('the holder runs', () => starts.length === 1)
  const { spawnOwned } = await import('./helpers/processes.js')
  const child = spawnOwned(process.execPath, ['--import', 'tsx', new URL('./helpers/waiter-child.ts', import.meta.url).pathname, String(server.port), prefix], { stdio: ['ignore', 'pipe', 'inherit'] })
  const said = await new Promise<string>((resolve) => { child.stdout?.once('data', (data: Buffer) => { resolve(String(data).trim()) }) })
  t.equal(said, 'queued 3', 'the child has 3 waiters in the queue')
  child.kill('SIGKILL')
  const last = send(bases[0] as string, 'after')
  await waitFor('after queued behind the dead waiters', async () => await queued(inspector, prefix) === 4)
  const releasedAt = performance.now()
  finish('holder')
  await waitFor('after runs', () => starts.length === 2, 8000)
  const tookMs = (starts[1]?.at ?? 0) - releasedAt
  t.equal(starts[1]?.tag, 'after', 'the live waiter was served')
  t.ok(tookMs < 5000, `once the dead waiters' leases lapsed (${tookMs.toFixed(0)} ms after the release)`)
  t.equal(await queued(inspector, prefix), 0, 'the dead waiters are gone from the queue')
  finish('after')
  t.same([(await holder).status, (await last).status], [200, 200])
})

test('the memory store: the same queue in one process', async (t) => {
  const app = await buildApp({ store: 'memory', user: () => 'one' })
  t.teardown(async () => { await app.close() })
  const gates: Array<() => void> = []
  const order: string[] = []
  app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '5s', by: 'user' } } }, async (req) => {
    order.push(String(req.headers['x-tag']))
    await new Promise<void>((resolve) => { gates.push(resolve) })
    return { delayMs: req.rateLimit?.delayMs }
  })
  await app.ready()
  const replies = []
  for (const tag of ['a', 'b', 'c']) {
    replies.push(app.inject({ url: '/slot', headers: { 'x-tag': tag } }))
    await waitFor(`${tag} in`, () => order.length + app.rateLimit.stats().waiting === replies.length)
  }
  for (let k = 0; k < 3; k++) {
    await waitFor(`handler ${k} runs`, () => gates.length === 1 && order.length === k + 1)
    gates.shift()?.()
  }
  const done = await Promise.all(replies)
  t.same(done.map((r) => r.statusCode), [200, 200, 200], 'all admitted')
  t.same(order, ['a', 'b', 'c'], 'in arrival order')
  t.equal(app.rateLimit.stats().delayed, 2, 'two waited')
})

test('acquire() honours wait: the second call resolves when the first releases', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('wacq')
  const redis = createClient(server)
  cleanUpPrefix(t, redis, prefix, async () => { await app?.close() })
  const app = await buildApp({ redis, prefix, user: () => undefined, policies: { workers: { concurrency: 1, wait: '5s', by: 'user' } } })
  await app.ready()
  const first = await app.rateLimit.acquire('workers', { user: 'job' })
  t.equal(first.allowed, true)
  let resolved = false
  const second = app.rateLimit.acquire('workers', { user: 'job' }).then((slot) => { resolved = true; return slot })
  await waitFor('the second waits', () => app.rateLimit.stats().waiting === 1)
  t.equal(resolved, false, 'not before the release')
  first.release()
  const slot = await second
  t.equal(slot.allowed, true, 'admitted once the slot was released')
  t.ok(slot.delayMs > 0, 'with the time it waited')
  slot.release()
  t.equal((await app.rateLimit.acquire('workers', { user: 'job' })).allowed, true)
})

test('Redis going away while requests wait: each waiter is answered by onRedisError at once, not when its wait runs out', async (t) => {
  const own = await startServer()
  t.teardown(async () => { await own.stop() })
  const prefix = uniquePrefix('wdown')
  const { Redis: Client } = await import('ioredis')
  const redis = new Client({ port: own.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0 })
  redis.on('error', () => {})
  await new Promise((resolve) => redis.once('ready', resolve))
  const app = await buildApp({ redis, prefix, user: () => 'one' })
  t.teardown(async () => { await app.close(); redis.disconnect() })
  let open: () => void = () => {}
  app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '20s', by: 'user', onRedisError: 'closed' } } }, async () => {
    await new Promise<void>((resolve) => { open = resolve })
    return { ok: true }
  })
  await app.ready()
  const holder = app.inject({ url: '/slot' })
  await waitFor('the holder runs', () => app.rateLimit.stats().allowed === 1)
  const waiter = app.inject({ url: '/slot' })
  await waitFor('the waiter waits', () => app.rateLimit.stats().waiting === 1)
  const stoppedAt = performance.now()
  await own.stop()
  const answer = await waiter
  const tookMs = performance.now() - stoppedAt
  t.equal(answer.statusCode, 503, 'onRedisError closed: 503')
  t.ok(tookMs < 3000, `answered ${tookMs.toFixed(0)} ms after Redis went away (its wait was 20 s)`)
  open()
  await holder
})

test('wait with the route’s other blocks: nothing is charged while a request waits; a rate refusal is not queued; past maxDelayed a waiter is refused at once; close() answers waiters 503', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('wmix')
  const redis = createClient(server)
  let app: FastifyInstance | undefined
  cleanUpPrefix(t, redis, prefix, async () => { await app?.close() })
  app = await buildApp({ redis, prefix, user: () => 'one', maxDelayed: 2 })
  const gates: Array<() => void> = []
  app.get('/mixed', {
    config: { rateLimit: [{ concurrency: 1, wait: '5s', by: 'user', name: 'slot' }, { algorithm: 'fixed-window', limit: 3, window: '1h', by: 'user', name: 'hourly' }] }
  }, async () => {
    await new Promise<void>((resolve) => { gates.push(resolve) })
    return { ok: true }
  })
  await app.ready()
  const a = app.inject({ url: '/mixed' })
  await waitFor('a runs', () => gates.length === 1)
  const b = app.inject({ url: '/mixed' })
  await waitFor('b waits', () => app?.rateLimit.stats().waiting === 1)
  const c = app.inject({ url: '/mixed' })
  await waitFor('c waits', () => app?.rateLimit.stats().waiting === 2)
  t.equal((await app.inject({ url: '/mixed' })).statusCode, 429, 'past maxDelayed (2 waiting): refused at once, joins no queue')
  t.equal(app.rateLimit.stats().undelayed, 1, 'counted undelayed')
  t.equal(await queued(redis, prefix), 2, 'two in the queue')
  const hourly = await app.rateLimit.peek('GET /mixed', { user: 'one' })
  t.equal(hourly.policies.find((p) => p.policy === 'hourly')?.remaining, 2, 'the hourly block charged a alone: the waiters are charged nothing while they wait')
  gates.shift()?.()
  t.equal((await a).statusCode, 200)
  await waitFor('b runs', () => gates.length === 1)
  gates.shift()?.()
  t.equal((await b).statusCode, 200, 'b admitted after its wait')
  await waitFor('c runs', () => gates.length === 1)
  // The hourly block has 1 unit left, c holds it: the next request is refused by the rate block, not queued.
  const d = await app.inject({ url: '/mixed' })
  t.equal(d.statusCode, 429, 'a rate refusal while the slot is busy: refused at once')
  t.ok(d.json<{ 'violated-policies': string[] }>()['violated-policies'].includes('hourly'), 'by the hourly block (the busy slot is named too)')
  t.equal(await queued(redis, prefix), 0, 'and it never joined the queue')
  gates.shift()?.()
  t.equal((await c).statusCode, 200)
  await app.rateLimit.reset('GET /mixed', { user: 'one' })
  // close() with a waiter: answered 503 through the refusal path, not left hanging.
  const e = app.inject({ url: '/mixed' })
  await waitFor('e runs', () => gates.length === 1)
  const f = app.inject({ url: '/mixed' })
  await waitFor('f waits', () => app?.rateLimit.stats().waiting === 1)
  const closing = app.close()
  const answer = await f
  t.equal(answer.statusCode, 503, 'the waiter is answered 503 at close')
  t.equal(answer.headers['retry-after'], '1')
  gates.shift()?.()
  t.equal((await e).statusCode, 200, 'the running request finishes')
  await closing
  app = undefined
})

/**
 * 40 requests at once on concurrency 1, wait 5s, maxDelayed 5 (each handler takes 100 ms): the waiting
 * count read at every event-loop turn, and the queue's entries in Redis (`queue`) read back to back,
 * while the burst is decided and served.
 */
async function waitBurst (t: Test, app: FastifyInstance, send: () => Promise<number>, queue: () => Promise<number>): Promise<void> {
  const undelayed = app.rateLimit.stats().undelayed
  const run = { done: false }
  let queuedMost = 0
  const reading = (async () => {
    while (!run.done) {
      queuedMost = Math.max(queuedMost, await queue())
      await new Promise((resolve) => setImmediate(resolve))
    }
  })()
  const { result, largest, reads } = await largestWhile(Promise.all(Array.from({ length: 40 }, send)), () => app.rateLimit.stats().waiting)
  run.done = true
  await reading
  const admitted = result.filter((status) => status === 200).length
  const refused = result.filter((status) => status === 429).length
  t.ok(largest <= 5, `waiting never above maxDelayed 5 (largest ${largest} over ${reads} event-loop turns)`)
  t.ok(queuedMost <= 5, `the slot's queue in the store never above 5 entries (largest ${queuedMost})`)
  t.equal(admitted + refused, 40, 'each admitted or refused 429')
  t.ok(admitted >= 2 && admitted <= 6, `the first and those that waited were admitted (${admitted})`)
  t.equal(app.rateLimit.stats().undelayed - undelayed, refused, 'every refusal was decided without wait (undelayed): it joined no queue')
  t.equal(await queue(), 0, 'the queue is empty once the burst is served')
  t.equal(app.rateLimit.stats().waiting, 0)
}

test('maxDelayed counts decisions in flight: 40 requests at once on a busy slot (inject, HTTP, the memory store) never leave more than 5 waiting or 5 in the queue', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('wburst')
  const redis = createClient(server)
  const apps: FastifyInstance[] = []
  const pools: Pool[] = []
  cleanUpPrefix(t, redis, prefix, async () => {
    for (const pool of pools) await pool.close()
    for (const app of apps) await app.close()
  })
  const build = async (options: Record<string, unknown>): Promise<FastifyInstance> => {
    const app = await buildApp({ user: (req) => req.headers['x-user'] as string | undefined, maxDelayed: 5, ...options })
    apps.push(app)
    app.get('/slot', { config: { rateLimit: { concurrency: 1, wait: '5s', by: 'user' } } }, async () => {
      await new Promise((resolve) => setTimeout(resolve, 100))
      return { ok: true }
    })
    return app
  }
  const app = await build({ redis, prefix })
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  // Over HTTP the 40 go out on 40 open connections, so they arrive together (a 404 opened each).
  const pool = new Pool(base, { connections: 40 })
  pools.push(pool)
  await Promise.all(Array.from({ length: 40 }, async () => await (await pool.request({ path: '/warm', method: 'GET' })).body.dump()))
  const inRedis = async (): Promise<number> => {
    const keys = await redis.keys(`${prefix}*ccq`)
    return keys.length === 0 ? 0 : (await Promise.all(keys.map(async (key) => await redis.zcard(key)))).reduce((a, b) => a + b, 0)
  }
  t.comment('inject')
  await waitBurst(t, app, async () => (await app.inject({ url: '/slot', headers: { 'x-user': 'inject' } })).statusCode, inRedis)
  t.comment('HTTP')
  await waitBurst(t, app, async () => {
    const res = await pool.request({ path: '/slot', method: 'GET', headers: { 'x-user': 'http' } })
    await res.body.dump()
    return res.statusCode
  }, inRedis)
  t.comment('the memory store')
  const memory = await build({ store: 'memory' })
  await waitBurst(t, memory, async () => (await memory.inject({ url: '/slot', headers: { 'x-user': 'memory' } })).statusCode, async () => memory.rateLimit.stats().waiting)
})

test('a waiter whose slot comes with a turn to hold carries its place under maxDelayed from the queue to the hold, and gives it back after', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('wturn')
  const redis = createClient(server)
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix, clock: clock.read, timeout: 5000, user: () => 'one', maxDelayed: 1 })
  cleanUpPrefix(t, redis, prefix, async () => { await app.close() })
  const gates: Array<() => void> = []
  app.get('/both', {
    config: { rateLimit: [{ concurrency: 1, wait: '5s', by: 'user' }, { algorithm: 'gcra', limit: 1, window: '1s', delay: '3s', by: 'user' }] }
  }, async (req) => {
    await new Promise<void>((resolve) => { gates.push(resolve) })
    return { delayMs: req.rateLimit?.delayMs }
  })
  await app.ready()
  const a = app.inject({ url: '/both' })
  await waitFor('a runs', () => gates.length === 1)
  const b = app.inject({ url: '/both' })
  await waitFor('b waits', () => app.rateLimit.stats().waiting === 1)
  // The slot comes with b's gcra turn 1 s ahead (the clock is frozen): b leaves the queue to be held.
  const stats = (): number => app.rateLimit.stats().held + app.rateLimit.stats().waiting
  const { largest } = await largestWhile((async () => {
    gates.shift()?.()
    await a
    await waitFor('b runs', () => gates.length === 1)
  })(), stats)
  t.ok(largest <= 1, `held + waiting never above maxDelayed 1 (largest ${largest})`)
  t.equal(app.rateLimit.stats().delayed, 1, 'b was admitted after its wait and its turn')
  gates.shift()?.()
  t.ok((await b).json<{ delayMs: number }>().delayMs >= 1000, 'b waited for the slot and was held for its turn')
  t.equal(stats(), 0, 'nothing held or waiting')
  // The place came back: the next request may still be held (a turn 2 s ahead), not decided undelayed.
  const c = app.inject({ url: '/both' })
  await waitFor('c runs', () => gates.length === 1)
  gates.shift()?.()
  t.equal((await c).json<{ delayMs: number }>().delayMs, 2000, 'held for its turn')
  t.equal(app.rateLimit.stats().undelayed, 0, 'no decision went without a place')
})

test('wait at startup: a clear error for each wrong use', async (t) => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ limit: 5, window: '1s', wait: '1s' }, /wait.*only applies to a concurrency block/],
    [{ concurrency: 2, delay: '1s' }, /delay.*a concurrency block waits for a free slot with `wait`/],
    [{ concurrency: 2, wait: '61s' }, /wait/],
    [{ concurrency: 2, wait: 'soon' }, /wait.*duration string/],
    [{ concurrency: 2, wait: '1s', mode: 'shadow' }, /wait.*shadow/]
  ]
  for (const [block, message] of cases) {
    const app = await buildApp({ store: 'memory' })
    await t.rejects(async () => {
      app.get('/x', { config: { rateLimit: block as never } }, async () => 'ok')
      await app.ready()
    }, { code: 'FST_RRL_INVALID_BLOCK', message }, JSON.stringify(block))
    await app.close().catch(() => {})
  }
})

test('a slot freed without an announcement (a holder\u2019s lease lapsed, a lost message): the waiter finds it by its poll (1 s apart)', async (t) => {
  const { bases, apps, inspector, prefix, starts, finish } = await fleet(t, 1, { concurrency: 1, wait: '5s' })
  const holder = send(bases[0] as string, 'holder')
  await waitFor('the holder runs', () => starts.length === 1)
  const waiter = send(bases[0] as string, 'waiter')
  await waitFor('the waiter waits', () => apps[0]?.rateLimit.stats().waiting === 1)
  // The holder's slot goes as a lapsed lease would: straight from Redis, nothing published.
  const key = await keyOf(inspector, prefix, 'cc') as string
  const freedAt = performance.now()
  t.equal(await inspector.del(key), 1, 'the slot set removed behind the plugin\u2019s back')
  await waitFor('the waiter runs', () => starts.length === 2, 3000, 5)
  const tookMs = (starts[1]?.at ?? 0) - freedAt
  t.comment(`admitted by its poll ${tookMs.toFixed(0)} ms after the slot was freed (polls 1 s apart)`)
  finish('holder')
  finish('waiter')
  const answer = await waiter
  t.same([(await holder).status, answer.status, answer.outcome], [200, 200, 'delayed'], 'admitted within its 5 s wait, with no message to wake it')
})
