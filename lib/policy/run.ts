import type { RunAlgorithm } from '../store/algorithms.js'
import type { BlockRun, Penalty } from '../store/port.js'
import type { CalendarPeriod } from '../kinds/period/calendar.js'
import type { BlockKind } from '../kinds/contract.js'

/** What every run of one block shares: fixed at compile time, whatever the limit. */
export interface RunSpec {
  /** 'concurrency': slots, `windowMs` being their lease. */
  algorithm: RunAlgorithm
  /** 1-based position in ALGORITHMS. */
  algorithmNumber: number
  windowMs: number
  /** What the block counts over (lib/kinds/). */
  kind: BlockKind
  /** token-bucket and gcra: the burst is a capacity of its own. */
  bursty: boolean
  /** The block declares `burst` (so a requestLimit result keeps it). */
  burstDeclared: boolean
  shadow: boolean
  penalty: Penalty | undefined
  /** The block's `localLimit` and the plugin's `fleetSize`: the local share's sources. */
  localLimit: number | undefined
  fleetSize: number | undefined
  /** The calendar period, when the block declares `period`: every run shares its boundaries. */
  period?: CalendarPeriod
  /** gcra and token-bucket with `delay`: how far ahead a turn may be reserved. */
  delayMs?: number | undefined
}

/**
 * How a run's burst meets another limit:
 * - `'declared-stays'` (requestLimit): a declared burst stays; otherwise the burst is the new limit.
 * - `'equal-follows'` (runtime overrides): a burst equal to the old limit follows the new one; another stays.
 */
export type BurstRule = 'declared-stays' | 'equal-follows'

/**
 * This instance's share of a block while Redis is unavailable (onRedisError
 * 'local'): `localLimit`, else `limit / fleetSize` (at least 1); the burst
 * scales with it. Undefined when neither is given.
 */
function localShare (spec: RunSpec, limit: number, burst: number): BlockRun['local'] {
  const { localLimit, fleetSize, windowMs } = spec
  const share = localLimit ?? (fleetSize === undefined ? undefined : Math.max(1, Math.floor(limit / fleetSize)))
  if (share === undefined) return undefined
  return { limit: share, windowMs, burst: Math.max(1, Math.floor(burst * share / limit)) }
}

/** The one builder of a BlockRun: its numbers and the local share (spec text is the Redis store's, header strings reply/'s). */
export function buildRun (spec: RunSpec, tier: string | undefined, limit: number, burst: number): BlockRun {
  const { algorithm, windowMs } = spec
  return {
    algorithm,
    algorithmNumber: spec.algorithmNumber,
    params: spec.delayMs === undefined ? { limit, windowMs, burst } : { limit, windowMs, burst, delayMs: spec.delayMs, hold: true },
    kind: spec.kind,
    shadow: spec.shadow,
    tier,
    penalty: spec.penalty,
    local: localShare(spec, limit, burst),
    period: spec.period
  }
}

/** `run` at another limit (a requestLimit result or an override): the burst by `rule`, the local share recomputed. */
export function runAtLimit (spec: RunSpec, run: BlockRun, limit: number, rule: BurstRule): BlockRun {
  if (limit === run.params.limit) return run
  const { burst } = run.params
  const kept = rule === 'declared-stays' ? spec.bursty && spec.burstDeclared : burst !== run.params.limit
  return buildRun(spec, run.tier, limit, kept ? burst : limit)
}
