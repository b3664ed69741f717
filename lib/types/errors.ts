import type { FastifyError, FastifyErrorConstructor } from '@fastify/error'
import type { RateLimitDecision } from './api.js'

/* The refusal errors' types: what `instanceof errors.FST_RRL_RATE_LIMITED` (and the 503, 403) narrows to. */

/**
 * A refusal handed to Fastify's error handler (`useErrorHandler: true`): the
 * plugin sets `rateLimit`, `retryAfter` and `violatedPolicies` on every one it
 * throws. One built by hand (`new errors.FST_RRL_RATE_LIMITED(5)`) has only
 * the code, status code and message.
 */
export interface RateLimitRefusalError extends FastifyError {
  code: 'FST_RRL_RATE_LIMITED' | 'FST_RRL_LIMITER_UNAVAILABLE' | 'FST_RRL_BANNED'
  /** 429 (over a limit, or a ban's 429), 503 (limiter unavailable, fail-closed) or 403 (a ban). */
  statusCode: 403 | 429 | 503
  /** The decision, as on `request.rateLimit` (`outcome: 'banned'` for both ban refusals). */
  rateLimit: RateLimitDecision
  /** Seconds, as sent in `Retry-After`; 0 on a 403 (none is sent). */
  retryAfter: number
  /** Names of the policies that refused the request (empty for a 503 and a ban). */
  violatedPolicies: string[]
}

/**
 * A refusal error class: a `@fastify/error` constructor whose `prototype`
 * (what `instanceof` narrows to) is the error with the refusal's fields.
 */
export interface RateLimitRefusalErrorConstructor<C extends RateLimitRefusalError['code'], SC extends RateLimitRefusalError['statusCode']>
  extends FastifyErrorConstructor<{ code: C, statusCode: SC }> {
  readonly prototype: RateLimitRefusalError & { code: C, statusCode: SC }
}
