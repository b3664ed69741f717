import { ALGORITHMS, DEFAULT_LEASE_MS, MAX_LIMIT, MAX_SLIDING_LOG_LIMIT, type RunAlgorithm } from '../store/algorithms.js'
import type { BlockRun } from '../store/port.js'
import { FALLBACK_TIER, readCounts, type Counts, type Fail } from './block-fields.js'
import { parseWindow } from './duration.js'
import { buildRun, type RunSpec } from './run.js'
import { checkOneKind, concurrencyShape } from './concurrency.js'

/** The numbers of a block: algorithm, window, and its limit and burst per tier. */
export interface Shape {
  /** 'concurrency' for a concurrency block (its window is the slots' lease). */
  algorithm: RunAlgorithm
  /** token-bucket and gcra: `burst` is a capacity of its own. */
  bursty: boolean
  maxLimit: number
  windowMs: number
  limits: Counts
  bursts: Map<string | undefined, number> | undefined
  /** Every tier named in either map (undefined alone without tiers). */
  tierNames: Array<string | undefined>
}

export function readShape (input: Record<string, unknown>, fail: Fail, leaseMs = DEFAULT_LEASE_MS): Shape {
  checkOneKind(input, fail)
  if (input.concurrency !== undefined) return concurrencyShape(input, leaseMs, fail)
  const algorithm = (input.algorithm ?? 'sliding-window') as RunAlgorithm
  if (algorithm === 'concurrency' || !ALGORITHMS.includes(algorithm)) {
    fail('algorithm', `must be one of ${ALGORITHMS.join(', ')} (got ${JSON.stringify(input.algorithm)})`)
  }
  const bursty = algorithm === 'token-bucket' || algorithm === 'gcra'
  const sliding = algorithm === 'sliding-log'
  const maxLimit = sliding ? MAX_SLIDING_LOG_LIMIT : MAX_LIMIT
  const maxText = `${maxLimit}${sliding ? ' for sliding-log (one sorted-set entry per request)' : ''}`
  const limits = readCounts(input.limit, 'limit', maxLimit, maxText, fail)
  const windowMs = parseWindow(input.window)
  if (typeof windowMs === 'string') return fail('window', windowMs)
  let bursts: Shape['bursts']
  if (input.burst !== undefined) {
    if (!bursty) fail('burst', `only applies to token-bucket and gcra (algorithm is ${algorithm})`)
    bursts = new Map(readCounts(input.burst, 'burst', MAX_LIMIT, String(MAX_LIMIT), fail))
  }
  const named = [...limits.map(([tier]) => tier), ...(bursts?.keys() ?? [])].filter((tier) => tier !== undefined)
  // Every tier named in either map gets a run; a tier missing from one map takes that map's fallback.
  const tierNames = named.length > 0 ? [...new Set([FALLBACK_TIER, ...named])] : [undefined]
  return { algorithm, bursty, maxLimit, windowMs, limits, bursts, tierNames }
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
