import { DAY_MS } from '../store/algorithms.js'
import { CalendarPeriod, PERIODS, zoneFormat, type PeriodUnit } from '../kinds/period/calendar.js'
import type { Fail } from './block-fields.js'
import { choiceMessage, isCount, isOneOf, shown } from '../util/validate.js'
import { item } from '../util/item.js'

/**
 * What a block counts over: exactly one of these fields. A third kind
 * (`concurrency`) joins by being added here.
 */
export const BLOCK_KINDS = ['window', 'period', 'concurrency'] as const
export type BlockKind = typeof BLOCK_KINDS[number]

/** The block's kind; a block with none is a window block (whose own error says what is missing). */
export function readKind (input: Record<string, unknown>, fail: Fail): BlockKind {
  const given = BLOCK_KINDS.filter((field) => input[field] !== undefined)
  if (given.length > 1) {
    fail(item(given, 1), `cannot be combined with ${item(given, 0)}: a block has exactly one of ${BLOCK_KINDS.join(', ')}`)
  }
  if (given[0] !== 'period') {
    for (const field of ['timeZone', 'weekStart']) {
      if (input[field] !== undefined) fail(field, 'only applies to a block with period (a window is a duration aligned to the epoch)')
    }
  }
  return given[0] ?? 'window'
}

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
  const timeZone = input.timeZone ?? 'UTC'
  const format = typeof timeZone === 'string' && timeZone.length <= 64 ? zoneFormat(timeZone) : undefined
  if (typeof timeZone !== 'string' || format === undefined) fail('timeZone', `must be an IANA time zone name like 'Europe/Berlin' or 'UTC' (got ${shown(input.timeZone)})`)
  if (input.weekStart !== undefined && unit !== 'week') fail('weekStart', `only applies to period: 'week' (period is '${unit}')`)
  const weekStart = input.weekStart ?? 1
  if (!isCount(weekStart, 7)) fail('weekStart', `must be an integer from 1 (Monday) to 7 (Sunday) (got ${shown(input.weekStart)})`)
  return new CalendarPeriod({ unit, timeZone, weekStart }, format, now)
}
