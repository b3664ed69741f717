import type { RateLimitApi, RateLimitDecision } from './api.js'
import type { CheckedRouteRateLimit } from './exact.js'

/* The public types, one file per concern under types/; index.ts re-exports them all. */

export type { AlgorithmName } from '../store/algorithms.js'
export * from './block.js'
export * from './options.js'
export type { CheckedRouteRateLimit } from './exact.js'
export * from './api.js'
export * from './errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: CheckedRouteRateLimit<this>
  }
  interface FastifyRequest {
    rateLimit: RateLimitDecision | null
  }
  interface FastifyInstance {
    rateLimit: RateLimitApi
  }
}
