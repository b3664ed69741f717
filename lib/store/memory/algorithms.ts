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
import type { AlgorithmName, BlockParams, RawDecision } from '../algorithms.js'

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
   * Gives back `cost` units spent `elapsedMs` ago (refundOn), as the Lua
   * script's `'2'` mode does. Undefined: nothing to give back (state unchanged);
   * `state: undefined` with `given`: the state may be dropped.
   */
  refund?: (state: S | undefined, params: BlockParams, cost: number, now: number, elapsedMs: number) => { state: S | undefined, ttlMs: number } | undefined
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

/** floor(a / b) for integers with |a|, b below 2^53, exact whatever the rounding of a / b. */
function idiv (a: number, b: number): number {
  let q = Math.floor(a / b)
  if (q * b > a) q = q - 1
  else if ((q + 1) * b <= a) q = q + 1
  return q
}

/** ceil(a / b) for non-negative integers below 2^53, exact. */
function cdiv (a: number, b: number): number {
  let q = idiv(a, b)
  if (q * b < a) q = q + 1
  return q
}

function decision (allowed: boolean, remaining: number, resetMs: number, retryAfterMs: number): RawDecision {
  return { allowed, remaining, resetMs, retryAfterMs }
}

export const fixedWindow: MemoryAlgorithm<FixedWindowState> = {
  step (state, { limit, windowMs: w }, cost, now) {
    now = Math.floor(now)
    const idx = idiv(now, w)
    let count = 0
    if (state !== undefined && state.idx === idx) count = state.count
    const toEnd = (idx + 1) * w - now
    const available = Math.max(0, limit - count)
    if (cost > limit) {
      return { decision: decision(false, available, count > 0 ? toEnd : 0, w), state: undefined, ttlMs: 0 }
    }
    if (count + cost > limit) {
      return { decision: decision(false, available, toEnd, toEnd), state: undefined, ttlMs: 0 }
    }
    count = count + cost
    return { decision: decision(true, limit - count, toEnd, 0), state: { idx, count }, ttlMs: toEnd }
  },
  refund (state, { windowMs: w }, cost, now, elapsedMs) {
    now = Math.floor(now)
    const idx = idiv(now, w)
    const count = state !== undefined && state.idx === idx ? state.count : 0
    if (count === 0 || idiv(now - elapsedMs, w) !== idx) return undefined
    return { state: { idx, count: Math.max(0, count - cost) }, ttlMs: (idx + 1) * w - now }
  }
}

/** The counts [cur, prev] of the current and previous window; zero when stale or absent (Lua: readCounts). */
function counts (state: SlidingWindowState | undefined, idx: number): [number, number] {
  if (state === undefined) return [0, 0]
  if (state.idx === idx) return [state.cur, state.prev]
  return state.idx === idx - 1 ? [0, state.cur] : [0, 0]
}

export const slidingWindow: MemoryAlgorithm<SlidingWindowState> = {
  step (state, { limit, windowMs: w }, cost, now) {
    now = Math.floor(now)
    const idx = idiv(now, w)
    const elapsed = now - idx * w
    let [cur, prev] = counts(state, idx)
    const resetMs = (c: number, p: number): number => {
      if (c > 0) return (idx + 1) * w + w - idiv(w - 1, c) - now
      if (p > 0) {
        const e = w - idiv(w - 1, p)
        if (e > elapsed) return e - elapsed
      }
      return 0
    }
    const estimate = idiv(prev * (w - elapsed), w) + cur
    const available = Math.max(0, limit - estimate)
    if (cost > limit) {
      return { decision: decision(false, available, resetMs(cur, prev), w), state: undefined, ttlMs: 0 }
    }
    if (estimate + cost > limit) {
      let retry = -1
      const room = limit - cost - cur
      if (room >= 0 && prev > 0) {
        let e = w - idiv((room + 1) * w - 1, prev)
        if (e <= elapsed) e = elapsed + 1
        if (e < w) retry = e - elapsed
      }
      if (retry < 0) {
        let e = 0
        if (cur > 0) {
          e = w - idiv((limit - cost + 1) * w - 1, cur)
          if (e < 0) e = 0
        }
        retry = w - elapsed + e
      }
      return { decision: decision(false, available, resetMs(cur, prev), retry), state: undefined, ttlMs: 0 }
    }
    cur = cur + cost
    return {
      decision: decision(true, limit - estimate - cost, resetMs(cur, prev), 0),
      state: { idx, cur, prev },
      ttlMs: (idx + 2) * w - now
    }
  },
  refund (state, { windowMs: w }, cost, now, elapsedMs) {
    now = Math.floor(now)
    const idx = idiv(now, w)
    let [cur, prev] = counts(state, idx)
    const atIdx = idiv(now - elapsedMs, w)
    if (atIdx === idx && cur > 0) cur = Math.max(0, cur - cost)
    else if (atIdx === idx - 1 && prev > 0) prev = Math.max(0, prev - cost)
    else return undefined
    return { state: { idx, cur, prev }, ttlMs: (idx + 2) * w - now }
  }
}

/** Index of the first element > x in a sorted array. */
function upperBound (a: readonly number[], x: number): number {
  let lo = 0
  let hi = a.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if ((a[mid] as number) <= x) lo = mid + 1
    else hi = mid
  }
  return lo
}

export const slidingLog: MemoryAlgorithm<SlidingLogState> = {
  step (state, { limit, windowMs: w }, cost, now) {
    now = Math.floor(now)
    const all = state ?? []
    const cut = upperBound(all, now - w)
    const log = cut === 0 ? all : all.slice(cut)
    const count = log.length
    if (cost <= limit && count + cost <= limit) {
      const at = upperBound(log, now)
      const next = log.slice(0, at)
      for (let i = 0; i < cost; i++) next.push(now)
      for (let i = at; i < count; i++) next.push(log[i] as number)
      // same formula as Lua (PEXPIRE W); equal to newest + W - now unless the clock went backwards
      return { decision: decision(true, limit - count - cost, w, 0), state: next, ttlMs: Math.max(w, (next[next.length - 1] as number) + w - now) }
    }
    const available = Math.max(0, limit - count)
    const pruned = cut === 0 ? undefined : log
    const ttlMs = count === 0 ? 0 : (log[count - 1] as number) + w - now
    if (count === 0) {
      return { decision: decision(false, available, 0, w), state: pruned, ttlMs }
    }
    let retry = w
    if (cost <= limit) {
      const k = count + cost - limit
      retry = (log[k - 1] as number) + w - now
    }
    return { decision: decision(false, available, (log[count - 1] as number) + w - now, retry), state: pruned, ttlMs }
  }
}

/** The bucket as of `now`: stored tokens plus the refill since, up to the capacity (scaled by the window). */
function refill (state: TokenBucketState | undefined, limit: number, w: number, burst: number, now: number): { tokens: number, base: number, cap: number } {
  const cap = burst * w
  if (state === undefined) return { tokens: cap, base: now, cap }
  let st = state.tokens
  if (st > cap) st = cap
  if (st < 0) st = 0
  let base = now
  let elapsed = now - state.ts
  if (elapsed < 0) {
    elapsed = 0
    base = state.ts
  }
  const maxElapsed = idiv(cap, limit) + 1
  if (elapsed > maxElapsed) elapsed = maxElapsed
  const gain = elapsed * limit
  return { tokens: gain >= cap - st ? cap : st + gain, base, cap }
}

export const tokenBucket: MemoryAlgorithm<TokenBucketState> = {
  step (state, { limit, windowMs: w, burst }, cost, now) {
    now = Math.floor(now)
    const refilled = refill(state, limit, w, burst, now)
    const { base, cap } = refilled
    let tokens = refilled.tokens
    const lag = base - now
    const resetMs = (t: number): number => t >= cap ? 0 : lag + cdiv(cap - t, limit)
    if (cost > burst) {
      return { decision: decision(false, idiv(tokens, w), resetMs(tokens), w), state: undefined, ttlMs: 0 }
    }
    const need = cost * w
    if (tokens < need) {
      return { decision: decision(false, idiv(tokens, w), resetMs(tokens), lag + cdiv(need - tokens, limit)), state: undefined, ttlMs: 0 }
    }
    tokens = tokens - need
    const reset = resetMs(tokens)
    return { decision: decision(true, idiv(tokens, w), reset, 0), state: { tokens, ts: base }, ttlMs: reset }
  },
  refund (state, { limit, windowMs: w, burst }, cost, now) {
    // the bucket as of now, plus the tokens, up to its capacity (same steps as the Lua '2' mode)
    now = Math.floor(now)
    const refilled = refill(state, limit, w, burst, now)
    const { base, cap } = refilled
    let tokens = refilled.tokens
    tokens = tokens + cost * w
    if (tokens >= cap) return { state: undefined, ttlMs: 0 }
    return { state: { tokens, ts: base }, ttlMs: base - now + cdiv(cap - tokens, limit) }
  }
}

/**
 * max(0, TAT − now) in units of 1/limit ms, capped at the tolerance `cap`
 * (a TAT further ahead, after a clock step back, counts as a full tolerance).
 */
function debt (state: GcraState | undefined, limit: number, cap: number, now: number): number {
  if (state === undefined || state.tatMs < now) return 0
  let dMs = state.tatMs - now
  const maxMs = idiv(cap, limit) + 1
  if (dMs > maxMs) dMs = maxMs
  const d = dMs * limit + state.frac
  return d > cap ? cap : d
}

export const gcra: MemoryAlgorithm<GcraState> = {
  step (state, { limit, windowMs: w, burst }, cost, now) {
    now = Math.floor(now)
    const cap = burst * w
    const d = debt(state, limit, cap, now)
    if (cost > burst) {
      return { decision: decision(false, idiv(cap - d, w), cdiv(d, limit), w), state: undefined, ttlMs: 0 }
    }
    const nd = d + cost * w
    if (nd > cap) {
      return { decision: decision(false, idiv(cap - d, w), cdiv(d, limit), cdiv(nd - cap, limit)), state: undefined, ttlMs: 0 }
    }
    const whole = idiv(nd, limit)
    const reset = cdiv(nd, limit)
    return { decision: decision(true, idiv(cap - nd, w), reset, 0), state: { tatMs: now + whole, frac: nd - whole * limit }, ttlMs: reset }
  },
  refund (state, { limit, windowMs: w, burst }, cost, now) {
    now = Math.floor(now)
    const cap = burst * w
    const d = debt(state, limit, cap, now)
    const rd = d - cost * w
    if (rd <= 0) return { state: undefined, ttlMs: 0 }
    const whole = idiv(rd, limit)
    return { state: { tatMs: now + whole, frac: rd - whole * limit }, ttlMs: cdiv(rd, limit) }
  }
}

export const memoryAlgorithms: Record<AlgorithmName, MemoryAlgorithm<any>> = {
  'fixed-window': fixedWindow,
  'sliding-window': slidingWindow,
  'sliding-log': slidingLog,
  'token-bucket': tokenBucket,
  gcra
}
