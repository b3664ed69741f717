import { ALGORITHMS, maxLimitFor, type AlgorithmName, type RunAlgorithm } from '../store/algorithms.js'
import { MAX_LIMIT } from '../limits.js'
import type { BlockRun } from '../store/port.js'
import type { CalendarPeriod } from '../kinds/period/calendar.js'
import type { BlockKind } from '../kinds/contract.js'
import { isBursty } from '../kinds/window/kind.js'
import { FALLBACK_TIER, readCounts, type Counts, type Fail } from './block-fields.js'
import { buildRun, type RunSpec } from './run.js'

/** The numbers of a block: algorithm, window, and its limit and burst per tier. */
export interface Shape {
  kind: BlockKind
  /** 'concurrency' for a concurrency block (its window is the slots' lease). */
  algorithm: RunAlgorithm
  /** The scripts' algorithm number: 1-based in ALGORITHMS, CONCURRENCY_NUMBER for slots. */
  algorithmNumber: number
  /** token-bucket and gcra: `burst` is a capacity of its own. */
  bursty: boolean
  maxLimit: number
  /** The window; a period's nominal length (NOMINAL_PERIOD_MS). */
  windowMs: number
  /** The calendar period, when the block declares `period`. */
  period: CalendarPeriod | undefined
  /** gcra and token-bucket: how far ahead a turn may be reserved (the block's `delay`), undefined without one. */
  delayMs: number | undefined
  limits: Counts
  bursts: Map<string | undefined, number> | undefined
  /** Every tier named in either map (undefined alone without tiers). */
  tierNames: Array<string | undefined>
}

/** The largest limit, as an error states it: why it is what it is. */
function maxLimitText (algorithm: AlgorithmName, windowMs: number, maxLimit: number, delayMs: number | undefined): string {
  if (algorithm === 'sliding-log') return `${maxLimit} for sliding-log (one sorted-set entry per request)`
  if (maxLimit === MAX_LIMIT) return String(maxLimit)
  if (delayMs !== undefined) return `${maxLimit}, the largest for a ${windowMs} ms window and a ${delayMs} ms delay (${algorithm} needs 2 × burst × window + limit × delay below 2^53)`
  return `${maxLimit}, the largest for a ${windowMs} ms window (${algorithm} needs max(limit, burst) × window below 2^53)`
}

/** What a rate block counts with: its algorithm and window (a period: fixed-window over the period's nominal length), and its delay. */
export interface Counting { algorithm: AlgorithmName, windowMs: number, period: CalendarPeriod | undefined, delayMs: number | undefined }

/**
 * The largest limit and burst: the algorithm's, and with a delay (the stored
 * debt reaches 2 × burst × window + limit × delay) one that keeps that exact.
 */
function maxLimitOf (algorithm: AlgorithmName, windowMs: number, delayMs: number | undefined): number {
  const own = maxLimitFor(algorithm, windowMs)
  return delayMs === undefined ? own : Math.min(own, Math.floor(Number.MAX_SAFE_INTEGER / (2 * windowMs + delayMs)))
}

/** A rate block's shape (a window or a period): its limit and burst per tier, within the algorithm's bounds. */
export function rateShape (kind: BlockKind, counting: Counting, input: Record<string, unknown>, fail: Fail): Shape {
  const { algorithm, windowMs, period, delayMs } = counting
  const bursty = isBursty(algorithm)
  const maxLimit = maxLimitOf(algorithm, windowMs, delayMs)
  const maxText = maxLimitText(algorithm, windowMs, maxLimit, delayMs)
  const limits = readCounts(input.limit, 'limit', maxLimit, maxText, fail)
  let bursts: Shape['bursts']
  if (input.burst !== undefined) {
    if (!bursty) fail('burst', `only applies to token-bucket and gcra (algorithm is ${algorithm})`)
    bursts = new Map(readCounts(input.burst, 'burst', maxLimit, maxText, fail))
  }
  const named = [...limits.map(([tier]) => tier), ...(bursts?.keys() ?? [])].filter((tier) => tier !== undefined)
  // Every tier named in either map gets a run; a tier missing from one map takes that map's fallback.
  const tierNames = named.length > 0 ? [...new Set([FALLBACK_TIER, ...named])] : [undefined]
  const algorithmNumber = ALGORITHMS.indexOf(algorithm) + 1
  return { kind, algorithm, algorithmNumber, bursty, maxLimit, windowMs, period, delayMs, limits, bursts, tierNames }
}

export function isTiered (shape: Shape): boolean {
  return shape.tierNames[0] !== undefined
}

export function limitOf (shape: Shape, tier: string | undefined): number {
  const { limits } = shape
  const own = limits.find(([name]) => name === tier) ?? limits.find(([name]) => name === FALLBACK_TIER) ?? limits[0]
  return (own as [string | undefined, number])[1]
}

/** A tier's burst: its own, else the map's fallback, else the limit. */
export function burstOf (shape: Shape, tier: string | undefined, limit: number): number {
  const { bursts } = shape
  if (!shape.bursty || bursts === undefined) return limit
  return bursts.get(tier) ?? bursts.get(FALLBACK_TIER) ?? bursts.get(undefined) ?? limit
}

/** The base run (fallback tier) and, with tiers, one run per tier name. */
export function tierRuns (spec: RunSpec, shape: Shape): { base: BlockRun, tiers: Map<string, BlockRun> | undefined } {
  const runOf = (tier: string | undefined): BlockRun => {
    const limit = limitOf(shape, tier)
    return buildRun(spec, tier, limit, burstOf(shape, tier, limit))
  }
  if (!isTiered(shape)) return { base: runOf(undefined), tiers: undefined }
  const base = runOf(FALLBACK_TIER)
  return { base, tiers: new Map(shape.tierNames.map((tier) => [tier as string, tier === FALLBACK_TIER ? base : runOf(tier)])) }
}
