import type { AlgorithmName, MemoryAlgorithm, RunAlgorithm } from '../../store/algorithms.js'
import type { BlockKind, KindRun, MemoryChange } from '../contract.js'
import { DAY_MS, LONG_HOLD_MS } from '../../limits.js'
import { memoryAlgorithms } from './memory/algorithms.js'
import { secondsCeil } from '../../util/seconds.js'

/*
 * Window blocks: `limit` per `window`, counted by one of the five algorithms
 * (scripts/<algorithm>.lua, memory/algorithms.ts), the window aligned to the epoch.
 */

/**
 * Uppercase: state format 2 (numbers packed as doubles, scripts/prelude.lua),
 * or fixed-window's format 3 (`FC`: one integer counter, scripts/fixed-window.lua).
 * The decimal format lived under the lowercase codes, format 2 of fixed-window
 * under `FW`.
 */
const SUFFIX: Record<AlgorithmName, string> = {
  'fixed-window': 'FC',
  'sliding-window': 'SW',
  'sliding-log': 'sl',
  'token-bucket': 'TB',
  gcra: 'GC'
}

/**
 * A block with `delay` keeps reservations the undelayed scripts would clamp
 * away (a debt past twice the tolerance, a level below one capacity), so its
 * state has codes of its own: an instance without delay never reads it in a deploy.
 */
const DELAYED_SUFFIX: Partial<Record<AlgorithmName, string>> = {
  'token-bucket': 'TD',
  gcra: 'GD'
}

/** Windows up to a day keep their decimal suffix: old and new instances share those keys. */
const DECIMAL_SUFFIX_MAX_MS = DAY_MS

/** A window run's algorithm: always one of the five. */
function nameOf (algorithm: RunAlgorithm): AlgorithmName {
  if (algorithm === 'concurrency') throw new TypeError('a window run counts by one of the five algorithms')
  return algorithm
}

export function algorithmOf (algorithm: RunAlgorithm): MemoryAlgorithm {
  return memoryAlgorithms[nameOf(algorithm)]
}

/** A kind's units change by its runs' algorithm at their numbers now: give back (`units` < 0) or charge (> 0), as batch.lua's adjustOne. */
export function unitsBy (algorithmOf: (run: KindRun) => MemoryAlgorithm, paramsAt: BlockKind['paramsAt']): BlockKind['memoryUnits'] {
  return (state, run, units, now, chargedAt): MemoryChange => {
    const algorithm = algorithmOf(run)
    if (units < 0) return algorithm.refund?.(state, paramsAt(run, now), -units, now, chargedAt)
    return units > 0 ? algorithm.charge?.(state, paramsAt(run, now), units, now) : undefined
  }
}

export function isBursty (algorithm: RunAlgorithm): boolean {
  return algorithm === 'token-bucket' || algorithm === 'gcra'
}

/**
 * `q` units per `w` seconds. For token-bucket and gcra the quota is the burst
 * capacity and `w` the time to refill it from empty (burst × window / limit),
 * so `r` never exceeds `q` and `t` never exceeds `w`; otherwise `q` = limit, `w` = window.
 */
export function rateTerms (algorithm: RunAlgorithm, limit: number, burst: number, windowMs: number): { quota: number, windowSeconds: number, params: string, slots: false } {
  const bursty = isBursty(algorithm)
  const windowSeconds = Math.max(1, secondsCeil(bursty ? Math.ceil(burst * windowMs / limit) : windowMs))
  return { quota: bursty ? burst : limit, windowSeconds, params: `;w=${windowSeconds}`, slots: false }
}

/**
 * A window up to a day: `SW60000` (the algorithm, the window in ms); a
 * longer one: `SW~` + the ms in base 36 (`SW~eiz5s00` for 366 days; `~`
 * never appears in the decimal form, so the two cannot meet).
 */
function windowSuffix (code: string, windowMs: number): string {
  return windowMs <= DECIMAL_SUFFIX_MAX_MS ? code + windowMs : `${code}~${windowMs.toString(36)}`
}

export const windowKind: BlockKind = {
  name: 'window',
  keySuffix: ({ algorithm, windowMs }) => windowSuffix(SUFFIX[nameOf(algorithm)], windowMs),
  holdsSlot: false,
  straight: true,
  callArg: (cost) => cost,
  specTail: () => '',
  chargeMark: (_run, _decision, at) => at,
  paramsAt: (run) => run.params,
  // A window longer than a day is a quota: units given back elsewhere are seen within LONG_HOLD_MS.
  denyHold: (run, now, until) => run.params.windowMs > DAY_MS ? Math.min(until, now + LONG_HOLD_MS) : until,
  headerTerms: (run) => rateTerms(run.algorithm, run.params.limit, run.params.burst, run.params.windowMs),
  memoryStep: (state, run, arg, now) => algorithmOf(run.algorithm).step(state, run.params, Number(arg), now),
  memoryUnits: unitsBy((run) => algorithmOf(run.algorithm), (run) => run.params)
}

/**
 * A gcra or token-bucket window with `delay`: the window kind whose runs may
 * reserve a later turn. Its spec's tail carries the reach ('d<ms>', or
 * 'n<ms>' for a run that reserves none: scripts/batch.lua delayFn).
 */
export const delayedWindowKind: BlockKind = {
  ...windowKind,
  keySuffix: ({ algorithm, windowMs }) => {
    const code = DELAYED_SUFFIX[nameOf(algorithm)]
    if (code === undefined) throw new TypeError('only gcra and token-bucket blocks delay')
    return windowSuffix(code, windowMs)
  },
  specTail: ({ params }) => `${params.hold === false ? 'n' : 'd'}${params.delayMs ?? 0}`,
  // A gcra turn is given back only while its arrival time is the latest: the one its charge left, rounded up.
  chargeMark: (run, decision, at) => run.algorithm === 'gcra' ? at + decision.resetMs : at
}
