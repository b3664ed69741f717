import createError from '@fastify/error'
import processWarning from 'process-warning'
import type { RateLimitRefusalError, RateLimitRefusalErrorConstructor } from './types/errors.js'

/*
 * Every configuration error fails register or ready, never a request, but one
 * that no public API shows at ready (FST_RRL_ROUTE_NOT_SEEN). Messages
 * name the route and the field so the fix is obvious from the stack trace.
 * Codes are listed in docs/errors.md (a test checks that).
 */

export const FST_RRL_NO_REDIS = createError(
  'FST_RRL_NO_REDIS',
  'fastify-redis-rate-limit needs a Redis client: pass `redis` (an ioredis or iovalkey Redis or Cluster, or a node-redis client, cluster or sentinel), register @fastify/redis first, or set `store: \'memory\'` for a single process',
  500, TypeError
)

export const FST_RRL_UNSUPPORTED_CLIENT = createError(
  'FST_RRL_UNSUPPORTED_CLIENT',
  'fastify-redis-rate-limit: %s is %s, which is not a supported Redis client: pass an ioredis or iovalkey Redis or Cluster, or a node-redis (`redis` v5, v6) client, cluster or sentinel, connected by the application (see docs/clients.md)',
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
  'These routes declare no rate limit (add config.%s, `%s: false` to opt out, or a plugin-level defaultLimit): %s',
  500
)

/**
 * @deprecated No longer thrown: ready() cannot list the routes declared before
 * the plugin through Fastify's public API, so each is refused at request time
 * with FST_RRL_ROUTE_NOT_SEEN instead. Kept for code that compares with it.
 */
export const FST_RRL_ROUTES_BEFORE_PLUGIN = createError(
  'FST_RRL_ROUTES_BEFORE_PLUGIN',
  'Routes were declared before fastify-redis-rate-limit was loaded, so it cannot limit them: %s. Use `await app.register(rateLimit, ...)` before declaring routes',
  500
)

/**
 * Request time, logged once per route: a route of the plugin's context that its
 * onRoute hook never saw (declared before the plugin loaded) is refused with a
 * 500 rather than served unlimited. %s: the route.
 */
export const FST_RRL_ROUTE_NOT_SEEN = createError(
  'FST_RRL_ROUTE_NOT_SEEN',
  'Route %s was declared before fastify-redis-rate-limit loaded, so it has no rate limit and its requests are refused with 500. Declare routes after `await app.register(rateLimit, ...)` (see docs/routes.md)',
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

export const FST_RRL_SCRIPT_ERROR = createError(
  'FST_RRL_SCRIPT_ERROR',
  'Rate limiter script failed for this decision: %s',
  503
)

export const FST_RRL_STORE_OVERLOADED = createError(
  'FST_RRL_STORE_OVERLOADED',
  'Rate limiter has %d decisions queued or waiting on Redis (maxPending); not queueing more',
  503
)

export const FST_RRL_REDIS_CIRCUIT_OPEN = createError(
  'FST_RRL_REDIS_CIRCUIT_OPEN',
  'Rate limiter store skipped: %d failures in a row, retrying Redis in %d ms (circuit breaker)',
  503
)

export const FST_RRL_INVALID_COST = createError(
  'FST_RRL_INVALID_COST',
  'Cost function for route %s returned %s; charging the default cost of 1',
  500
)

export const FST_RRL_IDENTITY_FAILED = createError(
  'FST_RRL_IDENTITY_FAILED',
  'Identity part `%s` for route %s threw or returned an unusable value; falling back to the client IP',
  500
)

export const FST_RRL_REQUEST_VALUE_FAILED = createError(
  'FST_RRL_REQUEST_VALUE_FAILED',
  'Rate limit `%s` for route %s %s',
  500
)

/** A process warning of this plugin: emitted once per process, silenced like any Node warning. */
function warning (code: string, message: string): ReturnType<typeof processWarning.createWarning> {
  return processWarning.createWarning({ name: 'FastifyRedisRateLimitWarning', code, message })
}

/**
 * Runtime warning (once per process): Fastify took request.ip from the
 * X-Forwarded-For of a public peer, which is what `trustProxy: true` does for
 * every peer: any client can pick its own IP. %s: the peer's address.
 */
export const FST_RRL_TRUST_PROXY_TRUE = warning('FST_RRL_TRUST_PROXY_TRUE', 'Fastify took request.ip from the X-Forwarded-For header of %s, a public address. With trustProxy: true the header is believed from every peer, so any client that reaches this server directly can choose the IP it is rate limited as. Trust only your proxies\' addresses, e.g. trustProxy: [\'10.0.0.0/8\'] (see docs/security.md)')

/**
 * Runtime warning (once per process): a forwarding header came from a
 * loopback or private peer (a proxy, by its address) and Fastify ignored it,
 * so request.ip is the proxy and every client behind it shares one limit.
 * %s: the header, %s: the peer's address.
 */
export const FST_RRL_FORWARDED_UNTRUSTED = warning('FST_RRL_FORWARDED_UNTRUSTED', 'A rate limited request arrived with %s from %s, but Fastify did not take the client from it (trustProxy unset, false, a hop count, or not trusting that peer): request.ip is then your proxy\'s address, so every client behind it shares one rate limit. Set trustProxy to your proxies\' addresses or CIDRs, e.g. trustProxy: [\'10.0.0.0/8\'], or a function (see docs/security.md, proxy trust)')

/**
 * Startup warning (once per process): two policies of one route whose names
 * differ only in case. %s: the route, %s: the two names.
 */
export const FST_RRL_POLICY_NAME_CASE = warning('FST_RRL_POLICY_NAME_CASE', 'Route %s has rate limit policies whose names differ only in case (%s): headers and problem bodies show both, and clients or dashboards that ignore case will confuse them. Rename one')

/**
 * Warning at ready() (once per process): Redis may evict limiter keys before
 * their TTL (every key of ours has one, so allkeys-* and volatile-* both can),
 * which silently resets callers' counts. %s lists the nodes and their policies.
 */
export const FST_RRL_EVICTION_POLICY = warning('FST_RRL_EVICTION_POLICY', 'Redis can evict rate limiter keys before their TTL, which silently resets callers\' counts: %s. Set maxmemory-policy noeviction on a Redis that holds limiter keys (see docs/operations.md, eviction)')

/** Programmatic API (fastify.rateLimit.peek/reset/consume): thrown to the caller, never to a client. */
export const FST_RRL_UNKNOWN_POLICY = createError(
  'FST_RRL_UNKNOWN_POLICY',
  'No rate limit named %s: use a route (\'GET /orders/:id\'), a block name or a name from the `policies` option',
  500, TypeError
)

/** An API target several routes (or policies) answer to: the message lists a target that reaches each one. */
export const FST_RRL_AMBIGUOUS_TARGET = createError(
  'FST_RRL_AMBIGUOUS_TARGET',
  'fastify.rateLimit.%s: %s names %s; name one by a target from this list, or as { method, url, constraints }',
  500, TypeError
)

export const FST_RRL_INVALID_API_CALL = createError(
  'FST_RRL_INVALID_API_CALL',
  'fastify.rateLimit.%s: %s',
  500, TypeError
)

/** The console page (`fastify-redis-rate-limit/console`), at register: neither `authorize` nor `public: true`. */
export const FST_RRL_CONSOLE_NO_AUTHORIZE = createError(
  'FST_RRL_CONSOLE_NO_AUTHORIZE',
  'fastify-redis-rate-limit/console can ban and reset callers: pass `authorize(request)` (true lets the request in), or `public: true` to serve it to anyone who reaches it (see docs/console.md)',
  500, TypeError
)

/** The console page, at register: no `fastify.<configKey>` decorator (%s), so the rate limit plugin is not registered before it. */
export const FST_RRL_CONSOLE_NO_RATE_LIMIT = createError(
  'FST_RRL_CONSOLE_NO_RATE_LIMIT',
  'fastify-redis-rate-limit/console reads fastify.%s, which is not there: register fastify-redis-rate-limit (awaited) before the console, with the same configKey',
  500, TypeError
)

/** The console page, logged at every start with `public: true`: anyone who reaches it can ban and reset callers. */
export const FST_RRL_CONSOLE_PUBLIC = createError(
  'FST_RRL_CONSOLE_PUBLIC',
  'fastify-redis-rate-limit/console at %s is public (public: true): anyone who reaches it can ban, override and reset callers; pass `authorize(request)` instead',
  500
)

/** A console request that `authorize` refused (false, not true, or it threw): 403, nothing changes. */
export const FST_RRL_CONSOLE_FORBIDDEN = createError(
  'FST_RRL_CONSOLE_FORBIDDEN',
  'Not authorized for the rate limit console',
  403
)

/** A console change (POST) without the page's same-site token, or from another site: 403, nothing changes. */
export const FST_RRL_CONSOLE_BAD_TOKEN = createError(
  'FST_RRL_CONSOLE_BAD_TOKEN',
  'A console change needs the page\'s token (the x-console-token header matching its SameSite=Strict cookie), sent from the console\'s own origin: %s',
  403
)

/** A skip predicate (`allowList` function or a block's `skip`) failed: logged once per burst, the request is limited as usual. */
export const FST_RRL_SKIP_FAILED = createError(
  'FST_RRL_SKIP_FAILED',
  '%s for route %s threw, rejected, returned a non-boolean or did not answer in time; the request is limited as usual',
  500
)

/** A `replyBuilder` threw, returned a Promise or no object: logged once per burst, the default problem+json reply is sent. */
export const FST_RRL_REPLY_BUILDER_FAILED = createError(
  'FST_RRL_REPLY_BUILDER_FAILED',
  'replyBuilder failed for route %s (threw, or returned a Promise or no object); sending the default problem+json reply',
  500
)

/**
 * A refusal's class. Typed with the fields `createRefuse` (reply/problem.ts)
 * sets on every instance it throws, so `instanceof` narrows to them.
 */
function refusalError<C extends RateLimitRefusalError['code'], SC extends RateLimitRefusalError['statusCode']> (
  code: C, message: string, statusCode: SC
): RateLimitRefusalErrorConstructor<C, SC> {
  return createError(code, message, statusCode) as RateLimitRefusalErrorConstructor<C, SC>
}

/**
 * `useErrorHandler: true`: the refusals, handed to Fastify's error handler
 * (`setErrorHandler`). `statusCode` 429 / 503 / 403 (a ban), `rateLimit`
 * carries the decision, `retryAfter` the seconds also sent in `Retry-After`
 * (0 for a 403, which sends none). A ban's 429 is FST_RRL_RATE_LIMITED with
 * `rateLimit.outcome` `'banned'`.
 */
export const FST_RRL_RATE_LIMITED = refusalError(
  'FST_RRL_RATE_LIMITED',
  'Rate limit exceeded; retry in %s second(s)',
  429
)

export const FST_RRL_LIMITER_UNAVAILABLE = refusalError(
  'FST_RRL_LIMITER_UNAVAILABLE',
  'The rate limiter is temporarily unavailable; retry in %s second(s)',
  503
)

export const FST_RRL_BANNED = refusalError(
  'FST_RRL_BANNED',
  'Requests from this client are refused by an operator ban',
  403
)
