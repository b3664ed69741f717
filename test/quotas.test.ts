/**
 * Quotas: windows up to 366 days and calendar periods (day, week, month,
 * year in a time zone), on both stores, with the injected clock. Node computes
 * a period's boundaries; the script (or the memory store) picks the period
 * that holds its own clock. Then what such a block may declare (exact
 * integers below 2^53, exactly one of window and period, valid time zones),
 * and the deny cache keeping entries of such blocks about a second at most.
 */
import { test } from 'tap'
import type { FastifyInstance } from 'fastify'
import { buildApp, setupRedisApp, setupStoreApp, TestClock } from './helpers/app.js'
import { cleanUpPrefix, createClient, getRedis, readState, uniquePrefix, windowTag } from './helpers/redis.js'
import { PERIOD_CLOCK } from '../lib/kinds/period/calendar.js'
import type { RateLimitBlock } from '../lib/index.js'

const ok = async (): Promise<string> => 'ok'
const STORES = ['redis', 'memory'] as const
const DAY = 86_400_000

async function periodApp (t: Parameters<typeof setupStoreApp>[0], store: typeof STORES[number], block: RateLimitBlock, at: number): Promise<{ app: FastifyInstance, clock: TestClock }> {
  const { app, clock } = await setupStoreApp(t, store, `period-${store}`)
  clock.now = at
  app.get('/q', { config: { rateLimit: { by: 'header:x-key', name: 'plan', ...block } } }, ok)
  await app.ready()
  return { app, clock }
}

const call = async (app: FastifyInstance, key = 'k1') => await app.inject({ url: '/q', headers: { 'x-key': key } })

for (const store of STORES) {
  test(`${store}: a monthly quota resets at midnight on the 1st in Europe/Berlin, not in UTC`, async (t) => {
    // 2030-01-31 23:59:59 in Berlin (UTC+1) is 22:59:59 UTC.
    const beforeBerlinMidnight = Date.UTC(2030, 0, 31, 22, 59, 59)
    const berlin = await periodApp(t, store, { limit: 2, period: 'month', timeZone: 'Europe/Berlin' }, beforeBerlinMidnight)
    const utc = await periodApp(t, store, { limit: 2, period: 'month' }, beforeBerlinMidnight)
    for (const { app } of [berlin, utc]) {
      const first = await call(app)
      t.equal(first.headers['ratelimit-policy'], '"plan";q=2;w=2678400', 'w is January: 31 days')
      t.equal((await call(app)).statusCode, 200)
    }
    const refused = await call(berlin.app)
    t.equal(refused.statusCode, 429)
    t.equal(refused.headers['retry-after'], '1', 'Berlin: one second to the real end of the month')
    t.equal(refused.headers.ratelimit, '"plan";r=0;t=1')
    const utcRefused = await call(utc.app)
    t.equal(utcRefused.headers['retry-after'], String(3600 + 1), 'UTC: an hour and a second to go')

    berlin.clock.advance(1000)
    utc.clock.advance(1000)
    const february = await call(berlin.app)
    t.equal(february.statusCode, 200, 'Berlin: February has begun, a fresh quota')
    t.equal(february.headers['ratelimit-policy'], '"plan";q=2;w=2419200', 'w is February 2030: 28 days')
    t.equal(february.headers.ratelimit, `"plan";r=1;t=${28 * 86400}`, 't counts to the end of February in Berlin')
    t.equal((await call(utc.app)).statusCode, 429, 'UTC: still January')
    utc.clock.advance(3600_000)
    t.equal((await call(utc.app)).statusCode, 200, 'UTC: February from 00:00 UTC')
    t.equal((await call(berlin.app, 'k2')).statusCode, 200, 'another key has its own quota')
  })

  test(`${store}: a day period across a daylight-saving change lasts 23 and 25 hours`, async (t) => {
    // Berlin moves to summer time on 2030-03-31 (02:00 → 03:00): that day has 23 hours.
    const spring = await periodApp(t, store, { limit: 1, period: 'day', timeZone: 'Europe/Berlin' }, Date.UTC(2030, 2, 31, 10))
    const admitted = await call(spring.app)
    t.equal(admitted.headers['ratelimit-policy'], '"plan";q=1;w=82800', 'w = 23 hours')
    const refused = await call(spring.app)
    // Midnight of April 1st in Berlin (UTC+2) is 22:00 UTC: 12 hours after 10:00 UTC.
    t.equal(refused.headers['retry-after'], String(12 * 3600))
    spring.clock.now = Date.UTC(2030, 2, 31, 21, 59, 59, 999)
    t.equal((await call(spring.app)).statusCode, 429, '1 ms before midnight in Berlin')
    spring.clock.advance(1)
    t.equal((await call(spring.app)).statusCode, 200, 'midnight in Berlin (summer time)')

    // ... and back to winter time on 2030-10-27 (03:00 → 02:00): 25 hours.
    const autumn = await periodApp(t, store, { limit: 1, period: 'day', timeZone: 'Europe/Berlin' }, Date.UTC(2030, 9, 27, 12))
    t.equal((await call(autumn.app)).headers['ratelimit-policy'], '"plan";q=1;w=90000', 'w = 25 hours')
    // Midnight of the 28th in Berlin (UTC+1) is 23:00 UTC.
    t.equal((await call(autumn.app)).headers['retry-after'], String(11 * 3600))
  })

  test(`${store}: February in a leap year is 29 days`, async (t) => {
    const { app, clock } = await periodApp(t, store, { limit: 1, period: 'month' }, Date.UTC(2028, 1, 28, 23, 59, 59))
    t.equal((await call(app)).headers['ratelimit-policy'], '"plan";q=1;w=2505600')
    clock.advance(1000)
    const leapDay = await call(app)
    t.equal(leapDay.statusCode, 429, 'February 29th is still February')
    t.equal(leapDay.headers['retry-after'], String(86400))
    clock.advance(DAY)
    t.equal((await call(app)).statusCode, 200, 'March 1st')
  })

  test(`${store}: weeks start on weekStart in the time zone; a year period`, async (t) => {
    // 2030-01-01 is a Tuesday: a Monday week began on 2029-12-31, a Sunday week on 2029-12-30.
    const monday = await periodApp(t, store, { limit: 1, period: 'week' }, Date.UTC(2030, 0, 1, 12))
    await call(monday.app)
    t.equal((await call(monday.app)).headers['retry-after'], String(5.5 * 86400), 'ends Monday 2030-01-07 00:00 UTC')
    const sunday = await periodApp(t, store, { limit: 1, period: 'week', weekStart: 7, timeZone: 'America/New_York' }, Date.UTC(2030, 0, 1, 12))
    await call(sunday.app)
    // Sunday 2030-01-06 00:00 in New York (UTC-5) is 05:00 UTC.
    t.equal((await call(sunday.app)).headers['retry-after'], String(4 * 86400 + 17 * 3600))
    const year = await periodApp(t, store, { limit: 1, period: 'year', timeZone: 'Asia/Kolkata' }, Date.UTC(2030, 11, 31, 18, 29, 59))
    t.equal((await call(year.app)).headers['ratelimit-policy'], '"plan";q=1;w=31536000')
    t.equal((await call(year.app)).headers['retry-after'], '1', '2031 begins at 18:30 UTC in India')
  })

  test(`${store}: a 30-day sliding window`, async (t) => {
    const { app, clock } = await setupStoreApp(t, store, `long-${store}`)
    app.get('/q', { config: { rateLimit: { limit: 2, window: '30d', by: 'header:x-key', name: 'plan' } } }, ok)
    await app.ready()
    t.equal((await call(app)).headers['ratelimit-policy'], '"plan";q=2;w=2592000')
    await call(app)
    const refused = await call(app)
    t.equal(refused.statusCode, 429)
    const retry = Number(refused.headers['retry-after'])
    t.ok(retry > 0 && retry <= 60 * 86400, `Retry-After ${retry} s, within two windows`)
    clock.advance(retry * 1000)
    t.equal((await call(app)).statusCode, 200, 'admitted at Retry-After')
    clock.advance(61 * DAY)
    t.equal((await call(app)).headers.ratelimit, '"plan";r=1;t=' + String(Math.ceil((60 * DAY - clock.now % (30 * DAY)) / 1000)), 'two windows later only the new request counts (rounded up, it weighs one unit until the next window ends)')
  })

  test(`${store}: two instances whose boundary clocks are 2 s apart agree at the boundary; one clock decides`, async (t) => {
    const clock = new TestClock(Date.UTC(2030, 0, 31, 23, 59, 59))
    const apps = await sharedApps(t, store, clock, [-2000, 2000])
    const [behind, ahead] = apps as [FastifyInstance, FastifyInstance]
    t.equal((await call(behind)).statusCode, 200, 'behind (its Node still in January): January by the shared clock')
    t.equal((await call(ahead)).statusCode, 200, 'ahead (its Node already in February): January by the shared clock')
    if (store === 'redis') t.equal((await call(behind)).statusCode, 429, 'one quota for both instances')
    clock.advance(1000)
    t.equal((await call(behind)).statusCode, 200, 'February for the instance still behind')
    t.equal((await call(ahead)).statusCode, 200, 'February for the instance ahead')
    if (store === 'redis') t.equal((await call(ahead)).statusCode, 429, 'one February quota for both')
  })
  test(`${store}: a period block with tiers and refundOn: refunds go back to the period they were spent in`, async (t) => {
    const { app, clock } = await setupStoreApp(t, store, `prf-${store}`, { tier: (request) => request.headers['x-plan'] as string | undefined })
    clock.now = Date.UTC(2030, 0, 31, 23, 59, 59)
    app.get('/q', {
      config: { rateLimit: { limit: { default: 1, pro: 3 }, period: 'month', by: 'header:x-key', name: 'plan', refundOn: (reply) => reply.statusCode >= 500 } }
    }, async (request, reply) => await reply.code(request.headers['x-fail'] === '1' ? 500 : 200).send('done'))
    await app.ready()
    const pro = { 'x-key': 'p', 'x-plan': 'pro' }
    t.equal((await app.inject({ url: '/q', headers: pro })).headers['ratelimit-policy'], '"plan";q=3;w=2678400;frrl-tier="pro"')
    t.equal((await app.inject({ url: '/q', headers: { ...pro, 'x-fail': '1' } })).statusCode, 500, 'a 5xx: refunded')
    t.equal((await app.inject({ url: '/q', headers: pro })).headers.ratelimit, '"plan";r=1;t=1', 'the refund came back: 2 of 3 spent, not 3')
    await app.inject({ url: '/q', headers: pro })
    t.equal((await app.inject({ url: '/q', headers: pro })).statusCode, 429)
    t.equal((await app.inject({ url: '/q', headers: { 'x-key': 'd' } })).headers['ratelimit-policy'], '"plan";q=1;w=2678400;frrl-tier="default"', 'the default tier')
    clock.advance(1000)
    t.equal((await app.inject({ url: '/q', headers: pro })).statusCode, 200, 'February: a fresh count')
  })
}

/** Instances on one store (Redis: one prefix; memory: one store each) whose Node-side period clocks are skewed. */
async function sharedApps (t: Parameters<typeof setupStoreApp>[0], store: typeof STORES[number], clock: TestClock, skews: number[]): Promise<FastifyInstance[]> {
  const server = store === 'redis' ? await getRedis() : undefined
  const prefix = uniquePrefix('skew')
  const apps: FastifyInstance[] = []
  for (const skew of skews) {
    const options = { clock: clock.read, [PERIOD_CLOCK]: () => clock.now + skew }
    const redis = server === undefined ? undefined : createClient(server)
    const app = await buildApp(redis === undefined ? { store: 'memory', ...options } : { redis, prefix, ...options })
    if (redis !== undefined) cleanUpPrefix(t, redis, prefix, async () => await app.close())
    else t.teardown(async () => { await app.close() })
    app.get('/q', { config: { rateLimit: { limit: 2, period: 'month', by: 'header:x-key', name: 'plan' } } }, ok)
    await app.ready()
    apps.push(app)
  }
  return apps
}

test('a period key is one key per identity, the period start kept in its state', async (t) => {
  const { app, redis, prefix, clock } = await setupRedisApp(t, 'period-key')
  clock.now = Date.UTC(2030, 4, 10)
  app.get('/q', { config: { rateLimit: { limit: 5, period: 'month', timeZone: 'Europe/Berlin', by: 'header:x-key' } } }, ok)
  await app.ready()
  await call(app)
  const keys = await redis.keys(`${prefix}:*`)
  t.equal(keys.length, 1)
  t.match(keys[0], /\}:PCm[A-Za-z0-9_-]{7}$/, 'suffix: PC, the unit, a hash of the time zone')
  // May 2030 in Berlin starts 2030-04-30 22:00 UTC.
  t.same(await readState(redis, keys[0] as string), [windowTag(Date.UTC(2030, 3, 30, 22)), 1], 'the state: the period start (as its tag) and the count')
  const ttl = await redis.pttl(keys[0] as string)
  t.equal(ttl > 0 && ttl <= Date.UTC(2030, 4, 31, 22) - clock.now, true, 'lives until the period ends')
  clock.now = Date.UTC(2030, 5, 10)
  await call(app)
  t.same(await redis.keys(`${prefix}:*`), keys, 'the next period reuses the key')
})

test('policies() and printPolicies show the period, its time zone and the current length', async (t) => {
  const lines: string[] = []
  const { app, clock } = await setupRedisApp(t, 'period-list', { printPolicies: true }, {
    logger: { level: 'info', stream: { write: (line: string) => { lines.push(line) } } }
  })
  clock.now = Date.UTC(2030, 1, 10)
  app.get('/q', { config: { rateLimit: { limit: 5, period: 'month', timeZone: 'Europe/Berlin' } } }, ok)
  app.get('/w', { config: { rateLimit: { limit: 5, window: '7d', algorithm: 'fixed-window' } } }, ok)
  await app.ready()
  const [q, w] = app.rateLimit.policies().filter((row) => row.method === 'GET')
  t.match(q?.limits[0], { algorithm: 'fixed-window', period: 'month', timeZone: 'Europe/Berlin', windowMs: 28 * DAY })
  t.match(w?.limits[0], { windowMs: 7 * DAY, period: undefined })
  clock.now = Date.UTC(2030, 2, 10)
  t.equal(app.rateLimit.policies().find((row) => row.url === '/q')?.limits[0]?.windowMs, 31 * DAY - 3600_000, 'read when called: March in Berlin, 31 days less the hour summer time takes')
  const printed = lines.join('')
  t.match(printed, /month \(Europe\/Berlin\)/)
  t.match(printed, /604800000ms/)
})

for (const store of STORES) {
  test(`${store}: a store clock outside the periods Node sent fails that decision; the route's onRedisError decides`, async (t) => {
    const { app, clock } = await setupStoreApp(t, store, `far-${store}`, { [PERIOD_CLOCK]: () => Date.UTC(2030, 0, 10) } as object)
    clock.now = Date.UTC(2030, 5, 10) // five months after the Node side's clock: outside its three periods
    app.get('/open', { config: { rateLimit: { limit: 1, period: 'month', name: 'open' } } }, ok)
    app.get('/closed', { config: { rateLimit: { limit: 1, period: 'month', name: 'closed', onRedisError: 'closed' } } }, ok)
    await app.ready()
    const open = await app.inject('/open')
    t.equal(open.statusCode, 200, 'fail-open: admitted, not counted in a wrong period')
    t.equal(open.headers.ratelimit, undefined, 'no quota figures: nothing was decided')
    t.equal((await app.inject('/closed')).statusCode, 503, 'fail-closed: 503')
    t.equal(app.rateLimit.stats().degraded, 2)
  })
}

/* ------------------------------------------- what a quota block may declare */

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
