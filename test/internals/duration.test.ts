import { test } from 'tap'
import { parseWindow } from '../../lib/policy/duration.js'
import { MAX_WINDOW_MS } from '../../lib/limits.js'
import { errors } from '../../lib/index.js'
import { buildApp, setupRedisApp } from '../helpers/app.js'

const ok = async (): Promise<string> => 'ok'

test('durations read by @lukeed/ms, as @fastify/rate-limit reads timeWindow', async (t) => {
  const cases: Array<[string, number]> = [
    ['500ms', 500],
    ['1s', 1000],
    ['15m', 900_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['1 minute', 60_000],
    ['15 minutes', 900_000],
    ['2 mins', 120_000],
    ['30 seconds', 30_000],
    ['10 secs', 10_000],
    ['250 milliseconds', 250],
    ['1 hour', 3_600_000],
    ['2 hrs', 7_200_000],
    ['1 day', 86_400_000],
    ['1.5s', 1500],
    ['1.5 hours', 5_400_000],
    ['.5s', 500],
    ['1 Minute', 60_000],
    ['  1 minute  ', 60_000],
    ['1000', 1000]
  ]
  for (const [input, ms] of cases) t.equal(parseWindow(input), ms, JSON.stringify(input))
  t.equal(parseWindow(1), 1, 'a number is milliseconds')
  t.equal(parseWindow(86_400_000), 86_400_000, 'one day is the longest window')
})

test('what is refused, with a message that quotes the string', async (t) => {
  const unreadable = ['', '   ', 'minute', '1 fortnight', '1m30s', '1e3', 'one minute', '0s', '0', '1-m', 'x'.repeat(65), '1'.repeat(500) + 'x']
  for (const input of unreadable) {
    const message = parseWindow(input)
    t.type(message, 'string', JSON.stringify(input))
    t.match(message, /must be milliseconds or a duration string like '500ms'.*'15 minutes'/, JSON.stringify(input))
    if (input.length < 65) t.ok((message as string).includes(`(got ${JSON.stringify(input)})`), `quotes ${JSON.stringify(input)}: ${String(message)}`)
  }
  // Read, but outside 1 ms .. 1 day (the default bound: penalties, the breaker's cooldown), or not whole milliseconds.
  t.equal(parseWindow('1w'), 'must be between 1 ms and 1 day (got "1w" = 604800000 ms)')
  t.equal(parseWindow('25 hours'), 'must be between 1 ms and 1 day (got "25 hours" = 90000000 ms)')
  t.equal(parseWindow('-1s'), 'must be between 1 ms and 1 day (got "-1s" = -1000 ms)')
  t.equal(parseWindow('1 year'), 'must be between 1 ms and 1 day (got "1 year" = 31557600000 ms)')
  // A block's window goes to 366 days.
  t.equal(parseWindow('1w', MAX_WINDOW_MS), 604_800_000)
  t.equal(parseWindow('1 week', MAX_WINDOW_MS), 604_800_000)
  t.equal(parseWindow('30d', MAX_WINDOW_MS), 2_592_000_000)
  t.equal(parseWindow('1y', MAX_WINDOW_MS), 31_557_600_000, '@lukeed/ms: a year is 365.25 days')
  t.equal(parseWindow('366d', MAX_WINDOW_MS), MAX_WINDOW_MS)
  t.equal(parseWindow('367d', MAX_WINDOW_MS), 'must be between 1 ms and 366 days (got "367d" = 31708800000 ms)')
  for (const month of ['1M', '2 M', 'mo', '1mo', '3 months', '1 Month', '1 MONTH']) {
    t.match(parseWindow(month, MAX_WINDOW_MS), /^has no month unit .*use period: 'month'/, `${month} points to period`)
  }
  t.equal(parseWindow('1m', MAX_WINDOW_MS), 60_000, 'lowercase m stays a minute')
  t.equal(parseWindow('1.5ms'), 'must be a whole number of milliseconds (got "1.5ms" = 1.5)')
  t.equal(parseWindow('0.5'), 'must be a whole number of milliseconds (got "0.5" = 0.5)')
  t.equal(parseWindow(1.5), 'must be a whole number of milliseconds (got 1.5)')
  t.equal(parseWindow(0), 'must be between 1 ms and 1 day (got 0 ms)')
  t.equal(parseWindow(Number.POSITIVE_INFINITY), 'must be a whole number of milliseconds (got Infinity)')
  t.equal(parseWindow(Number.NaN), 'must be a whole number of milliseconds (got NaN)')
  t.match(parseWindow(null), /duration string .*\(got null\)$/)
  t.match(parseWindow({ ms: 1 }), /\(got object\)$/)
})

test('a bad window string fails register with a coded error naming the route, the field and the string', async (t) => {
  const app = await buildApp({ store: 'memory' })
  t.teardown(async () => { await app.close() })
  let caught: unknown
  try {
    app.get('/x', { config: { rateLimit: { limit: 5, window: '1 fortnight' } } }, ok)
  } catch (error) {
    caught = error
  }
  t.ok(caught instanceof errors.FST_RRL_INVALID_BLOCK, 'a FST_RRL_INVALID_BLOCK')
  t.equal((caught as Error).message, 'Invalid rate limit for route GET /x: `window` must be milliseconds or a duration string like \'500ms\', \'1s\', \'1m\', \'15 minutes\', \'1 hour\', \'1d\' (got "1 fortnight")')
  const other = await buildApp({ store: 'memory' })
  t.teardown(async () => { await other.close() })
  t.throws(() => other.get('/y', { config: { rateLimit: { limit: 5, window: '400 days' } } }, ok), { code: 'FST_RRL_INVALID_BLOCK', message: /`window` must be between 1 ms and 366 days \(got "400 days" = 34560000000 ms\)/ })
  t.throws(() => other.get('/m', { config: { rateLimit: { limit: 5, window: '1M' } } }, ok), { code: 'FST_RRL_INVALID_BLOCK', message: /`window` has no month unit \(got "1M"; '1M' would read as one minute\): use period: 'month'/ })
  await t.rejects(buildApp({ store: 'memory', defaultLimit: { limit: 5, window: '1 month' } }), { code: 'FST_RRL_INVALID_BLOCK', message: /"1 month"/ })
  await t.rejects(buildApp({ store: 'memory', defaultLimit: { limit: 5, window: '1m', penalty: { after: 1, for: '1m', max: '2d' } } }), { code: 'FST_RRL_INVALID_BLOCK', message: /`penalty.max` must be between 1 ms and 1 day/ }, 'a penalty stays within a day')
  await t.rejects(buildApp({ store: 'memory', circuitBreaker: { cooldown: '2d' } }), { code: 'FST_RRL_INVALID_OPTION', message: /between 1 ms and 1 day/ }, 'so does the breaker\'s cooldown')
})

test('long-form windows enforce the same limit as their short form, against a real Redis', async (t) => {
  const { app, clock } = await setupRedisApp(t, 'dur')
  app.get('/long', { config: { rateLimit: { limit: 2, window: '1 minute', name: 'long' } } }, ok)
  app.get('/log', { config: { rateLimit: { limit: 1, window: '15 minutes', algorithm: 'sliding-log', name: 'log' } } }, ok)
  await app.ready()
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) {
    const reply = await app.inject({ url: '/long' })
    statuses.push(reply.statusCode)
    t.equal(reply.headers['ratelimit-policy'], '"long";q=2;w=60')
  }
  t.same(statuses, [200, 200, 429])
  clock.advance(60_000 * 2)
  t.equal((await app.inject({ url: '/long' })).statusCode, 200, 'admitted again two minutes later')

  t.equal((await app.inject({ url: '/log' })).statusCode, 200)
  const refused = await app.inject({ url: '/log' })
  t.equal(refused.statusCode, 429)
  t.equal(refused.headers['ratelimit-policy'], '"log";q=1;w=900')
  t.equal(refused.headers['retry-after'], '900', 'fifteen minutes, in seconds')
  clock.advance(15 * 60_000 - 1)
  t.equal((await app.inject({ url: '/log' })).statusCode, 429, 'one ms short of fifteen minutes')
  clock.advance(1)
  t.equal((await app.inject({ url: '/log' })).statusCode, 200, 'fifteen minutes later')
  t.same(app.rateLimit.policies().filter((p) => p.method === 'GET').map((p) => [p.url, p.limit !== false && p.limit.windowMs]), [['/long', 60_000], ['/log', 900_000]])
})
