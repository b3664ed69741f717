import fp from 'fastify-plugin'
import { rateLimitPlugin } from './fastify/register.js'

export * from './types/index.js'
export { ALGORITHMS } from './store/algorithms.js'
export { canonicalClientIp as canonicalIp } from './keys/ip.js'
export * as errors from './errors.js'
export { CHANNELS, METRICS, type DecisionMessage, type StoreErrorMessage } from './diagnostics.js'

export const fastifyRedisRateLimit = fp(rateLimitPlugin, {
  fastify: '5.x',
  name: 'fastify-redis-rate-limit'
})

export default fastifyRedisRateLimit
