/*
 * What TypeScript says about a misspelt block field. Fastify infers a route's
 * `config` type from the literal (`config?: FastifyContextConfig &
 * ContextConfig`), so no excess property check reaches `config.rateLimit`:
 * a misspelt optional field compiles, a misspelt required one fails without
 * naming it. `satisfies` on the block, and the plugin options' blocks, name
 * it. Startup always does (FST_RRL_INVALID_BLOCK, "did you mean"; docs/errors.md).
 */
import type { FastifyInstance } from 'fastify'
import { describe, expect, test } from 'tstyche'
import rateLimit, { type AnyRateLimitBlock, type RateLimitBlock, type RouteRateLimit } from '../lib/index.js'

declare const app: FastifyInstance
const handler = async (): Promise<string> => 'ok'

describe('misspelt block fields', () => {
  test('a route block written with satisfies names the field (a missing required field is reported too)', () => {
    expect(app.get('/a', { config: { rateLimit: { limt: 5, window: '1m' } satisfies RouteRateLimit } }, handler)).type.toRaiseError('is not assignable', '\'limt\' does not exist')
    expect(app.get('/b', { config: { rateLimit: { limit: 5, window: '1m', burts: 2 } satisfies RateLimitBlock } }, handler)).type.toRaiseError('Did you mean to write \'burst\'?')
    expect(app.get('/c', { config: { rateLimit: { max: 5, timeWindow: '1m' } satisfies AnyRateLimitBlock } }, handler)).type.toRaiseError('is not assignable', '\'max\' does not exist')
    expect(app.get('/d', { config: { rateLimit: { limit: 5, window: '1m' } satisfies RouteRateLimit } }, handler)).type.not.toRaiseError()
  })

  test('the plugin options\' blocks name it', () => {
    expect(app.register(rateLimit, { defaultLimit: { limt: 5, window: '1m' } })).type.toRaiseError('\'limt\' does not exist')
    expect(app.register(rateLimit, { globalLimits: [{ limit: 5, window: '1m', burts: 2 }] })).type.toRaiseError('Did you mean to write \'burst\'?')
  })

  test('in a route\'s config, Fastify\'s inferred config type hides it (startup names it)', () => {
    expect(app.get('/e', { config: { rateLimit: { limt: 5, window: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/f', { config: { rateLimit: { limit: 5, window: '1m', burts: 2 } } }, handler)).type.not.toRaiseError()
  })
})
