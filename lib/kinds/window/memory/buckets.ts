import type { BlockParams, MemoryAlgorithm } from '../../../store/algorithms.js'
import { cdiv, decision, idiv } from './math.js'

/** token-bucket state: tokens scaled by windowMs, as of ms `ts`. Lua: "tokens:ts". */
export interface TokenBucketState { readonly tokens: number, readonly ts: number }
/** gcra state: theoretical arrival time tatMs + frac / limit ms. Lua: "tatMs:frac". */
export interface GcraState { readonly tatMs: number, readonly frac: number }

/** A delay's reach in units (delayMs × limit; 0 without one) and whether a turn may be reserved (Lua: reach, hold). */
function reachOf ({ delayMs, hold, limit }: BlockParams): { dl: number, hold: boolean } {
  return delayMs === undefined || delayMs <= 0 ? { dl: 0, hold: false } : { dl: delayMs * limit, hold: hold !== false }
}

/** Admitted at a turn `waitMs` from now (Lua: allowed 4): nothing remains until it; `freeNow` whole units were free before it. */
function reserved (resetMs: number, waitMs: number, nextMs: number, freeNow: number): ReturnType<typeof decision> {
  return { allowed: true, remaining: 0, resetMs, retryAfterMs: 0, nextMs, waitMs, freeNow }
}

/** The bucket as of `now`: stored tokens (down to -(capacity + reach) after an overdraft) plus the refill since, up to the capacity (scaled by the window). */
function refill (state: TokenBucketState | undefined, limit: number, w: number, burst: number, now: number, dl: number): { tokens: number, base: number, cap: number } {
  const cap = burst * w
  if (state === undefined) return { tokens: cap, base: now, cap }
  let st = state.tokens
  if (st > cap) st = cap
  if (st < -cap - dl) st = -cap - dl
  let base = now
  let elapsed = now - state.ts
  if (elapsed < 0) {
    elapsed = 0
    base = state.ts
  }
  const maxElapsed = idiv(2 * cap + dl, limit) + 1
  if (elapsed > maxElapsed) elapsed = maxElapsed
  const gain = elapsed * limit
  return { tokens: gain >= cap - st ? cap : st + gain, base, cap }
}

/** Whole tokens in the bucket: 0 while it is overdrawn (Lua: whole). */
function whole (t: number, w: number): number {
  return t <= 0 ? 0 : idiv(t, w)
}

export const tokenBucket: MemoryAlgorithm<TokenBucketState> = {
  step (state, params, cost, now) {
    const { limit, windowMs: w, burst } = params
    const { dl, hold } = reachOf(params)
    now = Math.floor(now)
    const refilled = refill(state, limit, w, burst, now, dl)
    const { base, cap } = refilled
    let tokens = refilled.tokens
    const lag = base - now
    const resetMs = (t: number): number => t >= cap ? 0 : lag + cdiv(cap - t, limit)
    // ms until the bucket holds one more whole token; 0 = full
    const nextMs = (t: number): number => t >= cap ? 0 : lag + cdiv((whole(t, w) + 1) * w - t, limit)
    if (cost > burst) {
      return { decision: decision(false, whole(tokens, w), resetMs(tokens), w, nextMs(tokens)), state: undefined, ttlMs: 0 }
    }
    const need = cost * w
    if (tokens < need) {
      const left = tokens - need
      if (left >= -dl && hold) {
        const reset = resetMs(left)
        return { decision: reserved(reset, lag + cdiv(-left, limit), nextMs(left), whole(tokens, w)), state: { tokens: left, ts: base }, ttlMs: reset }
      }
      return { decision: decision(false, whole(tokens, w), resetMs(tokens), lag + cdiv(-left - (hold ? dl : 0), limit), nextMs(tokens)), state: undefined, ttlMs: 0 }
    }
    tokens = tokens - need
    const reset = resetMs(tokens)
    return { decision: decision(true, idiv(tokens, w), reset, 0, nextMs(tokens)), state: { tokens, ts: base }, ttlMs: reset }
  },
  refund (state, params, cost, now) {
    // the bucket as of now, plus the tokens, up to its capacity (same steps as the Lua '2' mode)
    const { limit, windowMs: w, burst } = params
    now = Math.floor(now)
    const refilled = refill(state, limit, w, burst, now, reachOf(params).dl)
    const { base, cap } = refilled
    let tokens = refilled.tokens
    tokens = tokens + cost * w
    if (tokens >= cap) return { state: undefined, ttlMs: 0 }
    return { state: { tokens, ts: base }, ttlMs: base - now + cdiv(cap - tokens, limit) }
  },
  charge (state, params, cost, now) {
    // below empty, down to -(capacity + reach) (Lua mode 3)
    const { limit, windowMs: w, burst } = params
    const { dl } = reachOf(params)
    now = Math.floor(now)
    const { tokens, base, cap } = refill(state, limit, w, burst, now, dl)
    const left = Math.max(-cap - dl, tokens - cost * w)
    return { state: { tokens: left, ts: base }, ttlMs: base - now + cdiv(cap - left, limit) }
  }
}

/**
 * max(0, TAT − now) in units of 1/limit ms, capped at `top`: twice the
 * tolerance plus a delay's reach (an overdraft reaches that far; a TAT further
 * ahead, after a clock step back, counts as that much).
 */
function debt (state: GcraState | undefined, limit: number, top: number, now: number): number {
  if (state === undefined || state.tatMs < now) return 0
  let dMs = state.tatMs - now
  const maxMs = idiv(top, limit) + 1
  if (dMs > maxMs) dMs = maxMs
  const d = dMs * limit + state.frac
  return d > top ? top : d
}

/** Whole units left under the tolerance: 0 while the debt is beyond it (Lua: left). */
function left (d: number, cap: number, w: number): number {
  return d >= cap ? 0 : idiv(cap - d, w)
}

/** ms until the debt leaves room for one more whole unit; 0 = no debt (Lua: nextMs). */
function debtNextMs (d: number, cap: number, limit: number, w: number): number {
  return d <= 0 ? 0 : cdiv(d - (cap - (left(d, cap, w) + 1) * w), limit)
}

export const gcra: MemoryAlgorithm<GcraState> = {
  step (state, params, cost, now) {
    const { limit, windowMs: w, burst } = params
    const { dl, hold } = reachOf(params)
    now = Math.floor(now)
    const cap = burst * w
    const d = debt(state, limit, 2 * cap + dl, now)
    if (cost > burst) {
      return { decision: decision(false, left(d, cap, w), cdiv(d, limit), w, debtNextMs(d, cap, limit, w)), state: undefined, ttlMs: 0 }
    }
    const nd = d + cost * w
    if (nd > cap) {
      if (nd <= cap + dl && hold) {
        const whole = idiv(nd, limit)
        const reset = cdiv(nd, limit)
        return { decision: reserved(reset, cdiv(nd - cap, limit), debtNextMs(nd, cap, limit, w), left(d, cap, w)), state: { tatMs: now + whole, frac: nd - whole * limit }, ttlMs: reset }
      }
      return { decision: decision(false, left(d, cap, w), cdiv(d, limit), cdiv(nd - cap - (hold ? dl : 0), limit), debtNextMs(d, cap, limit, w)), state: undefined, ttlMs: 0 }
    }
    const whole = idiv(nd, limit)
    const reset = cdiv(nd, limit)
    return { decision: decision(true, idiv(cap - nd, w), reset, 0, debtNextMs(nd, cap, limit, w)), state: { tatMs: now + whole, frac: nd - whole * limit }, ttlMs: reset }
  },
  refund (state, params, cost, now, chargedAt) {
    const { limit, windowMs: w, burst } = params
    const { dl } = reachOf(params)
    now = Math.floor(now)
    const cap = burst * w
    const d = debt(state, limit, 2 * cap + dl, now)
    // with reservations, only the latest one's: chargedAt is the TAT its charge left, rounded up
    if (dl > 0 && now + cdiv(d, limit) !== chargedAt) return undefined
    const rd = d - cost * w
    if (rd <= 0) return { state: undefined, ttlMs: 0 }
    const whole = idiv(rd, limit)
    return { state: { tatMs: now + whole, frac: rd - whole * limit }, ttlMs: cdiv(rd, limit) }
  },
  charge (state, params, cost, now) {
    // beyond the tolerance, up to twice it plus the reach (Lua mode 3)
    const { limit, windowMs: w, burst } = params
    const top = 2 * burst * w + reachOf(params).dl
    now = Math.floor(now)
    const cd = Math.min(top, debt(state, limit, top, now) + cost * w)
    const whole = idiv(cd, limit)
    return { state: { tatMs: now + whole, frac: cd - whole * limit }, ttlMs: cdiv(cd, limit) }
  }
}
