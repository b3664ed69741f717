import { test } from 'tap'
import { Redis } from 'ioredis'
import { buildApp } from './helpers/app.js'
import { freePort, startRedisServer } from './helpers/redis.js'

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
  t.match(await redis.get(key as string), /:3$/, 'each abandoned decision ran exactly once: 1 + 2 = 3, never resent')
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push((await app.inject('/x')).statusCode)
  t.same(statuses, [429, 429, 429], '1 + 2 abandoned-but-executed + resumed enforcement: the limit of 3 holds')
})
