import { cdiv, decision, idiv } from './math.js'
import type { BlockParams, MemoryAlgorithm } from '../../../store/algorithms.js'

/** fixed-window state: window index (floor(now / W)) and units consumed in it. Lua: "idx:count". */
export interface FixedWindowState { readonly idx: number, readonly count: number }
/** sliding-window state. Lua: "idx:cur:prev". */
export interface SlidingWindowState { readonly idx: number, readonly cur: number, readonly prev: number }

export const fixedWindow: MemoryAlgorithm<FixedWindowState> = {
  step (state, { limit, windowMs: w, start }, cost, now) {
    now = Math.floor(now)
    // A calendar period's index is its start (Lua: the `start` argument).
    const idx = start ?? idiv(now, w)
    let count = 0
    if (state !== undefined && state.idx === idx) count = state.count
    const toEnd = (start ?? idx * w) + w - now
    const available = Math.max(0, limit - count)
    if (cost > limit) {
      return { decision: decision(false, available, count > 0 ? toEnd : 0, w, count > 0 ? toEnd : 0), state: undefined, ttlMs: 0 }
    }
    if (count + cost > limit) {
      return { decision: decision(false, available, toEnd, toEnd, toEnd), state: undefined, ttlMs: 0 }
    }
    count = count + cost
    return { decision: decision(true, limit - count, toEnd, 0, toEnd), state: { idx, count }, ttlMs: toEnd }
  },
  refund (state, { windowMs: w, start }, cost, now, chargedAt) {
    now = Math.floor(now)
    const idx = start ?? idiv(now, w)
    const from = start ?? idx * w
    const count = state !== undefined && state.idx === idx ? state.count : 0
    // only while the window the units were charged in is the current one
    if (count === 0 || chargedAt < from || chargedAt >= from + w) return undefined
    return { state: { idx, count: Math.max(0, count - cost) }, ttlMs: from + w - now }
  },
  charge (state, { limit, windowMs: w, start }, cost, now) {
    // to the current window or period, kept up to twice the limit (Lua mode 3)
    now = Math.floor(now)
    const idx = start ?? idiv(now, w)
    const count = state !== undefined && state.idx === idx ? state.count : 0
    return { state: { idx, count: Math.min(2 * limit, count + cost) }, ttlMs: (start ?? idx * w) + w - now }
  }
}

/**
 * ms until a refused `cost` fits: the earliest e with prev * (W - e) <= (limit - cost - cur) * W,
 * else in the next window (prev = cur, cur = 0) (Lua: retryMs).
 */
function windowRetryMs (cur: number, prev: number, { limit, windowMs: w }: BlockParams, cost: number, elapsed: number): number {
  const room = limit - cost - cur
  if (room >= 0) {
    // refused now with room: prev > 0, and this e is after elapsed
    const e = w - idiv(room * w, prev)
    if (e < w) return e - elapsed
  }
  // next window: earliest e with cur * (W - e) <= (limit - cost) * W; e == W is the window after next
  const e = cur > 0 ? Math.max(0, w - idiv((limit - cost) * w, cur)) : 0
  return w - elapsed + e
}

/** ms until `available` grows by one unit: when available + 1 units would fit; 0 = full (Lua: nextMs). */
function windowNextMs (cur: number, prev: number, params: BlockParams, available: number, elapsed: number): number {
  return available >= params.limit ? 0 : windowRetryMs(cur, prev, params, available + 1, elapsed)
}

/** The counts [cur, prev] of the current and previous window; zero when stale or absent (Lua: readCounts). */
function counts (state: SlidingWindowState | undefined, idx: number): [number, number] {
  if (state === undefined) return [0, 0]
  if (state.idx === idx) return [state.cur, state.prev]
  return state.idx === idx - 1 ? [0, state.cur] : [0, 0]
}

export const slidingWindow: MemoryAlgorithm<SlidingWindowState> = {
  step (state, params, cost, now) {
    const { limit, windowMs: w } = params
    now = Math.floor(now)
    const idx = idiv(now, w)
    const elapsed = now - idx * w
    let [cur, prev] = counts(state, idx)
    // full once a count has wholly left the trailing window: it weighs at least 1 until then
    const resetMs = (c: number, p: number): number => c > 0 ? (idx + 2) * w - now : p > 0 ? (idx + 1) * w - now : 0
    // The exact rule (scripts/sliding-window.lua): the weighted previous count rounded up.
    // At or above 2^53 (an overdraft) the product is rounded, and the estimate is still at
    // least the limit, as the true one is; the decision and `available` (0) are exact.
    const estimate = cdiv(prev * (w - elapsed), w) + cur
    const available = Math.max(0, limit - estimate)
    if (cost > limit) {
      return { decision: decision(false, available, resetMs(cur, prev), w, windowNextMs(cur, prev, params, available, elapsed)), state: undefined, ttlMs: 0 }
    }
    if (estimate + cost > limit) {
      const retry = windowRetryMs(cur, prev, params, cost, elapsed)
      return { decision: decision(false, available, resetMs(cur, prev), retry, windowNextMs(cur, prev, params, available, elapsed)), state: undefined, ttlMs: 0 }
    }
    cur = cur + cost
    const remaining = limit - estimate - cost
    return {
      decision: decision(true, remaining, resetMs(cur, prev), 0, windowNextMs(cur, prev, params, remaining, elapsed)),
      state: { idx, cur, prev },
      ttlMs: (idx + 2) * w - now
    }
  },
  refund (state, { windowMs: w }, cost, now, chargedAt) {
    now = Math.floor(now)
    const idx = idiv(now, w)
    let [cur, prev] = counts(state, idx)
    // the window the units were charged in: the current or the previous one
    const atIdx = idiv(chargedAt, w)
    if (atIdx === idx && cur > 0) cur = Math.max(0, cur - cost)
    else if (atIdx === idx - 1 && prev > 0) prev = Math.max(0, prev - cost)
    else return undefined
    return { state: { idx, cur, prev }, ttlMs: (idx + 2) * w - now }
  },
  charge (state, { limit, windowMs: w }, cost, now) {
    // to the current window, kept up to twice the limit (Lua mode 3)
    now = Math.floor(now)
    const idx = idiv(now, w)
    const [cur, prev] = counts(state, idx)
    return { state: { idx, cur: Math.min(2 * limit, cur + cost), prev }, ttlMs: (idx + 2) * w - now }
  }
}
