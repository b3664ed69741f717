/**
 * The five algorithms in TypeScript: the memory store runs them, and they are
 * the reference model the property tests hold `scripts/*.lua` to. Every
 * function here performs the same integer operations, in the same order, as
 * its Lua twin, so both give identical decisions bit for bit.
 *
 * States are immutable: a step never mutates the state it is given; it returns
 * a new one (or `undefined` to leave the stored state as it is).
 *
 * Time and `ttlMs`: the stored state stops mattering `ttlMs` ms after `now`;
 * from then on (now' >= now + ttlMs) passing `undefined` gives the same
 * decisions as passing the stale state. `ttlMs` is what the Lua script passes
 * to PX / PEXPIRE for the same step.
 */
import type { AlgorithmName, BlockParams, RawDecision } from '../../../store/algorithms.js'
import { gcra, tokenBucket } from './buckets.js'
import { slidingLog } from './sliding-log.js'
import { fixedWindow, slidingWindow } from './windows.js'

export interface MemoryStep<S> {
  decision: RawDecision
  /** New state to store, or undefined = leave the stored state unchanged. */
  state: S | undefined
  /** How long the stored state matters from now (only meaningful with a new state; <= 0 means it may be dropped). */
  ttlMs: number
}

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

/** fixed-window state: window index (floor(now / W)) and units consumed in it. Lua: "idx:count". */
export interface FixedWindowState { readonly idx: number, readonly count: number }
/** sliding-window state. Lua: "idx:cur:prev". */
export interface SlidingWindowState { readonly idx: number, readonly cur: number, readonly prev: number }
/** sliding-log state: one timestamp per admitted unit, sorted ascending. Lua: a sorted set. */
export type SlidingLogState = readonly number[]
/** token-bucket state: tokens scaled by windowMs, as of ms `ts`. Lua: "tokens:ts". */
export interface TokenBucketState { readonly tokens: number, readonly ts: number }
/** gcra state: theoretical arrival time tatMs + frac / limit ms. Lua: "tatMs:frac". */
export interface GcraState { readonly tatMs: number, readonly frac: number }

export { fixedWindow, slidingWindow, slidingLog, tokenBucket, gcra }

export const memoryAlgorithms: Record<AlgorithmName, MemoryAlgorithm<any>> = {
  'fixed-window': fixedWindow,
  'sliding-window': slidingWindow,
  'sliding-log': slidingLog,
  'token-bucket': tokenBucket,
  gcra
}
