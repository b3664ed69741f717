/**
 * Quotas: what a long window or a period block may declare (exact integers
 * below 2^53, exactly one of window and period, valid time zones), and the
 * deny cache keeping entries of such blocks about a second at most.
 */
import { test } from 'tap'
import { buildApp, setupRedisApp } from './helpers/app.js'
import type { RateLimitBlock } from '../lib/index.js'

const ok = async (): Promise<string> => 'ok'

/** The startup error of a block on a memory-store app (or undefined when it compiles). */
async function blockError (block: unknown): Promise<Error | undefined> {
  const app = await buildApp({ store: 'memory' })
  try {
    app.get('/q', { config: { rateLimit: block as RateLimitBlock } }, ok)
    await app.ready()
    return undefined
  } catch (error) {
    return error as Error
  } finally {
    await app.close()
  }
}

const invalid = (field: string, text: RegExp) => ({ code: 'FST_RRL_INVALID_BLOCK', message: new RegExp(`\`${field}\` ${text.source}`) })

test('max(limit, burst) × window stays below 2^53: the error names the largest limit for that window', async (t) => {
  // 2^53 / 30 days = 3,474,999.2; a year of 366 days: 284,836.
  t.equal(await blockError({ limit: 3_474_999, window: '30d' }), undefined, 'the largest exact limit for 30 days')
  t.match(await blockError({ limit: 3_475_000, window: '30d' }), invalid('limit', /must be an integer from 1 to 3474999, the largest for a 2592000000 ms window \(sliding-window needs max\(limit, burst\) × window below 2\^53\)/))
  t.match(await blockError({ limit: 10, burst: 284_837, window: '366d', algorithm: 'token-bucket' }), invalid('burst', /must be an integer from 1 to 284836, the largest/))
  t.match(await blockError({ limit: 284_837, window: '366d', algorithm: 'gcra' }), invalid('limit', /must be an integer from 1 to 284836, the largest/))
  t.match(await blockError({ limit: { default: 10, pro: 3_475_000 }, window: '30d' }), invalid('limit', /must be an integer from 1 to 3474999, the largest .* for tier "pro"/), 'a tier map too')
  t.equal(await blockError({ limit: 100_000_000, window: '366d', algorithm: 'fixed-window' }), undefined, 'fixed-window only counts: the usual maximum')
  t.equal(await blockError({ limit: 100_000_000, period: 'year' }), undefined, 'so does a period')
  t.match(await blockError({ limit: 10_001, window: '366d', algorithm: 'sliding-log' }), invalid('limit', /must be an integer from 1 to 10000 for sliding-log/))
  t.equal(await blockError({ limit: 100_000_000, window: '1d' }), undefined, 'a day: unchanged')
  t.match(await blockError({ limit: 5, window: '30d', localLimit: 3_475_000 }), invalid('localLimit', /must be an integer from 1 to 3474999/))
})

test('runtime overrides and requestLimit results keep to the same bound', async (t) => {
  const { app } = await setupRedisApp(t, 'quota-bound')
  app.get('/q', { config: { rateLimit: { limit: 5, window: '30d', name: 'q', requestLimit: (request) => Number(request.headers['x-limit']) } } }, ok)
  await app.ready()
  const base = { target: 'GET /q', ttl: 60_000, actor: 'test', reason: 'bound' }
  await t.rejects(app.rateLimit.setOverride({ ...base, limit: 3_475_000 }), { code: 'FST_RRL_INVALID_API_CALL', message: /limit must be an integer from 1 to 3474999/ })
  const record = await app.rateLimit.setOverride({ ...base, limit: 3_474_999 })
  t.equal(record.limit, 3_474_999, 'the largest is accepted')
  await app.rateLimit.clearOverride(record.id, { actor: 'test', reason: 'bound' })
  const over = await app.inject({ url: '/q', headers: { 'x-limit': '3475000' } })
  t.equal(over.headers['ratelimit-policy'], '"q";q=5;w=2592000', 'a requestLimit above the bound falls back to the block\'s limit')
  const within = await app.inject({ url: '/q', headers: { 'x-limit': '3474999' } })
  t.equal(within.headers['ratelimit-policy'], '"q";q=3474999;w=2592000')
})

test('a block has exactly one of window and period; period fields are checked at startup', async (t) => {
  t.match(await blockError({ limit: 5, window: '1d', period: 'month' }), invalid('period', /cannot be combined with window: a block has exactly one of window, period/))
  t.match(await blockError({ limit: 5, period: 'fortnight' }), invalid('period', /must be 'day', 'week', 'month' or 'year' \(got "fortnight"\)/))
  t.match(await blockError({ limit: 5, period: 'month', algorithm: 'sliding-window' }), invalid('algorithm', /must be 'fixed-window' or omitted with period/))
  t.equal(await blockError({ limit: 5, period: 'month', algorithm: 'fixed-window' }), undefined)
  t.match(await blockError({ limit: 5, period: 'month', burst: 10 }), invalid('burst', /only applies to token-bucket and gcra/))
  t.match(await blockError({ limit: 5, period: 'day', timeZone: 'Mars/Olympus_Mons' }), invalid('timeZone', /must be an IANA time zone name like 'Europe\/Berlin' or 'UTC' \(got "Mars\/Olympus_Mons"\)/))
  t.match(await blockError({ limit: 5, period: 'day', timeZone: 42 }), invalid('timeZone', /must be an IANA time zone name.*\(got 42\)/))
  t.match(await blockError({ limit: 5, window: '1d', timeZone: 'UTC' }), invalid('timeZone', /only applies to a block with period/))
  t.match(await blockError({ limit: 5, period: 'week', weekStart: 0 }), invalid('weekStart', /must be an integer from 1 \(Monday\) to 7 \(Sunday\)/))
  t.match(await blockError({ limit: 5, period: 'week', weekStart: 8 }), invalid('weekStart', /must be an integer from 1 \(Monday\) to 7 \(Sunday\)/))
  t.match(await blockError({ limit: 5, period: 'month', weekStart: 1 }), invalid('weekStart', /only applies to period: 'week'/))
  t.equal(await blockError({ limit: 5, period: 'week', weekStart: 7, timeZone: 'America/New_York' }), undefined)
  t.match(await blockError({ limit: 5, window: '1M' }), invalid('window', /has no month unit .*use period: 'month'/))
  t.match(await blockError({ limit: 5 }), invalid('window', /must be milliseconds or a duration string/), 'neither: the window is missing')
})

test('the deny cache keeps a long-window or period refusal about a second, answering with the real retry time', async (t) => {
  const { app, redis, prefix, clock } = await setupRedisApp(t, 'quota-deny')
  clock.now = Date.UTC(2030, 0, 10)
  app.get('/month', { config: { rateLimit: { limit: 1, period: 'month', by: 'header:x-key', name: 'month' } } }, ok)
  app.get('/week', { config: { rateLimit: { limit: 1, window: '7d', algorithm: 'fixed-window', by: 'header:x-key', name: 'week' } } }, ok)
  app.get('/minute', { config: { rateLimit: { limit: 1, window: '1m', algorithm: 'fixed-window', by: 'header:x-key', name: 'minute' } } }, ok)
  await app.ready()
  const call = async (url: string) => await app.inject({ url, headers: { 'x-key': 'k' } })
  for (const url of ['/month', '/week', '/minute']) {
    await call(url)
    t.equal((await call(url)).statusCode, 429, `${url}: refused by Redis, remembered locally`)
  }
  // Another instance gives the units back (a reset there): Redis forgets the counts, this instance's cache does not know.
  const keys = await redis.keys(`${prefix}:*`)
  t.equal(keys.length, 3)
  await redis.del(...keys)
  clock.advance(999)
  const cached = await call('/month')
  t.equal(cached.statusCode, 429, 'within the second: still answered from the cache')
  t.equal(cached.headers['retry-after'], String(22 * 86400), 'with the real time to the end of the month (22 days less 999 ms, rounded up)')
  t.equal((await call('/week')).statusCode, 429)
  clock.advance(1)
  t.equal((await call('/month')).statusCode, 200, 'a second later: asked Redis again, admitted')
  t.equal((await call('/week')).statusCode, 200, 'a 7-day window too')
  t.equal((await call('/minute')).statusCode, 429, 'a 1-minute window keeps its entry until its retry time')
  t.equal(app.rateLimit.stats().limited > 0, true)
})
