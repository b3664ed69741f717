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

/** Validates the plugin options at register time; every mistake is a coded error naming the option. */
export function resolveOptions (input: RateLimitPluginOptions | undefined): ResolvedOptions {
  const options = (input ?? {}) as Record<string, unknown>
  for (const name of Object.keys(options)) {
    if (!OPTION_NAMES.has(name)) throw new FST_RRL_INVALID_OPTION(name, `is not an option (known: ${[...OPTION_NAMES].join(', ')})`)
  }

  const store = choice('store', options.store ?? 'redis', STORES)

  const redis = options.redis
  if (redis !== undefined && (redis === null || typeof (redis as { evalsha?: unknown }).evalsha !== 'function' || typeof (redis as { status?: unknown }).status !== 'string')) {
    throw new FST_RRL_INVALID_OPTION('redis', 'must be an ioredis Redis or Cluster instance')
  }

  const prefix = options.prefix ?? 'rl'
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new FST_RRL_INVALID_OPTION('prefix', `must be 1 to ${MAX_PREFIX_LENGTH} characters from A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`)
  }

  const onRedisError = choice('onRedisError', options.onRedisError ?? 'open', FAILURE_POLICIES)

  const timeout = options.timeout ?? 50
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    throw new FST_RRL_INVALID_OPTION('timeout', `must be an integer number of milliseconds from 1 to ${MAX_TIMEOUT_MS} (got ${shown(timeout)})`)
  }

  const headers = choice('headers', options.headers ?? 'ietf', HEADER_MODES)

  const ipv6Subnet = options.ipv6Subnet ?? 64
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < 8 || ipv6Subnet > 128) {
    throw new FST_RRL_INVALID_OPTION('ipv6Subnet', `must be an integer prefix length from 8 to 128 (got ${shown(ipv6Subnet)})`)
  }

  const defaultLimit = options.defaultLimit
  if (defaultLimit !== undefined && (defaultLimit === null || typeof defaultLimit !== 'object' || (Array.isArray(defaultLimit) && defaultLimit.length === 0))) {
    throw new FST_RRL_INVALID_OPTION('defaultLimit', 'must be a rate limit block like { limit: 100, window: \'1m\' } (or an array of blocks)')
  }

  const globalLimits = options.globalLimits ?? []
  if (!Array.isArray(globalLimits) || globalLimits.length > MAX_GLOBAL_BLOCKS) {
    throw new FST_RRL_INVALID_OPTION('globalLimits', `must be an array of 0 to ${MAX_GLOBAL_BLOCKS} rate limit blocks (got ${Array.isArray(globalLimits) ? `${globalLimits.length} blocks` : typeof globalLimits})`)
  }

  const denyCache = options.denyCache ?? {}
  let denyCacheMax = 10_000
  if (denyCache === false) denyCacheMax = 0
  else if (denyCache === null || typeof denyCache !== 'object' || Array.isArray(denyCache) || Object.keys(denyCache).some((key) => key !== 'max')) {
    throw new FST_RRL_INVALID_OPTION('denyCache', 'must be false or { max: <entries> }')
  } else if ((denyCache as { max?: unknown }).max !== undefined) {
    const max = (denyCache as { max?: unknown }).max
    if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > MAX_DENY_CACHE) throw new FST_RRL_INVALID_OPTION('denyCache', `max must be an integer from 1 to ${MAX_DENY_CACHE} (got ${shown(max)})`)
    denyCacheMax = max
  }

  const mode = choice('mode', options.mode ?? 'enforce', MODES)

  const tier = options.tier
  if (tier !== undefined && typeof tier !== 'function') throw new FST_RRL_INVALID_OPTION('tier', 'must be a function (request) => string | undefined')

  const policies = options.policies ?? {}
  if (policies === null || typeof policies !== 'object' || Array.isArray(policies)) throw new FST_RRL_INVALID_OPTION('policies', 'must be an object { name: block or array of blocks }')
  for (const name of Object.keys(policies)) {
    if (!isPolicyName(name)) throw new FST_RRL_INVALID_OPTION('policies', `has a name ${JSON.stringify(name)}: use ${POLICY_NAME_RULE}`)
  }

  for (const flag of ['printPolicies', 'metrics', 'batchWrites', 'useErrorHandler'] as const) {
    if (options[flag] !== undefined && typeof options[flag] !== 'boolean') throw new FST_RRL_INVALID_OPTION(flag, `must be true or false (got ${typeof options[flag]})`)
  }

  const clock = options.clock
  if (clock !== undefined && typeof clock !== 'function') throw new FST_RRL_INVALID_OPTION('clock', 'must be a function returning milliseconds since the epoch')

  const hashSecret = resolveHashSecret(options.hashSecret)

  const configKey = options.configKey ?? 'rateLimit'
  if (typeof configKey !== 'string' || !CONFIG_KEY.test(configKey) || configKey in Object.prototype) {
    throw new FST_RRL_INVALID_OPTION('configKey', `must be a property name of 1 to 64 characters from A-Z a-z 0-9 _ $, not starting with a digit, and not an Object.prototype name (got ${JSON.stringify(configKey) ?? typeof configKey})`)
  }

  let allowList: SkipPredicate | undefined
  if (typeof options.allowList === 'function') allowList = options.allowList as SkipPredicate
  else if (Array.isArray(options.allowList)) {
    const compiled = compileAllowList(options.allowList)
    if (typeof compiled === 'string') throw new FST_RRL_INVALID_OPTION('allowList', compiled)
    allowList = compiled
  } else if (options.allowList !== undefined) {
    throw new FST_RRL_INVALID_OPTION('allowList', `must be an array of IP addresses and CIDR ranges, or a function (request) => boolean | Promise<boolean> (got ${shown(options.allowList)})`)
  }

  const replyBuilder = options.replyBuilder
  if (replyBuilder !== undefined && typeof replyBuilder !== 'function') throw new FST_RRL_INVALID_OPTION('replyBuilder', `must be a function (request, refusal) => { body, headers? } (got ${typeof replyBuilder})`)
  if (replyBuilder !== undefined && options.useErrorHandler === true) throw new FST_RRL_INVALID_OPTION('replyBuilder', 'and useErrorHandler: true both shape refusals: choose one (with useErrorHandler, shape the reply in setErrorHandler)')

  const notFound = options.notFound
  if (notFound !== undefined && (notFound === null || typeof notFound !== 'object' || (Array.isArray(notFound) && notFound.length === 0))) {
    throw new FST_RRL_INVALID_OPTION('notFound', 'must be a rate limit block like { limit: 30, window: \'1m\' } (or an array of blocks)')
  }

  return {
    allowList,
    replyBuilder: replyBuilder as ReplyBuilder | undefined,
    useErrorHandler: options.useErrorHandler === true,
    notFound: notFound as RateLimitBlock | RateLimitBlock[] | undefined,
    store,
    redis: redis as ResolvedOptions['redis'],
    prefix,
    defaultLimit: defaultLimit as RateLimitBlock | RateLimitBlock[] | undefined,
    onRedisError,
    timeout,
    headers,
    user: optionalFunction('user', options.user),
    apiKey: optionalFunction('apiKey', options.apiKey),
    ipv6Subnet,
    clock: clock as (() => number) | undefined,
    hashSecret,
    globalLimits: globalLimits as RateLimitBlock[],
    denyCacheMax,
    mode,
    tier: tier as ResolvedOptions['tier'],
    policies: policies as Record<string, RateLimitBlock | RateLimitBlock[]>,
    printPolicies: options.printPolicies === true,
    metrics: options.metrics !== false,
    batchWrites: options.batchWrites !== false,
    maxBatch: integerOption(options, 'maxBatch', 128, 1, MAX_BATCH),
    maxPending: integerOption(options, 'maxPending', 50_000, 1, MAX_PENDING),
    fleetSize: options.fleetSize === undefined ? undefined : integerOption(options, 'fleetSize', 1, 1, MAX_FLEET),
    maxKeys: integerOption(options, 'maxKeys', DEFAULT_MAX_KEYS, 1, MAX_KEYS),
    circuitBreaker: resolveBreaker(options.circuitBreaker),
    configKey,
    hook: choice('hook', options.hook ?? 'onRequest', HOOKS),
    identityTimeout: integerOption(options, 'identityTimeout', DEFAULT_IDENTITY_TIMEOUT_MS, 1, MAX_IDENTITY_TIMEOUT_MS)
  }
}
