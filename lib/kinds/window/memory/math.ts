import type { RawDecision } from '../../../store/algorithms.js'

/** floor(a / b) for integers with |a|, b below 2^53, exact whatever the rounding of a / b. */
export function idiv (a: number, b: number): number {
  let q = Math.floor(a / b)
  if (q * b > a) q = q - 1
  else if ((q + 1) * b <= a) q = q + 1
  return q
}

/** ceil(a / b) for non-negative integers below 2^53, exact. */
export function cdiv (a: number, b: number): number {
  let q = idiv(a, b)
  if (q * b < a) q = q + 1
  return q
}

export function decision (allowed: boolean, remaining: number, resetMs: number, retryAfterMs: number, nextMs: number): RawDecision {
  return { allowed, remaining, resetMs, retryAfterMs, nextMs }
}
