import type { BlockParams } from '../../store/algorithms.js'
import { hashValue } from '../../util/hash.js'
import type { BlockKind, KindRun } from '../contract.js'
import { LONG_HOLD_MS } from '../../limits.js'
import { memoryAlgorithms } from '../window/memory/algorithms.js'
import { rateTerms, unitsBy } from '../window/kind.js'
import { periodAt, type PeriodBoundaries } from './calendar.js'
import type { RateLimitWeekday } from '../../types/index.js'

/*
 * Calendar periods: a fixed-window count over the day, week, month or year
 * that holds now, in a time zone. Node computes the boundaries around its
 * clock (calendar.ts) and sends them; the batch script picks the one holding
 * Redis TIME (batch.lua periodFn), as paramsAt does for the memory store.
 */

function boundariesOf (run: KindRun): PeriodBoundaries {
  if (run.period === undefined) throw new TypeError('a period run carries its boundaries')
  return run.period
}

/** A run's numbers at `now`: the period holding it, picked as the batch script picks it. */
function paramsAt (run: KindRun, now: number): BlockParams {
  const period = periodAt(boundariesOf(run).bounds(), Math.floor(now))
  if (period === undefined) throw new Error('now is outside the calendar periods sent')
  return { ...run.params, windowMs: period[1] - period[0], start: period[0] }
}

const fixedWindow = memoryAlgorithms['fixed-window']

export const periodKind: BlockKind = {
  name: 'period',
  /**
   * `PC` + the unit's letter + 7 characters of SHA-256 over the time zone (as
   * declared) and weekStart (`PCmX3k9aQ2`). The period's start is in the state
   * (fixed-window's tag), so one key serves every period. Format 2 lived under `FP`.
   */
  keySuffix: ({ period }) => {
    if (period === undefined) throw new TypeError('a period block has a calendar spec')
    const { unit, timeZone, weekStart } = period.spec
    return 'PC' + unit.charAt(0) + hashValue(`${timeZone}|${weekStart}`).slice(0, 7)
  },
  holdsSlot: false,
  straight: true,
  callArg: (cost) => cost,
  specTail: (run) => boundariesOf(run).arg(),
  chargeMark: (_run, _decision, at) => at,
  paramsAt,
  // A quota: units given back elsewhere are seen within LONG_HOLD_MS.
  denyHold: (_run, now, until) => Math.min(until, now + LONG_HOLD_MS),
  // `w` is the current period's length: the strings are rendered again in each period.
  headerTerms: (run) => rateTerms(run.algorithm, run.params.limit, run.params.burst, boundariesOf(run).lengthMs()),
  headerEpoch: (run) => boundariesOf(run).bounds()[1],
  memoryStep: (state, run, arg, now) => fixedWindow.step(state, paramsAt(run, now), Number(arg), now),
  memoryUnits: unitsBy(() => fixedWindow, paramsAt),
  summarize: (row, period) => {
    if (period === undefined) return
    // The current period's length when read: copySummaries copies it as a value.
    Object.defineProperty(row, 'windowMs', { get: () => period.lengthMs(), enumerable: true })
    row.period = period.spec.unit
    row.timeZone = period.spec.timeZone
    if (period.spec.unit === 'week') row.weekStart = period.spec.weekStart as RateLimitWeekday
  }
}
