/**
 * What the RateLimit fields promise a client (draft-10), checked as a client
 * would act on them, for every algorithm and a multi-block route, on both
 * stores, with the injected clock:
 *   - `t` is "until more quota": when r = 0, a request t seconds later is
 *     admitted and one at t − 1 s is not;
 *   - r is exact: r further requests are admitted with no time passing, the
 *     next one is refused;
 *   - q and w are the block's; every field parses (structured-headers);
 *   - a 429's listed t are never later than Retry-After.
 * Also: no fields on redirects and 304s; deny-cache answers keep the full
 * RateLimit-Policy.
 */
import { test, type Test } from 'tap'
import type { LightMyRequestResponse } from 'fastify'
import { ALGORITHMS, CHANNELS, type DecisionMessage, type RateLimitBlock } from '../lib/index.js'
import { listenChannel, setupStoreApp, type TestClock } from './helpers/app.js'
import { parseFields as items, type FieldItem as Item } from './helpers/fields.js'

/** A deterministic stream of numbers in [0, 1): the same walk on every run. */
function random (seed: number): () => number {
  let state = seed
  return () => {
    state = (state * 1103515245 + 12345) % 2147483648
    return state / 2147483648
  }
}

const ROUTES: Array<[string, RateLimitBlock | RateLimitBlock[], number]> = [
  ...ALGORITHMS.map((algorithm): [string, RateLimitBlock, number] => [`/${algorithm}`, { algorithm, limit: 4, window: '8s', name: algorithm }, 8000]),
  ['/tb-burst', { algorithm: 'token-bucket', limit: 3, window: '6s', burst: 5, name: 'tb-burst' }, 6000],
  ['/gcra-burst', { algorithm: 'gcra', limit: 3, window: '6s', burst: 5, name: 'gcra-burst' }, 6000],
  ['/multi', [{ limit: 3, window: '2s', name: 'short' }, { algorithm: 'fixed-window', limit: 6, window: '10s', name: 'long' }], 10000]
]

/** q and w as each block states them: the limit per window, or the burst per refill time (token-bucket, gcra). */
function declared (block: RateLimitBlock): { q: number, w: number } {
  const windowMs = Number.parseInt(String(block.window), 10) * 1000
  const limit = block.limit as number
  if (block.algorithm === 'token-bucket' || block.algorithm === 'gcra') {
    const burst = (block.burst ?? limit) as number
    return { q: burst, w: Math.max(1, Math.ceil(Math.ceil(burst * windowMs / limit) / 1000)) }
  }
  return { q: limit, w: windowMs / 1000 }
}

function checkFields (t: Test, res: LightMyRequestResponse, blocks: RateLimitBlock[], at: string): Item[] {
  const policy = items(res.headers['ratelimit-policy'])
  t.same(policy.map((p) => p.name), blocks.map((b) => b.name), `${at}: RateLimit-Policy lists every block`)
  for (const block of blocks) {
    const item = policy.find((p) => p.name === block.name)
    t.same({ q: item?.q, w: item?.w }, declared(block), `${at}: ${String(block.name)} q and w are the block's`)
  }
  const state = items(res.headers.ratelimit)
  if (res.statusCode === 429) {
    const retryAfter = Number(res.headers['retry-after'])
    t.same(state.map((s) => s.name), JSON.parse(res.body)['violated-policies'], `${at}: a 429 reports its refusing policies`)
    for (const s of state) t.ok(s.t === undefined || s.t <= retryAfter, `${at}: t=${String(s.t)} ≤ Retry-After ${retryAfter}`)
  }
  return state
}

async function walk (t: Test, app: Awaited<ReturnType<typeof setupStoreApp>>['app'], clock: TestClock, path: string, blocks: RateLimitBlock[], windowMs: number, seed: number): Promise<{ tChecks: number, rChecks: number }> {
  const next = random(seed)
  let tChecks = 0
  let rChecks = 0
  for (let step = 0; step < 40; step++) {
    clock.advance(Math.floor(next() * next() * windowMs))
    const res = await app.inject(path)
    const at = `${path} #${step}`
    const state = checkFields(t, res, blocks, at)
    const empty = state.find((s) => s.r === 0 && s.t !== undefined)
    if (empty !== undefined && next() < 0.7) {
      // t is when more quota comes: refused one second before, admitted at t (refusals charge nothing)
      const wait = state.reduce((most, s) => s.r === 0 && s.t !== undefined ? Math.max(most, s.t) : most, 0)
      clock.advance((wait - 1) * 1000)
      const early = await app.inject(path)
      checkFields(t, early, blocks, `${at} at t-1`)
      t.equal(early.statusCode, 429, `${at}: refused at t - 1 = ${wait - 1} s`)
      clock.advance(1000)
      const due = await app.inject(path)
      checkFields(t, due, blocks, `${at} at t`)
      t.equal(due.statusCode, 200, `${at}: admitted at t = ${wait} s`)
      tChecks++
    } else if (res.statusCode === 200 && next() < 0.3) {
      // r is exact: r more requests now, then a refusal
      const r = Math.min(...state.map((s) => s.r as number))
      for (let i = 0; i < r; i++) t.equal((await app.inject(path)).statusCode, 200, `${at}: request ${i + 1} of r=${r} admitted`)
      const over = await app.inject(path)
      checkFields(t, over, blocks, `${at} past r`)
      t.equal(over.statusCode, 429, `${at}: the request after r=${r} more is refused`)
      rChecks++
    }
  }
  return { tChecks, rChecks }
}

for (const store of ['memory', 'redis'] as const) {
  test(`${store}: t, r, q and w mean what the draft says, for every algorithm and a multi-block route`, async (t) => {
    const { app, clock } = await setupStoreApp(t, store, 'fields')
    for (const [path, block] of ROUTES) app.get(path, { config: { rateLimit: block } }, async () => 'ok')
    await app.ready()
    let seed = 7
    for (const [path, block, windowMs] of ROUTES) {
      const blocks = Array.isArray(block) ? block : [block]
      const { tChecks, rChecks } = await walk(t, app, clock, path, blocks, windowMs, seed++)
      t.ok(tChecks > 0 && rChecks > 0, `${path}: ${tChecks} t checks and ${rChecks} r checks`)
    }
  })

  test(`${store}: no RateLimit fields on a 3xx`, async (t) => {
    const { app } = await setupStoreApp(t, store, 'redirect', { headers: 'both' })
    const block = { limit: 5, window: '1m' }
    app.get('/go', { config: { rateLimit: block } }, async (_request, reply) => reply.redirect('/there'))
    app.get('/same', { config: { rateLimit: block } }, async (_request, reply) => reply.code(304).send())
    app.get('/ok', { config: { rateLimit: block } }, async () => 'ok')
    await app.ready()
    for (const path of ['/go', '/same']) {
      const res = await app.inject(path)
      t.ok(res.statusCode >= 300 && res.statusCode < 400, `${path}: ${res.statusCode}`)
      for (const field of ['ratelimit', 'ratelimit-policy', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
        t.equal(res.headers[field], undefined, `${path}: no ${field}`)
      }
    }
    const ok = await app.inject('/ok')
    t.ok(ok.headers.ratelimit !== undefined && ok.headers['x-ratelimit-limit'] !== undefined, '200: the fields are sent')
  })
}

test('redis: a deny-cache answer keeps the full RateLimit-Policy and reports its refusing block', async (t) => {
  const { app, clock } = await setupStoreApp(t, 'redis', 'denied')
  const blocks: RateLimitBlock[] = [{ limit: 1, window: '10s', name: 'tight' }, { algorithm: 'fixed-window', limit: 50, window: '1h', name: 'wide' }]
  app.get('/x', { config: { rateLimit: blocks } }, async () => 'ok')
  await app.ready()
  const decisions = listenChannel<DecisionMessage>(t, CHANNELS.decision)
  t.equal((await app.inject('/x')).statusCode, 200)
  const refused = await app.inject('/x')
  t.equal(refused.statusCode, 429, 'refused by the store')
  clock.advance(10)
  const cached = await app.inject('/x')
  t.equal(cached.statusCode, 429, 'refused again')
  t.same(decisions.map((d) => d.source), ['store', 'store', 'deny-cache'], 'the third answer came from the deny cache')
  t.equal(cached.headers['ratelimit-policy'], refused.headers['ratelimit-policy'], 'the same RateLimit-Policy as the store refusal')
  t.same(items(cached.headers['ratelimit-policy']).map((p) => p.name), ['tight', 'wide'], 'both blocks listed')
  t.same(items(cached.headers.ratelimit).map((p) => p.name), ['tight'], 'the refusing block reported')
})
