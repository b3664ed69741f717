import type { RateLimitApi, RateLimitDecision } from './api.js'
import type { RouteRateLimit } from './options.js'

/* The public types, one file per concern under types/; index.ts re-exports them all. */

export type { AlgorithmName } from '../store/algorithms.js'
export * from './block.js'
export * from './options.js'
export * from './api.js'
export * from './errors.js'

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
