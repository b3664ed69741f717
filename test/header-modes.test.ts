/**
 * Header formats as clients parse them, over HTTP (fetch) against a real
 * Redis, with the injected clock: every format alone and every combination
 * the option accepts. Each response is read with `ratelimit-header-parser`
 * (the express-rate-limit project's parser) where it reads the format, and
 * with `structured-headers` (RFC 9651) where the draft uses Structured
 * Fields; limit, remaining and reset must equal the decision's
 * (`request.rateLimit`: the binding block) on admitted and refused answers,
 * deny-cache answers included, on a multi-block route and on concurrency
 * blocks. Also: `'ietf'` and `'both'` give that parser NaN (it reads
 * `RateLimit` first and gives up on draft-10), bad values and combinations
 * fail at startup, and no format's field is sent on a 3xx.
 */
import { test, type Test } from 'tap'
import Fastify from 'fastify'
import { parseRateLimit, type RateLimit } from 'ratelimit-header-parser'
import { parseDictionary, parseItem, parseList } from 'structured-headers'
import rateLimit, { type AnyRateLimitBlock, type HeaderFormat, type HeaderMode, type RateLimitBlock, type RateLimitDecision } from '../lib/index.js'
import { HEADER_FORMATS } from '../lib/options/fields.js'
import { FORMATS } from '../lib/reply/headers.js'
import { setupRedisApp, type TestClock } from './helpers/app.js'
import { parseFields } from './helpers/fields.js'

/** One response as a client sees it, with the decision the plugin took for it. */
interface Answer {
  status: number
  headers: Headers
  decision: RateLimitDecision
  /** What ratelimit-header-parser made of it; `reset` is a Date it computed between `before` and `after`. */
  parsed: RateLimit | undefined
  before: number
  after: number
}

type Routes = Record<string, AnyRateLimitBlock | AnyRateLimitBlock[]>

/** An app on the test Redis sending `headers`, listening on a loopback port; `get` fetches a path. */
async function serve (t: Test, headers: HeaderMode, routes: Routes, handler: () => Promise<string> = async () => 'ok'): Promise<{ get: (path: string) => Promise<Answer>, clock: TestClock }> {
  // A generous timeout: a degraded answer sends no fields, and each answer asserts it was not degraded.
  const { app, clock } = await setupRedisApp(t, 'hm', { headers, timeout: 5000 })
  const decisions = new Map<string, RateLimitDecision>()
  app.addHook('onSend', async (request) => {
    if (request.rateLimit !== null) decisions.set(String(request.headers['x-request']), request.rateLimit)
  })
  for (const [path, block] of Object.entries(routes)) app.get(path, { config: { rateLimit: block } }, handler)
  const base = await app.listen({ port: 0, host: '127.0.0.1' })
  let count = 0
  const get = async (path: string): Promise<Answer> => {
    const id = String(++count)
    const res = await fetch(base + path, { headers: { 'x-request': id } })
    await res.text()
    const before = Date.now()
    const parsed = parseRateLimit(res)
    const after = Date.now()
    const decision = decisions.get(id)
    if (decision === undefined) throw new Error(`no decision for ${path}`)
    return { status: res.status, headers: res.headers, decision, parsed, before, after }
  }
  return { get, clock }
}

/** What a single-valued format must state: the binding block's limit, units left, and reset (Retry-After on a refusal). */
function expected (answer: Answer, windowSeconds: Record<string, number>): { limit: number, remaining: number, reset: number } {
  const { decision } = answer
  const reset = decision.allowed
    ? Math.min(Math.ceil(decision.resetMs / 1000), windowSeconds[decision.policy] ?? Infinity)
    : Number(answer.headers.get('retry-after'))
  return { limit: decision.limit, remaining: decision.remaining, reset }
}

/** ratelimit-header-parser's reading equals `want`; its reset is `want.reset` seconds after the moment it parsed. */
function parserReads (t: Test, answer: Answer, want: { limit: number, remaining: number, reset: number }, label: string): void {
  const { parsed, before, after } = answer
  t.equal(parsed?.limit, want.limit, `${label}: parser limit`)
  t.equal(parsed?.remaining, want.remaining, `${label}: parser remaining`)
  const reset = parsed?.reset?.getTime() ?? Number.NaN
  t.ok(reset >= before + want.reset * 1000 && reset <= after + want.reset * 1000, `${label}: parser reset ${want.reset} s (got ${reset - before} ms after parsing began)`)
}

const integer = (value: string | null): unknown => value === null ? undefined : parseItem(value)[0]

/** Each format's own fields, parsed as its draft says (Structured Fields where it uses them), equal `want`. */
function fieldsRead (t: Test, format: HeaderFormat, answer: Answer, want: { limit: number, remaining: number, reset: number }, label: string): void {
  const h = answer.headers
  if (format === 'draft-6') {
    t.same([integer(h.get('ratelimit-limit')), integer(h.get('ratelimit-remaining')), integer(h.get('ratelimit-reset'))], [want.limit, want.remaining, want.reset], `${label}: RateLimit-Limit/Remaining/Reset`)
  } else if (format === 'draft-7') {
    const dictionary = parseDictionary(h.get('ratelimit') ?? '')
    t.same(['limit', 'remaining', 'reset'].map((key) => dictionary.get(key)?.[0]), [want.limit, want.remaining, want.reset], `${label}: RateLimit dictionary`)
  } else if (format === 'legacy') {
    t.same([h.get('x-ratelimit-limit'), h.get('x-ratelimit-remaining'), h.get('x-ratelimit-reset')], [want.limit, want.remaining, want.reset].map(String), `${label}: X-RateLimit-*`)
  } else {
    const state = parseFields(h.get('ratelimit')).find((item) => item.name === answer.decision.policy)
    t.equal(state?.r, want.remaining, `${label}: RateLimit r of the binding policy`)
  }
  if (format === 'draft-6' || format === 'draft-7') {
    for (const [item, params] of parseList(h.get('ratelimit-policy') ?? '')) {
      t.ok(Number.isInteger(item) && Number.isInteger(params.get('w')), `${label}: RateLimit-Policy member ${String(item)};w=${String(params.get('w'))}`)
    }
  }
}

/** Every `headers` value the option accepts, as written and as the formats it sends. */
const ACCEPTED: Array<[HeaderMode, HeaderFormat[]]> = [
  ['ietf', ['ietf']], ['draft-6', ['draft-6']], ['draft-7', ['draft-7']], ['legacy', ['legacy']], ['both', ['ietf', 'legacy']],
  [['draft-6', 'legacy'], ['draft-6', 'legacy']], [['legacy', 'draft-7'], ['draft-7', 'legacy']],
  [['draft-6', 'draft-7'], ['draft-6', 'draft-7']], [['draft-6', 'draft-7', 'legacy'], ['draft-6', 'draft-7', 'legacy']]
]

/** The parser reads RateLimit first, then RateLimit-Remaining, then X-RateLimit-Remaining: it reads a set unless 'ietf' is in it. */
const parserReadsSet = (formats: HeaderFormat[]): boolean => !formats.includes('ietf')

const label = (mode: HeaderMode): string => JSON.stringify(mode)

for (const [mode, formats] of ACCEPTED) {
  test(`${label(mode)}: one block, admitted, refused by the store and by the deny cache, as clients parse it`, async (t) => {
    const { get } = await serve(t, mode, { '/orders': { algorithm: 'fixed-window', limit: 3, window: '10s', name: 'orders' } })
    const statuses: number[] = []
    for (let i = 1; i <= 5; i++) {
      const answer = await get('/orders')
      statuses.push(answer.status)
      t.equal(answer.decision.degraded, false, `#${i} decided by the store`)
      const want = expected(answer, { orders: 10 })
      if (parserReadsSet(formats)) parserReads(t, answer, want, `#${i}`)
      for (const format of formats) fieldsRead(t, format, answer, want, `#${i} ${format}`)
    }
    t.same(statuses, [200, 200, 200, 429, 429])
  })
}

test('the exact lines of each format (as docs/replies.md shows them)', async (t) => {
  const lines = async (mode: HeaderMode): Promise<string[]> => {
    const { get } = await serve(t, mode, { '/orders': { algorithm: 'fixed-window', limit: 100, window: '1m', name: 'orders' } })
    const { headers } = await get('/orders')
    return [...headers].filter(([name]) => name.includes('ratelimit')).map(([name, value]) => `${name}: ${value}`)
  }
  t.same(await lines('ietf'), ['ratelimit: "orders";r=99;t=60', 'ratelimit-policy: "orders";q=100;w=60'])
  t.same(await lines('draft-6'), ['ratelimit-limit: 100', 'ratelimit-policy: 100;w=60', 'ratelimit-remaining: 99', 'ratelimit-reset: 60'])
  t.same(await lines('draft-7'), ['ratelimit: limit=100, remaining=99, reset=60', 'ratelimit-policy: 100;w=60'])
  t.same(await lines('legacy'), ['x-ratelimit-limit: 100', 'x-ratelimit-remaining: 99', 'x-ratelimit-reset: 60'])
})

const MULTI: RateLimitBlock[] = [
  { algorithm: 'fixed-window', limit: 3, window: '10s', name: 'short' },
  { algorithm: 'fixed-window', limit: 4, window: '1m', name: 'long' }
]

for (const [mode, formats] of ACCEPTED.filter(([, sets]) => !sets.includes('ietf'))) {
  test(`${label(mode)}: a multi-block route reports the binding block, admitted and refused`, async (t) => {
    const { get, clock } = await serve(t, mode, { '/multi': MULTI })
    const seen: string[] = []
    for (let i = 1; i <= 6; i++) {
      // The short window rolls after the 4th request: then the long block binds (fewest left), and refuses.
      if (i === 5) clock.advance(10_000)
      const answer = await get('/multi')
      seen.push(`${answer.status} ${answer.decision.policy}`)
      const want = expected(answer, { short: 10, long: 60 })
      parserReads(t, answer, want, `#${i}`)
      for (const format of formats) fieldsRead(t, format, answer, want, `#${i} ${format}`)
      if (formats.includes('draft-6') || formats.includes('draft-7')) t.equal(answer.headers.get('ratelimit-policy'), '3;w=10, 4;w=60', `#${i}: every rate block, on every answer`)
    }
    t.same(seen, ['200 short', '200 short', '200 short', '429 short', '200 long', '429 long'])
  })
}

test('draft-6/-7 RateLimit-Policy: one member per quota value (the draft forbids two), concurrency blocks left out', async (t) => {
  const { get } = await serve(t, ['draft-6', 'draft-7'], {
    '/same': [{ limit: 5, window: '1s', name: 'a' }, { limit: 5, window: '1m', name: 'b' }, { limit: 50, window: '1h', name: 'c' }],
    '/mixed': [{ concurrency: 2, name: 'jobs' }, { limit: 5, window: '1m', name: 'jobs-per-minute' }]
  })
  t.equal((await get('/same')).headers.get('ratelimit-policy'), '5;w=1, 50;w=3600')
  t.equal((await get('/mixed')).headers.get('ratelimit-policy'), '5;w=60')
})

for (const [mode, formats] of ACCEPTED) {
  test(`${label(mode)}: a concurrency block states its slots; a refusal's reset is its Retry-After`, async (t) => {
    let open: () => void = () => {}
    const gate = new Promise<void>((resolve) => { open = resolve })
    let entered = 0
    let bothIn: () => void = () => {}
    const held = new Promise<void>((resolve) => { bothIn = resolve })
    const { get } = await serve(t, mode, { '/jobs': { concurrency: 2, name: 'jobs', by: 'ip' } }, async () => {
      if (++entered === 2) bothIn()
      await gate
      return 'ok'
    })
    const first = get('/jobs')
    const second = get('/jobs')
    await held
    const refused = await get('/jobs')
    open()
    const answers = [await first, await second, refused]
    t.same(answers.map((a) => a.status).sort(), [200, 200, 429])
    for (const [i, answer] of answers.entries()) {
      const want = expected(answer, { jobs: 1 })
      if (parserReadsSet(formats)) parserReads(t, answer, want, `#${i}`)
      for (const format of formats) fieldsRead(t, format, answer, want, `#${i} ${format}`)
      const policy = answer.headers.get('ratelimit-policy')
      t.equal(policy, formats.includes('ietf') ? '"jobs";q=2;qu="concurrent-requests"' : null, `#${i}: RateLimit-Policy (draft-6/-7 have no slots)`)
    }
    t.same([refused.decision.limit, refused.decision.remaining, expected(refused, {}).reset], [2, 0, 1], 'the refusal: 2 slots, none free, Retry-After 1')
  })
}

test('ratelimit-header-parser reads RateLimit first: NaN for draft-10, so with \'both\' it ignores X-RateLimit-*', async (t) => {
  const routes = { '/orders': { limit: 10, window: '1m', name: 'orders' } }
  const ietf = await (await serve(t, 'ietf', routes)).get('/orders')
  const both = await (await serve(t, 'both', routes)).get('/orders')
  for (const [name, answer] of [['ietf', ietf], ['both', both]] as const) {
    t.ok(answer.parsed !== undefined && Number.isNaN(answer.parsed.limit) && Number.isNaN(answer.parsed.remaining) && Number.isNaN(answer.parsed.reset?.getTime()), `${name}: limit, remaining and reset are NaN`)
  }
  t.equal(both.headers.get('x-ratelimit-remaining'), '9', '\'both\' did send X-RateLimit-*')
  const legacyOnly = new Headers([...both.headers].filter(([name]) => name.startsWith('x-ratelimit-')))
  t.same({ ...parseRateLimit(legacyOnly), reset: undefined }, { limit: 10, used: 1, remaining: 9, reset: undefined }, 'which it reads once RateLimit is absent')
  const draft7 = await (await serve(t, ['draft-7', 'legacy'], routes)).get('/orders')
  t.same([draft7.parsed?.limit, draft7.parsed?.remaining], [10, 9], '[\'draft-7\', \'legacy\']: the RateLimit it reads first parses')
})

async function startsWith (headers: unknown): Promise<unknown> {
  const app = Fastify()
  app.register(rateLimit, { store: 'memory', headers } as never)
  try {
    await app.ready()
    return undefined
  } catch (error) {
    return error
  } finally {
    await app.close()
  }
}

test('a bad headers value or combination is a coded startup error naming the allowed values', async (t) => {
  for (const bad of ['draft-8', 'Draft-6', true, null, 0, [], ['both'], ['legacy', 'legacy'], ['draft-6', 'nope'], ['ietf', 'draft-6'], ['draft-7', 'ietf', 'legacy'], { ietf: true }]) {
    const error = await startsWith(bad)
    t.match(error, { code: 'FST_RRL_INVALID_OPTION', message: /option `headers`.*'ietf', 'draft-6', 'draft-7', 'legacy', 'both', false/ }, JSON.stringify(bad))
  }
  t.match(await startsWith(['ietf', 'draft-7']), { message: /cannot combine 'ietf' and 'draft-7': both send RateLimit and RateLimit-Policy, in different syntaxes/ })
  for (const [mode] of ACCEPTED) t.equal(await startsWith(mode), undefined, `${label(mode)} is accepted`)
  t.equal(await startsWith(false), undefined, 'false is accepted')
})

test('the combinations accepted are exactly those that never send one field name in two syntaxes', async (t) => {
  const clash = (a: HeaderFormat, b: HeaderFormat): boolean =>
    Object.entries(FORMATS[a].fields).some(([field, syntax]) => FORMATS[b].fields[field] !== undefined && FORMATS[b].fields[field] !== syntax)
  let clashing = 0
  for (const a of HEADER_FORMATS) {
    for (const b of HEADER_FORMATS) {
      if (a >= b) continue
      if (clash(a, b)) clashing++
      const error = await startsWith([a, b])
      t.equal(error === undefined, !clash(a, b), `[${a}, ${b}]: ${clash(a, b) ? 'refused' : 'accepted'}`)
    }
  }
  t.equal(clashing, 2, 'ietf clashes with draft-6 (RateLimit-Policy) and draft-7 (both fields)')
})

for (const [mode, formats] of ACCEPTED) {
  test(`${label(mode)}: no field of the formats on a 3xx`, async (t) => {
    const { app } = await setupRedisApp(t, 'hm3', { headers: mode })
    app.get('/moved', { config: { rateLimit: { limit: 5, window: '1m' } } }, async (_request, reply) => await reply.redirect('/elsewhere'))
    app.get('/here', { config: { rateLimit: { limit: 5, window: '1m' } } }, async () => 'ok')
    const fields = [...new Set(formats.flatMap((format) => Object.keys(FORMATS[format].fields)))]
    const moved = await app.inject('/moved')
    const here = await app.inject('/here')
    t.equal(moved.statusCode, 302)
    t.same(fields.filter((field) => moved.headers[field] !== undefined), [], 'none on the redirect')
    t.same(fields.filter((field) => here.headers[field] === undefined), [], 'every one on a 200')
  })
}

test('draft-6 and -7: a refusal\'s reset is its Retry-After, also past w; legacy caps its reset at w', async (t) => {
  // Three requests fill the window; they weigh on the next window too, so the wait (≈ 13.4 s) outlasts w = 10 s.
  const { get } = await serve(t, ['draft-6', 'draft-7', 'legacy'], { '/s': { algorithm: 'sliding-window', limit: 3, window: '10s', name: 's' } })
  for (let i = 0; i < 3; i++) await get('/s')
  const refused = await get('/s')
  const retryAfter = Number(refused.headers.get('retry-after'))
  t.ok(retryAfter > 10, `Retry-After ${retryAfter} s is past w`)
  t.equal(refused.headers.get('ratelimit-reset'), String(retryAfter), 'draft-6 RateLimit-Reset = Retry-After')
  t.equal(parseDictionary(refused.headers.get('ratelimit') ?? '').get('reset')?.[0], retryAfter, 'draft-7 reset = Retry-After')
  parserReads(t, refused, { limit: 3, remaining: 0, reset: retryAfter }, 'the parser (reading RateLimit)')
  t.equal(refused.headers.get('x-ratelimit-reset'), '10', 'X-RateLimit-Reset stays capped at w')
})
