import type { FastifyRequest } from 'fastify'
import { compileAllowList, type SkipPredicate } from './request/allow-list.js'
import type { BreakerOptions } from './decide/circuit-breaker.js'
import { parseWindow } from './policy/duration.js'
import { FST_RRL_INVALID_OPTION } from './errors.js'
import { DEFAULT_MAX_KEYS } from './store/memory/store.js'
import { DEFAULT_IDENTITY_TIMEOUT_MS, type IdentityFunction } from './keys/identity.js'
import { MAX_PREFIX_LENGTH, MIN_SECRET_BYTES } from './keys/layout.js'
import type { FailurePolicy, HeaderMode, ReplyBuilder, RateLimitBlock, RateLimitHook, RateLimitMode, RateLimitPluginOptions } from './types.js'
import { choiceProblem, FAILURE_POLICIES, HOOKS, isPolicyName, MAX_IDENTITY_TIMEOUT_MS, MODES, POLICY_NAME_RULE, shown } from './policy/validate.js'

/** Plugin options after validation, with every default filled in. */
export interface ResolvedOptions {
  store: 'redis' | 'memory'
  redis: RateLimitPluginOptions['redis']
  prefix: string
  defaultLimit: RateLimitBlock | RateLimitBlock[] | undefined
  onRedisError: FailurePolicy
  timeout: number
  headers: HeaderMode
  user: IdentityFunction | undefined
  apiKey: IdentityFunction | undefined
  ipv6Subnet: number
  clock: (() => number) | undefined
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
  maxPending: number
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
}

const MAX_DENY_CACHE = 1_000_000
const MAX_GLOBAL_BLOCKS = 16

/** Every plugin option (the README documents each; test/readme.test.ts checks). */
export const OPTION_NAMES: ReadonlySet<string> = new Set(['redis', 'store', 'prefix', 'defaultLimit', 'onRedisError', 'timeout', 'headers', 'user', 'apiKey', 'ipv6Subnet', 'clock', 'hashSecret', 'globalLimits', 'denyCache', 'mode', 'tier', 'policies', 'printPolicies', 'metrics', 'batchWrites', 'maxBatch', 'maxPending', 'fleetSize', 'maxKeys', 'circuitBreaker', 'configKey', 'hook', 'identityTimeout', 'allowList', 'replyBuilder', 'useErrorHandler', 'notFound'])
// No braces (they would move the Cluster hash tag) and nothing a key reader would trip on.
const PREFIX = new RegExp(`^[A-Za-z0-9_.:-]{1,${MAX_PREFIX_LENGTH}}$`)
const MAX_TIMEOUT_MS = 60_000
const MAX_BATCH = 1024
const MAX_PENDING = 1_000_000
const MAX_FLEET = 100_000
const MAX_KEYS = 10_000_000
const MAX_BREAKER_FAILURES = 10_000

/** `circuitBreaker`: false, or { failures?, cooldown? } with defaults 5 and 250 ms. */
function resolveBreaker (value: unknown): BreakerOptions | undefined {
  if (value === false) return undefined
  const input = (value ?? {}) as Record<string, unknown>
  if (typeof input !== 'object' || input === null || Array.isArray(input) || Object.keys(input).some((key) => key !== 'failures' && key !== 'cooldown')) {
    throw new FST_RRL_INVALID_OPTION('circuitBreaker', 'must be false or { failures?: number, cooldown?: duration }')
  }
  const failures = integerOption(input, 'failures', 5, 1, MAX_BREAKER_FAILURES, 'circuitBreaker.failures')
  const cooldownMs = parseWindow(input.cooldown ?? 250)
  if (typeof cooldownMs === 'string') throw new FST_RRL_INVALID_OPTION('circuitBreaker.cooldown', cooldownMs)
  return { failures, cooldownMs }
}

function integerOption (options: Record<string, unknown>, name: string, fallback: number, min: number, max: number, label = name): number {
  const value = options[name] ?? fallback
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new FST_RRL_INVALID_OPTION(label, `must be an integer from ${min} to ${max} (got ${shown(value)})`)
  }
  return value
}

const STORES = ['redis', 'memory'] as const
const HEADER_MODES = ['ietf', 'legacy', 'both', false] as const

/** `value` when it is one of `choices`, else the coded option error with the shared message. */
function choice<T extends string | false> (name: string, value: unknown, choices: readonly T[]): T {
  const problem = choiceProblem(value, choices)
  if (problem !== undefined) throw new FST_RRL_INVALID_OPTION(name, problem)
  return value as T
}
// A plain property name: it is also the name of the fastify instance decorator.
const CONFIG_KEY = /^[A-Za-z_$][A-Za-z0-9_$]{0,63}$/

function optionalFunction (name: string, value: unknown): IdentityFunction | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') throw new FST_RRL_INVALID_OPTION(name, `must be a function (request) => string | undefined, or async (got ${typeof value})`)
  return value as IdentityFunction
}

/** `hashSecret`: a string (UTF-8) or Buffer/Uint8Array of at least MIN_SECRET_BYTES bytes. The value is never echoed. */
function resolveHashSecret (value: unknown): Buffer | undefined {
  if (value === undefined) return undefined
  let bytes: Buffer
  if (typeof value === 'string') bytes = Buffer.from(value, 'utf8')
  else if (value instanceof Uint8Array) bytes = Buffer.from(value)
  else throw new FST_RRL_INVALID_OPTION('hashSecret', `must be a string or a Buffer (got ${value === null ? 'null' : typeof value})`)
  if (bytes.length < MIN_SECRET_BYTES) throw new FST_RRL_INVALID_OPTION('hashSecret', `must be at least ${MIN_SECRET_BYTES} bytes (got ${bytes.length}); use e.g. crypto.randomBytes(32) kept in your secret store`)
  return bytes
}

type Input = Record<string, unknown>

/** The store and how decisions reach it: store, redis, prefix, timeout, batching. */
function resolveStore (options: Input): Pick<ResolvedOptions, 'store' | 'redis' | 'prefix' | 'timeout' | 'batchWrites' | 'maxBatch' | 'maxPending' | 'maxKeys'> {
  const store = choice('store', options.store ?? 'redis', STORES)
  const redis = options.redis as { evalsha?: unknown, status?: unknown } | null | undefined
  if (redis !== undefined && (redis === null || typeof redis.evalsha !== 'function' || typeof redis.status !== 'string')) {
    throw new FST_RRL_INVALID_OPTION('redis', 'must be an ioredis Redis or Cluster instance')
  }
  const prefix = options.prefix ?? 'rl'
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new FST_RRL_INVALID_OPTION('prefix', `must be 1 to ${MAX_PREFIX_LENGTH} characters from A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`)
  }
  const timeout = options.timeout ?? 50
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    throw new FST_RRL_INVALID_OPTION('timeout', `must be an integer number of milliseconds from 1 to ${MAX_TIMEOUT_MS} (got ${shown(timeout)})`)
  }
  return {
    store,
    redis: redis as ResolvedOptions['redis'],
    prefix,
    timeout,
    batchWrites: options.batchWrites !== false,
    maxBatch: integerOption(options, 'maxBatch', 128, 1, MAX_BATCH),
    maxPending: integerOption(options, 'maxPending', 50_000, 1, MAX_PENDING),
    maxKeys: integerOption(options, 'maxKeys', DEFAULT_MAX_KEYS, 1, MAX_KEYS)
  }
}

/** A block or a non-empty array of blocks, checked for shape only (block.ts compiles it). */
function optionalBlocks (options: Input, name: 'defaultLimit' | 'notFound', example: string): RateLimitBlock | RateLimitBlock[] | undefined {
  const value = options[name]
  if (value !== undefined && (value === null || typeof value !== 'object' || (Array.isArray(value) && value.length === 0))) {
    throw new FST_RRL_INVALID_OPTION(name, `must be a rate limit block like { limit: ${example}, window: '1m' } (or an array of blocks)`)
  }
  return value as RateLimitBlock | RateLimitBlock[] | undefined
}

/** The blocks outside routes' own: defaultLimit, globalLimits, policies, notFound. */
function resolveBlocks (options: Input): Pick<ResolvedOptions, 'defaultLimit' | 'globalLimits' | 'policies' | 'notFound'> {
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
    if (!isPolicyName(name)) throw new FST_RRL_INVALID_OPTION('policies', `has a name ${JSON.stringify(name)}: use ${POLICY_NAME_RULE}`)
  }
  return {
    defaultLimit,
    globalLimits: globalLimits as RateLimitBlock[],
    policies: policies as Record<string, RateLimitBlock | RateLimitBlock[]>,
    notFound: optionalBlocks(options, 'notFound', '30')
  }
}

/** `denyCache`: false (0 = off) or { max }; default 10,000 entries. */
function resolveDenyCache (value: unknown): number {
  if (value === undefined || value === null) return 10_000
  if (value === false) return 0
  if (value === null || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).some((key) => key !== 'max')) {
    throw new FST_RRL_INVALID_OPTION('denyCache', 'must be false or { max: <entries> }')
  }
  const max = (value as { max?: unknown }).max
  if (max === undefined) return 10_000
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > MAX_DENY_CACHE) {
    throw new FST_RRL_INVALID_OPTION('denyCache', `max must be an integer from 1 to ${MAX_DENY_CACHE} (got ${shown(max)})`)
  }
  return max
}

/** `allowList`: addresses and CIDR ranges (compiled to a predicate on request.ip), or a function. */
function resolveAllowList (value: unknown): SkipPredicate | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'function') return value as SkipPredicate
  if (!Array.isArray(value)) {
    throw new FST_RRL_INVALID_OPTION('allowList', `must be an array of IP addresses and CIDR ranges, or a function (request) => boolean | Promise<boolean> (got ${shown(value)})`)
  }
  const compiled = compileAllowList(value)
  if (typeof compiled === 'string') throw new FST_RRL_INVALID_OPTION('allowList', compiled)
  return compiled
}

/** Who a request is, and what it may be checked against: identity functions, tiers, hashing, allow list. */
function resolveIdentity (options: Input): Pick<ResolvedOptions, 'user' | 'apiKey' | 'ipv6Subnet' | 'hashSecret' | 'tier' | 'identityTimeout' | 'allowList'> {
  const ipv6Subnet = options.ipv6Subnet ?? 64
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < 8 || ipv6Subnet > 128) {
    throw new FST_RRL_INVALID_OPTION('ipv6Subnet', `must be an integer prefix length from 8 to 128 (got ${shown(ipv6Subnet)})`)
  }
  const tier = options.tier
  if (tier !== undefined && typeof tier !== 'function') throw new FST_RRL_INVALID_OPTION('tier', 'must be a function (request) => string | undefined')
  return {
    user: optionalFunction('user', options.user),
    apiKey: optionalFunction('apiKey', options.apiKey),
    ipv6Subnet,
    hashSecret: resolveHashSecret(options.hashSecret),
    tier: tier as ResolvedOptions['tier'],
    identityTimeout: integerOption(options, 'identityTimeout', DEFAULT_IDENTITY_TIMEOUT_MS, 1, MAX_IDENTITY_TIMEOUT_MS),
    allowList: resolveAllowList(options.allowList)
  }
}

/** How refusals are sent: headers, replyBuilder or the error handler. */
function resolveReplies (options: Input): Pick<ResolvedOptions, 'headers' | 'replyBuilder' | 'useErrorHandler'> {
  const headers = choice('headers', options.headers ?? 'ietf', HEADER_MODES)
  const replyBuilder = options.replyBuilder
  if (replyBuilder !== undefined && typeof replyBuilder !== 'function') {
    throw new FST_RRL_INVALID_OPTION('replyBuilder', `must be a function (request, refusal) => { body, headers? } (got ${typeof replyBuilder})`)
  }
  if (replyBuilder !== undefined && options.useErrorHandler === true) {
    throw new FST_RRL_INVALID_OPTION('replyBuilder', 'and useErrorHandler: true both shape refusals: choose one (with useErrorHandler, shape the reply in setErrorHandler)')
  }
  return { headers, replyBuilder: replyBuilder as ReplyBuilder | undefined, useErrorHandler: options.useErrorHandler === true }
}

function resolveConfigKey (value: unknown): string {
  const configKey = value ?? 'rateLimit'
  if (typeof configKey !== 'string' || !CONFIG_KEY.test(configKey) || configKey in Object.prototype) {
    const got = JSON.stringify(configKey) ?? typeof configKey
    throw new FST_RRL_INVALID_OPTION('configKey', `must be a property name of 1 to 64 characters from A-Z a-z 0-9 _ $, not starting with a digit, and not an Object.prototype name (got ${got})`)
  }
  return configKey
}

/** Validates the plugin options at register time; every mistake is a coded error naming the option. */
export function resolveOptions (input: RateLimitPluginOptions | undefined): ResolvedOptions {
  const options = (input ?? {}) as Input
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.has(name)) throw new FST_RRL_INVALID_OPTION(name, `is not an option (known: ${[...OPTION_NAMES].join(', ')})`)
  }
  for (const flag of ['printPolicies', 'metrics', 'batchWrites', 'useErrorHandler'] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== 'boolean') throw new FST_RRL_INVALID_OPTION(flag, `must be true or false (got ${typeof options[flag]})`)
  }
  const clock = options.clock
  if (clock !== undefined && typeof clock !== 'function') throw new FST_RRL_INVALID_OPTION('clock', 'must be a function returning milliseconds since the epoch')
  return {
    ...resolveStore(options),
    ...resolveBlocks(options),
    ...resolveIdentity(options),
    ...resolveReplies(options),
    onRedisError: choice('onRedisError', options.onRedisError ?? 'open', FAILURE_POLICIES),
    clock: clock as (() => number) | undefined,
    denyCacheMax: resolveDenyCache(options.denyCache),
    mode: choice('mode', options.mode ?? 'enforce', MODES),
    printPolicies: options.printPolicies === true,
    metrics: options.metrics !== false,
    fleetSize: options.fleetSize === undefined ? undefined : integerOption(options, 'fleetSize', 1, 1, MAX_FLEET),
    circuitBreaker: resolveBreaker(options.circuitBreaker),
    configKey: resolveConfigKey(options.configKey),
    hook: choice('hook', options.hook ?? 'onRequest', HOOKS)
  }
}
