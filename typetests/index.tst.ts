/*
 * Type tests (tstyche, as Fastify and @fastify/rate-limit use): the public
 * types as a user compiles against them. Run by `npm test` (`npm run test:types`).
 * Kept out of the main tsconfig: the `toRaiseError` cases are meant not to compile.
 */
import Fastify, { type FastifyInstance, type FastifyPluginAsync, type FastifyReply, type FastifyRequest } from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import { describe, expect, test } from 'tstyche'
import rateLimit, {
  ALGORITHMS,
  CHANNELS,
  errors,
  fastifyRedisRateLimit,
  METRICS,
  type AlgorithmName,
  type AnyRateLimitBlock,
  type DecisionMessage,
  type FailurePolicy,
  type HeaderFormat,
  type HeaderMode,
  type IdentityFunction,
  type IdentityPartSpec,
  type PolicyBlockSummary,
  type RateLimitBlockFields,
  type RateLimitPeriod,
  type RateLimitPeriodBlock,
  type RateLimitWeekday,
  type RateLimitWindowBlock,
  type PolicySummary,
  type RateLimitApi,
  type RateLimitBan,
  type RateLimitBanInput,
  type RateLimitBanKind,
  type FleetView,
  type PictureCaller,
  type InstancePicture,
  type RateLimitOverride,
  type RateLimitBlock,
  type RateLimitConcurrencyBlock,
  type RateLimitDecision,
  type RateLimitHook,
  type RateLimitIdentity,
  type RateLimitMode,
  type RateLimitPluginOptions,
  type RedisClientLike,
  type RateLimitPolicyDecision,
  type RateLimitRefusal,
  type RateLimitSlot,
  type RateLimitStats,
  type RouteRateLimit,
  type StoreErrorMessage,
  type TieredCount
} from '../lib/index.js'

declare const app: FastifyInstance
declare const redis: Redis
declare const cluster: Cluster
const handler = async (): Promise<string> => 'ok'

describe('the plugin', () => {
  test('default and named exports are the same Fastify plugin', () => {
    expect(rateLimit).type.toBe(fastifyRedisRateLimit)
    expect(rateLimit).type.toBeAssignableTo<FastifyPluginAsync<RateLimitPluginOptions>>()
  })

  test('registers with no options and with every option', () => {
    expect(app.register(rateLimit)).type.not.toRaiseError()
    expect(app.register(rateLimit, {
      redis,
      store: 'redis',
      prefix: 'rl',
      defaultLimit: { limit: 120, window: '1m' },
      onRedisError: 'open',
      timeout: 50,
      headers: 'ietf',
      user: (request) => request.headers['x-user'] as string | undefined,
      apiKey: (request) => request.headers['x-api-key'] as string | undefined,
      ipv6Subnet: 64,
      hashSecret: 'a secret of at least 16 bytes',
      globalLimits: [{ name: 'per-user', limit: 300, window: '1m', by: 'user' }],
      denyCache: { max: 10_000 },
      mode: 'shadow',
      tier: (request) => request.headers['x-tier'] as string | undefined,
      policies: { 'email-send': { limit: 3, window: '1h' }, jobs: [{ limit: 1, window: 1000 }, { limit: 10, window: '1 minute' }] },
      printPolicies: true,
      metrics: false,
      batchWrites: false,
      maxBatch: 64,
      maxPending: 10_000,
      fleetSize: 3,
      maxKeys: 50_000,
      circuitBreaker: { failures: 3, cooldown: '500ms' },
      clock: () => Date.now(),
      configKey: 'redisRateLimit',
      hook: 'preHandler',
      identityTimeout: 100,
      allowList: ['10.0.0.0/8', '2001:db8::1'],
      replyBuilder: (request, refusal) => ({ body: { error: refusal.statusCode, path: request.url, policy: refusal.decision.policy }, headers: { 'x-retry': refusal.retryAfter } }),
      notFound: [{ limit: 20, window: '1m' }]
    })).type.not.toRaiseError()
    expect(app.register(rateLimit, { headers: 'draft-6' })).type.not.toRaiseError()
    expect(app.register(rateLimit, { headers: ['draft-7', 'legacy'] })).type.not.toRaiseError()
    expect(app.register(rateLimit, { allowList: async (request) => request.headers['x-internal'] === 'yes', useErrorHandler: true, notFound: { limit: 5, window: 1000 } })).type.not.toRaiseError()
    expect(app.register(rateLimit, { redis: cluster, store: 'memory', hashSecret: Buffer.alloc(32), denyCache: false, headers: false, circuitBreaker: false, onRedisError: 'local' })).type.not.toRaiseError()
  })

  test('defaultLimit: a block or an array of blocks', () => {
    expect<RateLimitPluginOptions['defaultLimit']>().type.toBe<AnyRateLimitBlock | AnyRateLimitBlock[] | undefined>()
    expect(app.register(rateLimit, { defaultLimit: [{ limit: 10, window: '1s' }, { limit: 1000, window: '1h', algorithm: 'fixed-window' }] })).type.not.toRaiseError()
    expect(app.register(rateLimit, { defaultLimit: false })).type.toRaiseError()
  })

  // Each case differs from the accepted registrations above in one option only, so its error is that option's.
  test('wrong option types are rejected', () => {
    expect(app.register(rateLimit, { store: 'mongo' })).type.toRaiseError()
    expect(app.register(rateLimit, { redis: { url: 'redis://x' } })).type.toRaiseError()
    expect(app.register(rateLimit, { prefix: 1 })).type.toRaiseError()
    expect(app.register(rateLimit, { onRedisError: 'fail' })).type.toRaiseError()
    expect(app.register(rateLimit, { timeout: '50ms' })).type.toRaiseError()
    expect(app.register(rateLimit, { headers: 'draft' })).type.toRaiseError()
    expect(app.register(rateLimit, { headers: true })).type.toRaiseError()
    expect(app.register(rateLimit, { headers: 'draft-8' })).type.toRaiseError()
    expect(app.register(rateLimit, { headers: ['both'] })).type.toRaiseError()
    expect(app.register(rateLimit, { user: 'user' })).type.toRaiseError()
    expect(app.register(rateLimit, { user: (request: FastifyRequest) => 42 })).type.toRaiseError()
    expect(app.register(rateLimit, { apiKey: true })).type.toRaiseError()
    expect(app.register(rateLimit, { ipv6Subnet: '64' })).type.toRaiseError()
    expect(app.register(rateLimit, { hashSecret: 42 })).type.toRaiseError()
    expect(app.register(rateLimit, { globalLimits: { limit: 1, window: '1s' } })).type.toRaiseError()
    expect(app.register(rateLimit, { denyCache: true })).type.toRaiseError()
    expect(app.register(rateLimit, { denyCache: { size: 10 } })).type.toRaiseError()
    expect(app.register(rateLimit, { mode: 'dry-run' })).type.toRaiseError()
    expect(app.register(rateLimit, { tier: 'pro' })).type.toRaiseError()
    expect(app.register(rateLimit, { policies: [{ limit: 1, window: '1s' }] })).type.toRaiseError()
    expect(app.register(rateLimit, { printPolicies: 'yes' })).type.toRaiseError()
    expect(app.register(rateLimit, { metrics: 1 })).type.toRaiseError()
    expect(app.register(rateLimit, { batchWrites: 'on' })).type.toRaiseError()
    expect(app.register(rateLimit, { maxBatch: '64' })).type.toRaiseError()
    expect(app.register(rateLimit, { maxPending: true })).type.toRaiseError()
    expect(app.register(rateLimit, { fleetSize: '3' })).type.toRaiseError()
    expect(app.register(rateLimit, { maxKeys: [] })).type.toRaiseError()
    expect(app.register(rateLimit, { circuitBreaker: true })).type.toRaiseError()
    expect(app.register(rateLimit, { clock: Date.now() })).type.toRaiseError()
    expect(app.register(rateLimit, { configKey: false })).type.toRaiseError()
    expect(app.register(rateLimit, { allowList: '10.0.0.1' })).type.toRaiseError()
    expect(app.register(rateLimit, { allowList: (request: FastifyRequest) => 'yes' })).type.toRaiseError()
    expect(app.register(rateLimit, { replyBuilder: () => 'body' })).type.toRaiseError()
    expect(app.register(rateLimit, { useErrorHandler: 'yes' })).type.toRaiseError()
    expect(app.register(rateLimit, { notFound: true })).type.toRaiseError()
    expect(app.register(rateLimit, { max: 100 })).type.toRaiseError()
    expect(app.register(rateLimit, { hook: 'onSend' })).type.toRaiseError()
    expect(app.register(rateLimit, { identityTimeout: '100ms' })).type.toRaiseError()
    expect(app.register(rateLimit, { user: async (request: FastifyRequest) => await Promise.resolve(request.headers['x-user'] as string | undefined), tier: async () => await Promise.resolve('pro') })).type.not.toRaiseError()
    expect(app.register(rateLimit, { tier: async () => await Promise.resolve(3) })).type.toRaiseError()
  })
})

describe('route config: config.rateLimit', () => {
  test('a block with every field', () => {
    expect(app.get('/orders/:id', {
      config: {
        rateLimit: {
          limit: 100,
          window: '1 minute',
          algorithm: 'token-bucket',
          burst: 20,
          by: ['ip', 'user', 'api-key', 'header:x-tenant', 'param:id', 'body:username', (request) => request.ip],
          cost: (request) => request.method === 'POST' ? 5 : 1,
          onRedisError: 'closed',
          name: 'orders',
          mode: 'enforce',
          refundOn: (reply: FastifyReply) => reply.statusCode >= 500,
          penalty: { after: 3, for: '15m', backoff: 2, max: '1d' },
          localLimit: 10,
          skip: async (request) => request.headers['x-admin'] === '1'
        }
      }
    }, handler)).type.not.toRaiseError()
    expect(app.get('/tiers', { config: { rateLimit: { limit: { default: 60, pro: 600 }, burst: { default: 5 }, window: 60_000, by: 'user', cost: 2 } } }, handler)).type.not.toRaiseError()
    expect(app.get('/tokens', { config: { rateLimit: { limit: 1000, window: '1m', cost: 100, settle: (request: FastifyRequest, reply: FastifyReply) => reply.statusCode === 200 && request.method === 'POST' ? 250 : 0 } } }, handler)).type.not.toRaiseError()
    expect(app.get('/tokens', { config: { rateLimit: { limit: 1000, window: '1m', settle: async () => await Promise.resolve(250) } } }, handler)).type.not.toRaiseError()
  })

  test('an array of blocks, false, or nothing', () => {
    expect(app.get('/search', { config: { rateLimit: [{ limit: 10, window: '1s' }, { limit: 1000, window: '1h', algorithm: 'fixed-window' }] } }, handler)).type.not.toRaiseError()
    expect(app.get('/health', { config: { rateLimit: false } }, handler)).type.not.toRaiseError()
    expect(app.get('/late', { config: { rateLimit: { limit: 10, window: '1m', hook: 'preHandler', by: async (request: FastifyRequest) => await Promise.resolve(request.headers['x-account'] as string | undefined), requestLimit: async () => await Promise.resolve(100) } } }, handler)).type.not.toRaiseError()
    expect(app.get('/plain', handler)).type.not.toRaiseError()
    expect(app.get('/quota', { config: { rateLimit: [{ limit: 10, window: '1s' }, { limit: 10_000, period: 'month', timeZone: 'Europe/Berlin', by: 'api-key' }] } }, handler)).type.not.toRaiseError()
    expect(app.get('/weekly', { config: { rateLimit: { limit: 500, period: 'week', weekStart: 7, algorithm: 'fixed-window' } } }, handler)).type.not.toRaiseError()
    expect(app.get('/long', { config: { rateLimit: { limit: 1000, window: '30d', algorithm: 'sliding-window' } } }, handler)).type.not.toRaiseError()
    expect(app.route({ method: 'POST', url: '/login', config: { rateLimit: { algorithm: 'sliding-log', limit: 5, window: '15m', by: ['ip', 'body:username'] } }, handler })).type.not.toRaiseError()
  })

  // Each case differs from an accepted block above in one field only, so its error is that field's.
  test('wrong field types are rejected', () => {
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'fortnight' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'month', window: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'month', algorithm: 'gcra' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'month', burst: 10 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'month', delay: '1s' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 10, window: '1s', algorithm: 'gcra', delay: '3s' } } }, handler)).type.not.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { concurrency: 2, wait: '5s' } } }, handler)).type.not.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { concurrency: 2, delay: '5s' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 10, window: '1s', wait: '5s' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'week', weekStart: 0 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, period: 'day', timeZone: 1 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', timeZone: 'UTC' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: true } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { window: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: '5', window: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: { pro: 600 }, window: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: true } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', algorithm: 'leaky-bucket' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', by: 'cookie' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', by: ['ip', 'query:q'] } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', cost: '2' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', penalty: { for: '1m' } } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', localLimit: '2' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', onRedisError: 'skip' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', hook: 'onResponse' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', requestLimit: 5 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', requestLimit: async () => await Promise.resolve('5') } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', mode: 'dry-run' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', name: 7 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', refundOn: true } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', settle: 3 } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', settle: () => '3' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { limit: 5, window: '1m', skip: true } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { max: 5, timeWindow: '1m' } } }, handler)).type.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: [{ limit: 5, window: '1m' }, false] } }, handler)).type.toRaiseError()
  })

  test('RouteRateLimit is what the key accepts, for a configKey of your own', () => {
    expect<RouteRateLimit>().type.toBe<AnyRateLimitBlock | AnyRateLimitBlock[] | false>()
    expect<AnyRateLimitBlock>().type.toBe<RateLimitBlock | RateLimitConcurrencyBlock>()
    expect<RouteRateLimit>().type.toBeAssignableFrom<false>()
    expect<RouteRateLimit>().type.not.toBeAssignableFrom<true>()
  })
})

describe('decorations', () => {
  test('request.rateLimit is the decision, or null before the hook ran', () => {
    app.get('/d', { config: { rateLimit: { limit: 1, window: '1s' } } }, async (request) => {
      expect(request.rateLimit).type.toBe<RateLimitDecision | null>()
      if (request.rateLimit !== null) {
        expect(request.rateLimit.remaining).type.toBe<number>()
        expect(request.rateLimit.outcome).type.toBe<'allowed' | 'delayed' | 'limited' | 'penalized' | 'shadow-limited' | 'degraded' | 'banned'>()
        expect(request.rateLimit.delayMs).type.toBe<number>()
        expect(request.rateLimit.policies).type.toBe<RateLimitPolicyDecision[]>()
      }
      return 'ok'
    })
  })

  test('fastify.rateLimit is the programmatic API', async () => {
    expect(app.rateLimit).type.toBe<RateLimitApi>()
    expect(app.rateLimit.policies()).type.toBe<PolicySummary[]>()
    expect(app.rateLimit.stats()).type.toBe<RateLimitStats>()
    expect(app.rateLimit.peek('GET /orders/:id', { user: 'alice' })).type.toBe<Promise<RateLimitDecision>>()
    expect(await app.rateLimit.consume('email-send', { ip: '203.0.113.7', tier: 'pro' }, 2)).type.toBe<RateLimitDecision>()
    expect(await app.rateLimit.schedule('email-send', { ip: '203.0.113.7' }, 1, { signal: AbortSignal.timeout(1000) })).type.toBe<RateLimitDecision>()
    expect(app.rateLimit.schedule).type.not.toBeCallableWith('email-send', { ip: '203.0.113.7' }, 1, { signal: 'no' })
    expect(app.rateLimit.reset('GET /orders/:id', { apiKey: 'k' })).type.toBe<Promise<void>>()
    expect(app.rateLimit.consume).type.not.toBeCallableWith('email-send', { user: 1 })
    expect(app.rateLimit.adjust('POST /v1/complete', { apiKey: 'k' }, -250)).type.toBe<Promise<string[]>>()
    expect(app.rateLimit.adjust).type.not.toBeCallableWith('POST /v1/complete', { apiKey: 'k' })
    expect(app.rateLimit.adjust).type.not.toBeCallableWith('POST /v1/complete', { apiKey: 'k' }, '250')
    expect(app.rateLimit.peek).type.not.toBeCallableWith({ user: 'alice' })
    expect(app.rateLimit.peek({ method: 'GET', url: '/api', constraints: { host: /^a\./ } }, { ip: '203.0.113.7' })).type.toBe<Promise<RateLimitDecision>>()
    expect(app.rateLimit.ban({ target: { method: 'GET', url: '/api' }, identity: { ip: '203.0.113.7' }, ttl: 60_000, actor: 'ops', reason: 'abuse' })).type.toBe<Promise<RateLimitBan>>()
    expect(app.rateLimit.consume).type.not.toBeCallableWith({ method: 'GET' }, { ip: '203.0.113.7' })
    expect(app.rateLimit.policies()[0]?.constraints).type.toBe<Record<string, unknown> | undefined>()
    expect(app.rateLimit.setOverride({ target: 'GET /orders/:id', identity: { user: 'alice' }, limit: 500, ttl: 'permanent', actor: 'ops', reason: 'incident' })).type.toBe<Promise<RateLimitOverride>>()
    expect(app.rateLimit.setOverride).type.not.toBeCallableWith({ target: 'GET /orders/:id', limit: 500, ttl: 60_000 })
    expect(app.rateLimit.listOverrides()).type.toBe<Promise<RateLimitOverride[]>>()
    expect(app.rateLimit.clearOverride('id', { actor: 'ops', reason: 'over' })).type.toBe<Promise<boolean>>()
    expect(app.rateLimit.ban({ identity: { ip: '203.0.113.7' }, ttl: 'permanent', actor: 'ops', reason: 'abuse' })).type.toBe<Promise<RateLimitBan>>()
    expect(app.rateLimit.ban({ target: 'GET /orders/:id', identity: { user: 'mallory' }, ttl: 60_000, actor: 'ops', reason: 'abuse', statusCode: 429 })).type.toBe<Promise<RateLimitBan>>()
    expect(app.rateLimit.ban).type.not.toBeCallableWith({ identity: { ip: '203.0.113.7' }, ttl: 60_000, actor: 'ops', reason: 'abuse', statusCode: 404 })
    expect(app.rateLimit.ban).type.not.toBeCallableWith({ identity: { tier: 'pro' }, ttl: 60_000, actor: 'ops', reason: 'abuse' })
    expect(app.rateLimit.ban).type.not.toBeCallableWith({ identity: { ip: '203.0.113.7' }, ttl: 60_000 })
    expect(app.rateLimit.unban('id', { actor: 'ops', reason: 'over' })).type.toBe<Promise<boolean>>()
    expect(app.rateLimit.listBans()).type.toBe<Promise<RateLimitBan[]>>()
    expect(Fastify().rateLimit).type.toBe<RateLimitApi>()
  })

  test('concurrency blocks and acquire()', async () => {
    expect(app.get('/export', { config: { rateLimit: { concurrency: 2, by: 'user' } } }, async () => 'ok')).type.not.toRaiseError()
    expect(app.get('/llm', { config: { rateLimit: [{ concurrency: { default: 2, pro: 10 } }, { limit: 100, window: '1m' }] } }, async () => 'ok')).type.not.toRaiseError()
    expect(app.get('/x', { config: { rateLimit: { concurrency: 2, cost: 2 } } }, async () => 'ok')).type.toRaiseError()
    expect(app.get('/y', { config: { rateLimit: { concurrency: 2, window: '1m' } } }, async () => 'ok')).type.toRaiseError()
    expect(app.register(rateLimit, { lease: '30s', globalLimits: [{ concurrency: 20, by: 'ip' }] })).type.not.toRaiseError()
    const slot = await app.rateLimit.acquire('exports', { user: 'alice' })
    expect(slot).type.toBe<RateLimitSlot>()
    expect(slot.release).type.toBe<() => void>()
    expect(slot.allowed).type.toBe<boolean>()
    expect(app.rateLimit.acquire).type.not.toBeCallableWith('exports', { user: 1 })
  })
})

describe('every exported type', () => {
  test('names and unions', () => {
    expect<AlgorithmName>().type.toBe<'fixed-window' | 'sliding-window' | 'sliding-log' | 'token-bucket' | 'gcra'>()
    expect(ALGORITHMS).type.toBe<readonly ['fixed-window', 'sliding-window', 'sliding-log', 'token-bucket', 'gcra']>()
    expect<FailurePolicy>().type.toBe<'open' | 'closed' | 'local'>()
    expect<HeaderMode>().type.toBe<'ietf' | 'draft-6' | 'draft-7' | 'legacy' | 'both' | false | readonly HeaderFormat[]>()
    expect<HeaderFormat>().type.toBe<'ietf' | 'draft-6' | 'draft-7' | 'legacy'>()
    expect<RateLimitMode>().type.toBe<'enforce' | 'shadow'>()
    expect<TieredCount>().type.toBeAssignableFrom<number>()
    expect<TieredCount>().type.toBeAssignableFrom<{ default: number, pro: number }>()
    expect<TieredCount>().type.not.toBeAssignableFrom<{ pro: number }>()
    expect<IdentityFunction>().type.toBe<(request: FastifyRequest) => string | undefined | Promise<string | undefined>>()
    expect<RateLimitHook>().type.toBe<'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'>()
    expect<IdentityPartSpec>().type.toBeAssignableFrom<'header:x-tenant'>()
    expect<IdentityPartSpec>().type.not.toBeAssignableFrom<'cookie:sid'>()
  })

  test('blocks, decisions and summaries', () => {
    expect<RateLimitBlock>().type.toHaveProperty('refundOn')
    expect<Pick<RateLimitWindowBlock, 'limit' | 'window'>>().type.toBe<{ limit: TieredCount, window: number | string }>()
    expect<Pick<RateLimitPeriodBlock, 'limit' | 'period'>>().type.toBe<{ limit: TieredCount, period: RateLimitPeriod }>()
    expect<RateLimitBlock>().type.toHaveProperty('settle')
    expect<PolicyBlockSummary['settles']>().type.toBe<boolean>()
    expect<RateLimitDecision['tier']>().type.toBe<string | undefined>()
    expect<RateLimitPolicyDecision['shadow']>().type.toBe<boolean>()
    expect<PolicyBlockSummary['algorithm']>().type.toBe<AlgorithmName | 'concurrency'>()
    expect<PolicyBlockSummary['period']>().type.toBe<RateLimitPeriod | undefined>()
    expect<PolicyBlockSummary['timeZone']>().type.toBe<string | undefined>()
    expect<RateLimitPeriod>().type.toBe<'day' | 'week' | 'month' | 'year'>()
    expect<RateLimitBlock>().type.toBe<RateLimitWindowBlock | RateLimitPeriodBlock>()
    expect<RateLimitPeriodBlock['weekStart']>().type.toBe<RateLimitWeekday | undefined>()
    expect<RateLimitBlockFields['limit']>().type.toBe<TieredCount>()
    expect<PolicyBlockSummary['tiers']>().type.toBe<Record<string, { limit: number, burst: number }> | undefined>()
    expect<PolicySummary['limit']>().type.toBe<false | PolicyBlockSummary>()
    expect<PolicySummary['limits']>().type.toBe<PolicyBlockSummary[]>()
    expect<RateLimitIdentity>().type.toBeAssignableFrom<{}>()
    expect<RateLimitIdentity>().type.not.toBeAssignableFrom<{ ip: number }>()
    expect<keyof RateLimitStats>().type.toBe<'allowed' | 'limited' | 'degraded' | 'shadowLimited' | 'refunded' | 'settled' | 'penalized' | 'skipped' | 'banned' | 'delayed' | 'delayAborted' | 'undelayed' | 'waitExpired' | 'held' | 'waiting'>()
    expect<PolicySummary['bans']>().type.toBe<number | undefined>()
    expect<RateLimitBanKind>().type.toBe<'ip' | 'user' | 'apiKey' | 'keyHash'>()
    expect<RateLimitBanInput['identity']>().type.toBe<{ ip: string } | { user: string } | { apiKey: string } | { keyHash: string }>()
    expect<Awaited<ReturnType<RateLimitApi['fleet']>>>().type.toBe<FleetView>()
    expect<FleetView['top'][number]['callers'][number]>().type.toBe<PictureCaller>()
    expect<Awaited<ReturnType<RateLimitApi['auditTrail']>>[number]['change']>().type.toBe<'set' | 'clear' | 'reset'>()
    expect<InstancePicture['store']['nodes'][number]['breaker']>().type.toBe<'closed' | 'open' | 'probing'>()
    expect<RateLimitBan['statusCode']>().type.toBe<403 | 429>()
    expect<RateLimitBan['expiresAt']>().type.toBe<number | null>()
    expect<RateLimitBanInput['statusCode']>().type.toBe<403 | 429 | undefined>()
    expect<RateLimitRefusal['statusCode']>().type.toBe<403 | 429 | 503>()
    expect<RateLimitPluginOptions['redis']>().type.toBe<RedisClientLike | undefined>()
    expect<RedisClientLike>().type.toBeAssignableFrom<Redis | Cluster>()
  })

  test('observability', () => {
    expect(CHANNELS.decision).type.toBe<'fastify-redis-rate-limit:decision'>()
    expect(CHANNELS.storeError).type.toBe<'fastify-redis-rate-limit:store-error'>()
    expect(METRICS.decisions).type.toBe<'rate_limit.decisions'>()
    expect<DecisionMessage['outcome']>().type.toBe<'allowed' | 'delayed' | 'limited' | 'penalized' | 'shadow-limited' | 'degraded' | 'skipped' | 'banned'>()
    expect<DecisionMessage['source']>().type.toBe<'store' | 'deny-cache' | 'local' | 'api' | 'allow-list' | 'skip' | 'ban'>()
    expect<DecisionMessage['identityKinds']>().type.toBe<string[]>()
    expect<StoreErrorMessage['cause']>().type.toBe<'timeout' | 'unavailable' | 'overloaded' | 'circuit-open' | 'bad-reply' | 'script-error' | 'other'>()
  })

  test('coded errors are constructors of FastifyError', () => {
    const error = new errors.FST_RRL_INVALID_OPTION('prefix', 'is wrong')
    expect(error.code).type.toBe<'FST_RRL_INVALID_OPTION'>()
    expect(error.statusCode).type.toBe<500>()
    expect(error).type.toBeAssignableTo<Error>()
    expect(new errors.FST_RRL_INVALID_BLOCK('GET /x', 'window', 'bad')).type.toBeAssignableTo<Error>()
    expect(new errors.FST_RRL_BANNED().statusCode).type.toBe<403>()
  })
})
