import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify'
import { FST_RRL_INVALID_COST } from './errors.js'
import { retryAfterSeconds, secondsCeil, type HeaderWriter } from './headers.js'
import type { CompiledPolicy } from './policy.js'
import { sendQuotaExceeded, sendUnavailable, UNAVAILABLE_RETRY_SECONDS } from './replies.js'
import type { Store } from './store.js'
import type { RateLimitStats } from './types.js'

/** What every route hook shares: built once per plugin instance. */
export interface Runtime {
  store: Store
  writeHeaders: HeaderWriter
  stats: RateLimitStats
  /** Logs store failures at most once per burst (see BurstLogger). */
  failures: BurstLogger
  /** Logs bad cost results at most once per burst. */
  badInput: BurstLogger
}

/**
 * Logs the first event of a burst and counts the rest, so a Redis outage at
 * thousands of requests per second produces one line per second, not one per
 * request. The next line carries how many were suppressed.
 */
export class BurstLogger {
  readonly #intervalMs: number
  #lastAt = -Infinity
  #suppressed = 0

  constructor (intervalMs = 1000) {
    this.#intervalMs = intervalMs
  }

  report (log: FastifyBaseLogger, fields: Record<string, unknown>, message: string): void {
    const now = Date.now()
    if (now - this.#lastAt < this.#intervalMs) {
      this.#suppressed++
      return
    }
    log.warn({ ...fields, suppressed: this.#suppressed }, message)
    this.#lastAt = now
    this.#suppressed = 0
  }
}

const MAX_COST = 100_000_000

function requestCost (policy: CompiledPolicy, request: FastifyRequest, runtime: Runtime): number {
  const cost = policy.cost
  if (typeof cost === 'number') return cost
  let value: unknown
  try {
    value = cost(request)
  } catch (error) {
    value = error
  }
  if (typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_COST) return value
  // A broken cost function must neither crash the request nor let it through for free.
  const shown = value instanceof Error ? `an error (${value.message})` : String(value)
  runtime.badInput.report(request.log, { err: new FST_RRL_INVALID_COST(policy.route, shown), route: policy.route }, 'rate limit cost function returned an invalid cost')
  return 1
}

/**
 * The per-route hook (onRequest, or preValidation when the identity needs the
 * body). One store call, then headers and either continue or a refusal.
 */
export function createRouteHook (policy: CompiledPolicy, runtime: Runtime) {
  const { store, writeHeaders, stats, failures } = runtime
  const { limit } = policy.params

  return async function rateLimitHook (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    const identity = policy.identity.resolve(request)
    const cost = requestCost(policy, request, runtime)
    let raw
    try {
      raw = await store.consume(policy, policy.keyHead + identity + policy.keyTail, cost)
    } catch (error) {
      stats.degraded++
      failures.report(request.log, { err: error, route: policy.route, policy: policy.name, onRedisError: policy.onRedisError }, 'rate limiter degraded: decision not enforced')
      const closed = policy.onRedisError === 'closed'
      request.rateLimit = {
        allowed: !closed,
        limit,
        remaining: 0,
        resetMs: 0,
        retryAfterMs: closed ? UNAVAILABLE_RETRY_SECONDS * 1000 : 0,
        policy: policy.name,
        degraded: true
      }
      return closed ? sendUnavailable(request, reply, policy) : undefined
    }

    request.rateLimit = {
      allowed: raw.allowed,
      limit,
      remaining: raw.remaining,
      resetMs: raw.resetMs,
      retryAfterMs: raw.retryAfterMs,
      policy: policy.name,
      degraded: false
    }
    if (raw.allowed) {
      stats.allowed++
      writeHeaders(reply, policy, raw.remaining, secondsCeil(raw.resetMs))
      return undefined
    }
    stats.limited++
    const retrySeconds = retryAfterSeconds(raw.retryAfterMs)
    writeHeaders(reply, policy, raw.remaining, retrySeconds)
    request.log.info({ route: policy.route, identityKind: policy.identity.kinds, policy: policy.name, limit }, 'rate limit exceeded')
    return sendQuotaExceeded(request, reply, policy, retrySeconds)
  }
}
