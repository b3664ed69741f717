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
 * block assumes the request was charged; when it was not (a peek, or another
 * block refused), the caller still has this request's cost, except at a
 * reserved turn (a block's `delay`): the turns already reserved are taken,
 * and what is left now is what the script found free before it.
 */
export function shownRemaining (decision: RawDecision, cost: number, charge: Charge): number {
  if (charge === 'charged' || !decision.allowed) return decision.remaining
  return decision.freeNow ?? decision.remaining + cost
}

/**
 * The retry a block reports: the script's, except at a reserved turn that was
 * not charged (a peek): the request fits without a wait once the turns
 * reserved before it have come, its wait.
 */
export function shownRetryMs (decision: RawDecision, charge: Charge): number {
  return charge === 'not-charged' && decision.waitMs !== undefined ? decision.waitMs : decision.retryAfterMs
}
