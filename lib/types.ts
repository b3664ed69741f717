import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Cluster, Redis } from 'ioredis'
import type { AlgorithmName } from './store/algorithms.js'

export type { AlgorithmName } from './store/algorithms.js'

/** Sync, or async (awaited at most `identityTimeout` ms; a rejection or an overrun falls back to the client IP). */
export type IdentityFunction = (request: FastifyRequest) => string | undefined | Promise<string | undefined>
export type IdentityPartSpec = 'ip' | 'user' | 'api-key' | `header:${string}` | `param:${string}` | `body:${string}` | IdentityFunction

export type FailurePolicy = 'open' | 'closed' | 'local'
export type HeaderMode = 'ietf' | 'legacy' | 'both' | false
/** `'enforce'` refuses over-limit requests; `'shadow'` decides and records but never refuses. */
export type RateLimitMode = 'enforce' | 'shadow'
/** The request lifecycle stage the decision runs at (plugin option and block field `hook`). */
export type RateLimitHook = 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
/** A count, or a count per tier: `{ default: 60, pro: 600 }` (the `default` tier is required). */
export type TieredCount = number | ({ default: number } & Record<string, number>)

/** One route's declared limit: `config: { rateLimit: { ... } }`. */
export interface RateLimitBlock {
  /** Requests per window; for token-bucket/gcra the sustained rate is `limit` per `window`. A tier map needs `default`. */
  limit: TieredCount
  /** Milliseconds, or `'500ms'`, `'1s'`, `'1m'`, `'15m'`, `'1h'`, `'1d'`. */
  window: number | string
  /** Default `'sliding-window'`. */
  algorithm?: AlgorithmName
  /** Token-bucket / GCRA capacity; default `limit`. May be a tier map too. */
  burst?: TieredCount
  /** Identity part(s); default: the user when `user(request)` gives one, else the IP. */
  by?: IdentityPartSpec | IdentityPartSpec[]
  /** Units this request spends; default 1. */
  cost?: number | ((request: FastifyRequest) => number)
  /**
   * What to do when Redis fails or is slow; default: the plugin's `onRedisError`.
   * `'local'` decides with this instance's own limiter at `localLimit` (or `limit / fleetSize`).
   */
  onRedisError?: FailurePolicy
  /** This instance's share of `limit` while Redis is unavailable (`onRedisError: 'local'`); default `limit / fleetSize`. */
  localLimit?: number
  /** Name shown in `RateLimit-Policy` and `violated-policies`; default derived from method and route. */
  name?: string
  /** `'shadow'`: decide and record, never refuse; default: the plugin's `mode`. */
  mode?: RateLimitMode
  /**
   * Return the units this request spent when its reply matches, e.g.
   * `(reply) => reply.statusCode >= 500` (fixed-window, sliding-window,
   * token-bucket and gcra; not sliding-log).
   */
  refundOn?: (reply: FastifyReply) => boolean
  /**
   * Escalation for repeat offenders: after `after` refusals within one window,
   * the identity is refused outright for `for`, `backoff` times longer at each
   * further offence (default 2), never longer than `max` (default 1 day).
   * Decided in the same script call as the limit.
   */
  penalty?: RateLimitPenalty
  /**
   * The lifecycle stage this route's decision runs at; default: the plugin's
   * `hook`. `'preHandler'` runs after authentication hooks, so `by: 'user'`
   * sees `request.user`. A route that reads the body (`body:<field>`) needs at
   * least `'preValidation'`: naming an earlier stage here is a startup error.
   * Every block of one route must name the same stage (or none).
   */
  hook?: RateLimitHook
  /**
   * This request's limit, e.g. from a database: `(request) => number | Promise<number>` (`undefined` keeps `limit`).
   * Awaited at most `identityTimeout` ms; a rejection, an overrun or a value that
   * is not an integer from 1 to the algorithm's maximum falls back to `limit`
   * (logged once per burst). `burst` stays as declared, else follows the returned limit.
   */
  requestLimit?: (request: FastifyRequest) => number | undefined | Promise<number | undefined>
  /**
   * Requests for which this returns `true` are not limited by this route at
   * all (every block of it, global ones included): no store call, counted as
   * `skipped`. Sync or async (bounded at 250 ms; a throw, rejection,
   * non-boolean or overrun means limited as usual, logged once per burst).
   */
  skip?: SkipPredicate
}

/** `allowList` as a function, and a block's `skip`: `true` lets the request through unlimited. */
export type SkipPredicate = (request: FastifyRequest) => boolean | Promise<boolean>

/** What a refusal hands to `replyBuilder` (and, as fields of the error, to the error handler). */
export interface RateLimitRefusal {
  /** 429 (over a limit) or 503 (the limiter is unavailable on a fail-closed route). */
  statusCode: 429 | 503
  /** Seconds sent in `Retry-After`. */
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

/** A block's `penalty`: see RateLimitBlock.penalty and the README's "Penalties". */
export interface RateLimitPenalty {
  /** Refusals within one window that start a penalty (1 to 1000). */
  after: number
  /** The first penalty's length: milliseconds or a duration string. */
  for: number | string
  /** Each further offence lasts this many times longer (1 to 100); default 2. */
  backoff?: number
  /** No penalty lasts longer: milliseconds or a duration string; default 1 day. */
  max?: number | string
}

export interface RateLimitPluginOptions {
  /** ioredis `Redis` or `Cluster`; default `fastify.redis` (from @fastify/redis). */
  redis?: Redis | Cluster
  /** `'redis'` (default) or `'memory'` (one process, same algorithms, no Redis). */
  store?: 'redis' | 'memory'
  /** First segment of every key; default `'rl'`. */
  prefix?: string
  /** Applied to routes that declare nothing (a block, or an array of blocks). Omit it for strict mode: every route must declare. */
  defaultLimit?: RateLimitBlock | RateLimitBlock[]
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
  globalLimits?: RateLimitBlock[]
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
  policies?: Record<string, RateLimitBlock | RateLimitBlock[]>
  /** Log a table of every route's limits at ready() (info level). Default false. */
  printPolicies?: boolean
  /** Record OpenTelemetry metrics when @opentelemetry/api is installed; default true. */
  metrics?: boolean
  /**
   * Coalesce the decisions of one event-loop turn into one script call (per
   * slot on a Cluster); default true. `false` sends one call per decision at
   * once. See README "Performance".
   */
  batchWrites?: boolean
  /** Decisions per script call, at most (1 to 1024); default 128. */
  maxBatch?: number
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
   * Test clock: milliseconds since the epoch. When set, scripts use it instead
   * of Redis `TIME`. For tests only; production uses the Redis clock.
   */
  clock?: () => number
  /**
   * The route config key this plugin reads (`config[configKey]`), and the name
   * of its instance decorator (`fastify[configKey]`); default `'rateLimit'`.
   * Another name lets it run beside `@fastify/rate-limit`, which reads
   * `config.rateLimit` and decorates `fastify.rateLimit`: see README,
   * "Migrating from @fastify/rate-limit". Type the new key with
   * `RouteRateLimit` and the decorator with `RateLimitApi` in your own
   * `declare module 'fastify'`.
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
  /** Limit the not-found handler with this block (or blocks): every 404 of this context shares one bucket per caller. */
  notFound?: RateLimitBlock | RateLimitBlock[]
}

/** What a route may declare under the plugin's config key: a block, an array of blocks, or `false` to opt out. */
export type RouteRateLimit = RateLimitBlock | RateLimitBlock[] | false

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
  /** `'shadow-limited'`: a shadow policy would have refused; the request went on. `'penalized'`: refused by a penalty. */
  outcome: 'allowed' | 'limited' | 'penalized' | 'shadow-limited' | 'degraded'
  /** The tier applied, when the route has tier maps. */
  tier: string | undefined
  /** Every policy decided for this request (the top-level fields are the binding one's). */
  policies: RateLimitPolicyDecision[]
}

/** One policy's part of a decision. */
export interface RateLimitPolicyDecision {
  policy: string
  allowed: boolean
  limit: number
  /** Units left now (nothing is charged on a refused request). */
  remaining: number
  resetMs: number
  retryAfterMs: number
  shadow: boolean
  tier: string | undefined
}

/** One block of a route's (or a named policy's) limits. */
export interface PolicyBlockSummary {
  name: string
  algorithm: AlgorithmName
  /** The `default` tier's values when the block has tiers. */
  limit: number
  windowMs: number
  burst: number
  by: string[]
  onRedisError: FailurePolicy
  /** Whether it came from `defaultLimit` rather than the route itself. */
  fromDefault: boolean
  mode: RateLimitMode
  /** Whether it comes from `globalLimits`. */
  global: boolean
  /** Per tier name: its limit and burst (undefined without tiers). */
  tiers: Record<string, { limit: number, burst: number }> | undefined
  refunds: boolean
  /** The runtime override of `limit` for every caller (see `setOverride`), when one is in force. */
  override?: RateLimitOverride
  /** How many callers have an override of their own for this block. */
  identityOverrides?: number
}

/** One route's effective limit, as listed by `fastify.rateLimit.policies()`. */
export interface PolicySummary {
  method: string
  url: string
  /** The route's first block; `false` for routes that opted out with `rateLimit: false`. */
  limit: false | PolicyBlockSummary
  /** Every block decided for the route's requests: its own, then the global ones (empty when opted out). */
  limits: PolicyBlockSummary[]
}

/**
 * Names a caller for the programmatic API: the values the policy's `by`
 * parts would read from a request. `user` and `apiKey` stand for what the
 * plugin's `user(request)` / `apiKey(request)` would return; function parts
 * are called with `{ ip, headers, params, body }`. A part left out falls back
 * to `ip`, as on a request.
 */
export interface RateLimitIdentity {
  ip?: string
  user?: string
  apiKey?: string
  headers?: Record<string, string>
  params?: Record<string, string>
  body?: Record<string, unknown>
  /** Tier for blocks with tier maps; default `default`. */
  tier?: string
}

export interface RateLimitStats {
  allowed: number
  limited: number
  /** Decisions the store could not take (errors and timeouts); onRedisError applied. */
  degraded: number
  /** Admitted requests a shadow policy would have refused (also counted in `allowed`). */
  shadowLimited: number
  /** Requests whose units were given back by refundOn. */
  refunded: number
  /** Refusals because the identity was serving a penalty, or started one (also counted in `limited`). */
  penalized: number
  /** Requests let through unlimited by `allowList` or a route's `skip` (no store call). */
  skipped: number
}

/** What `setOverride` takes. */
export interface RateLimitOverrideInput {
  /** A block: its name, a named policy, or a route (`'GET /orders/:id'`) with one block of its own. */
  target: string
  /** Only this caller (the values its `by` parts read); omitted: every caller of the block. */
  identity?: RateLimitIdentity
  /** The limit to apply instead of the block's (burst follows where it equals the limit). */
  limit: number
  /** Milliseconds until the override lapses, or `'permanent'`. */
  ttl: number | 'permanent'
  /** Who makes the change (logged and stored). */
  actor: string
  /** Why (logged and stored). */
  reason: string
}

/** One override in force, as `listOverrides()` and `policies()` show it. */
export interface RateLimitOverride {
  /** The override's id (the caller's key for one caller; the block's id for every caller); `clearOverride` takes it. */
  id: string
  /** The block's id: its key with `*` in place of the caller. */
  blockId: string
  /** The block's name and its route (or `api <name>`, `*` for a global block). */
  block: string
  route: string
  /** Which caller: the identity fields given, with the ip, user and tier values (others shown as `(given)`); null for every caller. */
  identity: Record<string, string> | null
  limit: number
  /** Plugin-clock ms when it lapses; null when permanent. */
  expiresAt: number | null
  actor: string
  reason: string
  /** Plugin-clock ms when it was set. */
  setAt: number
}

export interface RateLimitApi {
  /** Every route the plugin has seen, with its effective limit. */
  policies: () => PolicySummary[]
  /** Counters since startup, for metrics and alerts. */
  stats: () => RateLimitStats
  /**
   * What a request of `cost` (default 1) would get now, charging nothing.
   * `target`: a route (`'GET /orders/:id'`), a block or named policy name.
   */
  peek: (target: string, identity: RateLimitIdentity, cost?: number) => Promise<RateLimitDecision>
  /** Deletes the caller's state for every block of `target` (and this instance's deny-cache entries). */
  reset: (target: string, identity: RateLimitIdentity) => Promise<void>
  /**
   * Charges `cost` (default 1) to the caller, all-or-nothing over every block of
   * `target`, as a request would: for jobs, websockets, queues. Never throws
   * for a store failure: the decision is then `degraded` (onRedisError decides `allowed`).
   */
  consume: (target: string, identity: RateLimitIdentity, cost?: number) => Promise<RateLimitDecision>
  /**
   * Overrides a block's `limit` fleet-wide (stored in Redis; every instance
   * applies it within its next poll), for every caller or one. Logged.
   */
  setOverride: (input: RateLimitOverrideInput) => Promise<RateLimitOverride>
  /** Every override in force, read from the store now. */
  listOverrides: () => Promise<RateLimitOverride[]>
  /** Removes an override by id; false when there was none. Logged. */
  clearOverride: (id: string, change: { actor: string, reason: string }) => Promise<boolean>
}

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
