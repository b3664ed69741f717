import { BLOCK_DEFAULTS, DAY_MS, MAX_TIME_ZONE_LENGTH } from '../../limits.js'
import { CalendarPeriod, PERIODS, zoneFormat, type PeriodUnit } from './calendar.js'
import type { Fail } from '../../policy/block-fields.js'
import type { Counting } from '../../policy/shape.js'
import { choiceMessage, isCount, isOneOf, shown } from '../../util/validate.js'

/**
 * A period's nominal length: the static windowMs of its runs (every decision
 * uses the real period's start and length; policies() shows the current one).
 */
export const NOMINAL_PERIOD_MS: Record<PeriodUnit, number> = {
  day: DAY_MS,
  week: 7 * DAY_MS,
  month: 30 * DAY_MS,
  year: 365 * DAY_MS
}

/**
 * `period`, `timeZone` (an IANA name Intl knows, default 'UTC') and
 * `weekStart` (1 = Monday … 7 = Sunday, default 1; weeks only). A period is a
 * fixed-window count: another `algorithm` is an error. `now` is the clock
 * Node computes boundaries with.
 */
export function readPeriod (input: Record<string, unknown>, fail: Fail, now: () => number): CalendarPeriod {
  const unit = input.period
  if (!isOneOf(unit, PERIODS)) fail('period', choiceMessage(unit, PERIODS))
  if (input.algorithm !== undefined && input.algorithm !== 'fixed-window') {
    fail('algorithm', `must be 'fixed-window' or omitted with period: a calendar period is a fixed-window count (got ${shown(input.algorithm)})`)
  }
  const timeZone = input.timeZone ?? BLOCK_DEFAULTS.timeZone
  const format = typeof timeZone === 'string' && timeZone.length <= MAX_TIME_ZONE_LENGTH ? zoneFormat(timeZone) : undefined
  if (typeof timeZone !== 'string' || format === undefined) fail('timeZone', `must be an IANA time zone name like 'Europe/Berlin' or 'UTC' (got ${shown(input.timeZone)})`)
  if (input.weekStart !== undefined && unit !== 'week') fail('weekStart', `only applies to period: 'week' (period is '${unit}')`)
  const weekStart = input.weekStart ?? BLOCK_DEFAULTS.weekStart
  if (!isCount(weekStart, 7)) fail('weekStart', `must be an integer from 1 (Monday) to 7 (Sunday) (got ${shown(input.weekStart)})`)
  return new CalendarPeriod({ unit, timeZone, weekStart }, format, now)
}

/** A period block counts by fixed-window over the period; its static window is the nominal length. */
export function readPeriodCounting (input: Record<string, unknown>, fail: Fail, now: () => number): Counting {
  const period = readPeriod(input, fail, now)
  return { algorithm: 'fixed-window', windowMs: NOMINAL_PERIOD_MS[period.spec.unit], period, delayMs: undefined }
}
