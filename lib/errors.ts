import createError from '@fastify/error'

/*
 * Every configuration error fails register or ready, never a request. Messages
 * name the route and the field so the fix is obvious from the stack trace.
 * Codes are listed in the README's error table (a test checks that).
 */

export const FST_RRL_NO_REDIS = createError(
  'FST_RRL_NO_REDIS',
  'fastify-redis-rate-limit needs a Redis client: pass `redis` (an ioredis Redis or Cluster), register @fastify/redis first, or set `store: \'memory\'` for a single process',
  500, TypeError
)

export const FST_RRL_INVALID_OPTION = createError(
  'FST_RRL_INVALID_OPTION',
  'fastify-redis-rate-limit option `%s` %s',
  500, TypeError
)

export const FST_RRL_INVALID_BLOCK = createError(
  'FST_RRL_INVALID_BLOCK',
  'Invalid rate limit for route %s: `%s` %s',
  500, TypeError
)

export const FST_RRL_MISSING_LIMIT = createError(
  'FST_RRL_MISSING_LIMIT',
  'These routes declare no rate limit (add config.rateLimit, `rateLimit: false` to opt out, or a plugin-level defaultLimit): %s',
  500
)

export const FST_RRL_ROUTES_BEFORE_PLUGIN = createError(
  'FST_RRL_ROUTES_BEFORE_PLUGIN',
  'Routes were declared before fastify-redis-rate-limit was loaded, so it cannot limit them: %s. Use `await app.register(rateLimit, ...)` before declaring routes',
  500
)

/** Runtime conditions: logged (never sent to clients), they drive the route's onRedisError. */
export const FST_RRL_REDIS_UNAVAILABLE = createError(
  'FST_RRL_REDIS_UNAVAILABLE',
  'Rate limiter store unavailable: %s',
  503
)

export const FST_RRL_REDIS_TIMEOUT = createError(
  'FST_RRL_REDIS_TIMEOUT',
  'Rate limiter decision exceeded %d ms',
  503
)

export const FST_RRL_BAD_SCRIPT_REPLY = createError(
  'FST_RRL_BAD_SCRIPT_REPLY',
  'Rate limiter script returned an unexpected reply',
  503
)

export const FST_RRL_INVALID_COST = createError(
  'FST_RRL_INVALID_COST',
  'Cost function for route %s returned %s; charging the default cost of 1',
  500
)

export const FST_RRL_IDENTITY_FAILED = createError(
  'FST_RRL_IDENTITY_FAILED',
  'Identity part `%s` for route %s threw; falling back to the client IP',
  500
)
