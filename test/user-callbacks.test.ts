/**
 * User callbacks are isolated where they run: for every function the options
 * accept on the request path, a synchronous throw, a rejection and a promise
 * that never settles each get the documented fallback, within its bound,
 * logged once, with no unhandled rejection and no request left unanswered.
 * Against a real Redis; overruns use promises that never settle and a small
 * identityTimeout, not sleeps.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { test } from 'tap'
import type { RateLimitBlock, RateLimitPluginOptions } from '../lib/index.js'
import { SKIP_TIMEOUT_MS } from '../lib/limits.js'
import { setupRedisApp } from './helpers/app.js'

const IDENTITY_TIMEOUT = 20
/** What a loaded 2-core machine may add to a bound (Redis's 50 ms timeout included). */
const SLACK_MS = 500

type Failure = 'throws' | 'rejects' | 'never settles'
const FAILURES: readonly Failure[] = ['throws', 'rejects', 'never settles']

/** A callback that fails the given way (a rejection with an Error, as an async function's throw). */
function failing (how: Failure): (...args: unknown[]) => never {
  return (() => {
    if (how === 'throws') throw new Error('callback threw')
    if (how === 'rejects') return Promise.reject(new Error('callback rejected'))
    return new Promise(() => {})
  }) as never
}

interface Case {
  kind: string
  /** Plugin options and the route block, given the failing callback. */
  options?: (fn: never) => RateLimitPluginOptions
  block?: (fn: never) => Partial<RateLimitBlock>
  /** How long the callback may hold a request (its documented bound). */
  boundMs: number
  /** The log line that reports it: its error code, or its message. */
  logged: RegExp
}

const CASES: Case[] = [
  { kind: 'by function', block: (fn) => ({ by: fn }), boundMs: IDENTITY_TIMEOUT, logged: /FST_RRL_IDENTITY_FAILED/ },
  { kind: 'user', options: (fn) => ({ user: fn }), block: () => ({ by: 'user' }), boundMs: IDENTITY_TIMEOUT, logged: /FST_RRL_IDENTITY_FAILED/ },
  { kind: 'apiKey', options: (fn) => ({ apiKey: fn }), block: () => ({ by: 'api-key' }), boundMs: IDENTITY_TIMEOUT, logged: /FST_RRL_IDENTITY_FAILED/ },
  { kind: 'tier', options: (fn) => ({ tier: fn }), block: () => ({ limit: { default: 2, pro: 100 } }), boundMs: IDENTITY_TIMEOUT, logged: /FST_RRL_REQUEST_VALUE_FAILED/ },
  { kind: 'requestLimit', block: (fn) => ({ requestLimit: fn }), boundMs: IDENTITY_TIMEOUT, logged: /FST_RRL_REQUEST_VALUE_FAILED/ },
  { kind: 'cost function', block: (fn) => ({ cost: fn }), boundMs: 0, logged: /FST_RRL_INVALID_COST/ },
  { kind: 'skip', block: (fn) => ({ skip: fn }), boundMs: SKIP_TIMEOUT_MS, logged: /FST_RRL_SKIP_FAILED/ },
  { kind: 'allowList function', options: (fn) => ({ allowList: fn }), boundMs: SKIP_TIMEOUT_MS, logged: /FST_RRL_SKIP_FAILED/ },
  { kind: 'replyBuilder', options: (fn) => ({ replyBuilder: fn }), boundMs: 0, logged: /FST_RRL_REPLY_BUILDER_FAILED/ },
  { kind: 'refundOn', block: (fn) => ({ refundOn: fn }), boundMs: 0, logged: /refundOn/ },
  { kind: 'settle', block: (fn) => ({ settle: fn }), boundMs: 0, logged: /FST_RRL_REQUEST_VALUE_FAILED/ }
]

const unhandled: unknown[] = []
process.on('unhandledRejection', (reason: unknown) => { unhandled.push(reason) })

for (const c of CASES) {
  for (const how of FAILURES) {
    test(`${c.kind} that ${how}: the documented fallback, within its bound, logged once`, async (t) => {
      const lines: string[] = []
      const stream = { write: (line: string) => { lines.push(line) } }
      const fn = failing(how) as never
      const { app } = await setupRedisApp(t, 'cb', { identityTimeout: IDENTITY_TIMEOUT, ...c.options?.(fn) }, { logger: { level: 'warn', stream } })
      const block = { algorithm: 'fixed-window', limit: 2, window: '1h', ...c.block?.(fn) } as RateLimitBlock
      app.get('/x', { config: { rateLimit: block } }, async () => 'ok')
      await app.ready()
      unhandled.length = 0

      const answers: Array<{ status: number, type: unknown, ms: number }> = []
      for (let i = 0; i < 3; i++) {
        const started = performance.now()
        const res = await app.inject({ url: '/x', headers: { 'x-api-key': 'k' } })
        answers.push({ status: res.statusCode, type: res.headers['content-type'], ms: performance.now() - started })
        // End-of-request callbacks run after the response: let a bounded one finish before the next request.
        await sleep(IDENTITY_TIMEOUT + 10)
      }
      // Limited as if the callback were absent: limit 2 (the IP, the default tier, the block's limit, cost 1, no skip, no refund, the reservation).
      t.same(answers.map((a) => a.status), [200, 200, 429], 'answered: the documented fallback')
      t.match(answers[2]?.type, /^application\/problem\+json/, 'the refusal is the default problem+json')
      const slowest = Math.max(...answers.map((a) => a.ms))
      t.ok(slowest < c.boundMs + SLACK_MS, `each answer within its bound (${c.boundMs} ms): slowest ${slowest.toFixed(0)} ms`)
      const reports = lines.filter((line) => c.logged.test(line))
      t.equal(reports.length, 1, `three failures in one burst: logged once (${lines.length} warn lines)`)
      await sleep(10)
      t.same(unhandled, [], 'no unhandled rejection')
    })
  }
}
