/*
 * Every default and bound a user of the plugin meets, in one table: the
 * option resolvers, the block compiler, the key layout, the stores and the
 * API read them here, and the error messages print them from here. Each
 * says what it bounds and why that value. test/docs/defaults.test.ts holds
 * docs/options.md to this table; layers.test.ts lets no other lib module
 * export a MAX_, MIN_ or DEFAULT_ constant.
 *
 * This module imports nothing, so every tier may read it (a tier of its own,
 * below all others). Constants that tune the plugin's own machinery and that
 * no option, field, reply or error shows (reload waits, poll and sweep
 * intervals, log throttles, wire strides) stay beside the code they tune.
 */

/** One day in ms: the unit the bounds below are written in, and the longest duration most fields take. */
export const DAY_MS = 86_400_000

/* ── Plugin options ─────────────────────────────────────────────────── */

/** `identityTimeout`'s default (ms): room for a session or cache lookup, short enough that a stuck one costs a request little before it falls back. */
export const DEFAULT_IDENTITY_TIMEOUT_MS = 100
/** `identityTimeout` at most (ms): a minute, longer than clients wait for an answer. */
export const MAX_IDENTITY_TIMEOUT_MS = 60_000
/** `maxKeys`' default: callers active within one window that the memory store and the local limiter keep before evicting the least recently used. */
export const DEFAULT_MAX_KEYS = 100_000

/**
 * Every plugin option's default, in the form a user would write it: the
 * resolvers read them here, and test/docs/defaults.test.ts holds this table
 * equal to the "default" column of docs/options.md. An option missing here
 * has no default (none: the feature is off, or required input).
 */
export const DEFAULTS = {
  store: 'redis', // one limit for the whole fleet; 'memory' limits one process
  prefix: 'rl', // short: the prefix is part of every key's 128 bytes
  onRedisError: 'open', // a failing Redis never takes the service down; sensitive routes say 'closed'
  timeout: 50, // ms a decision waits on a silent Redis: many LAN round trips, little added latency when Redis is gone
  hook: 'onRequest', // decide before the body is read, so a refused request costs least
  identityTimeout: DEFAULT_IDENTITY_TIMEOUT_MS,
  headers: 'ietf', // the IETF draft's RateLimit-Policy and RateLimit fields (draft-10 syntax)
  ipv6Subnet: 64, // one subscriber holds a whole /64
  denyCache: { max: 10_000 }, // refused keys one instance remembers, least recently used evicted first
  mode: 'enforce', // refuse over the limit; 'shadow' only records
  printPolicies: false, // no startup table unless asked
  metrics: true, // metrics and traces, recorded only where @opentelemetry/api and an SDK provider are present
  batchWrites: true, // one script call per event-loop turn: about half the Redis CPU per decision
  maxBatch: 128, // decisions per script call: one call stays short, a turn's burst still needs few calls
  maxInFlight: 1, // one call in flight per lane: later decisions join the next call (group commit)
  maxKeys: DEFAULT_MAX_KEYS,
  circuitBreaker: { failures: 5, cooldown: '250ms' }, // five failures in a row is an outage, not a blip; a quarter second between probes
  maxPending: 50_000, // decisions waiting on Redis per instance before onRedisError answers at once
  maxDelayed: 10_000, // requests held or waiting per instance: about 16 KB of heap each (docs/shaping.md)
  configKey: 'rateLimit', // @fastify/rate-limit's key, so routes declared for it read the same
  lease: '60s', // DEFAULT_LEASE_MS as written
  picture: { interval: '5s', top: 20, rawIdentities: false }, // a picture per instance every 5 s; 20 callers per route; identities shown hashed
  useErrorHandler: false // the plugin answers refusals itself (problem+json)
} as const

/** `globalLimits` blocks, at most: each is one more key in every limited request's script call. */
export const MAX_GLOBAL_BLOCKS = 16
/** `fleetSize` at most: a sanity bound on a count of instances, far above any fleet. */
export const MAX_FLEET = 100_000
/** `configKey` length, at most: a plain property name (it also names the instance decorator), as policy names are bounded. */
export const MAX_CONFIG_KEY_LENGTH = 64
/** `ipv6Subnet` at least: a shorter prefix would count most of the IPv6 Internet as one caller. */
export const MIN_IPV6_SUBNET = 8
/** `ipv6Subnet` at most: 128 bits is one address. */
export const MAX_IPV6_SUBNET = 128
/** Entries an `allowList` array may hold: ranges are matched one by one on every request. */
export const MAX_ALLOW_ENTRIES = 10_000
/** How long an async `allowList` or `skip` may take (ms) before the request is limited as usual (fail safe): a slow predicate delays every request it sees. */
export const SKIP_TIMEOUT_MS = 250

/* ── Store and transport ────────────────────────────────────────────── */

/** `timeout` at most (ms): how long a decision waits on a silent Redis before onRedisError answers; a minute is longer than clients wait. */
export const MAX_TIMEOUT_MS = 60_000
/** `maxBatch` at most: decisions in one script call, which Redis runs without serving anything else. */
export const MAX_BATCH = 1024
/** `maxInFlight` at most: script calls in flight per lane; 1024 already means no group commit (every turn sends its own call). */
export const MAX_IN_FLIGHT = 1024
/** `maxPending` and `maxDelayed` at most: decisions (or held requests) one instance keeps in memory at once. */
export const MAX_PENDING = 1_000_000
/** `maxKeys` at most: keys the memory store and the local limiter hold in this process's heap. */
export const MAX_KEYS = 10_000_000
/** `denyCache.max` at most: refused keys one instance remembers in its heap. */
export const MAX_DENY_CACHE = 1_000_000
/** `circuitBreaker.failures` at most: a sanity bound on store failures in a row before the breaker opens. */
export const MAX_BREAKER_FAILURES = 10_000
/** How long the deny cache keeps a refusal of a quota (a window over a day, a period), in ms: units given back on another instance are seen within it. */
export const LONG_HOLD_MS = 1000

/* ── Block fields ───────────────────────────────────────────────────── */

/** A block's field defaults, as a user writes them (the "default" column of docs/options.md's route block table). */
export const BLOCK_DEFAULTS = {
  algorithm: 'sliding-window',
  cost: 1,
  timeZone: 'UTC',
  weekStart: 1
} as const

/** `limit` and `burst` at most: keeps every script value an exact integer below 2^53 (with the window: store/algorithms.ts maxLimitFor). */
export const MAX_LIMIT = 100_000_000
/** A sliding-log `limit` at most: the log keeps one sorted-set entry per admitted unit. */
export const MAX_SLIDING_LOG_LIMIT = 10_000
/** Most units one request may spend (`cost`, `adjust`): keeps every script value an exact integer. */
export const MAX_COST = 100_000_000
/** The shortest `window` (ms): the scripts count whole milliseconds. */
export const MIN_WINDOW_MS = 1
/** The longest `window` (ms): 366 days, a leap year; a calendar quota is a `period`. */
export const MAX_WINDOW_MS = 366 * DAY_MS
/** The longest other duration (penalty `for` and `max`, the breaker's `cooldown`, `lease`) unless its field says: a day. */
export const MAX_DURATION_MS = DAY_MS
/** Duration strings longer than this are refused before parsing: no duration needs them, and the parser's regex backtracks on long digit runs. */
export const MAX_DURATION_LENGTH = 64
/** Blocks one route may declare: each is one more key in its script call. */
export const MAX_ROUTE_BLOCKS = 16
/** Policy names (`name`, `policies` keys), at most this long: shown in headers and problem bodies as they are; a derived name is cut to fit. */
export const MAX_POLICY_NAME_LENGTH = 64
/** Tier names, at most this long: short tokens, shown in headers and metrics as they are. */
export const MAX_TIER_NAME_LENGTH = 32
/** A `timeZone` longer than this is refused before Intl reads it: IANA names are far shorter. */
export const MAX_TIME_ZONE_LENGTH = 64
/** `penalty.after` at most: a sanity bound on the refusals within one window that start a penalty. */
export const MAX_PENALTY_AFTER = 1000
/** `penalty.backoff` at most: a sanity bound on the factor each further offence multiplies the penalty by (capped by `max` anyway). */
export const MAX_PENALTY_BACKOFF = 100
/** `penalty.backoff`'s default: each further offence doubles the penalty. */
export const DEFAULT_PENALTY_BACKOFF = 2
/** `penalty.max`'s default (ms, `'1d'`): a penalty never outlasts a day unless the block says. */
export const DEFAULT_PENALTY_MAX_MS = DAY_MS

/* ── Keys and identities ────────────────────────────────────────────── */

/** Any key is at most this many bytes (keys/layout.ts budgets): bounded Redis memory per key, whatever a client sends. */
export const MAX_KEY_BYTES = 128
/** `prefix` length, at most: the first key segment's share of MAX_KEY_BYTES. */
export const MAX_PREFIX_LENGTH = 20
/** A route segment longer than this (bytes) is hashed in the key: its share of MAX_KEY_BYTES. Changing it changes key names. */
export const MAX_ROUTE_LENGTH = 44
/** An identity longer than this is hashed in the key: its share of MAX_KEY_BYTES. Changing it changes key names. */
export const MAX_IDENTITY_LENGTH = 44
/** `hashSecret`, at least this many bytes: 128 bits, so key names cannot be checked against guesses. */
export const MIN_SECRET_BYTES = 16

/* ── Concurrency and wait ───────────────────────────────────────────── */

/** `concurrency` at most: slots per identity, one sorted-set member each (listpack up to 128). */
export const MAX_CONCURRENCY = 10_000
/** `lease`'s default (ms; DEFAULTS.lease as written): a crashed instance's slots free within a minute. */
export const DEFAULT_LEASE_MS = 60_000
/** `lease` at least (ms): slots are renewed every lease / 3, so the lease bounds the renewal rate. */
export const MIN_LEASE_MS = 1000
/** `lease` at most (ms): a slot outlives its crashed instance by at most this. */
export const MAX_LEASE_MS = DAY_MS
/** A concurrency block's `wait` at most (ms): a waiting request keeps its socket and memory that long. */
export const MAX_WAIT_MS = 60_000

/* ── Delay ──────────────────────────────────────────────────────────── */

/** A block's `delay` at most (ms): a held request keeps its socket and memory that long. */
export const MAX_DELAY_MS = 60_000

/* ── Fleet records (bans, overrides) ────────────────────────────────── */

/** Every instance reads the fleet's records this often (ms): a ban or override made elsewhere applies within it. */
export const FLEET_POLL_MS = 1000
/** `actor` and `reason` of a change, at most this many characters: both are logged with every change. */
export const MAX_CHANGE_TEXT_LENGTH = 200

/* ── The fleet's picture and the console ────────────────────────────── */

/** `picture.interval` at least (ms): each instance writes one picture (a few KB) per interval. */
export const MIN_PICTURE_INTERVAL_MS = 1000
/** `picture.interval` at most (ms): a picture lapses after three intervals, so a dead instance shows that long. */
export const MAX_PICTURE_INTERVAL_MS = 300_000
/** `picture.top` at most: callers held per route (a Space-Saving summary of this many entries). */
export const MAX_PICTURE_TOP = 1000
/** Intervals of each route's series in a picture: a minute at the default interval, for rates and sparklines. */
export const PICTURE_SERIES = 12
/** Operator changes the audit trail keeps, about (a Redis stream trimmed with MAXLEN ~). */
export const AUDIT_ENTRIES = 10_000

/* ── The command-line tool (lib/console/cli/, docs/cli.md) ──────────── */

/** The CLI's defaults, as a user writes them on its command line. */
export const CLI_DEFAULTS = {
  prefix: DEFAULTS.prefix, // the plugin's: the CLI reads the keys the app writes
  timeout: '5s', // a store call of the CLI waits this long (a terminal on a far network, not a request path)
  interval: '2s', // `watch` redraws this often: pictures change once per instance interval (1 s at least)
  top: 10, // callers `top` shows per route
  audit: 20 // audit trail entries `audit` shows
} as const
/** `watch --interval` at least (ms): the pictures it reads change once per second at most. */
export const MIN_WATCH_INTERVAL_MS = 1000
/** A value the CLI shows in a table (an identity, a ban's reason), at most this many characters, then an ellipsis: one 8 KB identity must not fill a terminal. */
export const MAX_SHOWN_CHARS = 8192
/** `--ttl` of a ban or an override from the CLI, at most (ms): a year; longer is `permanent`, said so. */
export const MAX_CLI_TTL_MS = 366 * DAY_MS

/* ── The console page (fastify-redis-rate-limit/console) ───────────── */

/**
 * The console page plugin's option defaults, as a user writes them (docs/console.md's
 * options table, held to this by test/docs/defaults.test.ts).
 */
export const CONSOLE_DEFAULTS = {
  public: false, // the page refuses to start without `authorize`; `public: true` must be written, and warns at every start
  refresh: '1s', // the page reads the fleet once a second: a refusal shows within a picture interval and a refresh
  audit: 50, // audit entries the page shows, newest first
  rateLimit: { limit: 300, window: '1m' }, // per caller on each console route: five open tabs polling once a second
  configKey: 'rateLimit' // the rate limit plugin's configKey (its decorator and route config key)
} as const
/** The console's `refresh` at least (ms): each refresh of each open page is one fleet read (a store call). */
export const MIN_CONSOLE_REFRESH_MS = 250
/** The console's `refresh` at most (ms): a page slower than a minute no longer shows an incident as it happens. */
export const MAX_CONSOLE_REFRESH_MS = 60_000
/** A ban's or override's ttl set on the console page, at most (ms): 366 days; a change that must outlive it says 'permanent'. */
export const MAX_CONSOLE_TTL_MS = 366 * DAY_MS
/** A console form's string values (an identity, a target), at most this many characters; its body at most MAX_CONSOLE_BODY_BYTES. */
export const MAX_CONSOLE_VALUE_LENGTH = 16_384
/** A console request body at most (bytes): room for the longest values the forms take, JSON-escaped. */
export const MAX_CONSOLE_BODY_BYTES = 131_072
/** `audit` at most: entries one page read asks the audit trail for (auditTrail's own bound). */
export const MAX_AUDIT_READ = 1000
/** How long a console request waits on the store before answering 503 (a hung Redis without a client commandTimeout): an operator retries rather than waits. */
export const CONSOLE_STORE_WAIT_MS = 5000
