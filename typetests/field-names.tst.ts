/*
 * What TypeScript says about a misspelt or mistyped block field, wherever a
 * block is written. Fastify infers a route's `config` type from the literal
 * (`config?: FastifyContextConfig & ContextConfig`), so TypeScript's own
 * excess-property check never reaches `config.rateLimit`; the property's type
 * (CheckedRouteRateLimit, lib/types/exact.ts) holds each block to its kind and
 * names the field where it is written. The plugin options' blocks are not
 * inferred, so TypeScript's own check names it there. Startup names it too
 * (FST_RRL_INVALID_BLOCK, "did you mean"; docs/errors.md).
 */
import type { FastifyContextConfig, FastifyInstance } from 'fastify'
import { describe, expect, test } from 'tstyche'
import rateLimit, { type AnyRateLimitBlock, type CheckedRouteRateLimit, type RateLimitBlock, type RouteRateLimit } from '../lib/index.js'

declare const app: FastifyInstance
const handler = async (): Promise<string> => 'ok'

describe('a route\'s config.rateLimit names the field', () => {
  test('a misspelt optional field, in each block kind', () => {
    expect(app.get('/a', { config: { rateLimit: { limit: 5, window: '1m', algoritm: 'gcra' } } }, handler))
      .type.toRaiseError('\'algoritm\' does not exist in type RateLimitWindowBlock. Did you mean \'algorithm\'?')
    expect(app.get('/b', { config: { rateLimit: { limit: 500, period: 'month', timezone: 'Europe/Berlin' } } }, handler))
      .type.toRaiseError('\'timezone\' does not exist in type RateLimitPeriodBlock. Did you mean \'timeZone\'?')
    expect(app.get('/c', { config: { rateLimit: { concurrency: 2, wiat: '5s' } } }, handler))
      .type.toRaiseError('\'wiat\' does not exist in type RateLimitConcurrencyBlock. Did you mean \'wait\'?')
    expect(app.get('/d', { config: { rateLimit: { limit: 5, window: '1m', penalty: { after: 3, for: '15m', backof: 2 } } } }, handler))
      .type.toRaiseError('\'backof\' does not exist in type RateLimitPenalty. Did you mean \'backoff\'?')
    expect(app.route({ method: 'GET', url: '/e', config: { rateLimit: { limit: 5, window: '1m', burts: 10 } }, handler }))
      .type.toRaiseError('\'burts\' does not exist in type RateLimitWindowBlock. Did you mean \'burst\'?')
  })

  test('a misspelt required field, and a name with no near field', () => {
    expect(app.get('/a', { config: { rateLimit: { limt: 5, window: '1m' } } }, handler))
      .type.toRaiseError('\'limt\' does not exist in type RateLimitWindowBlock. Did you mean \'limit\'?')
    expect(app.get('/b', { config: { rateLimit: { max: 5, timeWindow: '1m' } } }, handler))
      .type.toRaiseError('\'max\' does not exist in type RateLimitWindowBlock":', '\'timeWindow\' does not exist in type RateLimitWindowBlock":')
  })

  test('a field of another kind', () => {
    expect(app.get('/a', { config: { rateLimit: { concurrency: 2, window: '1m' } } }, handler))
      .type.toRaiseError('\'window\' does not exist in type RateLimitConcurrencyBlock')
    expect(app.get('/b', { config: { rateLimit: { limit: 5, period: 'month', burst: 10 } } }, handler))
      .type.toRaiseError('\'burst\' does not exist in type RateLimitPeriodBlock')
    expect(app.get('/c', { config: { rateLimit: { limit: 5, window: '1m', wait: '1s' } } }, handler))
      .type.toRaiseError('\'wait\' does not exist in type RateLimitWindowBlock')
  })

  test('a value of another type names the field and the type it takes', () => {
    expect(app.get('/a', { config: { rateLimit: { limit: '10', window: '1m' } } }, handler))
      .type.toRaiseError('\'limit\' must be of type": TieredCount')
    expect(app.get('/b', { config: { rateLimit: { limit: 10, window: '1m', algorithm: 'leaky-bucket' } } }, handler))
      .type.toRaiseError('\'algorithm\' must be of type')
    expect(app.get('/c', { config: { rateLimit: { limit: 10, period: 'month', algorithm: 'gcra' } } }, handler))
      .type.toRaiseError('\'algorithm\' must be of type": "fixed-window"')
    expect(app.get('/d', { config: { rateLimit: { concurrency: '2' } } }, handler))
      .type.toRaiseError('\'concurrency\' must be of type": TieredCount')
    expect(app.get('/e', { config: { rateLimit: { limit: 10, window: '1m', penalty: { after: '3', for: '1m' } } } }, handler))
      .type.toRaiseError('\'after\' must be of type": number')
    // An object of the wrong shape gets TypeScript's own message, on the field.
    expect(app.get('/f', { config: { rateLimit: { limit: { pro: 600 }, window: '1m' } } }, handler))
      .type.toRaiseError('Property \'default\' is missing')
  })

  test('an array of blocks with one wrong block names its field', () => {
    expect(app.get('/a', { config: { rateLimit: [{ limit: 10, window: '1s' }, { limit: 1000, window: '1h', burts: 20 }] } }, handler))
      .type.toRaiseError('\'burts\' does not exist in type RateLimitWindowBlock')
    expect(app.get('/b', { config: { rateLimit: [{ limit: 10, window: '1s' }, { concurrency: 2, wiat: '1s' }, { limit: 10_000, period: 'month' }] } }, handler))
      .type.toRaiseError('\'wiat\' does not exist in type RateLimitConcurrencyBlock')
    expect(app.get('/c', { config: { rateLimit: [{ limit: 10, window: '1s' }, { limit: '1000', window: '1h' }] } }, handler))
      .type.toRaiseError('\'limit\' must be of type')
  })

  test('with satisfies, TypeScript\'s own check names it as well', () => {
    expect(app.get('/a', { config: { rateLimit: { limit: 5, window: '1m', burts: 2 } satisfies RateLimitBlock } }, handler))
      .type.toRaiseError('Types of property \'burts\' are incompatible', 'but \'burts\' does not exist in type \'RateLimitWindowBlock\'. Did you mean to write \'burst\'?')
    expect(app.get('/b', { config: { rateLimit: { max: 5, timeWindow: '1m' } satisfies AnyRateLimitBlock } }, handler))
      .type.toRaiseError('\'max\' does not exist in type RateLimitWindowBlock', 'and \'max\' does not exist in type \'AnyRateLimitBlock\'')
  })
})

describe('the plugin options\' blocks: TypeScript\'s own check names the field', () => {
  test('a misspelt field, a wrong value, an array with one wrong block', () => {
    expect(app.register(rateLimit, { defaultLimit: { limit: 5, window: '1m', algoritm: 'gcra' } }))
      .type.toRaiseError('\'algoritm\' does not exist in type')
    expect(app.register(rateLimit, { defaultLimit: { limt: 5, window: '1m' } }))
      .type.toRaiseError('\'limt\' does not exist in type \'RateLimitWindowBlock | AnyRateLimitBlock[]\'')
    expect(app.register(rateLimit, { globalLimits: [{ limit: 300, window: '1m' }, { limit: 5, window: '1m', burts: 2 }] }))
      .type.toRaiseError('\'burts\' does not exist in type \'RateLimitWindowBlock\'. Did you mean to write \'burst\'?')
    expect(app.register(rateLimit, { policies: { jobs: { limit: '10', window: '1m' } } }))
      .type.toRaiseError('Types of property \'limit\' are incompatible')
    expect(app.register(rateLimit, { notFound: { limit: 500, period: 'day', timezone: 'UTC' } }))
      .type.toRaiseError('\'timezone\' does not exist in type')
    expect(app.register(rateLimit, { defaultLimit: { concurrency: 2, wiat: '1s' } }))
      .type.toRaiseError('\'wiat\' does not exist in type')
  })
})

describe('what still compiles', () => {
  test('every block shape, alone and in arrays', () => {
    expect(app.get('/a', { config: { rateLimit: { limit: 5, window: '1m', algorithm: 'gcra', burst: 10, delay: '1s', by: ['ip', 'body:username', (request) => request.ip] } } }, handler)).type.not.toRaiseError()
    expect(app.get('/b', { config: { rateLimit: { limit: { default: 60, pro: 600 }, window: 60_000, cost: (request) => request.url.length, refundOn: (reply) => reply.statusCode >= 500, penalty: { after: 3, for: '1m', backoff: 2, max: '1h' } } } }, handler)).type.not.toRaiseError()
    expect(app.get('/c', { config: { rateLimit: { limit: 500, period: 'week', weekStart: 7, timeZone: 'Europe/Berlin', algorithm: 'fixed-window', settle: async () => await Promise.resolve(3) } } }, handler)).type.not.toRaiseError()
    expect(app.get('/d', { config: { rateLimit: { concurrency: { default: 2, pro: 8 }, wait: '5s', localLimit: 1, by: 'user', mode: 'shadow', hook: 'preHandler', skip: async () => await Promise.resolve(false) } } }, handler)).type.not.toRaiseError()
    expect(app.get('/e', { config: { rateLimit: [{ limit: 10, window: '1s' }, { limit: 10_000, period: 'month' }, { concurrency: 3 }] } }, handler)).type.not.toRaiseError()
    expect(app.get('/f', { config: { rateLimit: false } }, handler)).type.not.toRaiseError()
    expect(app.route({ method: 'POST', url: '/g', config: { rateLimit: { algorithm: 'sliding-log', limit: 5, window: '15m', onRedisError: 'closed', name: 'login' } }, handler })).type.not.toRaiseError()
  })

  test('blocks held in variables, conditional blocks, other config keys, explicit type arguments', () => {
    const block: RateLimitBlock = { limit: 5, window: '1m' }
    const blocks: AnyRateLimitBlock[] = [block, { concurrency: 2 }]
    const route: RouteRateLimit = false
    const loose: { limit: number, window: string, burst?: number } = { limit: 5, window: '1m' }
    const enabled = process.env.LIMITS === 'on'
    expect(app.get('/a', { config: { rateLimit: block } }, handler)).type.not.toRaiseError()
    expect(app.get('/b', { config: { rateLimit: blocks } }, handler)).type.not.toRaiseError()
    expect(app.get('/c', { config: { rateLimit: route } }, handler)).type.not.toRaiseError()
    expect(app.get('/d', { config: { rateLimit: [loose, { concurrency: 1 }] } }, handler)).type.not.toRaiseError()
    expect(app.get('/e', { config: { rateLimit: enabled ? { limit: 5, window: '1m' } : false } }, handler)).type.not.toRaiseError()
    expect(app.get('/f', { config: { rateLimit: enabled ? { limit: 5, window: '1m' } : { concurrency: 2 } } }, handler)).type.not.toRaiseError()
    expect(app.get('/g', { config: { rateLimit: { limit: 5, window: '1m' }, owner: 'search' } }, handler)).type.not.toRaiseError()
    expect(app.get<{ Querystring: { q: string } }>('/h', { config: { rateLimit: { limit: 5, window: '1m' } } }, handler)).type.not.toRaiseError()
  })

  test('read back, config.rateLimit is a RouteRateLimit', () => {
    expect<CheckedRouteRateLimit<FastifyContextConfig>>().type.toBe<RouteRateLimit>()
    app.get('/a', { config: { rateLimit: { limit: 5, window: '1m' } } }, async (request) => {
      expect(request.routeOptions.config.rateLimit).type.toBeAssignableTo<RouteRateLimit | undefined>()
      return 'ok'
    })
    app.addHook('onRequest', async (request) => {
      expect(request.routeOptions.config.rateLimit).type.toBe<RouteRateLimit | undefined>()
    })
  })
  test('a helper that passes a block through: typed RateLimitBlock it compiles and its callers are checked; generic over the block it does not (CHANGELOG)', () => {
    function limited (url: string, block: RateLimitBlock): void {
      app.get(url, { config: { rateLimit: block } }, handler)
    }
    expect(limited('/a', { limit: 10, window: '1m' })).type.not.toRaiseError()
    expect(limited('/b', { limit: 10, window: '1m', algoritm: 'gcra' })).type.toRaiseError("'algoritm' does not exist")
    function limitedGeneric<B extends RateLimitBlock> (url: string, block: B): void {
      expect(app.get(url, { config: { rateLimit: block } }, handler)).type.toRaiseError()
    }
    expect(limitedGeneric).type.not.toBe<undefined>()
  })
})
