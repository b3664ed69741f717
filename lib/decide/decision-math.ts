import type { RawDecision } from '../store/algorithms.js'
import { secondsCeil } from '../util/seconds.js'

/*
 * Numbers derived from a raw decision that both the decision engine and the
 * presentation (headers, replies) need. They live here, below both, so the
 * decision core never imports presentation and no formula is written twice.
 */

export { secondsCeil }

/** Whole seconds for Retry-After: at least 1, never earlier than the decision says. */
export function retryAfterSeconds (retryAfterMs: number): number {
  return Math.max(1, secondsCeil(retryAfterMs))
}

/** Retry-After for a 503: the limiter usually recovers within a second or two. */
export const UNAVAILABLE_RETRY_SECONDS = 1

/**
 * Whether admitting blocks were charged this request's cost: `'not-charged'`
 * when another block refused, on a deny-cache answer, or on a peek.
 */
export type Charge = 'charged' | 'not-charged'

/**
 * The units a block reports as left. A script's `remaining` for an admitting
 * block assumes the request was charged; when it was not, the caller still has
 * this request's cost.
 */
export function shownRemaining (decision: RawDecision, cost: number, charge: Charge): number {
  return charge === 'not-charged' && decision.allowed ? decision.remaining + cost : decision.remaining
}
