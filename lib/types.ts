import type { RateLimitApi, RateLimitDecision } from './types/api.js'
import type { RouteRateLimit } from './types/options.js'

/* The public types, one file per concern under types/; index.ts re-exports them all. */

export type { AlgorithmName } from './store/algorithms.js'
export * from './types/block.js'
export * from './types/options.js'
export * from './types/api.js'
export * from './types/errors.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    rateLimit?: RouteRateLimit
  }
  interface FastifyRequest {
    rateLimit: RateLimitDecision | null
  }
  interface FastifyInstance {
    rateLimit: RateLimitApi
  }
}
