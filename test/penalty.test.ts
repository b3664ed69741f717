/**
 * Penalties (escalation for repeat offenders): after `after` refusals within
 * one window the identity is refused outright for `for`, longer at each
 * further offence; decided in the same script call as the limit, honoured by
 * the deny cache once it starts, shown in Retry-After and RateLimit's `t`.
 * Held on Redis and on the memory store, which must agree. Injected clock.
 */
import { test, type Test } from 'tap'
import { ALGORITHMS } from '../lib/index.js'
import { buildApp, setupStoreApp } from './helpers/app.js'

const setup = async (t: Test, store: 'redis' | 'memory', options: Parameters<typeof buildApp>[0] = {}) => await setupStoreApp(t, store, 'pn', options)

const PENALTY = { after: 3, for: '1m', backoff: 2, max: '3m' }

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: three refusals in one window start a penalty; the next offence lasts twice as long, capped by max`, async (t) => {
    const { app, clock } = await setup(t, store)
    app.get('/login', { config: { rateLimit: { algorithm: 'fixed-window', limit: 2, window: '10s', name: 'login', penalty: PENALTY } } }, async () => 'ok')
    await app.ready()
    const hit = async (): Promise<{ status: number, retry: number | undefined, ratelimit: string | undefined }> => {
      const res = await app.inject('/login')
      return { status: res.statusCode, retry: res.headers['retry-after'] === undefined ? undefined : Number(res.headers['retry-after']), ratelimit: res.headers.ratelimit as string | undefined }
    }

    t.equal((await hit()).status, 200)
    t.equal((await hit()).status, 200)
    t.same(await hit(), { status: 429, retry: 10, ratelimit: '"login";r=0;t=10' }, 'refusal 1: the window decides')
    t.same(await hit(), { status: 429, retry: 10, ratelimit: '"login";r=0;t=10' }, 'refusal 2 reached the store (not the deny cache)')
    t.same(await hit(), { status: 429, retry: 60, ratelimit: '"login";r=0;t=60' }, 'refusal 3 starts a 1 minute penalty')
    t.equal(app.rateLimit.stats().penalized, 1)
    t.same(await hit(), { status: 429, retry: 60, ratelimit: '"login";r=0;t=60' }, 'during the penalty')

    clock.advance(30_000) // the window has long reset; the penalty has 30 s left
    t.same(await hit(), { status: 429, retry: 30, ratelimit: '"login";r=0;t=30' }, 'a new window does not lift the penalty')
    const peeked = await app.rateLimit.peek('login', { ip: '127.0.0.1' })
    t.match(peeked, { allowed: false, retryAfterMs: 30_000, outcome: 'penalized' }, 'peek shows the penalty')

    clock.advance(30_000) // penalty over
    t.equal((await hit()).status, 200, 'admitted once the penalty ends')
    t.equal((await hit()).status, 200)
    await hit()
    await hit()
    t.same(await hit(), { status: 429, retry: 120, ratelimit: '"login";r=0;t=120' }, 'second offence: 2 minutes (backoff 2)')
    clock.advance(120_000)
    t.equal((await hit()).status, 200)
    t.equal((await hit()).status, 200)
    await hit()
    await hit()
    t.same(await hit(), { status: 429, retry: 180, ratelimit: '"login";r=0;t=180' }, 'third offence: 4 minutes, capped at max 3 minutes')

    await app.rateLimit.reset('login', { ip: '127.0.0.1' })
    clock.advance(1) // past any deny-cache entry's time base
    t.equal(app.rateLimit.stats().penalized, 5, 'every refusal during a penalty, from the store or the deny cache')
    t.equal((await app.rateLimit.peek('login', { ip: '127.0.0.1' })).allowed, true, 'reset forgives the penalty')
  })

  test(`${store}: refusals of another window do not add up, and a quiet caller's offences are forgotten`, async (t) => {
    const { app, clock } = await setup(t, store)
    app.get('/x', { config: { rateLimit: { algorithm: 'fixed-window', limit: 1, window: '10s', name: 'x', penalty: { after: 3, for: '1m' } } } }, async () => 'ok')
    await app.ready()
    const status = async (): Promise<number> => (await app.inject('/x')).statusCode
    t.same([await status(), await status(), await status()], [200, 429, 429], 'two refusals in the first window')
    clock.advance(10_000)
    t.same([await status(), await status(), await status()], [200, 429, 429], 'two more in the next: still no penalty')
    t.equal(app.rateLimit.stats().penalized, 0)
    t.equal(Number((await app.inject('/x')).headers['retry-after']), 60, 'the third of one window starts it')
    // Quiet for the penalty and as long again: the offence is forgotten, the next penalty is 1 minute again.
    clock.advance(60_000 + 60_000 + 1)
    t.same([await status(), await status(), await status()], [200, 429, 429])
    t.equal(Number((await app.inject('/x')).headers['retry-after']), 60, 'first offence again, not the second')
  })
}

test('redis: every algorithm and a multi-limit route start penalties; other blocks are not charged during one', async (t) => {
  const { app } = await setup(t, 'redis')
  for (const algorithm of ALGORITHMS) {
    app.get(`/${algorithm}`, { config: { rateLimit: { algorithm, limit: 1, window: '10s', penalty: { after: 2, for: '1m' } } } }, async () => 'ok')
  }
  app.get('/multi', { config: { rateLimit: [{ limit: 1, window: '10s', name: 'short', penalty: { after: 1, for: '1m' } }, { limit: 100, window: '1h', name: 'long' }] } }, async () => 'ok')
  await app.ready()
  for (const algorithm of ALGORITHMS) {
    const statuses = [(await app.inject(`/${algorithm}`)).statusCode, (await app.inject(`/${algorithm}`)).statusCode]
    const third = await app.inject(`/${algorithm}`)
    t.same(statuses, [200, 429], `${algorithm}: one admitted, one refused`)
    t.equal(third.statusCode, 429)
    t.equal(third.headers['retry-after'], '60', `${algorithm}: the second refusal starts the penalty`)
  }
  t.equal((await app.inject('/multi')).statusCode, 200)
  const first = await app.inject('/multi')
  t.equal(first.headers['retry-after'], '60', 'multi: the first refusal starts the penalty')
  t.match(first.json(), { 'violated-policies': ['short'] })
  const long = await app.rateLimit.peek('GET /multi', { ip: '127.0.0.1' })
  t.equal(long.policies.find((p) => p.policy === 'long')?.remaining, 99, 'the long block was charged once, for the one admitted request')
})

test('penalty is validated at register', async (t) => {
  const bad: Array<[unknown, RegExp]> = [
    [{ after: 0, for: '1m' }, /penalty\.after.*got 0/],
    [{ after: 3 }, /penalty\.for/],
    [{ after: 3, for: 'soon' }, /penalty\.for.*"soon"/],
    [{ after: 3, for: '1m', backoff: 0.5 }, /penalty\.backoff.*0\.5/],
    [{ after: 3, for: '10m', max: '1m' }, /penalty\.max.*at least/],
    [{ after: 3, for: '1m', until: 'forever' }, /penalty\.until.*not a penalty field/],
    ['3 strikes', /penalty.*must be an object/]
  ]
  for (const [penalty, message] of bad) {
    const app = await buildApp({ store: 'memory' })
    t.throws(() => app.get('/x', { config: { rateLimit: { limit: 1, window: '1s', penalty: penalty as never } } }, async () => 'ok'), { code: 'FST_RRL_INVALID_BLOCK', message }, JSON.stringify(penalty))
    await app.close()
  }
})
