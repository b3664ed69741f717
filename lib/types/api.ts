import type { AlgorithmName } from '../store/algorithms.js'
import type { FailurePolicy, RateLimitMode, RateLimitPeriod, RateLimitWeekday } from './block.js'

/* What the plugin answers: decisions, `fastify.rateLimit` and its records. */

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
  /**
   * `'shadow-limited'`: a shadow policy would have refused; the request went on. `'penalized'`: refused by a penalty.
   * `'banned'`: refused by an operator ban (`ban()`); `retryAfterMs` and `resetMs` are then the ban's time left, -1 when permanent.
   */
  outcome: 'allowed' | 'delayed' | 'limited' | 'penalized' | 'shadow-limited' | 'degraded' | 'banned'
  /** Outcome `'delayed'`: ms it waited for a slot (a concurrency block's `wait`) plus ms held for the turn its blocks' `delay` reserved (the longest); else 0. */
  delayMs: number
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
  /** `'concurrency'` for a concurrency block: then `limit` is its `concurrency`, `windowMs` the slots' lease and `burst` equals `limit`. */
  algorithm: AlgorithmName | 'concurrency'
  /** The `default` tier's values when the block has tiers. */
  limit: number
  /** The window; for a calendar period, the current period's length (read when `policies()` is called). */
  windowMs: number
  /** The calendar period, for a block that declares one. */
  period?: RateLimitPeriod
  /** The period's time zone, for a block that declares a period. */
  timeZone?: string
  /** The weekday a `'week'` period starts on (1 = Monday … 7 = Sunday), for a week period. */
  weekStart?: RateLimitWeekday
  /** A gcra or token-bucket block's `delay` (ms), when it declares one: requests are held up to this long for their turn. */
  delayMs?: number
  /** A concurrency block's `wait` (ms), when it declares one: a request waits up to this long for a free slot. */
  waitMs?: number
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
  /** Whether it has `settle`: usage charged by what the request used, when it ends. */
  settles: boolean
  /** The runtime override of `limit` for every caller (see `setOverride`), when one is in force. */
  override?: RateLimitOverride
  /** How many callers have an override of their own for this block. */
  identityOverrides?: number
}

/** One route's effective limit, as listed by `fastify.rateLimit.policies()`. */
export interface PolicySummary {
  method: string
  url: string
  /** The route's constraints (host, version, custom strategies) as declared; absent on a route without. */
  constraints?: Record<string, unknown>
  /** The route's first block; `false` for routes that opted out with `rateLimit: false`. */
  limit: false | PolicyBlockSummary
  /** Every block decided for the route's requests: its own, then the global ones (empty when opted out). */
  limits: PolicyBlockSummary[]
  /** How many operator bans in force apply to the route (its own and every-route ones); absent when none. */
  bans?: number
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

/** A route by method, URL and constraints: reaches one of several routes that share method and URL. */
export interface RateLimitRouteTarget {
  method: string
  url: string
  /** The route's `constraints` as declared (compared by value; a RegExp by source and flags); omitted for the route without constraints. */
  constraints?: Record<string, unknown>
}

/**
 * What the API's calls name: a route (`'GET /orders/:id'`; a constrained
 * route's label, `'GET /api {"host":"a.example.com"}'`), a block name, a name
 * from the `policies` option, or a route as `{ method, url, constraints }`.
 */
export type RateLimitTarget = string | RateLimitRouteTarget

export interface RateLimitStats {
  allowed: number
  limited: number
  /** Decisions the store could not take (errors and timeouts); onRedisError applied. */
  degraded: number
  /** Admitted requests a shadow policy would have refused (also counted in `allowed`). */
  shadowLimited: number
  /** Requests whose units were given back by refundOn. */
  refunded: number
  /** Requests whose `settle` changed their usage when they ended (the difference from the reservation was charged or given back). */
  settled: number
  /** Refusals because the identity was serving a penalty, or started one (also counted in `limited`). */
  penalized: number
  /** Requests let through unlimited by `allowList` or a route's `skip` (no store call). */
  skipped: number
  /** Requests refused by an operator ban (not counted in `limited`; no store call). */
  banned: number
  /** Requests admitted at a later turn and held until it (a block's `delay`), or after waiting for a slot (`wait`); also counted in `allowed`. */
  delayed: number
  /** Held requests whose client left before their turn (what they charged was given back), and waiters whose client left the queue (docs/shaping.md). */
  delayAborted: number
  /** Decisions sent without `delay` or `wait` because this instance held or queued `maxDelayed` requests: only what fits now is admitted. */
  undelayed: number
  /** Waiters refused because their `wait` ran out before a slot came to them (also counted in `limited`). */
  waitExpired: number
  /** Requests this instance holds for a turn now, and those waiting for a slot (not counters). */
  held: number
  waiting: number
}

/** What `setOverride` takes. */
export interface RateLimitOverrideInput {
  /** A block: its name, a named policy, or a route (`'GET /orders/:id'`, `{ method, url, constraints }`) with one block of its own. */
  target: RateLimitTarget
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

/** The identity kinds a ban can name: `keyHash` is a caller as the console shows it (`PictureCaller.hash`). */
export type RateLimitBanKind = 'ip' | 'user' | 'apiKey' | 'keyHash'

/** What `ban` takes. */
export interface RateLimitBanInput {
  /** A route (`'GET /orders/:id'`, `{ method, url, constraints }`) or one of its block names; omitted: every limited route. */
  target?: RateLimitTarget
  /**
   * Exactly one of `ip` (grouped by `ipv6Subnet` as in keys), `user` (what the
   * plugin's `user(request)` returns), `apiKey` (what `apiKey(request)` returns)
   * or `keyHash`: the hash of a key's identity part, as `fleet()` shows a
   * refused caller (`PictureCaller.hash`), matching the requests whose key, on
   * any of the route's blocks, has that identity part.
   */
  identity: { ip: string } | { user: string } | { apiKey: string } | { keyHash: string }
  /** Milliseconds until the ban lapses, or `'permanent'`. */
  ttl: number | 'permanent'
  /** Who bans (logged and stored). */
  actor: string
  /** Why (logged and stored). */
  reason: string
  /** 403 (default) or 429 with `Retry-After` = the ban's time left (not with `ttl: 'permanent'`). */
  statusCode?: 403 | 429
}

/** One ban in force, as `ban` returns it and `listBans()` lists it. */
export interface RateLimitBan {
  /** `<route or *>|<rendered identity>` (`*|ip=203.0.113.7`, `GET /orders|u=<hash>`); `unban` takes it. */
  id: string
  /** The route it applies to (`GET /orders`; `GET /api {"host":"a.example.com"}` for a constrained route), or `*` for every limited route. */
  route: string
  kind: RateLimitBanKind
  /** Which caller: `{ ip }`, `{ user }` or `{ keyHash }` with the value; an API key only as `{ apiKey: '(given)' }`. */
  identity: Record<string, string>
  statusCode: 403 | 429
  /** Plugin-clock ms when it lapses; null when permanent. */
  expiresAt: number | null
  actor: string
  reason: string
  /** Plugin-clock ms when it was set. */
  setAt: number
}

/** What `acquire()` returns: the decision, and the slot it took (when admitted). */
export interface RateLimitSlot extends RateLimitDecision {
  /**
   * Gives the slot back, once (later calls do nothing). Until then this
   * instance renews it every lease / 3. Does nothing when no slot was taken
   * (refused, or the store failed and onRedisError let the caller through).
   */
  release: () => void
}

export interface RateLimitApi {
  /** Every route the plugin has seen, with its effective limit. */
  policies: () => PolicySummary[]
  /** Counters since startup, for metrics and alerts. */
  stats: () => RateLimitStats
  /**
   * What a request of `cost` (default 1) would get now, charging nothing.
   * `target`: a route (`'GET /orders/:id'`, `{ method, url, constraints }`), a block or named policy name.
   */
  peek: (target: RateLimitTarget, identity: RateLimitIdentity, cost?: number) => Promise<RateLimitDecision>
  /**
   * Deletes the caller's state for every block of `target` (and this instance's deny-cache entries).
   * With `change` (who and why), the reset is logged and written to the audit trail, as bans and overrides are.
   */
  reset: (target: RateLimitTarget, identity: RateLimitIdentity, change?: { actor: string, reason: string }) => Promise<void>
  /**
   * The fleet's picture: every live instance's published picture (the `picture`
   * option), merged (docs/console.md). One store call; rejects when the store fails.
   */
  fleet: () => Promise<FleetView>
  /** The newest operator changes (bans, overrides, audited resets), newest first: at most `count` (default 50, at most 1000). */
  auditTrail: (count?: number) => Promise<AuditEntry[]>
  /**
   * Charges `cost` (default 1) to the caller, all-or-nothing over every block of
   * `target`, as a request would: for jobs, websockets, queues. Never throws
   * for a store failure: the decision is then `degraded` (onRedisError decides `allowed`).
   */
  consume: (target: RateLimitTarget, identity: RateLimitIdentity, cost?: number) => Promise<RateLimitDecision>
  /** consume() that waits: resolves at the turn a block's `delay` reserved (`delayMs`); rejects past it (FST_RRL_RATE_LIMITED), on abort, at close (docs/shaping.md). */
  schedule: (target: RateLimitTarget, identity: RateLimitIdentity, cost?: number, options?: { signal?: AbortSignal }) => Promise<RateLimitDecision>
  /**
   * Takes a slot of every concurrency block of `target` for the caller (and
   * charges its rate blocks one unit, all-or-nothing, as consume does), for
   * work outside HTTP requests. Check `allowed`; call `release()` when the work
   * ends. Never throws for a store failure: onRedisError decides, and the slot's
   * release() then does nothing (`'local'`: it gives back the local slot).
   */
  acquire: (target: RateLimitTarget, identity: RateLimitIdentity) => Promise<RateLimitSlot>
  /**
   * Changes the caller's usage by `units` (a signed integer: positive charges,
   * negative gives back) on every block of `target` that supports it (all but
   * sliding-log): a route's or named policy's own blocks, or the one block
   * `target` names (a global block too), fleet-wide,
   * in one store call, never refused: usage may go over the limit (an
   * overdraft), as a request's `settle` may. For usage reported after the
   * request (a stream that counts its tokens later). Resolves to the names of
   * the blocks it applied to; rejects when the store fails.
   */
  adjust: (target: RateLimitTarget, identity: RateLimitIdentity, units: number) => Promise<string[]>
  /**
   * Overrides a block's `limit` fleet-wide (stored in Redis; every instance
   * applies it within its next poll), for every caller or one. Logged.
   */
  setOverride: (input: RateLimitOverrideInput) => Promise<RateLimitOverride>
  /** Every override in force, read from the store now. */
  listOverrides: () => Promise<RateLimitOverride[]>
  /** Removes an override by id; false when there was none. Logged. */
  clearOverride: (id: string, change: { actor: string, reason: string }) => Promise<boolean>
  /**
   * Refuses one caller fleet-wide (stored in Redis; every instance applies it
   * within its next poll), on every limited route or one. Logged. `reset()` does not lift it.
   */
  ban: (input: RateLimitBanInput) => Promise<RateLimitBan>
  /** Lifts a ban by id everywhere; false when there was none. Logged. */
  unban: (id: string, change: { actor: string, reason: string }) => Promise<boolean>
  /** Every ban in force, read from the store now. */
  listBans: () => Promise<RateLimitBan[]>
}

/* The fleet's picture (lib/picture/): what each instance publishes and what fastify.rateLimit.fleet() merges (docs/console.md). */

/** One node's breaker as the store sees it now (store/redis/breakers.ts): the unit that fails alone. */
export interface NodeHealth {
  /** The node's name (host:port; `memory` for the memory store). */
  node: string
  /** `closed`: decisions ask it; `open`: they answer by onRedisError until `retryInMs` passes; `probing`: one decision is testing it. */
  breaker: 'closed' | 'open' | 'probing'
  /** Store failures in a row. */
  failures: number
  retryInMs: number
}

/** One route and policy's decisions in one interval. */
export interface RouteCounts {
  route: string
  /** The binding policy (the block named in the decision). */
  policy: string
  /** Admitted by the store: allowed, delayed or shadow-limited (a delayed request is also in `delayed`). */
  admitted: number
  /** Refused for a limit (429), from the store or the deny cache. */
  refused: number
  /** Answered by onRedisError (Redis failed or the breaker was open). */
  degraded: number
  /** Admitted at a later turn, or after a wait for a slot. */
  delayed: number
  /** Decisions that waited for a concurrency slot (admitted or refused after the wait). */
  waited: number
  /** Refusals the local deny cache answered without a store call (also in `refused`). */
  denyCache: number
  /** Refused by an operator ban. */
  banned: number
  /** Let through unlimited by allowList or a route's skip. */
  skipped: number
}

/** A route and policy's counts: the last interval's, and the last intervals' series (oldest first) for sparklines and rates. */
export interface PictureRow extends RouteCounts {
  series: { admitted: number[], refused: number[], degraded: number[] }
}

/** A caller among a route's most refused: its key hash (and the identity part of its key, when the app opted in). */
export interface PictureCaller {
  /** The identity part of its key hashed (keyed by hashSecret when set): what a ban by key hash names. */
  hash: string
  /** The identity part of the caller's key (`ip=…`, `u=<hash>`…): only with `picture.rawIdentities`. */
  identity?: string
  /** Refusals, decayed by half every interval; overestimated by at most `error`. */
  count: number
  error: number
}

export interface InstancePicture {
  format: 1
  /** `<host>-<pid>-<random>`: unique per registration of the plugin. */
  id: string
  /** The app it runs in (`<host>-<pid>-<random>`, one per Fastify server): two registrations in one app publish a picture each, with the same `app`. */
  app: string
  /** The plugin's package version. */
  version: string
  host: string
  pid: number
  /** The instance's own clock (ms since the epoch) at its start and at this publish. */
  startedAt: number
  publishedAt: number
  uptimeMs: number
  intervalMs: number
  store: { kind: 'redis' | 'memory', cluster: boolean, nodes: NodeHealth[] }
  /** The instance's counters since it started (fastify.rateLimit.stats()). */
  stats: RateLimitStats
  routes: PictureRow[]
  top: Array<{ route: string, callers: PictureCaller[] }>
  /** What it declares (fastify.rateLimit.policies()). */
  policies: PolicySummary[]
  /** Whether this instance hashes identities with a `hashSecret` (HMAC-SHA256): the CLI's peek and reset then need the secret. */
  hashSecret: boolean
  /** The instance's `ipv6Subnet`: how IPv6 callers are grouped in keys. */
  ipv6Subnet: number
  /** Bans and overrides in force, as this instance holds them. */
  bans: number
  overrides: number
}

export interface FleetRoute extends RouteCounts {
  /** Instances that counted this row. */
  instances: number
  /** Decisions per second over the last minute (RATE_WINDOW_MS), the fleet's sum. */
  perSecond: { admitted: number, refused: number, degraded: number }
  /** The fleet's series, oldest first. */
  series: { admitted: number[], refused: number[], degraded: number[] }
}

export interface FleetNode extends NodeHealth {
  instance: string
}

/** A route whose declared limits differ between instances: a deploy in progress, or instances configured apart. */
export interface PolicyDisagreement {
  route: string
  /** One entry per distinct declaration: the instances that declare it and its blocks. */
  variants: Array<{ instances: string[], limits: PolicySummary['limits'] }>
}

export interface FleetView {
  /** The store's time of the read. */
  at: number
  instances: InstancePicture[]
  /** Pictures this version cannot read (another format: a deploy in progress). */
  unreadable: number
  routes: FleetRoute[]
  top: Array<{ route: string, callers: PictureCaller[] }>
  nodes: FleetNode[]
  disagreements: PolicyDisagreement[]
}

/** One operator change as the audit trail keeps it (docs/console.md): who, what, when, why. */
export interface AuditEntry {
  /** ISO time of the change (the store's clock for records). */
  at: string
  change: 'set' | 'clear' | 'reset'
  /** `ban`, `override`, or `usage` for a reset. */
  noun: string
  id: string
  actor: string
  reason: string
  /** The record set, for a `set`. */
  record?: unknown
}
