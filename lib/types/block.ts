import type { FastifyReply, FastifyRequest } from 'fastify'
import type { AlgorithmName } from '../store/algorithms.js'

/* What a route declares: a block's fields and the scalar types they use. */

/** Sync, or async (awaited at most `identityTimeout` ms; a rejection or an overrun falls back to the client IP). */
export type IdentityFunction = (request: FastifyRequest) => string | undefined | Promise<string | undefined>
export type IdentityPartSpec = 'ip' | 'user' | 'api-key' | `header:${string}` | `param:${string}` | `body:${string}` | IdentityFunction

export type FailurePolicy = 'open' | 'closed' | 'local'
/**
 * One header format: `'ietf'` (draft-10 `RateLimit-Policy` / `RateLimit`),
 * `'draft-6'` (`RateLimit-Limit/Remaining/Reset` + `RateLimit-Policy`),
 * `'draft-7'` (`RateLimit: limit=…, remaining=…, reset=…` + `RateLimit-Policy`),
 * `'legacy'` (`X-RateLimit-*`).
 */
export type HeaderFormat = 'ietf' | 'draft-6' | 'draft-7' | 'legacy'
/**
 * The `headers` option: one format, `'both'` (`['ietf', 'legacy']`), several
 * formats (never two that send one field in two syntaxes: `'ietf'` with
 * `'draft-6'` or `'draft-7'`), or `false` for none.
 */
export type HeaderMode = HeaderFormat | 'both' | false | readonly HeaderFormat[]
/** `'enforce'` refuses over-limit requests; `'shadow'` decides and records but never refuses. */
export type RateLimitMode = 'enforce' | 'shadow'
/** The request lifecycle stage the decision runs at (plugin option and block field `hook`). */
export type RateLimitHook = 'onRequest' | 'preParsing' | 'preValidation' | 'preHandler'
/** A count, or a count per tier: `{ default: 60, pro: 600 }` (the `default` tier is required). */
export type TieredCount = number | ({ default: number } & Record<string, number>)

/** A calendar period a quota resets at (`period` field). */
export type RateLimitPeriod = 'day' | 'week' | 'month' | 'year'
/** ISO weekday: 1 = Monday … 7 = Sunday. */
export type RateLimitWeekday = 1 | 2 | 3 | 4 | 5 | 6 | 7

/** A block counted over a duration: `{ limit: 100, window: '1m' }`. */
export interface RateLimitWindowBlock extends RateLimitBlockFields {
  /**
   * Milliseconds, or `'500ms'`, `'1s'`, `'1m'`, `'15m'`, `'1h'`, `'1d'`, `'7d'`, `'1y'`
   * (up to 366 days). A duration aligned to the epoch: a `'7d'` fixed window resets
   * on Thursdays 00:00 UTC; use `period` for calendar quotas.
   */
  window: number | string
  /** Default `'sliding-window'`. */
  algorithm?: AlgorithmName
  /** Token-bucket / GCRA capacity; default `limit`. May be a tier map too. */
  burst?: TieredCount
  /**
   * gcra and token-bucket only: shape instead of refuse. A request that would
   * be refused, but whose turn comes within `delay`, is admitted at that turn
   * (reserved fleet-wide in the same script call) and held on this instance
   * until it; further than `delay`, it is refused. Milliseconds or a duration
   * string, up to 60 s. See docs/shaping.md.
   */
  delay?: number | string
  /** A concurrency block's field (a rate block waits for its turn with `delay`). */
  wait?: never
  period?: never
  timeZone?: never
  weekStart?: never
}

/** A quota that resets on the calendar: `{ limit: 10_000, period: 'month', timeZone: 'Europe/Berlin' }` (a fixed-window count). */
export interface RateLimitPeriodBlock extends RateLimitBlockFields {
  /** Resets at the start of each day, week, month or year in `timeZone`. */
  period: RateLimitPeriod
  /** IANA time zone name; default `'UTC'`. */
  timeZone?: string
  /** The weekday a `'week'` starts on; default 1 (Monday). */
  weekStart?: RateLimitWeekday
  /** A period is always a fixed-window count. */
  algorithm?: 'fixed-window'
  window?: never
  burst?: never
  delay?: never
  wait?: never
}

/** One route's declared limit: `config: { rateLimit: { ... } }`, over a `window` or a calendar `period`. */
export type RateLimitBlock = RateLimitWindowBlock | RateLimitPeriodBlock

/** What every block may declare, whatever it counts over. */
export interface RateLimitBlockFields {
  /** Requests per window (or period); for token-bucket/gcra the sustained rate is `limit` per `window`. A tier map needs `default`. */
  limit: TieredCount
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
   * The units this request actually used, known when it ends, e.g. an LLM
   * call's tokens: an integer from 0 to the block's capacity (`burst`, else
   * `limit`). `cost` is then the reservation charged at admission; when the
   * response closes (finished, aborted or timed out) the difference is
   * charged or given back, fleet-wide, in one store call. Usage may end over
   * the limit (an overdraft): the next requests wait until it is back under.
   * Awaited at most `identityTimeout` ms; a throw, rejection, overrun or bad
   * value is logged once per burst and leaves the reservation charged. Not
   * with `refundOn`, not for sliding-log, not in `policies` (use `adjust`).
   */
  settle?: (request: FastifyRequest, reply: FastifyReply) => number | Promise<number>
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

/**
 * A concurrency block: at most `concurrency` requests of one identity in
 * flight across the fleet (a tier map needs `default`). A slot is taken in the
 * same script call as the route's other blocks and given back when the
 * response closes (after it finished, on a client abort, on a timeout); a
 * crashed instance's slots are reclaimed after the plugin's `lease`.
 * Refused: 429 with `Retry-After: 1`. See docs/options.md (Concurrency blocks) and docs/shaping.md (`wait`).
 */
export interface RateLimitConcurrencyBlock extends Pick<RateLimitBlock, 'by' | 'onRedisError' | 'name' | 'mode' | 'hook' | 'skip'> {
  /** Requests in flight per identity, at most (1 to 10,000), or a tier map. */
  concurrency: TieredCount
  /** This instance's own cap while Redis is unavailable (`onRedisError: 'local'`); default `concurrency / fleetSize`. */
  localLimit?: number
  /**
   * A request that finds no free slot waits up to this long for one,
   * fleet-wide in arrival order, then is refused as without it (1 ms to 60 s;
   * milliseconds or a duration string). Not with `mode: 'shadow'`. See docs/shaping.md.
   */
  wait?: number | string
  delay?: never
  limit?: never
  window?: never
  algorithm?: never
  burst?: never
  cost?: never
  penalty?: never
  refundOn?: never
  requestLimit?: never
}

/** Any block a route, `globalLimits`, `defaultLimit` or `policies` may declare. */
export type AnyRateLimitBlock = RateLimitBlock | RateLimitConcurrencyBlock

/** `allowList` as a function, and a block's `skip`: `true` lets the request through unlimited. */
export type SkipPredicate = (request: FastifyRequest) => boolean | Promise<boolean>
/** A block's `penalty`: see RateLimitBlock.penalty and docs/algorithms.md, "Penalties". */
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
