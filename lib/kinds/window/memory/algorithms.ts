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
import type { AlgorithmName, MemoryAlgorithm } from '../../../store/algorithms.js'
import { gcra, tokenBucket } from './buckets.js'
import { slidingLog } from './sliding-log.js'
import { fixedWindow, slidingWindow } from './windows.js'

export { fixedWindow, slidingWindow, slidingLog, tokenBucket, gcra }

export const memoryAlgorithms: Record<AlgorithmName, MemoryAlgorithm<any>> = {
  'fixed-window': fixedWindow,
  'sliding-window': slidingWindow,
  'sliding-log': slidingLog,
  'token-bucket': tokenBucket,
  gcra
}
