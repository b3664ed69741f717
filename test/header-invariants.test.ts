/**
 * Header invariants, parsed with `structured-headers` (RFC 9651) as a client
 * would: for every algorithm, both stores, a burst larger than the limit, a
 * multi-limit route answered by the deny cache, and a penalty:
 *   - every field parses;
 *   - r ≤ q and t ≤ w for every policy, t ≤ 2w for the sliding window (a penalty's t is the
 *     documented exception);
 *   - `RateLimit-Policy` is the same on every response of a route; `RateLimit`
 *     lists its policies, and only the refusing ones on a 429;
 *   - on a 429, Retry-After is never earlier than a violated policy's t.
 * Requests walk through time with the injected clock.
 */
import { test, type Test } from 'tap'
import { ALGORITHMS, type RateLimitBlock } from '../lib/index.js'
import { buildApp, setupStoreApp } from './helpers/app.js'
import { parseFields as parse, type FieldItem as Policy } from './helpers/fields.js'

const setup = async (t: Test, store: 'redis' | 'memory', options: Parameters<typeof buildApp>[0] = {}) => await setupStoreApp(t, store, 'hi', options)

const ROUTES: Array<[string, RateLimitBlock | RateLimitBlock[]]> = [
  ...ALGORITHMS.map((algorithm): [string, RateLimitBlock] => [`/${algorithm}`, { algorithm, limit: 3, window: '10s', name: algorithm }]),
  ['/tb-burst', { algorithm: 'token-bucket', limit: 2, window: '10s', burst: 5, name: 'tb-burst' }],
  ['/gcra-burst', { algorithm: 'gcra', limit: 2, window: '10s', burst: 5, name: 'gcra-burst' }],
  ['/multi', [{ limit: 2, window: '10s', name: 'short' }, { algorithm: 'fixed-window', limit: 4, window: '1m', name: 'long' }]],
  ['/penalty', { algorithm: 'fixed-window', limit: 1, window: '10s', name: 'penalty', penalty: { after: 2, for: '1m' } }]
]

for (const store of ['redis', 'memory'] as const) {
  test(`${store}: r ≤ q, t ≤ w, RateLimit-Policy constant, a 429 reports only its refusing policies, Retry-After ≥ t`, async (t) => {
    const { app, clock } = await setup(t, store)
    for (const [path, block] of ROUTES) app.get(path, { config: { rateLimit: block } }, async () => 'ok')
    await app.ready()
    let checked = 0
    let penalized = 0
    let partial = 0
    for (const [path, block] of ROUTES) {
      let listed: string | undefined
      for (let step = 0; step < 14; step++) {
        // Bursts of requests, then pauses of growing length: windows roll, buckets refill.
        if (step % 4 === 0) clock.advance(step * 700)
        const res = await app.inject(path)
        const policies = parse(res.headers['ratelimit-policy'] as string | undefined)
        const states = parse(res.headers.ratelimit as string | undefined)
        t.ok(policies.length > 0, `${path} #${step}: RateLimit-Policy present`)
        // draft-10 §3: RateLimit-Policy SHOULD stay consistent over a sequence of responses (deny-cache answers included)
        listed ??= res.headers['ratelimit-policy'] as string
        t.equal(res.headers['ratelimit-policy'], listed, `${path} #${step}: the same RateLimit-Policy on every response`)
        const retryAfter = res.headers['retry-after'] === undefined ? undefined : Number(res.headers['retry-after'])
        const violated: string[] = res.statusCode === 429 ? JSON.parse(res.body)['violated-policies'] : []
        // draft-10 §6 and Appendix B: a refusal reports the policies that refused it
        const reported = res.statusCode === 429 ? violated : policies.map((p) => p.name)
        t.same(states.map((p) => p.name), reported, `${path} #${step}: RateLimit names ${res.statusCode === 429 ? 'the refusing' : 'every'} policy`)
        if (states.length < policies.length) partial++
        for (const state of states) {
          const policy = policies.find((p) => p.name === state.name) as Policy
          const isPenalty = path === '/penalty' && res.statusCode === 429 && (state.t as number) > (policy.w as number)
          if (isPenalty) penalized++
          t.ok((state.r as number) <= (policy.q as number), `${path} #${step} ${policy.name}: r=${state.r} ≤ q=${policy.q}`)
          // t = until one more unit: at most the window; for the sliding window at most two (a count
          // weighs until its window has wholly left the trailing window, docs/algorithms.md)
          const algorithm = [block].flat().find((b) => b.name === policy.name)?.algorithm ?? 'sliding-window'
          const bound = (policy.w as number) * (algorithm === 'sliding-window' ? 2 : 1)
          t.ok(isPenalty || state.t === undefined || (state.t as number) <= bound, `${path} #${step} ${policy.name}: t=${state.t} ≤ ${bound} (w=${policy.w})`)
          if (retryAfter !== undefined && state.t !== undefined) t.ok(retryAfter >= (state.t as number), `${path} #${step}: Retry-After ${retryAfter} ≥ t=${state.t}`)
          checked++
        }
      }
    }
    t.ok(checked > 100, `${checked} policy states checked`)
    t.ok(penalized > 0, `${penalized} penalized answers (t beyond w, as documented)`)
    t.ok(partial > 0, `${partial} refusals on the multi-limit route report fewer policies than it has`)
  })
}

test('a burst larger than the limit is stated as q = burst with w = the time to refill it', async (t) => {
  const { app } = await setup(t, 'memory')
  app.get('/b', { config: { rateLimit: { algorithm: 'token-bucket', limit: 2, window: '10s', burst: 5, name: 'b' } } }, async () => 'ok')
  await app.ready()
  const res = await app.inject('/b')
  t.equal(res.headers['ratelimit-policy'], '"b";q=5;w=25', '5 tokens, refilled at 2 per 10 s: 25 s')
  t.equal(res.headers.ratelimit, '"b";r=4;t=5')
})
