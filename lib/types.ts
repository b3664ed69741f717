import type { FastifyRequest } from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import type { AlgorithmName } from './algorithm-types.js'
import type { IdentityFunction, IdentityPartSpec } from './identity.js'

export type { AlgorithmName } from './algorithm-types.js'
export type { IdentityFunction, IdentityPartSpec } from './identity.js'

export type FailurePolicy = 'open' | 'closed'
export type HeaderMode = 'ietf' | 'legacy' | 'both' | false

/** One route's declared limit: `config: { rateLimit: { ... } }`. */
export interface RateLimitBlock {
  /** Requests per window; for token-bucket/gcra the sustained rate is `limit` per `window`. */
  limit: number
  /** Milliseconds, or `'500ms'`, `'1s'`, `'1m'`, `'15m'`, `'1h'`, `'1d'`. */
  window: number | string
  /** Default `'sliding-window'`. */
  algorithm?: AlgorithmName
  /** Token-bucket / GCRA capacity; default `limit`. */
  burst?: number
  /** Identity part(s); default: the user when `user(request)` gives one, else the IP. */
  by?: IdentityPartSpec | IdentityPartSpec[]
  /** Units this request spends; default 1. */
  cost?: number | ((request: FastifyRequest) => number)
  /** What to do when Redis fails or is slow; default: the plugin's `onRedisError`. */
  onRedisError?: FailurePolicy
  /** Name shown in `RateLimit-Policy` and `violated-policies`; default derived from method and route. */
  name?: string
}

export interface RateLimitPluginOptions {
  /** ioredis `Redis` or `Cluster`; default `fastify.redis` (from @fastify/redis). */
  redis?: Redis | Cluster
  /** `'redis'` (default) or `'memory'` (one process, same algorithms, no Redis). */
  store?: 'redis' | 'memory'
  /** First segment of every key; default `'rl'`. */
  prefix?: string
  /** Applied to routes that declare nothing. Omit it for strict mode: every route must declare. */
  defaultLimit?: RateLimitBlock
  /** Route default when Redis fails or exceeds `timeout`; default `'open'`. */
  onRedisError?: FailurePolicy
  /** Milliseconds a decision may wait on Redis; default 50. */
  timeout?: number
  /** Which response headers to send; default `'ietf'`. */
  headers?: HeaderMode
  /** The authenticated identity of a request, if any. */
  user?: IdentityFunction
  /** The caller's API key; use it only where something validates the key first. */
  apiKey?: IdentityFunction
  /** IPv6 prefix length that counts as one caller; default 64. */
  ipv6Subnet?: number
  /**
   * Test clock: milliseconds since the epoch. When set, scripts use it instead
   * of Redis `TIME`. For tests only; production uses the Redis clock.
   */
  clock?: () => number
}

/** The decision for this request: `request.rateLimit`. */
export interface RateLimitDecision {
  allowed: boolean
  limit: number
  remaining: number
  resetMs: number
  retryAfterMs: number
  /** Policy name, as in `RateLimit-Policy`. */
  policy: string
  /** True when the store failed and the route's onRedisError decided instead. */
  degraded: boolean
}

/** One route's effective limit, as listed by `fastify.rateLimit.policies()`. */
export interface PolicySummary {
  method: string
  url: string
  /** `false` for routes that opted out with `rateLimit: false`. */
  limit: false | {
    name: string
    algorithm: AlgorithmName
    limit: number
    windowMs: number
    burst: number
    by: string[]
    onRedisError: FailurePolicy
    /** Whether it came from `defaultLimit` rather than the route itself. */
    fromDefault: boolean
  }
}

export interface RateLimitStats {
  allowed: number
  limited: number
  /** Decisions the store could not take (errors and timeouts); onRedisError applied. */
  degraded: number
}

export interface RateLimitApi {
  /** Every route the plugin has seen, with its effective limit. */
  policies: () => PolicySummary[]
  /** Counters since startup, for metrics and alerts. */
  stats: () => RateLimitStats
}

declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: RateLimitBlock | false
  }
  interface FastifyRequest {
    rateLimit: RateLimitDecision | null
  }
  interface FastifyInstance {
    rateLimit: RateLimitApi
  }
}
