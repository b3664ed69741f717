import { item } from '../../util/item.js'
import { DAY_MS } from '../../limits.js'
/*
 * Calendar periods (`period: 'day' | 'week' | 'month' | 'year'` in a time
 * zone). Redis Lua has no date library, so Node computes the boundaries with
 * Intl: the previous, current and next periods around its own clock, sent with
 * the block's spec in every batch. The script (scripts/batch.lua) and the
 * memory store pick, by their clock, the period that holds `now` (periodAt):
 * instances whose clocks are skewed by less than a period agree on the period,
 * also at the boundary, because one shared clock decides.
 *
 * The boundaries are cached per block and recomputed only when Node's clock
 * leaves the cached current period: no Intl call on the request path.
 */

export const PERIODS = ['day', 'week', 'month', 'year'] as const
export type PeriodUnit = typeof PERIODS[number]

export interface CalendarSpec {
  unit: PeriodUnit
  /** An IANA name, as declared (the key's hash uses it as written, stable across ICU versions). */
  timeZone: string
  /** ISO weekday the week starts on: 1 = Monday … 7 = Sunday. */
  weekStart: number
}

/** b0 < b1 < b2 < b3 (ms): the previous [b0, b1), current [b1, b2) and next [b2, b3) periods. */
export type Boundaries = readonly [number, number, number, number]

/**
 * Test-only: a plugin option under this symbol replaces the clock Node
 * computes boundaries with (never the decision's clock), to test instances
 * whose clocks disagree. Not exported from the package.
 */
export const PERIOD_CLOCK = Symbol('fastify-redis-rate-limit.periodClock')

/** A formatter for `timeZone`, or undefined when Intl does not know the zone. */
export function zoneFormat (timeZone: string): Intl.DateTimeFormat | undefined {
  try {
    return new Intl.DateTimeFormat('en-US', {
      timeZone,
      calendar: 'gregory',
      numberingSystem: 'latn',
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric'
    })
  } catch {
    return undefined
  }
}

/** The period of `bounds` that holds `now`: [start, end), or undefined (a clock more than a period from Node's). Lua: batch.lua periodAt. */
export function periodAt (bounds: Boundaries, now: number): [number, number] | undefined {
  for (let i = 0; i < 3; i++) {
    const start = item(bounds, i)
    const end = item(bounds, i + 1)
    if (now >= start && now < end) return [start, end]
  }
  return undefined
}

/** What the stores read of a period: the boundaries around Node's clock (CalendarPeriod; a test may supply its own). */
export interface PeriodBoundaries {
  bounds: () => Boundaries
  /** The boundaries as the batch script reads them: `b0:b1:b2:b3`. */
  arg: () => string
  lengthMs: () => number
}

export class CalendarPeriod implements PeriodBoundaries {
  readonly spec: CalendarSpec
  readonly #format: Intl.DateTimeFormat
  readonly #now: () => number
  #bounds: Boundaries = [0, 0, 0, 0]
  #arg = ''

  constructor (spec: CalendarSpec, format: Intl.DateTimeFormat, now: () => number) {
    this.spec = spec
    this.#format = format
    this.#now = now
  }

  /** The boundaries around Node's clock, recomputed only when it leaves the cached current period. */
  bounds (): Boundaries {
    const now = this.#now()
    if (now < this.#bounds[1] || now >= this.#bounds[2]) this.#compute(now)
    return this.#bounds
  }

  /** The boundaries as the batch script reads them: `b0:b1:b2:b3`. */
  arg (): string {
    this.bounds()
    return this.#arg
  }

  /** The current period's length by Node's clock (RateLimit-Policy `w`, policies() `windowMs`). */
  lengthMs (): number {
    const bounds = this.bounds()
    return bounds[2] - bounds[1]
  }

  #compute (now: number): void {
    const first = this.#unitStart(this.#localDay(now))
    const bounds = [-1, 0, 1, 2].map((n) => this.#startOf(this.#addUnits(first, n))) as unknown as Boundaries
    this.#bounds = bounds
    this.#arg = bounds.join(':')
  }

  /** The local wall clock at `t`, read as if it were UTC (whole seconds). */
  #wall (t: number): number {
    const parts: Record<string, number> = {}
    for (const part of this.#format.formatToParts(t)) {
      if (part.type !== 'literal') parts[part.type] = Number(part.value)
    }
    const { year, month, day, hour, minute, second } = parts as Record<string, number>
    return Date.UTC(year as number, (month as number) - 1, day, hour, minute, second)
  }

  /** The local date at `t` as the UTC midnight of that date. */
  #localDay (t: number): number {
    const wall = this.#wall(t)
    return wall - (((wall % DAY_MS) + DAY_MS) % DAY_MS)
  }

  /** The first local day of the period that holds `day`. */
  #unitStart (day: number): number {
    const date = new Date(day)
    switch (this.spec.unit) {
      case 'day': return day
      case 'week': {
        const weekday = date.getUTCDay() === 0 ? 7 : date.getUTCDay()
        return day - ((weekday - this.spec.weekStart + 7) % 7) * DAY_MS
      }
      case 'month': return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1)
      case 'year': return Date.UTC(date.getUTCFullYear(), 0, 1)
    }
  }

  #addUnits (day: number, n: number): number {
    const date = new Date(day)
    switch (this.spec.unit) {
      case 'day': return day + n * DAY_MS
      case 'week': return day + 7 * n * DAY_MS
      case 'month': return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + n, 1)
      case 'year': return Date.UTC(date.getUTCFullYear() + n, 0, 1)
    }
  }

  /**
   * The first instant whose local date is `day` or later: local midnight, or
   * the end of a daylight-saving gap where midnight does not exist.
   */
  #startOf (day: number): number {
    let at = day - (this.#wall(day) - day)
    at = day - (this.#wall(at) - at)
    if (this.#localDay(at) >= day && this.#localDay(at - 1) < day) return at
    // Midnight skipped or repeated: search the first instant of the day (rare; once per period).
    let lo = day - 2 * DAY_MS
    let hi = day + 2 * DAY_MS
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2)
      if (this.#localDay(mid) >= day) hi = mid
      else lo = mid
    }
    return hi
  }
}
