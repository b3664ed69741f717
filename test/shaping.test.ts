import { test, type Test } from 'tap'
import { performance } from 'node:perf_hooks'
import { Pool, request } from 'undici'
import type { FastifyInstance } from 'fastify'
import type { Redis } from 'ioredis'
import { buildApp, largestWhile, setupStoreApp, TestClock } from './helpers/app.js'
import { readState } from './helpers/redis.js'
import { cleanUpPrefix, createClient, getRedis, uniquePrefix } from './helpers/redis.js'
import { listeningFleet } from './helpers/fleet.js'

/*
 * Shaping with `delay` (docs/shaping.md): several instances on one Redis and
 * one test clock, so the turns the script reserves are exact (the clock does
 * not move while the fleet decides: each request's wait is its turn). The
 * holds themselves are real timers: their measured start times are reported
 * (t.comment), and only their order is asserted.
 */

const USER = { 'x-user': 'one-identity' }

interface Fleet {
  bases: string[]
  apps: FastifyInstance[]
  clock: TestClock
  inspector: Redis
  prefix: string
  /** Handler starts: [delayMs the request was admitted with, performance.now()]. */
  starts: Array<[number, number]>
}

async function fleet (t: Test, size: number, block: Record<string, unknown> | Array<Record<string, unknown>>, options: Record<string, unknown> = {}): Promise<Fleet> {
  const clock = new TestClock()
  const starts: Fleet['starts'] = []
  const built = await listeningFleet(t, 'shape', size, async (redis, prefix) => {
    // Holds are timed on this machine; the store's 50 ms default timeout is not under test here.
    const app = await buildApp({ redis, prefix, clock: clock.read, timeout: 5000, user: (req) => req.headers['x-user'] as string | undefined, ...options })
    app.get('/shaped', { config: { rateLimit: Array.isArray(block) ? block : { by: 'user', ...block } } as never }, async (req) => {
      starts.push([req.rateLimit?.delayMs ?? -1, performance.now()])
      return { delayMs: req.rateLimit?.delayMs, outcome: req.rateLimit?.outcome }
    })
    return app
  })
  return { ...built, clock, starts }
}

/** One request; its status, the delay it was admitted with (-1 when refused) and when its answer came. */
async function shaped (base: string, signal?: AbortSignal): Promise<{ status: number, delayMs: number, at: number, retryAfter: string | undefined }> {
  const res = await request(`${base}/shaped`, { headers: USER, signal })
  const body = await res.body.text()
  const delayMs = res.statusCode === 200 ? (JSON.parse(body) as { delayMs: number }).delayMs : -1
  return { status: res.statusCode, delayMs, at: performance.now(), retryAfter: res.headers['retry-after'] as string | undefined }
}

function spread (errors: number[]): string {
  const sorted = [...errors].sort((a, b) => a - b)
  const at = (q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0
  return `p50 ${at(0.5).toFixed(1)} ms, p95 ${at(0.95).toFixed(1)} ms, max ${at(1).toFixed(1)} ms`
}

test('gcra 10/s, delay 3s, 3 instances: 30 concurrent requests all admitted at turns one emission interval apart; of 40 more, those past 3 s are refused at once, the rest admitted in order', async (t) => {
  const { bases, apps, starts } = await fleet(t, 3, { algorithm: 'gcra', limit: 10, window: '1s', delay: '3s' })
  const startedAt = performance.now()
  const first = await Promise.all(Array.from({ length: 30 }, async (_, i) => await shaped(bases[i % 3] as string)))
  t.same(first.map((r) => r.status), Array.from({ length: 30 }, () => 200), 'all 30 admitted, none refused')
  const waits = first.map((r) => r.delayMs).sort((a, b) => a - b)
  t.same(waits, [...Array.from({ length: 10 }, () => 0), ...Array.from({ length: 20 }, (_, k) => (k + 1) * 100)], 'the burst of 10 at once, then turns exactly 100 ms (one emission interval) apart')
  // The turns are on the frozen test clock; measured from the last handler that started at once.
  const origin = Math.max(...starts.filter(([d]) => d === 0).map(([, at]) => at))
  const errors = starts.filter(([d]) => d > 0).map(([d, at]) => at - origin - d)
  t.comment(`30 requests (first decision ${(origin - startedAt).toFixed(0)} ms after the start): handler start minus reserved turn: ${spread(errors)}`)

  // The state now reserves up to 2000 ms ahead; 40 more: turns 2100…3000 fit in delay, the 30 after are refused.
  starts.length = 0
  const more = await Promise.all(Array.from({ length: 40 }, async (_, i) => await shaped(bases[i % 3] as string)))
  const admitted = more.filter((r) => r.status === 200)
  const refused = more.filter((r) => r.status === 429)
  t.equal(admitted.length, 10, '10 more fit within the 3 s delay')
  t.equal(refused.length, 30, 'the 30 whose turn is past 3 s are refused')
  t.same(admitted.map((r) => r.delayMs).sort((a, b) => a - b), Array.from({ length: 10 }, (_, k) => 2100 + k * 100), 'at turns 2100 … 3000 ms')
  const firstAdmittedAt = Math.min(...admitted.map((r) => r.at))
  t.ok(refused.every((r) => r.at < firstAdmittedAt), 'every refusal was answered before the first held request of its batch went on: refused at once, not after waiting')
  t.ok(refused.every((r) => r.retryAfter === '1'), 'a refusal retries when its turn would be within the delay (Retry-After 1)')
  const order = starts.map(([d]) => d)
  t.same(order, [...order].sort((a, b) => a - b), 'handlers started in the order of their turns, across the instances')
  for (const app of apps) t.equal(app.rateLimit.stats().held, 0, 'nothing held once every turn came')
  t.equal(apps.reduce((sum, app) => sum + app.rateLimit.stats().delayed, 0), 30, 'stats: 20 + 10 delayed')
})

test('token-bucket 10/s, delay 3s: turns one interval apart after the burst, the level down to -(rate × delay) and no further', async (t) => {
  const { bases } = await fleet(t, 2, { algorithm: 'token-bucket', limit: 10, window: '1s', delay: '3s' })
  const results = await Promise.all(Array.from({ length: 45 }, async (_, i) => await shaped(bases[i % 2] as string)))
  const waits = results.filter((r) => r.status === 200).map((r) => r.delayMs).sort((a, b) => a - b)
  t.same(waits, [...Array.from({ length: 10 }, () => 0), ...Array.from({ length: 30 }, (_, k) => (k + 1) * 100)], '10 at once, 30 at turns 100 … 3000 ms')
  t.equal(results.filter((r) => r.status === 429).length, 5, 'the 5 past 3 s refused')
})

/** Takes the burst (limit 10) at once, then holds requests at 100, 200, … ms; returns their abort controllers and answers. */
async function holdSome (f: Fleet, count: number): Promise<Array<{ abort: AbortController, answer: Promise<Awaited<ReturnType<typeof shaped>> | 'aborted'> }>> {
  const base = f.bases[0] as string
  for (let i = 0; i < 10; i++) t0(await shaped(base))
  const held = []
  for (let i = 0; i < count; i++) {
    const abort = new AbortController()
    held.push({ abort, answer: shaped(base, abort.signal).catch(() => 'aborted' as const) })
    // One at a time, so their turns are in this order.
    await waitUntil(() => f.apps.reduce((sum, app) => sum + app.rateLimit.stats().held, 0) === i + 1)
  }
  return held
}

function t0 (r: { status: number }): void {
  if (r.status !== 200) throw new Error(`the burst was refused (${r.status})`)
}

async function waitUntil (check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 5))
  if (!check()) throw new Error('condition not reached within 2.5 s')
}

const heldNow = (f: Fleet): number => f.apps.reduce((sum, app) => sum + app.rateLimit.stats().held, 0)

test('gcra, a held request aborted by its client: the latest gives its turn back to the next caller; one in the middle gives nothing back, later ones keep their turns', async (t) => {
  const f = await fleet(t, 1, { algorithm: 'gcra', limit: 10, window: '1s', delay: '3s' })
  const [a, b] = await holdSome(f, 2) as [Awaited<ReturnType<typeof holdSome>>[0], Awaited<ReturnType<typeof holdSome>>[0]]
  b.abort.abort()
  t.equal(await b.answer, 'aborted')
  await waitUntil(() => f.apps[0]?.rateLimit.stats().delayAborted === 1)
  const c = shaped(f.bases[0] as string)
  await waitUntil(() => heldNow(f) === 2)
  // a (100 ms) and c hold; c took b's turn (200 ms): the latest's turn was given back.
  a.abort.abort()
  t.equal(await a.answer, 'aborted')
  await waitUntil(() => f.apps[0]?.rateLimit.stats().delayAborted === 2)
  const d = await shaped(f.bases[0] as string)
  t.equal((await c).delayMs, 200, 'the next caller got the aborted latest turn (200 ms)')
  t.equal(d.delayMs, 300, 'an abort in the middle (a, 100 ms) gave nothing back: the next turn is after c\'s')
  t.equal(heldNow(f), 0, 'nothing held')
})

test('token-bucket, a held request in the middle aborted: its units return to the level, later held requests keep their turns, a later caller takes the freed capacity', async (t) => {
  const f = await fleet(t, 1, { algorithm: 'token-bucket', limit: 10, window: '1s', delay: '3s' })
  const [a, b] = await holdSome(f, 2) as [Awaited<ReturnType<typeof holdSome>>[0], Awaited<ReturnType<typeof holdSome>>[0]]
  a.abort.abort()
  t.equal(await a.answer, 'aborted')
  await waitUntil(() => f.apps[0]?.rateLimit.stats().delayAborted === 1)
  const c = await shaped(f.bases[0] as string)
  const bAnswer = await b.answer
  t.equal(bAnswer === 'aborted' ? -1 : bAnswer.delayMs, 200, 'b kept its turn (200 ms)')
  t.equal(c.delayMs, 200, 'the later caller took the freed unit: the level is what it was after b, so its turn is b\'s (docs/shaping.md)')
})

test('maxDelayed: past it this instance decides without delay, reserves no turn, counts undelayed; the held count returns to zero', async (t) => {
  const f = await fleet(t, 1, { algorithm: 'gcra', limit: 10, window: '1s', delay: '3s' }, { maxDelayed: 2 })
  const base = f.bases[0] as string
  for (let i = 0; i < 10; i++) t0(await shaped(base))
  const held = [shaped(base), shaped(base)]
  await waitUntil(() => heldNow(f) === 2)
  const over = await Promise.all(Array.from({ length: 3 }, async () => await shaped(base)))
  t.same(over.map((r) => r.status), [429, 429, 429], 'refused: only what fits now is admitted')
  t.ok(over.every((r) => r.retryAfter === '1'), 'Retry-After: when it would fit now')
  const app = f.apps[0] as FastifyInstance
  t.equal(app.rateLimit.stats().undelayed, 3, 'counted')
  t.same((await Promise.all(held)).map((r) => r.delayMs), [100, 200])
  t.equal(app.rateLimit.stats().held, 0, 'held returns to zero')
  t.equal((await shaped(base)).delayMs, 300, 'the refusals reserved nothing: the next turn follows the two held')
})

/**
 * A burst of 60 on gcra 10/s with a 30 s delay and maxDelayed 5, the burst of 10 taken first: the
 * held count read at every event-loop turn while it is decided. Each answer: its status and delay.
 */
async function burstAtBound (app: FastifyInstance, send: () => Promise<{ status: number, delayMs: number }>): Promise<{ answers: Array<{ status: number, delayMs: number }>, largest: number, reads: number }> {
  for (let i = 0; i < 10; i++) t0(await send())
  const { result, largest, reads } = await largestWhile(Promise.all(Array.from({ length: 60 }, send)), () => app.rateLimit.stats().held)
  return { answers: result, largest, reads }
}

/** What a burst at the bound must show, whichever way it came in: never more held than the bound, the rest decided undelayed and refused at once. */
function checkBurst (t: Test, app: FastifyInstance, { answers, largest, reads }: Awaited<ReturnType<typeof burstAtBound>>, exact: boolean): void {
  const held = answers.filter((a) => a.status === 200)
  const refused = answers.filter((a) => a.status === 429)
  t.ok(largest <= 5, `held never above maxDelayed 5 (largest ${largest} over ${reads} event-loop turns)`)
  t.ok(largest >= 1, 'and requests were held')
  t.equal(held.length + refused.length, 60, 'each answered 200 at its turn or 429')
  t.ok(held.every((a) => a.delayMs > 0), 'nothing fitted now: every admitted one was held for a turn')
  t.equal(app.rateLimit.stats().undelayed, refused.length, 'every refusal was decided without delay (undelayed), none for a turn past the 30 s delay')
  if (exact) t.same(held.map((a) => a.delayMs).sort((a, b) => a - b), [100, 200, 300, 400, 500], 'in one event-loop turn: the first 5 took the places, the other 55 were decided undelayed')
  t.equal(app.rateLimit.stats().held, 0, 'held returns to zero')
}

test('maxDelayed counts decisions in flight: 60 requests at once (inject, HTTP) never hold more than 5; the others are decided undelayed and reserve nothing in Redis', async (t) => {
  for (const transport of ['inject', 'http'] as const) {
    const f = await fleet(t, 1, { algorithm: 'gcra', limit: 10, window: '1s', delay: '30s' }, { maxDelayed: 5 })
    const app = f.apps[0] as FastifyInstance
    // Over HTTP the 60 go out on 60 open connections, so they arrive together (a 404 opened each).
    const pool = new Pool(f.bases[0] as string, { connections: 60 })
    t.teardown(async () => { await pool.close() })
    if (transport === 'http') await Promise.all(Array.from({ length: 60 }, async () => await (await pool.request({ path: '/warm', method: 'GET' })).body.dump()))
    const send = async (): Promise<{ status: number, delayMs: number }> => {
      if (transport === 'http') {
        const res = await pool.request({ path: '/shaped', method: 'GET', headers: USER })
        const body = await res.body.text()
        return { status: res.statusCode, delayMs: res.statusCode === 200 ? (JSON.parse(body) as { delayMs: number }).delayMs : -1 }
      }
      const res = await app.inject({ url: '/shaped', headers: USER })
      return { status: res.statusCode, delayMs: res.statusCode === 200 ? res.json<{ delayMs: number }>().delayMs : -1 }
    }
    const burst = burstAtBound(app, send)
    // Read Redis as soon as the 60 are decided (its key expires by the real clock): one turn reserved per held request.
    await waitUntil(() => app.rateLimit.stats().delayed + app.rateLimit.stats().limited >= 60)
    const keys = await f.inspector.keys(`${f.prefix}:*`)
    const states = (await Promise.all(keys.map(async (key) => await readState(f.inspector, key)))).filter((state) => state?.length === 2)
    const result = await burst
    t.comment(`${transport}: ${result.answers.filter((a) => a.status === 200).length} held, ${app.rateLimit.stats().undelayed} undelayed`)
    checkBurst(t, app, result, true)
    const [tatMs] = states[0] ?? []
    t.equal(states.length, 1, `${transport}: one gcra state`)
    t.equal((tatMs ?? 0) - f.clock.now, 1000 + 100 * app.rateLimit.stats().delayed, `${transport}: Redis reserved the burst (1000 ms) plus one 100 ms turn per held request, nothing for the undelayed`)
  }
})

test('maxDelayed counts decisions in flight on the memory store too', async (t) => {
  const clock = new TestClock()
  const app = await buildApp({ store: 'memory', clock: clock.read, maxDelayed: 5 })
  t.teardown(async () => { await app.close() })
  app.get('/m', { config: { rateLimit: { algorithm: 'gcra', limit: 10, window: '1s', delay: '30s' } } }, async (req) => ({ delayMs: req.rateLimit?.delayMs }))
  const send = async (): Promise<{ status: number, delayMs: number }> => {
    const res = await app.inject('/m')
    return { status: res.statusCode, delayMs: res.statusCode === 200 ? res.json<{ delayMs: number }>().delayMs : -1 }
  }
  checkBurst(t, app, await burstAtBound(app, send), true)
})

test('peek() on a delaying block counts the turns reserved: nothing left now, and its retry is when consume() would be admitted', async (t) => {
  for (const store of ['redis', 'memory'] as const) {
    for (const algorithm of ['gcra', 'token-bucket'] as const) {
      const { app } = await setupStoreApp(t, store, 'peekturn', { timeout: 5000, user: (req) => req.headers['x-user'] as string | undefined })
      app.get('/p', { config: { rateLimit: { algorithm, limit: 1, window: '10s', delay: '60s', by: 'user' } } }, async () => 'ok')
      app.get('/q', { config: { rateLimit: { algorithm, limit: 3, window: '3s', delay: '10s', by: 'user' } } }, async () => 'ok')
      await app.ready()
      const at = `${store}, ${algorithm}`
      t.equal((await app.inject({ url: '/p', headers: USER })).statusCode, 200, `${at}: the one unit`)
      // Held until the app closes below (503).
      const held = Array.from({ length: 3 }, async () => await app.inject({ url: '/p', headers: USER }))
      await waitUntil(() => app.rateLimit.stats().held === 3)
      const peeked = await app.rateLimit.peek('GET /p', { user: USER['x-user'] })
      const consumed = await app.rateLimit.consume('GET /p', { user: USER['x-user'] })
      t.match(peeked, { allowed: true, outcome: 'delayed', delayMs: 40_000, remaining: 0, retryAfterMs: 40_000 }, `${at}: three turns reserved (10, 20, 30 s): a request would be held 40 s, nothing is left now`)
      t.match(peeked.policies, [{ remaining: 0, retryAfterMs: 40_000 }], `${at}: its block says the same`)
      t.match(consumed, { allowed: false, remaining: 0, retryAfterMs: 40_000 }, `${at}: consume() agrees`)
      // One unit of three left now, a cost of 2 would wait one interval (1 s): the unit is still there.
      await app.rateLimit.consume('GET /q', { user: 'two' }, 2)
      t.match(await app.rateLimit.peek('GET /q', { user: 'two' }, 2), { allowed: true, delayMs: 1000, remaining: 1, retryAfterMs: 1000 }, `${at}: a cost above what is free: remaining is what is free`)
      await app.close()
      t.same((await Promise.all(held)).map((r) => r.statusCode), [503, 503, 503], `${at}: the held ones answered at close`)
    }
  }
})

test('close() answers held requests with 503 and Retry-After instead of leaving them hanging', async (t) => {
  // One emission interval is 1 s: after the burst, turns 1 s … 30 s ahead.
  const f = await fleet(t, 1, { algorithm: 'gcra', limit: 10, window: '10s', delay: '30s' })
  const base = f.bases[0] as string
  for (let i = 0; i < 10; i++) t0(await shaped(base))
  const held = Array.from({ length: 30 }, async () => await shaped(base))
  const app = f.apps[0] as FastifyInstance
  await waitUntil(() => app.rateLimit.stats().delayed === 30)
  const heldAtClose = app.rateLimit.stats().held
  await app.close()
  const answers = await Promise.all(held)
  const answered = answers.filter((r) => r.status === 503)
  t.ok(answered.length >= heldAtClose - 1 && heldAtClose >= 25, `held requests whose turn had not come were answered 503 (${answered.length}; ${heldAtClose} held when close() was called)`)
  t.ok(answered.every((r) => Number(r.retryAfter) >= 1), 'each with Retry-After')
  t.ok(answers.every((r) => r.status === 503 || (r.status === 200 && r.delayMs <= 5000)), 'the others went on at their turn; none failed otherwise')
  t.equal(app.rateLimit.stats().held, 0, 'nothing held after close')
})

test('several blocks: the wait is the longest over the delaying blocks, and a block without delay must admit now', async (t) => {
  const f = await fleet(t, 1, [
    { algorithm: 'gcra', limit: 10, window: '1s', delay: '3s', by: 'user' },
    { algorithm: 'token-bucket', limit: 5, window: '1s', delay: '3s', by: 'user' },
    { algorithm: 'fixed-window', limit: 12, window: '1h', by: 'user' }
  ])
  const results = (await Promise.all(Array.from({ length: 14 }, async () => (await shaped(f.bases[0] as string)).delayMs))).sort((a, b) => a - b)
  // token-bucket 5/s: 5 at once, then 200 ms apart; gcra 10/s: 10 at once, then 100 ms apart; fixed-window: 12 in all.
  t.same(results, [-1, -1, 0, 0, 0, 0, 0, 200, 400, 600, 800, 1000, 1200, 1400], 'the longest wait binds; the fixed window refuses the 13th and 14th outright, reserving nothing')
})

test('the memory store shapes the same way in one process', async (t) => {
  const clock = new TestClock()
  const app = await buildApp({ store: 'memory', clock: clock.read })
  t.teardown(async () => { await app.close() })
  app.get('/m', { config: { rateLimit: { algorithm: 'gcra', limit: 10, window: '1s', delay: '3s' } } }, async (req) => ({ delayMs: req.rateLimit?.delayMs }))
  const results = await Promise.all(Array.from({ length: 45 }, async () => await app.inject('/m')))
  const waits = results.filter((r) => r.statusCode === 200).map((r) => (r.json() as { delayMs: number }).delayMs).sort((a, b) => a - b)
  t.same(waits, [...Array.from({ length: 10 }, () => 0), ...Array.from({ length: 30 }, (_, k) => (k + 1) * 100)])
  t.equal(results.filter((r) => r.statusCode === 429).length, 5)
})

test('schedule(): 20 callers on 2 instances share a 50/s policy, each resolving at its turn', async (t) => {
  const server = await getRedis()
  const prefix = uniquePrefix('sched')
  const clock = new TestClock()
  const clients = [createClient(server), createClient(server)]
  const policies = { upstream: { algorithm: 'gcra', limit: 50, window: '1s', burst: 1, delay: '1s', by: 'api-key' } } as const
  const apps = await Promise.all(clients.map(async (redis) => await buildApp({ redis, prefix, clock: clock.read, timeout: 5000, policies, apiKey: (req) => req.headers['x-api-key'] as string | undefined })))
  for (const app of apps) await app.ready()
  cleanUpPrefix(t, clients[0] as Redis, prefix, async () => {
    for (const app of apps) await app.close()
    clients[1]?.disconnect()
  })
  const startedAt = performance.now()
  const pendingCalls = Promise.all(Array.from({ length: 20 }, async (_, i) => {
    const decision = await (apps[i % 2] as FastifyInstance).rateLimit.schedule('upstream', { apiKey: 'payments' })
    return { delayMs: decision.delayMs, at: performance.now() - startedAt }
  }))
  // The next steps run once these are decided, not once they resolve: the clock is frozen, but Redis
  // expires the key by the real one (here 400 ms after the last turn was reserved).
  const delayed = (i: number): number => apps[i]?.rateLimit.stats().delayed ?? 0
  await waitUntil(() => delayed(0) + delayed(1) === 19)
  // The clock half a second back for this call: its turn is 900 ms away, time enough to see it held on a loaded machine.
  clock.advance(-500)
  const aborted = new AbortController()
  const pending = (apps[1] as FastifyInstance).rateLimit.schedule('upstream', { apiKey: 'payments' }, 1, { signal: aborted.signal })
  await waitUntil(() => delayed(0) + delayed(1) === 20)
  clock.advance(500)
  aborted.abort()
  await t.rejects(pending, { name: 'AbortError' }, 'an aborted schedule() rejects with the signal\'s reason')
  await waitUntil(() => apps[1]?.rateLimit.stats().delayAborted === 1)
  const api = (apps[0] as FastifyInstance).rateLimit
  await t.rejects(api.schedule('upstream', { apiKey: 'payments' }, 1, { signal: 'soon' } as never), { code: 'FST_RRL_INVALID_API_CALL', message: /options\.signal must be an AbortSignal \(got string\)/ })
  await t.rejects(api.schedule('upstream', { apiKey: 'payments' }, 1, 5 as never), { code: 'FST_RRL_INVALID_API_CALL', message: /options must be \{ signal\? \} \(got number\)/ })
  // (Before the holds below: Redis expires the key by the real clock, which moves while they wait.)
  const consumed = await (apps[0] as FastifyInstance).rateLimit.consume('upstream', { apiKey: 'payments' })
  t.equal(consumed.allowed, false, 'consume() never waits: it admits only what fits now')
  t.equal(consumed.delayMs, 0)
  // Its turn (400 ms) was the latest: given back. Then 400 … 1000 ms fit the 1 s delay, 31 turns; 4 more are past it.
  const later = await Promise.all(Array.from({ length: 35 }, async (_, i) => await (apps[i % 2] as FastifyInstance).rateLimit.schedule('upstream', { apiKey: 'payments' }).then(
    (decision) => decision.delayMs, (error: { code: string, retryAfter: number }) => error.code)))
  t.same(later.filter((x) => typeof x === 'number').sort((a, b) => Number(a) - Number(b)), Array.from({ length: 31 }, (_, k) => 400 + k * 20), 'the aborted turn was reused; turns up to the delay')
  t.same(later.filter((x) => typeof x === 'string'), ['FST_RRL_RATE_LIMITED', 'FST_RRL_RATE_LIMITED', 'FST_RRL_RATE_LIMITED', 'FST_RRL_RATE_LIMITED'], 'a turn past the delay rejects with the coded refusal')
  const calls = await pendingCalls
  t.same(calls.map((c) => c.delayMs).sort((a, b) => a - b), Array.from({ length: 20 }, (_, k) => k * 20), 'the first 20: turns 20 ms apart (50/s), fleet-wide')
  t.comment(`schedule(): resolve time minus turn: ${spread(calls.map((c) => c.at - c.delayMs))}`)
})

test('startup: delay on the wrong block, too long, in shadow mode, or past the exact bound fails with the field named', async (t) => {
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ algorithm: 'fixed-window', limit: 10, window: '1s', delay: '1s' }, /delay.*only applies to gcra and token-bucket.*algorithm: 'gcra'/],
    [{ period: 'day', limit: 10, delay: '1s' }, /delay.*only applies to a gcra or token-bucket block with window/],
    [{ concurrency: 2, delay: '1s' }, /delay.*only applies to a gcra or token-bucket block with window/],
    [{ algorithm: 'gcra', limit: 10, window: '1s', delay: '61s' }, /delay.*between 1 ms and 60000 ms/],
    [{ algorithm: 'gcra', limit: 10, window: '1s', delay: '1s', mode: 'shadow' }, /delay.*shadow/],
    [{ algorithm: 'gcra', limit: 100_000_000, window: '1d', delay: '60s' }, /limit.*2 × burst × window \+ limit × delay below 2\^53/]
  ]
  for (const [block, message] of cases) {
    const app = await buildApp({ store: 'memory' })
    t.throws(() => app.get('/x', { config: { rateLimit: block as never } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message }, JSON.stringify(block))
    await app.close()
  }
})

test('crossings: refundOn on a delaying gcra block gives back only the latest turn; a store failure holds nothing; a refusal remembered by the deny cache reserves nothing', async (t) => {
  const server = await getRedis()
  const redis = createClient(server)
  const prefix = uniquePrefix('shapex')
  const clock = new TestClock()
  const app = await buildApp({ redis, prefix, clock: clock.read, timeout: 5000 })
  app.get('/r', {
    config: { rateLimit: { algorithm: 'gcra', limit: 10, window: '1s', delay: '1s', refundOn: (reply) => reply.statusCode >= 500 } }
  }, async (req, reply) => {
    if (req.headers['x-fail'] === '1') return await reply.code(500).send({ delayMs: req.rateLimit?.delayMs })
    return { delayMs: req.rateLimit?.delayMs }
  })
  cleanUpPrefix(t, redis, prefix, async () => { await app.close() })
  for (let i = 0; i < 10; i++) t.equal((await app.inject('/r')).statusCode, 200)
  // The latest turn (100 ms) fails and is given back: the next caller gets the same turn.
  const failed = await app.inject({ url: '/r', headers: { 'x-fail': '1' } })
  t.same([failed.statusCode, failed.json()], [500, { delayMs: 100 }])
  await waitUntil(() => app.rateLimit.stats().refunded === 1)
  t.same((await app.inject('/r')).json(), { delayMs: 100 }, 'the failed latest turn was given back')
  // Two held, the first fails after the second reserved: nothing is given back (the second depends on it).
  const [first, second] = await Promise.all([app.inject({ url: '/r', headers: { 'x-fail': '1' } }), app.inject('/r')])
  t.same([first.json(), second.json()], [{ delayMs: 200 }, { delayMs: 300 }])
  await waitUntil(() => app.rateLimit.stats().refunded === 2)
  t.same((await app.inject('/r')).json(), { delayMs: 400 }, 'a failed turn that was not the latest gave nothing back')
  // 1 s of turns reserved: the next is refused, and the deny cache answers its retry without a store call or a turn.
  const [over1] = await Promise.all(Array.from({ length: 7 }, async () => await app.inject('/r'))).then((all) => all.filter((r) => r.statusCode === 429))
  t.ok(over1 !== undefined, 'refused past the delay')
  const cached = await app.inject('/r')
  t.equal(cached.statusCode, 429)
  t.ok(app.rateLimit.stats().delayed >= 1)

  // The store fails (a client on a closed port, onRedisError 'open'): admitted degraded at once, nothing held.
  const dead = createClient({ url: 'redis://127.0.0.1:1', host: '127.0.0.1', port: 1, stop: async () => {} }, { enableOfflineQueue: false, lazyConnect: true, retryStrategy: () => null })
  const degraded = await buildApp({ redis: dead, prefix, clock: clock.read, maxDelayed: 2 })
  degraded.get('/d', { config: { rateLimit: { algorithm: 'gcra', limit: 1, window: '1s', delay: '1s' } } }, async (req) => ({ delayMs: req.rateLimit?.delayMs, degraded: req.rateLimit?.degraded }))
  t.teardown(async () => { await degraded.close(); dead.disconnect() })
  await degraded.ready()
  const answers = []
  for (let i = 0; i < 3; i++) answers.push((await degraded.inject('/d')).json())
  t.same(answers, [{ delayMs: 0, degraded: true }, { delayMs: 0, degraded: true }, { delayMs: 0, degraded: true }], 'onRedisError decided: no turn, no hold')
  t.equal(degraded.rateLimit.stats().held, 0)
  t.equal(degraded.rateLimit.stats().undelayed, 0, 'each failed decision gave its place under maxDelayed (2) back: the third still had one')
})
