import { test } from 'tap'
import { Redis } from 'ioredis'
import { buildApp } from '../helpers/app.js'
import { freePort, readState, startRedisServer } from '../helpers/redis.js'
import { pluginClient, RECOVERY_BOUND_MS, startServer, type ClientKind } from '../helpers/topologies.js'

const TIMEOUT = 50
// What the event loop of a loaded 2-core machine may add on top of the timeout.
const MARGIN = 150

test('unreachable Redis: fail-open admits and marks degraded, fail-closed answers 503, both within the timeout', async (t) => {
  const port = await freePort() // nothing listens here
  // A default-configured client: offline queue on, retries on. The plugin must not wait on it.
  const redis = new Redis({ port, host: '127.0.0.1', lazyConnect: false })
  redis.on('error', () => {})
  const app = await buildApp({ redis, timeout: TIMEOUT })
  app.get('/open', { config: { rateLimit: { limit: 1, window: '1m', onRedisError: 'open' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { limit: 1, window: '1m', onRedisError: 'closed' } } }, async () => 'never')
  app.get('/warm', { config: { rateLimit: false } }, async () => 'warm')
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect() })
  // The first inject pays for lazy loading and JIT; the decision, not that, is under test.
  await app.inject('/warm')

  for (let i = 0; i < 3; i++) {
    let started = performance.now()
    const open = await app.inject('/open')
    const openMs = performance.now() - started
    t.equal(open.statusCode, 200)
    t.match(open.json(), { allowed: true, degraded: true })
    t.equal(open.headers.ratelimit, undefined, 'no quota is claimed when none was checked')
    t.ok(openMs < TIMEOUT + MARGIN, `fail-open answered in ${openMs.toFixed(1)} ms`)

    started = performance.now()
    const closed = await app.inject('/closed')
    const closedMs = performance.now() - started
    t.equal(closed.statusCode, 503)
    t.equal(closed.headers['retry-after'], '1')
    t.equal(closed.headers['content-type'], 'application/problem+json; charset=utf-8')
    const body = closed.json()
    t.equal(body.type, 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity')
    t.notMatch(JSON.stringify(body), /ECONNREFUSED|connect|redis|127\.0\.0\.1/i, 'no Redis error text in the reply')
    t.ok(closedMs < TIMEOUT + MARGIN, `fail-closed answered in ${closedMs.toFixed(1)} ms`)
  }
  t.equal(app.rateLimit.stats().degraded, 6)
})

test('hung Redis (SIGSTOP): decisions give up after the timeout and are not resent; after SIGCONT enforcement resumes', async (t) => {
  const server = await startRedisServer()
  const redis = new Redis(server.url)
  const app = await buildApp({ redis, timeout: TIMEOUT, prefix: 'hung' })
  app.get('/x', { config: { rateLimit: { limit: 3, window: '1m', algorithm: 'fixed-window' } } }, async (req) => req.rateLimit)
  app.get('/closed', { config: { rateLimit: { limit: 3, window: '1m', onRedisError: 'closed' } } }, async () => 'ok')
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect(); await server.stop() })

  t.equal((await app.inject('/x')).statusCode, 200)
  process.kill(server.pid, 'SIGSTOP')
  let worst = 0
  for (let i = 0; i < 4; i++) {
    const started = performance.now()
    const res = await app.inject(i % 2 === 0 ? '/x' : '/closed')
    worst = Math.max(worst, performance.now() - started)
    t.equal(res.statusCode, i % 2 === 0 ? 200 : 503)
  }
  t.ok(worst < TIMEOUT + MARGIN, `worst decision while hung: ${worst.toFixed(1)} ms`)
  process.kill(server.pid, 'SIGCONT')
  // Commands queued while hung now complete; the abandoned /x decisions still count once each.
  await redis.ping()
  const [key] = await redis.keys('hung:{GET:/x|*')
  t.equal((await readState(redis, key as string))?.[1], 3, 'each abandoned decision ran exactly once: 1 + 2 = 3, never resent')
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push((await app.inject('/x')).statusCode)
  t.same(statuses, [429, 429, 429], '1 + 2 abandoned-but-executed + resumed enforcement: the limit of 3 holds')
})

for (const kind of ['recommended', 'default'] as ClientKind[]) {
  test(`startup with Redis absent: ready() under 1 s, onRedisError applies, enforcement starts once Redis appears (${kind} client)`, async (t) => {
    const port = await freePort() // nothing listens here yet
    const redis = pluginClient(kind, port)
    const app = await buildApp({ redis, timeout: TIMEOUT, prefix: 'absent' })
    app.get('/open', { config: { rateLimit: { limit: 2, window: '1h', onRedisError: 'open', by: 'header:x-id' } } }, async (req) => req.rateLimit)
    app.get('/closed', { config: { rateLimit: { limit: 2, window: '1h', onRedisError: 'closed', by: 'header:x-id' } } }, async () => 'ok')
    const later: { server?: Awaited<ReturnType<typeof startServer>> } = {}
    t.teardown(async () => { await app.close(); redis.disconnect(); await later.server?.stop() })
    let started = performance.now()
    await app.ready()
    const readyMs = performance.now() - started
    t.ok(readyMs < 1000, `ready() took ${readyMs.toFixed(0)} ms with Redis absent`)

    // Without Redis long enough for the client's reconnect backoff to grow: 2.5 s for a default
    // client (docs/operations.md quotes its recovery after 2.5 s); the recommended one reaches its
    // 200 ms cap within 0.5 s.
    const absentMs = kind === 'recommended' ? 1000 : 2500
    let worst = 0
    let n = 0
    const until = performance.now() + absentMs
    while (performance.now() < until && n < 1000) {
      const t0 = performance.now()
      const open = await app.inject({ url: '/open', headers: { 'x-id': `a${n}` } })
      const closed = await app.inject({ url: '/closed', headers: { 'x-id': `a${n}` } })
      worst = Math.max(worst, performance.now() - t0)
      if (open.statusCode !== 200 || open.json().degraded !== true || closed.statusCode !== 503) t.fail(`request ${n}: ${open.statusCode} / ${closed.statusCode}`)
      n++
      await new Promise((resolve) => setTimeout(resolve, 25))
    }
    t.ok(worst < 2 * (TIMEOUT + MARGIN), `worst pair of decisions while absent: ${worst.toFixed(1)} ms`)

    later.server = await startServer([], { port, label: 'absent' })
    started = performance.now()
    let enforcedAfter = -1
    for (let i = 0; enforcedAfter < 0 && performance.now() - started < 8000; i++) {
      const res = await app.inject({ url: '/open', headers: { 'x-id': `b${i}` } })
      if (res.json().degraded === false) enforcedAfter = performance.now() - started
      else await new Promise((resolve) => setTimeout(resolve, 10))
    }
    // Recommended options reconnect within 200 ms; a default client waits out its own backoff (up to 5 s + jitter).
    const bound = kind === 'recommended' ? RECOVERY_BOUND_MS : 5500
    t.ok(enforcedAfter >= 0 && enforcedAfter < bound, `${kind}: enforcement started ${enforcedAfter.toFixed(0)} ms after Redis appeared`)
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await app.inject({ url: '/closed', headers: { 'x-id': 'late' } })).statusCode)
    t.same(statuses, [200, 200, 429], 'the limit holds from then on')
    t.comment(`figures ${JSON.stringify({ fault: 'absent at startup', kind, readyMs: Math.round(readyMs), worstPairMs: Math.round(worst * 10) / 10, absentMs, enforcedAfterMs: Math.round(enforcedAfter) })}`)
  })
}

test('visible degradation: an outage at a high request rate logs about one line per second, with its cause, and counts every decision', async (t) => {
  const port = await freePort() // Redis is gone for the whole test
  const redis = pluginClient('recommended', port)
  const lines: Array<Record<string, unknown>> = []
  const app = await buildApp({ redis, timeout: TIMEOUT, prefix: 'burst' }, {
    logger: { level: 'warn', stream: { write: (line: string) => { lines.push(JSON.parse(line)) } } }
  })
  app.get('/open', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'open' } } }, async (req) => ({ degraded: req.rateLimit?.degraded }))
  app.get('/closed', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'closed' } } }, async () => 'never')
  await app.ready()
  t.teardown(async () => { await app.close(); redis.disconnect() })

  // Long enough for a second line (lines are a second apart), with half a second to spare.
  const RUN_MS = 1500
  let sent = 0
  let openDegraded = 0
  let closed503 = 0
  const started = performance.now()
  while (performance.now() - started < RUN_MS && sent < 100_000) {
    const batch = await Promise.all(Array.from({ length: 100 }, async (_, i) => await app.inject(i % 2 === 0 ? '/open' : '/closed')))
    for (const res of batch) {
      if (res.statusCode === 200 && res.json().degraded === true) openDegraded++
      if (res.statusCode === 503) closed503++
    }
    sent += batch.length
  }
  const elapsed = performance.now() - started
  const rate = sent / (elapsed / 1000)
  t.equal(openDegraded + closed503, sent, 'every request: fail-open admitted with request.rateLimit.degraded, fail-closed 503')
  t.equal(app.rateLimit.stats().degraded, sent, 'stats().degraded counts every degraded decision')
  const degradedLines = lines.filter((line) => typeof line.msg === 'string' && /degraded/.test(line.msg as string))
  const seconds = Math.ceil(elapsed / 1000)
  // The rate is a figure (printed below), not an assertion: speed belongs to benchmarks/.
  t.ok(degradedLines.length >= 2 && degradedLines.length <= seconds + 1, `${degradedLines.length} log lines for ${sent} degraded decisions in ${(elapsed / 1000).toFixed(1)} s`)
  for (const line of degradedLines) {
    const err = line.err as { code?: string, message?: string } | undefined
    t.match(err?.code, /^FST_RRL_REDIS_/, 'each line names the cause with a code')
    t.ok(typeof err?.message === 'string' && err.message.length > 0, `cause: ${err?.message}`)
  }
  // Each line carries how many were suppressed since the previous one: one more line (a second
  // later) accounts for the tail, and then lines + suppressed equals every degraded decision.
  const lastAt = Date.now()
  await new Promise((resolve) => setTimeout(resolve, 1050))
  await app.inject('/open')
  const all = lines.filter((line) => typeof line.msg === 'string' && /degraded/.test(line.msg as string))
  t.equal(all.length, degradedLines.length + 1, `one more line a second later (${Date.now() - lastAt} ms)`)
  const suppressed = all.reduce((sum, line) => sum + Number(line.suppressed ?? 0), 0)
  t.equal(suppressed + all.length, sent + 1, `the lines account for every degraded decision (${suppressed} suppressed + ${all.length} logged)`)
  t.comment(`figures ${JSON.stringify({ fault: 'outage log volume', requests: sent, ratePerSecond: Math.round(rate), seconds: +(elapsed / 1000).toFixed(2), logLines: degradedLines.length, suppressed, statsDegraded: app.rateLimit.stats().degraded - 1 })}`)
})
