import { DEFAULT_IDENTITY_TIMEOUT_MS } from '../keys/identity.js'
import { DEFAULT_MAX_KEYS } from '../store/memory/store.js'

/*
 * Every plugin option's default, in the form a user would write it: the
 * resolvers read them here, and test/docs/defaults.test.ts holds this table
 * equal to the "default" column of docs/options.md. An option missing here
 * has no default (none: the feature is off, or required input).
 * Two live in the tier that also falls back to them (keys, store), and are
 * named here so the table stays whole.
 */
export const DEFAULTS = {
  store: 'redis',
  prefix: 'rl',
  onRedisError: 'open',
  timeout: 50,
  hook: 'onRequest',
  identityTimeout: DEFAULT_IDENTITY_TIMEOUT_MS,
  headers: 'ietf',
  ipv6Subnet: 64,
  denyCache: { max: 10_000 },
  mode: 'enforce',
  printPolicies: false,
  metrics: true,
  batchWrites: true,
  maxBatch: 128,
  maxInFlight: 1,
  maxKeys: DEFAULT_MAX_KEYS,
  circuitBreaker: { failures: 5, cooldown: '250ms' },
  maxPending: 50_000,
  maxDelayed: 10_000,
  configKey: 'rateLimit',
  lease: '60s',
  useErrorHandler: false
} as const
