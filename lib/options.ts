import { FST_RRL_INVALID_OPTION } from './errors.js'
import type { IdentityFunction } from './identity.js'
import { MAX_PREFIX_LENGTH } from './keys.js'
import type { FailurePolicy, HeaderMode, RateLimitBlock, RateLimitPluginOptions } from './types.js'

/** Plugin options after validation, with every default filled in. */
export interface ResolvedOptions {
  store: 'redis' | 'memory'
  redis: RateLimitPluginOptions['redis']
  prefix: string
  defaultLimit: RateLimitBlock | undefined
  onRedisError: FailurePolicy
  timeout: number
  headers: HeaderMode
  user: IdentityFunction | undefined
  apiKey: IdentityFunction | undefined
  ipv6Subnet: number
  clock: (() => number) | undefined
}

const KNOWN = new Set(['redis', 'store', 'prefix', 'defaultLimit', 'onRedisError', 'timeout', 'headers', 'user', 'apiKey', 'ipv6Subnet', 'clock'])
// No braces (they would move the Cluster hash tag) and nothing a key reader would trip on.
const PREFIX = new RegExp(`^[A-Za-z0-9_.:-]{1,${MAX_PREFIX_LENGTH}}$`)
const MAX_TIMEOUT_MS = 60_000

function optionalFunction (name: string, value: unknown): IdentityFunction | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') throw new FST_RRL_INVALID_OPTION(name, `must be a function (request) => string | undefined (got ${typeof value})`)
  return value as IdentityFunction
}

/** Validates the plugin options at register time; every mistake is a coded error naming the option. */
export function resolveOptions (input: RateLimitPluginOptions | undefined): ResolvedOptions {
  const options = (input ?? {}) as Record<string, unknown>
  for (const name of Object.keys(options)) {
    if (!KNOWN.has(name)) throw new FST_RRL_INVALID_OPTION(name, `is not an option (known: ${[...KNOWN].join(', ')})`)
  }

  const store = options.store ?? 'redis'
  if (store !== 'redis' && store !== 'memory') throw new FST_RRL_INVALID_OPTION('store', `must be 'redis' or 'memory' (got ${JSON.stringify(store)})`)

  const redis = options.redis
  if (redis !== undefined && (redis === null || typeof (redis as { evalsha?: unknown }).evalsha !== 'function' || typeof (redis as { status?: unknown }).status !== 'string')) {
    throw new FST_RRL_INVALID_OPTION('redis', 'must be an ioredis Redis or Cluster instance')
  }

  const prefix = options.prefix ?? 'rl'
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new FST_RRL_INVALID_OPTION('prefix', `must be 1 to ${MAX_PREFIX_LENGTH} characters from A-Z a-z 0-9 _ . : - (got ${JSON.stringify(prefix)})`)
  }

  const onRedisError = options.onRedisError ?? 'open'
  if (onRedisError !== 'open' && onRedisError !== 'closed') throw new FST_RRL_INVALID_OPTION('onRedisError', `must be 'open' or 'closed' (got ${JSON.stringify(onRedisError)})`)

  const timeout = options.timeout ?? 50
  if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_TIMEOUT_MS) {
    throw new FST_RRL_INVALID_OPTION('timeout', `must be an integer number of milliseconds from 1 to ${MAX_TIMEOUT_MS} (got ${String(timeout)})`)
  }

  const headers = options.headers ?? 'ietf'
  if (headers !== 'ietf' && headers !== 'legacy' && headers !== 'both' && headers !== false) {
    throw new FST_RRL_INVALID_OPTION('headers', `must be 'ietf', 'legacy', 'both' or false (got ${JSON.stringify(headers)})`)
  }

  const ipv6Subnet = options.ipv6Subnet ?? 64
  if (typeof ipv6Subnet !== 'number' || !Number.isInteger(ipv6Subnet) || ipv6Subnet < 8 || ipv6Subnet > 128) {
    throw new FST_RRL_INVALID_OPTION('ipv6Subnet', `must be an integer prefix length from 8 to 128 (got ${String(ipv6Subnet)})`)
  }

  const defaultLimit = options.defaultLimit
  if (defaultLimit !== undefined && (defaultLimit === null || typeof defaultLimit !== 'object' || Array.isArray(defaultLimit))) {
    throw new FST_RRL_INVALID_OPTION('defaultLimit', 'must be a rate limit block like { limit: 100, window: \'1m\' }')
  }

  const clock = options.clock
  if (clock !== undefined && typeof clock !== 'function') throw new FST_RRL_INVALID_OPTION('clock', 'must be a function returning milliseconds since the epoch')

  return {
    store,
    redis: redis as ResolvedOptions['redis'],
    prefix,
    defaultLimit: defaultLimit as RateLimitBlock | undefined,
    onRedisError,
    timeout,
    headers,
    user: optionalFunction('user', options.user),
    apiKey: optionalFunction('apiKey', options.apiKey),
    ipv6Subnet,
    clock: clock as (() => number) | undefined
  }
}
