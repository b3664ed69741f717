import type { FastifyReply, FastifyRequest } from 'fastify'
import { UNAVAILABLE_RETRY_SECONDS } from '../decide/decision-math.js'
import { FST_RRL_BANNED, FST_RRL_LIMITER_UNAVAILABLE, FST_RRL_RATE_LIMITED } from '../errors.js'
import type { RateLimitRefusal, ReplyBuilder } from '../types/index.js'
import { strayThenable } from '../util/await-within.js'

/*
 * RFC 9457 problem details for the refusals: over a limit, limiter unavailable, banned. No Redis error text and no
 * identity value ever reaches a client: bodies are built from the policy and
 * the request path only (the route template when the identity is a path param).
 * The plugin may instead build refusals with the user's `replyBuilder`, or
 * hand them to Fastify's error handler as coded errors (`useErrorHandler`).
 */

const PROBLEM_TYPE = 'application/problem+json'
export const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded'
export const TEMPORARY_REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity'
export const ABNORMAL_USAGE_DETECTED = 'https://iana.org/assignments/http-problem-types#abnormal-usage-detected'

/** What a reply reads from a compiled policy. */
export interface ReplySource {
  /** Whether a body may echo the request path (not when an identity comes from a path param). */
  echoPath: boolean
}

function instanceOf (request: FastifyRequest, policy: ReplySource): string {
  if (!policy.echoPath) return request.routeOptions.url ?? '/'
  const query = request.url.indexOf('?')
  return query === -1 ? request.url : request.url.slice(0, query)
}

// The constant part of every 429 body, serialised once: a flood of refusals is the hot path here.
const QUOTA_BODY_HEAD = `{"type":${JSON.stringify(QUOTA_EXCEEDED)},"title":"Too Many Requests","status":429,"detail":"Rate limit exceeded; retry in `

/** `violated` names every enforced policy that refused the request. */
export function sendQuotaExceeded (request: FastifyRequest, reply: FastifyReply, policy: ReplySource, retrySeconds: number, violated: string[]): FastifyReply {
  reply.code(429).header('retry-after', retrySeconds).type(PROBLEM_TYPE)
  return reply.send(QUOTA_BODY_HEAD + retrySeconds + (retrySeconds === 1 ? ' second.' : ' seconds.') +
    '","instance":' + JSON.stringify(instanceOf(request, policy)) +
    ',"violated-policies":' + JSON.stringify(violated) + '}')
}

/** `retrySeconds`: 1 while the limiter is unavailable; a held request answered at close gets the time its turn was still away. */
export function sendUnavailable (request: FastifyRequest, reply: FastifyReply, policy: ReplySource, retrySeconds = UNAVAILABLE_RETRY_SECONDS): FastifyReply {
  reply.code(503).header('retry-after', retrySeconds).type(PROBLEM_TYPE)
  return reply.send(JSON.stringify({
    type: TEMPORARY_REDUCED_CAPACITY,
    title: 'Service Unavailable',
    status: 503,
    detail: 'The rate limiter is temporarily unavailable; retry shortly.',
    instance: instanceOf(request, policy)
  }))
}

/** An operator ban: 403, or 429 with Retry-After = the ban's time left. Never RateLimit fields (no quota applies). */
export function sendBanned (request: FastifyRequest, reply: FastifyReply, policy: ReplySource, statusCode: 403 | 429, retrySeconds: number): FastifyReply {
  reply.code(statusCode).type(PROBLEM_TYPE)
  if (statusCode === 429) reply.header('retry-after', retrySeconds)
  return reply.send(JSON.stringify({
    type: ABNORMAL_USAGE_DETECTED,
    title: statusCode === 429 ? 'Too Many Requests' : 'Forbidden',
    status: statusCode,
    detail: statusCode === 429
      ? `Requests from this client are refused; retry in ${retrySeconds} ${retrySeconds === 1 ? 'second' : 'seconds'}.`
      : 'Requests from this client are refused.',
    instance: instanceOf(request, policy)
  }))
}

/** Sends (or, with useErrorHandler, throws) one refusal. Retry-After is set on every refusal but a 403. */
export type Refuse = (request: FastifyRequest, reply: FastifyReply, policy: ReplySource, refusal: RateLimitRefusal) => FastifyReply

function sendDefault (request: FastifyRequest, reply: FastifyReply, policy: ReplySource, refusal: RateLimitRefusal): FastifyReply {
  const { statusCode } = refusal
  if (statusCode === 403 || refusal.decision.outcome === 'banned') return sendBanned(request, reply, policy, statusCode === 403 ? 403 : 429, refusal.retryAfter)
  return statusCode === 429
    ? sendQuotaExceeded(request, reply, policy, refusal.retryAfter, refusal.violatedPolicies)
    : sendUnavailable(request, reply, policy, refusal.retryAfter)
}

function refusalError (refusal: RateLimitRefusal): Error {
  if (refusal.statusCode === 403) return new FST_RRL_BANNED()
  return refusal.statusCode === 429 ? new FST_RRL_RATE_LIMITED(refusal.retryAfter) : new FST_RRL_LIMITER_UNAVAILABLE(refusal.retryAfter)
}

/**
 * The refusal path chosen by the plugin options: the problem+json default, a
 * `replyBuilder` (falling back to the default when it throws or returns no
 * object, reported through `onBuilderError`), or a coded error for Fastify's
 * error handler carrying the decision.
 */
export function createRefuse (replyBuilder: ReplyBuilder | undefined, useErrorHandler: boolean, onBuilderError: (request: FastifyRequest, error: unknown) => void): Refuse {
  if (useErrorHandler) {
    return function refuseWithError (_request, reply, _policy, refusal) {
      if (refusal.statusCode !== 403) reply.header('retry-after', refusal.retryAfter)
      throw Object.assign(refusalError(refusal), { rateLimit: refusal.decision, retryAfter: refusal.retryAfter, violatedPolicies: refusal.violatedPolicies })
    }
  }
  if (replyBuilder === undefined) return sendDefault
  return function refuseWithBuilder (request, reply, policy, refusal) {
    let built: ReturnType<ReplyBuilder>
    try {
      built = replyBuilder(request, refusal)
      if (strayThenable(built)) throw new TypeError('returned a Promise; replyBuilder must be synchronous')
      if (built === null || typeof built !== 'object') throw new TypeError(`returned ${built === null ? 'null' : typeof built}, not { body, headers? }`)
    } catch (error) {
      onBuilderError(request, error)
      return sendDefault(request, reply, policy, refusal)
    }
    reply.code(refusal.statusCode)
    if (refusal.statusCode !== 403) reply.header('retry-after', refusal.retryAfter)
    if (built.headers !== undefined) reply.headers(built.headers)
    return reply.send(built.body)
  }
}
