import type { FastifyRequest } from 'fastify'
import type { SkipPredicate } from '../request/allow-list.js'
import type { BreakerOptions } from '../store/redis/breakers.js'
import { FST_RRL_INVALID_OPTION, FST_RRL_UNSUPPORTED_CLIENT } from '../errors.js'
import { clientPort, describeClient } from '../store/redis/client/detect.js'
import { parseWindow } from '../policy/duration.js'
import {
  DEFAULTS, MAX_BATCH, MAX_FLEET, MAX_GLOBAL_BLOCKS, MAX_IDENTITY_TIMEOUT_MS, MAX_IN_FLIGHT, MAX_IPV6_SUBNET, MAX_KEYS, MAX_LEASE_MS,
  MAX_PENDING, MAX_PREFIX_LENGTH, MAX_TIMEOUT_MS, MIN_IPV6_SUBNET, MIN_LEASE_MS,
  MIN_PICTURE_INTERVAL_MS, MAX_PICTURE_INTERVAL_MS, MAX_PICTURE_TOP
} from '../limits.js'
import { OPTION_NAMES, unknownNameMessage } from '../policy/field-names.js'
import type { IdentityFunction } from '../keys/identity.js'
import { PERIOD_CLOCK } from '../kinds/period/calendar.js'
import type {
  FailurePolicy,
  HeaderFormat,
  ReplyBuilder,
  RateLimitBlock,
  RateLimitHook,
  RateLimitMode,
  RateLimitPluginOptions
} from '../types/index.js'
import {
  FAILURE_POLICIES,
  HOOKS,
  isPolicyName,
  MODES,
  POLICY_NAME_RULE
} from '../policy/rules.js'
import { shown } from '../util/validate.js'
import {
  choice, integerOption, optionalFunction, PREFIX,
  resolveAllowList, resolveBreaker, resolveConfigKey, resolveDenyCache, resolveHashSecret, resolveHeaders, STORES
} from './fields.js'

/** Plugin options after validation, with every default filled in. */
export interface ResolvedOptions {
  store: 'redis' | 'memory'
  redis: RateLimitPluginOptions['redis']
  prefix: string
  defaultLimit: RateLimitBlock | RateLimitBlock[] | undefined
  onRedisError: FailurePolicy
  timeout: number
  /** The header formats to send, in the order they are written; [] sends none. */
  headers: readonly HeaderFormat[]
  user: IdentityFunction | undefined
  apiKey: IdentityFunction | undefined
  ipv6Subnet: number
  clock: (() => number) | undefined
  /** Test-only (the PERIOD_CLOCK symbol): the clock Node computes calendar-period boundaries with; undefined: the plugin clock. */
  periodClock: (() => number) | undefined
  /** Test-only (the HOST_CLOCK symbol): this host's clock in place of Date.now, so a test can skew one instance's. */
  hostClock: () => number
  /** HMAC key for identity hashes, as a private copy; undefined: plain SHA-256. */
  hashSecret: Buffer | undefined
  globalLimits: RateLimitBlock[]
  /** Deny cache size; 0 = off. */
  denyCacheMax: number
  mode: RateLimitMode
  tier: ((request: FastifyRequest) => unknown) | undefined
  hook: RateLimitHook
  /** Milliseconds an async identity / tier / requestLimit function may take. */
  identityTimeout: number
  policies: Record<string, RateLimitBlock | RateLimitBlock[]>
  printPolicies: boolean
  metrics: boolean
  batchWrites: boolean
  maxBatch: number
  /** Script calls in flight per connection (per hash tag on a Cluster), at most. */
  maxInFlight: number
  maxPending: number
  /** Requests held for a reserved turn (a block's `delay`), at most, per plugin instance. */
  maxDelayed: number
  /** Instances sharing the limits (onRedisError 'local'); undefined: not given. */
  fleetSize: number | undefined
  maxKeys: number
  /** undefined: no circuit breaker. */
  circuitBreaker: BreakerOptions | undefined
  /** The route config key read, and the name of the instance decorator. */
  configKey: string
  /** undefined: no allow list. An array is compiled into a predicate on request.ip. */
  allowList: SkipPredicate | undefined
  replyBuilder: ReplyBuilder | undefined
  useErrorHandler: boolean
  /** The block(s) limiting the not-found handler; undefined: 404s are not limited. */
  notFound: RateLimitBlock | RateLimitBlock[] | undefined
  /** How long a concurrency slot lasts without a renewal (ms). */
  lease: number
  /** The fleet's picture; undefined: `picture: false`. */
  picture: PictureOptions | undefined
}

export interface PictureOptions {
  intervalMs: number
  top: number
  rawIdentities: boolean
  /** Test-only (the PICTURE_PUBLISH symbol): given the publisher's publish-now and its instance id, so a test publishes without waiting an interval. */
  onPublisher: ((publish: () => Promise<void>, id: string) => void) | undefined
}

/** Test-only: the option key of a function that receives the picture's publish-now. */
export const PICTURE_PUBLISH = Symbol('fastify-redis-rate-limit.picturePublish')

type Input = Record<string, unknown>

/** The store and how decisions reach it: store, redis, prefix, timeout, batching. */
function resolveStore (
  options: Input
): Pick<ResolvedOptions, 'store' | 'redis' | 'prefix' | 'timeout' | 'batchWrites' | 'maxBatch' | 'maxInFlight' | 'maxPending' | 'maxDelayed' | 'maxKeys'> {
  const store = choice('store', options.store ?? DEFAULTS.store, STORES)
  const redis = options.redis
  if (redis !== undefined && clientPort(redis) === undefined) throw new FST_RRL_UNSUPPORTED_CLIENT('option `redis`', describeClient(redis))
  const prefix = options.prefix ?? DEFAULTS.prefix
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new FST_RRL_INVALID_OPTION('prefix', `must be 1 to ${MAX_PREFIX_LENGTH} characters from A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`)
  }
  const timeout = options.timeout ?? DEFAULTS.timeout
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    throw new FST_RRL_INVALID_OPTION('timeout', `must be an integer number of milliseconds from 1 to ${MAX_TIMEOUT_MS} (got ${shown(timeout)})`)
  }
  return {
    store,
    redis: redis as ResolvedOptions['redis'],
    prefix,
    timeout,
    batchWrites: typeof options.batchWrites === 'boolean' ? options.batchWrites : DEFAULTS.batchWrites,
    maxBatch: integerOption(options, 'maxBatch', DEFAULTS.maxBatch, [1, MAX_BATCH]),
    maxInFlight: integerOption(options, 'maxInFlight', DEFAULTS.maxInFlight, [1, MAX_IN_FLIGHT]),
    maxPending: integerOption(options, 'maxPending', DEFAULTS.maxPending, [1, MAX_PENDING]),
    maxDelayed: integerOption(options, 'maxDelayed', DEFAULTS.maxDelayed, [0, MAX_PENDING]),
    maxKeys: integerOption(options, 'maxKeys', DEFAULTS.maxKeys, [1, MAX_KEYS])
  }
}

/** A block or a non-empty array of blocks, checked for shape only (block.ts compiles it). */
function optionalBlocks (
  options: Input,
  name: 'defaultLimit' | 'notFound',
  example: string
): RateLimitBlock | RateLimitBlock[] | undefined {
  const value = options[name]
  if (value !== undefined && (value === null || typeof value !== 'object' || (Array.isArray(value) && value.length === 0))) {
    throw new FST_RRL_INVALID_OPTION(name, `must be a rate limit block like { limit: ${example}, window: '1m' } (or an array of blocks)`)
  }
  return value as RateLimitBlock | RateLimitBlock[] | undefined
}

/** The blocks outside routes' own: defaultLimit, globalLimits, policies, notFound. */
function resolveBlocks (
  options: Input
): Pick<ResolvedOptions, 'defaultLimit' | 'globalLimits' | 'policies' | 'notFound'> {
  const defaultLimit = optionalBlocks(options, 'defaultLimit', '100')
  const globalLimits = options.globalLimits ?? []
  if (!Array.isArray(globalLimits) || globalLimits.length > MAX_GLOBAL_BLOCKS) {
    const got = Array.isArray(globalLimits) ? `${globalLimits.length} blocks` : typeof globalLimits
    throw new FST_RRL_INVALID_OPTION('globalLimits', `must be an array of 0 to ${MAX_GLOBAL_BLOCKS} rate limit blocks (got ${got})`)
  }
  const policies = options.policies ?? {}
  if (policies === null || typeof policies !== 'object' || Array.isArray(policies)) {
    throw new FST_RRL_INVALID_OPTION('policies', 'must be an object { name: block or array of blocks }')
  }
  for (const name of Object.keys(policies)) {
    if (!isPolicyName(name)) {
      throw new FST_RRL_INVALID_OPTION('policies', `has a name ${JSON.stringify(name)}: use ${POLICY_NAME_RULE}`)
    }
  }
  return {
    defaultLimit,
    globalLimits: globalLimits as RateLimitBlock[],
    policies: policies as Record<string, RateLimitBlock | RateLimitBlock[]>,
    notFound: optionalBlocks(options, 'notFound', '30')
  }
}

/** Who a request is, and what it may be checked against: identity functions, tiers, hashing, allow list. */
function resolveIdentity (
  options: Input
): Pick<ResolvedOptions, 'user' | 'apiKey' | 'ipv6Subnet' | 'hashSecret' | 'tier' | 'identityTimeout' | 'allowList'> {
  const ipv6Subnet = options.ipv6Subnet ?? DEFAULTS.ipv6Subnet
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < MIN_IPV6_SUBNET || ipv6Subnet > MAX_IPV6_SUBNET) {
    throw new FST_RRL_INVALID_OPTION('ipv6Subnet', `must be an integer prefix length from ${MIN_IPV6_SUBNET} to ${MAX_IPV6_SUBNET} (got ${shown(ipv6Subnet)})`)
  }
  const tier = options.tier
  if (tier !== undefined && typeof tier !== 'function') {
    throw new FST_RRL_INVALID_OPTION('tier', 'must be a function (request) => string | undefined')
  }
  return {
    user: optionalFunction('user', options.user),
    apiKey: optionalFunction('apiKey', options.apiKey),
    ipv6Subnet,
    hashSecret: resolveHashSecret(options.hashSecret),
    tier: tier as ResolvedOptions['tier'],
    identityTimeout: integerOption(options, 'identityTimeout', DEFAULTS.identityTimeout, [1, MAX_IDENTITY_TIMEOUT_MS]),
    allowList: resolveAllowList(options.allowList)
  }
}

/** How refusals are sent: headers, replyBuilder or the error handler. */
function resolveReplies (options: Input): Pick<ResolvedOptions, 'headers' | 'replyBuilder' | 'useErrorHandler'> {
  const headers = resolveHeaders(options.headers)
  const replyBuilder = options.replyBuilder
  if (replyBuilder !== undefined && typeof replyBuilder !== 'function') {
    throw new FST_RRL_INVALID_OPTION('replyBuilder', `must be a function (request, refusal) => { body, headers? } (got ${typeof replyBuilder})`)
  }
  if (replyBuilder !== undefined && options.useErrorHandler === true) {
    throw new FST_RRL_INVALID_OPTION('replyBuilder', 'and useErrorHandler: true both shape refusals: choose one (with useErrorHandler, shape the reply in setErrorHandler)')
  }
  return { headers, replyBuilder: replyBuilder as ReplyBuilder | undefined, useErrorHandler: typeof options.useErrorHandler === 'boolean' ? options.useErrorHandler : DEFAULTS.useErrorHandler }
}

/** `lease`: a duration from MIN_LEASE_MS to MAX_LEASE_MS. */
function resolveLease (value: unknown): number {
  const ms = parseWindow(value ?? DEFAULTS.lease)
  if (typeof ms === 'string') throw new FST_RRL_INVALID_OPTION('lease', ms)
  if (ms < MIN_LEASE_MS || ms > MAX_LEASE_MS) {
    throw new FST_RRL_INVALID_OPTION('lease', `must be from ${MIN_LEASE_MS} ms (1s) to 1 day (got ${ms} ms): a slot outlives its instance by at most this, and it is renewed every lease / 3`)
  }
  return ms
}

/** `picture`: false, or { interval?, top?, rawIdentities? } (DEFAULTS.picture for each one missing). */
function resolvePicture (value: unknown, onPublisher: PictureOptions['onPublisher']): PictureOptions | undefined {
  if (value === false) return undefined
  const input = (value ?? {}) as Input
  if (typeof input !== 'object' || input === null || Array.isArray(input) || Object.keys(input).some((key) => !['interval', 'top', 'rawIdentities'].includes(key))) {
    throw new FST_RRL_INVALID_OPTION('picture', 'must be false or { interval?: duration, top?: number, rawIdentities?: boolean }')
  }
  const intervalMs = parseWindow(input.interval ?? DEFAULTS.picture.interval)
  if (typeof intervalMs === 'string') throw new FST_RRL_INVALID_OPTION('picture.interval', intervalMs)
  if (intervalMs < MIN_PICTURE_INTERVAL_MS || intervalMs > MAX_PICTURE_INTERVAL_MS) {
    throw new FST_RRL_INVALID_OPTION('picture.interval', `must be from ${MIN_PICTURE_INTERVAL_MS} ms (1s) to ${MAX_PICTURE_INTERVAL_MS} ms (5m) (got ${intervalMs} ms)`)
  }
  const top = integerOption(input, 'top', DEFAULTS.picture.top, [0, MAX_PICTURE_TOP], 'picture.top')
  const raw = input.rawIdentities ?? DEFAULTS.picture.rawIdentities
  if (typeof raw !== 'boolean') throw new FST_RRL_INVALID_OPTION('picture.rawIdentities', `must be true or false (got ${typeof raw})`)
  return { intervalMs, top, rawIdentities: raw, onPublisher }
}

/** Test-only: the option key of a skewed host clock (what Date.now gives in production). */
export const HOST_CLOCK = Symbol('fastify-redis-rate-limit.hostClock')

/** A test-only function passed under a symbol key (invisible to the option-name check), or undefined. */
function symbolFunction (input: RateLimitPluginOptions | undefined, key: symbol): ((...args: never[]) => unknown) | undefined {
  const value = (input as Record<symbol, unknown> | undefined)?.[key]
  return typeof value === 'function' ? value as (...args: never[]) => unknown : undefined
}

/** A test-only clock passed under a symbol key, or undefined. */
function symbolClock (input: RateLimitPluginOptions | undefined, key: symbol): (() => number) | undefined {
  return symbolFunction(input, key) as (() => number) | undefined
}

/** Validates the plugin options at register time; every mistake is a coded error naming the option. */
export function resolveOptions (input: RateLimitPluginOptions | undefined): ResolvedOptions {
  const options = (input ?? {}) as Input
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.has(name)) {
      throw new FST_RRL_INVALID_OPTION(name, unknownNameMessage(name, 'option'))
    }
  }
  for (const flag of ['printPolicies', 'metrics', 'batchWrites', 'useErrorHandler'] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== 'boolean') {
      throw new FST_RRL_INVALID_OPTION(flag, `must be true or false (got ${typeof options[flag]})`)
    }
  }
  const clock = options.clock
  if (clock !== undefined && typeof clock !== 'function') {
    throw new FST_RRL_INVALID_OPTION('clock', 'must be a function returning milliseconds since the epoch')
  }
  return {
    ...resolveStore(options),
    ...resolveBlocks(options),
    ...resolveIdentity(options),
    ...resolveReplies(options),
    onRedisError: choice('onRedisError', options.onRedisError ?? DEFAULTS.onRedisError, FAILURE_POLICIES),
    clock: clock as (() => number) | undefined,
    periodClock: symbolClock(input, PERIOD_CLOCK),
    hostClock: symbolClock(input, HOST_CLOCK) ?? Date.now,
    denyCacheMax: resolveDenyCache(options.denyCache),
    mode: choice('mode', options.mode ?? DEFAULTS.mode, MODES),
    printPolicies: typeof options.printPolicies === 'boolean' ? options.printPolicies : DEFAULTS.printPolicies,
    metrics: typeof options.metrics === 'boolean' ? options.metrics : DEFAULTS.metrics,
    fleetSize: options.fleetSize === undefined ? undefined : integerOption(options, 'fleetSize', 1, [1, MAX_FLEET]),
    circuitBreaker: resolveBreaker(options.circuitBreaker),
    configKey: resolveConfigKey(options.configKey),
    hook: choice('hook', options.hook ?? DEFAULTS.hook, HOOKS),
    lease: resolveLease(options.lease),
    picture: resolvePicture(options.picture, symbolFunction(input, PICTURE_PUBLISH) as PictureOptions['onPublisher'])
  }
}
