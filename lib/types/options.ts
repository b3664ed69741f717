import type { FastifyRequest } from 'fastify'
import type { RateLimitDecision } from './api.js'
import type {
  AnyRateLimitBlock,
  FailurePolicy,
  HeaderMode,
  IdentityFunction,
  RateLimitBlock,
  RateLimitHook,
  RateLimitMode,
  SkipPredicate
} from './block.js'

/* The plugin options, and what a custom refusal reply receives and returns. */

/** What a refusal hands to `replyBuilder` (and, as fields of the error, to the error handler). */
export interface RateLimitRefusal {
  /**
   * 429 (over a limit, or a ban's 429), 503 (the limiter is unavailable on a
   * fail-closed route) or 403 (an operator ban; `decision.outcome` is `'banned'` for both ban refusals).
   */
  statusCode: 403 | 429 | 503
  /** Seconds sent in `Retry-After`; 0 on a 403 (none is sent). */
  retryAfter: number
  /** Names of the policies that refused the request (empty for a 503). */
  violatedPolicies: string[]
  /** The decision, as on `request.rateLimit`. */
  decision: RateLimitDecision
}

/** What `replyBuilder` returns: the body (an object is sent as JSON) and headers added to the reply. */
export interface RateLimitReply {
  body: unknown
  headers?: Record<string, string | number>
}

export type ReplyBuilder = (request: FastifyRequest, refusal: RateLimitRefusal) => RateLimitReply
/**
 * A Redis client the plugin can drive: an ioredis or iovalkey `Redis` or
 * `Cluster`, or a node-redis (`redis` v5, v6) client, cluster or sentinel.
 * Structural, so these types import no client package (a build without
 * ioredis compiles); which client it is, is detected at register, and
 * anything else fails with FST_RRL_UNSUPPORTED_CLIENT (docs/clients.md).
 */
export interface RedisClientLike {
  sendCommand: (...args: never[]) => unknown
}

export interface RateLimitPluginOptions {
  /** An ioredis or iovalkey `Redis` or `Cluster`, or a connected node-redis client, cluster or sentinel; default `fastify.redis` (from @fastify/redis). */
  redis?: RedisClientLike
  /** `'redis'` (default) or `'memory'` (one process, same algorithms, no Redis). */
  store?: 'redis' | 'memory'
  /** First segment of every key; default `'rl'`. */
  prefix?: string
  /** Applied to routes that declare nothing (a block, or an array of blocks). Omit it for strict mode: every route must declare. */
  defaultLimit?: AnyRateLimitBlock | AnyRateLimitBlock[]
  /** Route default when Redis fails or exceeds `timeout`; default `'open'`. */
  onRedisError?: FailurePolicy
  /** Milliseconds a decision may wait on Redis; default 50. */
  timeout?: number
  /**
   * The lifecycle stage every route's decision runs at, unless its block names
   * one; default `'onRequest'`. Routes whose identity reads the body run at
   * `'preValidation'` at the earliest (raised silently from an earlier default).
   */
  hook?: RateLimitHook
  /**
   * Milliseconds an async `by` function, `user`, `apiKey`, `tier` or
   * `requestLimit` may take (1 to 60000); default 100. On a rejection or an
   * overrun the identity part falls back to the client IP, the tier to
   * `default`, the limit to the block's `limit`. `timeout` bounds Redis alone.
   */
  identityTimeout?: number
  /** Which response headers to send; default `'ietf'`. */
  headers?: HeaderMode
  /** The authenticated identity of a request, if any. */
  user?: IdentityFunction
  /** The caller's API key; use it only where something validates the key first. */
  apiKey?: IdentityFunction
  /** IPv6 prefix length that counts as one caller; default 64. */
  ipv6Subnet?: number
  /**
   * Key for the identity hashes (HMAC-SHA256 instead of SHA-256): at least 16
   * bytes, the same on every instance. Without it, anyone who can read key
   * names can test guesses (a username, a leaked API key) against them.
   * Changing it gives every caller new key names: all buckets start empty.
   */
  hashSecret?: string | Buffer
  /**
   * Blocks that apply to every limited route, counted per identity across all
   * routes (e.g. 300/min per user). Decided in the same script call as the
   * route's own blocks, all-or-nothing. Each block's `by` default applies.
   */
  globalLimits?: AnyRateLimitBlock[]
  /**
   * Local deny cache: after the store refuses a key, this instance refuses it
   * by itself until the store's retry time. Default `{ max: 10000 }`; `false` turns it off.
   */
  denyCache?: false | { max?: number }
  /** Default mode of every block; default `'enforce'`. */
  mode?: RateLimitMode
  /** The tier of a request, for blocks whose `limit`/`burst` are tier maps; unknown or undefined → `default`. */
  tier?: (request: FastifyRequest) => string | undefined | Promise<string | undefined>
  /** Named limits outside HTTP routes, for `fastify.rateLimit.consume(name, identity)`. */
  policies?: Record<string, AnyRateLimitBlock | AnyRateLimitBlock[]>
  /** Log a table of every route's limits at ready() (info level). Default false. */
  printPolicies?: boolean
  /** Record OpenTelemetry metrics, and a trace event per decision on the request's span, when @opentelemetry/api and an SDK are installed; default true. */
  metrics?: boolean
  /**
   * Coalesce the decisions of one event-loop turn into one script call (per
   * slot on a Cluster); default true. `false` sends one call per decision at
   * once. See docs/performance.md.
   */
  batchWrites?: boolean
  /** Decisions per script call, at most (1 to 1024); default 128. */
  maxBatch?: number
  /**
   * Script calls in flight per connection (per hash tag on a Cluster), at
   * most (1 to 1024); default 1. Decisions that arrive while it is reached
   * join the next call (group commit). See docs/operations.md.
   */
  maxInFlight?: number
  /** Instances sharing the limits, for `onRedisError: 'local'` (each then allows `limit / fleetSize`). */
  fleetSize?: number
  /** Keys the memory store (and the local limiter of `onRedisError: 'local'`) keeps, least recently used evicted first; default 100,000. */
  maxKeys?: number
  /**
   * After `failures` store failures in a row, skip Redis for `cooldown` (each decision answers
   * at once by onRedisError), then probe with one decision; default `{ failures: 5, cooldown: '250ms' }`.
   */
  circuitBreaker?: { failures?: number, cooldown?: number | string } | false
  /**
   * Decisions queued or waiting on Redis, at most, per plugin instance (1 to
   * 1,000,000); default 50,000. Beyond it the route's `onRedisError` answers at once.
   */
  maxPending?: number
  /**
   * Requests held for a reserved turn (a gcra or token-bucket block's
   * `delay`), at most, per plugin instance (0 to 1,000,000); default 10,000.
   * Beyond it this instance decides without delay: only what fits now is
   * admitted, and no turn is reserved (`stats().undelayed`).
   */
  maxDelayed?: number
  /**
   * Test clock: milliseconds since the epoch. When set, scripts use it instead
   * of Redis `TIME`. For tests only; production uses the Redis clock.
   */
  clock?: () => number
  /**
   * How long a concurrency slot lasts without a renewal: each instance renews
   * the slots it holds every lease / 3, so a crashed instance's slots free
   * after at most this. Milliseconds or a duration string, 1 s to 1 day; default `'60s'`.
   */
  lease?: number | string
  /**
   * The fleet's picture (docs/console.md): once per `interval` (ms or a
   * duration, 1 s to 5 min; default `'5s'`) this instance writes its health,
   * breakers, per-route counts and the `top` callers it refused most per
   * route (0 to 1000; default 20) to Redis, for the CLI and the console page.
   * Callers are shown as their key's hash unless `rawIdentities` is true. No
   * store call is added to any request. `false`: nothing is published.
   */
  picture?: false | { interval?: number | string, top?: number, rawIdentities?: boolean }
  /**
   * The route config key this plugin reads (`config[configKey]`), and the name
   * of its instance decorator (`fastify[configKey]`); default `'rateLimit'`.
   * Another name lets it run beside `@fastify/rate-limit`, which reads
   * `config.rateLimit` and decorates `fastify.rateLimit`: see docs/migration.md,
   * "Migrating from @fastify/rate-limit". Type the new key with
   * `CheckedRouteRateLimit<this, 'key'>` (or `RouteRateLimit`) and the
   * decorator with `RateLimitApi` in your own `declare module 'fastify'`.
   */
  configKey?: string
  /**
   * Requests never limited (no store call; counted as `skipped`): IP addresses
   * and CIDR ranges matched against `request.ip` (IPv4-mapped IPv6 counts as
   * IPv4), or a function, sync or async (bounded at 250 ms; a failure means
   * limited as usual).
   */
  allowList?: string[] | SkipPredicate
  /** Builds the body and headers of 429 and 503 refusals; default: RFC 9457 problem+json. */
  replyBuilder?: ReplyBuilder
  /**
   * Hand refusals to Fastify's error handler (`setErrorHandler`) as coded
   * errors (`FST_RRL_RATE_LIMITED` 429, `FST_RRL_LIMITER_UNAVAILABLE` 503) with
   * `rateLimit` (the decision), `retryAfter` and `violatedPolicies`; `Retry-After` is still set. Default false.
   */
  useErrorHandler?: boolean
  /** Limit the not-found handler with this block (or blocks): every 404 of this context shares one bucket per caller. No concurrency block (a 404 holds nothing for long). */
  notFound?: RateLimitBlock | RateLimitBlock[]
}

/** What a route may declare under the plugin's config key: a block, an array of blocks, or `false` to opt out. */
export type RouteRateLimit = AnyRateLimitBlock | AnyRateLimitBlock[] | false
