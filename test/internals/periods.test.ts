/**
 * Calendar-period boundaries as Node computes them (lib/kinds/period/calendar.ts):
 * the previous, current and next periods around its clock, from Intl, cached
 * until the clock leaves the current period.
 */
import { test } from 'tap'
import { CalendarPeriod, periodAt, zoneFormat, type CalendarSpec } from '../../lib/kinds/period/calendar.js'

const iso = (ms: number): string => new Date(ms).toISOString()

function periodOf (spec: Partial<CalendarSpec> & Pick<CalendarSpec, 'unit'>, at: number): { period: CalendarPeriod, calls: () => number, clock: { now: number } } {
  const full: CalendarSpec = { timeZone: 'UTC', weekStart: 1, ...spec }
  const format = zoneFormat(full.timeZone) as Intl.DateTimeFormat
  let calls = 0
  const counted = new Proxy(format, {
    get (target, name) {
      if (name === 'formatToParts') return (t: number) => { calls++; return target.formatToParts(t) }
      return Reflect.get(target, name) as unknown
    }
  })
  const clock = { now: at }
  return { period: new CalendarPeriod(full, counted, () => clock.now), calls: () => calls, clock }
}

test('months in Europe/Berlin: local midnight of the 1st, summer time included', async (t) => {
  const { period } = periodOf({ unit: 'month', timeZone: 'Europe/Berlin' }, Date.UTC(2030, 2, 15))
  t.same(period.bounds().map(iso), ['2030-01-31T23:00:00.000Z', '2030-02-28T23:00:00.000Z', '2030-03-31T22:00:00.000Z', '2030-04-30T22:00:00.000Z'])
  t.equal(period.lengthMs(), 31 * 86_400_000 - 3_600_000, 'March loses the hour summer time takes')
  t.equal(period.arg(), period.bounds().join(':'))
})

test('a day whose midnight does not exist starts when the clocks resume; a skipped day is empty', async (t) => {
  // Chile moves to summer time at 00:00 on 2026-09-06: that day begins at 01:00 local (04:00 UTC).
  const { period } = periodOf({ unit: 'day', timeZone: 'America/Santiago' }, Date.UTC(2026, 8, 6, 12))
  t.same(period.bounds().map(iso), ['2026-09-05T04:00:00.000Z', '2026-09-06T04:00:00.000Z', '2026-09-07T03:00:00.000Z', '2026-09-08T03:00:00.000Z'])
  // Samoa skipped 2011-12-30 entirely.
  const apia = periodOf({ unit: 'day', timeZone: 'Pacific/Apia' }, Date.UTC(2011, 11, 29, 12)).period.bounds()
  t.equal(apia[2], apia[3], 'the day that never was: an empty period, never picked')
  t.equal(periodAt(apia, apia[2]), undefined, 'its start belongs to no period sent (the next one would)')
})

test('weeks start on weekStart; years in a half-hour zone', async (t) => {
  const monday = periodOf({ unit: 'week' }, Date.UTC(2030, 0, 1, 12)).period.bounds()
  t.equal(iso(monday[1]), '2029-12-31T00:00:00.000Z', '2030-01-01 is a Tuesday: the week began on Monday')
  const sunday = periodOf({ unit: 'week', weekStart: 7, timeZone: 'America/New_York' }, Date.UTC(2030, 0, 1, 12)).period.bounds()
  t.equal(iso(sunday[1]), '2029-12-30T05:00:00.000Z')
  const year = periodOf({ unit: 'year', timeZone: 'Asia/Kolkata' }, Date.UTC(2030, 5, 1)).period.bounds()
  t.same(year.map(iso), ['2028-12-31T18:30:00.000Z', '2029-12-31T18:30:00.000Z', '2030-12-31T18:30:00.000Z', '2031-12-31T18:30:00.000Z'])
})

test('boundaries are computed once per period: no Intl call while the clock stays in it', async (t) => {
  const { period, calls, clock } = periodOf({ unit: 'month', timeZone: 'Europe/Berlin' }, Date.UTC(2030, 0, 10))
  period.arg()
  const first = calls()
  t.ok(first > 0, `${first} formatToParts calls for the first computation`)
  for (let i = 0; i < 1000; i++) {
    clock.now += 60_000
    period.arg()
    period.lengthMs()
  }
  t.equal(calls(), first, '1000 lookups within January: no further Intl call')
  clock.now = Date.UTC(2030, 1, 5)
  period.arg()
  t.ok(calls() > first, 'recomputed once the clock passed the cached period')
  t.equal(iso(period.bounds()[1]), '2030-01-31T23:00:00.000Z')
})

test('periodAt picks the period holding now among the three, else none', async (t) => {
  const bounds = [1000, 5000, 12_000, 20_000] as const
  t.same(periodAt(bounds, 1000), [1000, 5000])
  t.same(periodAt(bounds, 4999), [1000, 5000])
  t.same(periodAt(bounds, 5000), [5000, 12_000])
  t.same(periodAt(bounds, 19_999), [12_000, 20_000])
  t.equal(periodAt(bounds, 999), undefined)
  t.equal(periodAt(bounds, 20_000), undefined)
  t.equal(zoneFormat('Not/AZone'), undefined)
})
