/*
 * The refusal errors as an app's error handler sees them, compiled with
 * exactOptionalPropertyTypes on (this folder's tsconfig), as strict apps do:
 * `instanceof` narrows to the refusal's fields, with no cast.
 */
import Fastify, { type FastifyError } from 'fastify'
import { describe, expect, test } from 'tstyche'
import rateLimit, { errors, type RateLimitDecision, type RateLimitRefusalError } from '../../lib/index.js'

declare const error: FastifyError

describe('refusal errors carry their data', () => {
  test('FST_RRL_RATE_LIMITED narrows to the decision, retryAfter and violatedPolicies', () => {
    if (error instanceof errors.FST_RRL_RATE_LIMITED) {
      expect(error.rateLimit).type.toBe<RateLimitDecision>()
      expect(error.rateLimit.remaining).type.toBe<number>()
      expect(error.retryAfter).type.toBe<number>()
      expect(error.violatedPolicies).type.toBe<string[]>()
      expect(error.code).type.toBe<'FST_RRL_RATE_LIMITED'>()
      expect(error.statusCode).type.toBe<429>()
      expect(error).type.toBeAssignableTo<RateLimitRefusalError>()
    }
  })

  test('FST_RRL_LIMITER_UNAVAILABLE (503) and FST_RRL_BANNED (403) too', () => {
    if (error instanceof errors.FST_RRL_LIMITER_UNAVAILABLE) {
      expect(error.rateLimit.degraded).type.toBe<boolean>()
      expect(error.retryAfter).type.toBe<number>()
      expect(error.statusCode).type.toBe<503>()
      expect(error.code).type.toBe<'FST_RRL_LIMITER_UNAVAILABLE'>()
    }
    if (error instanceof errors.FST_RRL_BANNED) {
      expect(error.rateLimit.outcome).type.toBe<RateLimitDecision['outcome']>()
      expect(error.retryAfter).type.toBe<number>()
      expect(error.statusCode).type.toBe<403>()
      expect(error.code).type.toBe<'FST_RRL_BANNED'>()
    }
  })

  test('in setErrorHandler, as docs/replies.md shows it', () => {
    const app = Fastify()
    expect(app.register(rateLimit, { store: 'memory', useErrorHandler: true })).type.not.toRaiseError()
    expect(app.setErrorHandler(async (error, _request, reply) => {
      if (error instanceof errors.FST_RRL_RATE_LIMITED) {
        return await reply.code(429).send({ policy: error.rateLimit.policy, remaining: error.rateLimit.remaining, retryAfter: error.retryAfter })
      }
      return await reply.code(500).send({ error: 'internal' })
    })).type.not.toRaiseError()
  })

  test('wrong uses do not compile', () => {
    expect(error.rateLimit).type.toRaiseError('Property \'rateLimit\' does not exist')
    if (error instanceof errors.FST_RRL_RATE_LIMITED) {
      expect(error.rateLimit.remainder).type.toRaiseError('Property \'remainder\' does not exist')
      expect(error.retryAfter.toUpperCase()).type.toRaiseError()
      expect(error.statusCode === 503).type.toRaiseError('no overlap')
    }
    if (error instanceof errors.FST_RRL_BANNED) {
      expect(error.code === 'FST_RRL_RATE_LIMITED').type.toRaiseError('no overlap')
    }
  })

  test('one built by hand has only the code, status and message', () => {
    const built = new errors.FST_RRL_RATE_LIMITED(5)
    expect(built.statusCode).type.toBe<429>()
    expect(built.message).type.toBe<string>()
    expect(built.rateLimit).type.toRaiseError('Property \'rateLimit\' does not exist')
  })
})
