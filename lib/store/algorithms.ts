/**
 * The contract every algorithm honours, in Lua (`scripts/<name>.lua`) and in
 * TypeScript (`kinds/window/memory/algorithms.ts`). Both sides must give identical
 * decisions for identical inputs: the memory store is the reference model the
 * property tests hold the Lua scripts to. Its bounds (MAX_LIMIT and the
 * rest) are in the limits table, lib/limits.ts.
 */
import { MAX_LIMIT, MAX_SLIDING_LOG_LIMIT } from '../limits.js'

export const ALGORITHMS = ['fixed-window', 'sliding-window', 'sliding-log', 'token-bucket', 'gcra'] as const
export type AlgorithmName = typeof ALGORITHMS[number]
/**
 * What a run counts: one of the algorithms, or in-flight slots (a concurrency
 * block: a block kind, not an algorithm a route can choose). Its script
 * number follows the algorithms'.
 */
export type RunAlgorithm = AlgorithmName | 'concurrency'
export const CONCURRENCY_NUMBER = ALGORITHMS.length + 1

/**
 * The largest limit (and burst) a block of `algorithm` over `windowMs` takes:
 * sliding-window (`prev * (w - elapsed)`), token-bucket and gcra (`burst * w`)
 * multiply by the window, so `max(limit, burst) × windowMs` must stay below
 * 2^53; fixed-window only counts. The one rule for declared limits, tier maps,
 * requestLimit results and runtime overrides.
 */
export function maxLimitFor (algorithm: AlgorithmName, windowMs: number): number {
  if (algorithm === 'sliding-log') return MAX_SLIDING_LOG_LIMIT
  if (algorithm === 'fixed-window') return MAX_LIMIT
  return Math.min(MAX_LIMIT, Math.floor(Number.MAX_SAFE_INTEGER / windowMs))
}

/** The numbers a script needs for one block; `burst` equals `limit` where it has no meaning. */
export interface BlockParams {
  limit: number
  windowMs: number
  burst: number
  /** fixed-window over a calendar period: the period's start (windowMs is then its length); else epoch-aligned. */
  start?: number
  /** gcra and token-bucket with `delay`: how far ahead (ms) a turn may be reserved, the reach of the stored state; a concurrency block with `wait`: how long a request may wait for a slot. */
  delayMs?: number
  /** With delayMs, false: decide within that reach but reserve no turn, or keep the slot queue's order without joining it (this instance holds maxDelayed requests). */
  hold?: boolean
}

/** What one algorithm answers for one request. All values are integers. */
export interface RawDecision {
  allowed: boolean
  /** Units still available after this request (admitted), or available now (rejected). */
  remaining: number
  /** Milliseconds until the quota is fully restored (0 when it already is). */
  resetMs: number
  /** 0 when admitted; otherwise the earliest ms from now at which the same request could be admitted. */
  retryAfterMs: number
  /**
   * Milliseconds until `remaining` grows by one unit (the RateLimit field's `t`):
   * when a request of `remaining + 1` units would be admitted; 0 when the quota is full.
   */
  nextMs: number
  /** Refused because the identity is serving a penalty (escalation), not by the algorithm alone. */
  penalized?: boolean
  /** Admitted at a turn reserved this many ms from the decision (a block's `delay`); absent: admitted now. */
  waitMs?: number
  /** With waitMs: the whole units available now, before the turn (fewer than the cost; `remaining` after it is 0). What a peek reports. */
  freeNow?: number
  /** Refused for now, but a place in the slot's queue is open to it (a concurrency block's `wait`): the waiters ahead of it. */
  queued?: number
}

/*
 * The TypeScript side of the contract: each algorithm's memory model
 * (kinds/window/memory/), and a concurrency block's (kinds/concurrency/memory-step.ts),
 * answers a step with a decision, the new state and how long it matters.
 */

/** One decision step of a memory model. */
export interface MemoryStep<S> {
  decision: RawDecision
  /** New state to store, or undefined = leave the stored state unchanged. */
  state: S | undefined
  /** How long the stored state matters from now (only meaningful with a new state; <= 0 means it may be dropped). */
  ttlMs: number
}

/** One algorithm's memory model: the reference the Lua script is held to. */
export interface MemoryAlgorithm<S = unknown> {
  step (state: S | undefined, params: BlockParams, cost: number, now: number): MemoryStep<S>
  /**
   * Gives back `cost` units charged at `chargedAt` (ms, this store's clock;
   * refundOn, settle, adjust), as the Lua script's `'2'` mode does, to the
   * window they were charged in. Undefined: nothing to give back (state
   * unchanged); `state: undefined` with `given`: the state may be dropped.
   */
  refund?: (state: S | undefined, params: BlockParams, cost: number, now: number, chargedAt: number) => { state: S | undefined, ttlMs: number } | undefined
  /**
   * Charges `cost` units without deciding (settle, adjust), as the Lua
   * script's mode 3 does: never refused, usage may go over the limit.
   */
  charge?: (state: S | undefined, params: BlockParams, cost: number, now: number) => { state: S | undefined, ttlMs: number } | undefined
}
