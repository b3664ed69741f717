import { compileAllowList, type SkipPredicate } from '../request/allow-list.js'
import type { BreakerOptions } from '../store/redis/breakers.js'
import { parseWindow } from '../policy/duration.js'
import { FST_RRL_INVALID_OPTION } from '../errors.js'
import type { IdentityFunction } from '../keys/identity.js'
import type { HeaderFormat } from '../types/index.js'
import { choiceMessage, isOneOf, shown } from '../util/validate.js'
import { DEFAULTS, MAX_BREAKER_FAILURES, MAX_CONFIG_KEY_LENGTH, MAX_DENY_CACHE, MAX_PREFIX_LENGTH, MIN_SECRET_BYTES } from '../limits.js'

/* Validators of single plugin options: each throws FST_RRL_INVALID_OPTION naming the option. */

// No braces (they would move the Cluster hash tag) and nothing a key reader would trip on.
export const PREFIX = new RegExp(`^[A-Za-z0-9_.:-]{1,${MAX_PREFIX_LENGTH}}$`)

/** `circuitBreaker`: false, or { failures?, cooldown? } (DEFAULTS.circuitBreaker for each one missing). */
export function resolveBreaker (value: unknown): BreakerOptions | undefined {
  if (value === false) return undefined
  const input = (value ?? {}) as Record<string, unknown>
  if (typeof input !== 'object' || input === null || Array.isArray(input) || Object.keys(input).some((key) => key !== 'failures' && key !== 'cooldown')) {
    throw new FST_RRL_INVALID_OPTION('circuitBreaker', 'must be false or { failures?: number, cooldown?: duration }')
  }
  const failures = integerOption(input, 'failures', DEFAULTS.circuitBreaker.failures, [1, MAX_BREAKER_FAILURES], 'circuitBreaker.failures')
  const cooldownMs = parseWindow(input.cooldown ?? DEFAULTS.circuitBreaker.cooldown)
  if (typeof cooldownMs === 'string') throw new FST_RRL_INVALID_OPTION('circuitBreaker.cooldown', cooldownMs)
  return { failures, cooldownMs }
}

/** An integer option within `[min, max]` (both included), `fallback` when absent; `label` names it in the error. */
export function integerOption (
  options: Record<string, unknown>,
  name: string,
  fallback: number,
  [min, max]: readonly [number, number],
  label = name
): number {
  const value = options[name] ?? fallback
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new FST_RRL_INVALID_OPTION(label, `must be an integer from ${min} to ${max} (got ${shown(value)})`)
  }
  return value
}

export const STORES = ['redis', 'memory'] as const
/** The header formats, in the order a combination is written. */
export const HEADER_FORMATS = ['ietf', 'draft-6', 'draft-7', 'legacy'] as const satisfies readonly HeaderFormat[]

/** Formats that send one field name in two syntaxes (reply/headers.ts FORMATS; test/header-modes.test.ts holds the two to each other). */
const HEADER_CLASHES: ReadonlyArray<[HeaderFormat, HeaderFormat, string]> = [
  ['ietf', 'draft-6', 'RateLimit-Policy'],
  ['ietf', 'draft-7', 'RateLimit and RateLimit-Policy']
]

const HEADER_VALUES = "'ietf', 'draft-6', 'draft-7', 'legacy', 'both', false, or an array of formats (e.g. ['draft-6', 'legacy'])"

/**
 * `headers`: the formats to send, in HEADER_FORMATS order; [] for false.
 * `'both'` is ietf and legacy. A combination may not send one field name in two syntaxes.
 */
export function resolveHeaders (value: unknown): readonly HeaderFormat[] {
  if (value === undefined) return [DEFAULTS.headers]
  if (value === false) return []
  if (value === 'both') return ['ietf', 'legacy']
  const listed: unknown[] = Array.isArray(value) ? value : [value]
  const formats = HEADER_FORMATS.filter((format) => listed.includes(format))
  if (formats.length === 0 || formats.length !== listed.length) {
    const got = Array.isArray(value) ? JSON.stringify(value) : shown(value)
    throw new FST_RRL_INVALID_OPTION('headers', `must be ${HEADER_VALUES}, each format once (got ${got})`)
  }
  for (const [a, b, fields] of HEADER_CLASHES) {
    if (formats.includes(a) && formats.includes(b)) {
      throw new FST_RRL_INVALID_OPTION('headers', `cannot combine '${a}' and '${b}': both send ${fields}, in different syntaxes (a client would read one as the other). Allowed: ${HEADER_VALUES}; 'ietf' combines only with 'legacy'`)
    }
  }
  return formats
}

/** `value` when it is one of `choices`, else the coded option error with the shared message. */
export function choice<T extends string | false> (name: string, value: unknown, choices: readonly T[]): T {
  if (isOneOf(value, choices)) return value
  throw new FST_RRL_INVALID_OPTION(name, choiceMessage(value, choices))
}
// A plain property name: it is also the name of the fastify instance decorator.
const CONFIG_KEY = new RegExp(`^[A-Za-z_$][A-Za-z0-9_$]{0,${MAX_CONFIG_KEY_LENGTH - 1}}$`)

export function optionalFunction (name: string, value: unknown): IdentityFunction | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'function') {
    throw new FST_RRL_INVALID_OPTION(name, `must be a function (request) => string | undefined, or async (got ${typeof value})`)
  }
  return value as IdentityFunction
}

/** `hashSecret`: a string (UTF-8) or Buffer/Uint8Array of at least MIN_SECRET_BYTES bytes. The value is never echoed. */
export function resolveHashSecret (value: unknown): Buffer | undefined {
  if (value === undefined) return undefined
  let bytes: Buffer
  if (typeof value === 'string') bytes = Buffer.from(value, 'utf8')
  else if (value instanceof Uint8Array) bytes = Buffer.from(value)
  else throw new FST_RRL_INVALID_OPTION('hashSecret', `must be a string or a Buffer (got ${value === null ? 'null' : typeof value})`)
  if (bytes.length < MIN_SECRET_BYTES) {
    throw new FST_RRL_INVALID_OPTION('hashSecret', `must be at least ${MIN_SECRET_BYTES} bytes (got ${bytes.length}); use e.g. crypto.randomBytes(32) kept in your secret store`)
  }
  return bytes
}

/** `denyCache`: false (0 = off) or { max }. */
export function resolveDenyCache (value: unknown): number {
  if (value === undefined || value === null) return DEFAULTS.denyCache.max
  if (value === false) return 0
  if (value === null || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).some((key) => key !== 'max')) {
    throw new FST_RRL_INVALID_OPTION('denyCache', 'must be false or { max: <entries> }')
  }
  const max = (value as { max?: unknown }).max
  if (max === undefined) return DEFAULTS.denyCache.max
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1 || max > MAX_DENY_CACHE) {
    throw new FST_RRL_INVALID_OPTION('denyCache', `max must be an integer from 1 to ${MAX_DENY_CACHE} (got ${shown(max)})`)
  }
  return max
}

/** `allowList`: addresses and CIDR ranges (compiled to a predicate on request.ip), or a function. */
export function resolveAllowList (value: unknown): SkipPredicate | undefined {
  if (value === undefined) return undefined
  if (typeof value === 'function') return value as SkipPredicate
  if (!Array.isArray(value)) {
    throw new FST_RRL_INVALID_OPTION('allowList', `must be an array of IP addresses and CIDR ranges, or a function (request) => boolean | Promise<boolean> (got ${shown(value)})`)
  }
  const compiled = compileAllowList(value)
  if (typeof compiled === 'string') throw new FST_RRL_INVALID_OPTION('allowList', compiled)
  return compiled
}

export function resolveConfigKey (value: unknown): string {
  const configKey = value ?? DEFAULTS.configKey
  if (typeof configKey !== 'string' || !CONFIG_KEY.test(configKey) || configKey in Object.prototype) {
    const got = JSON.stringify(configKey) ?? typeof configKey
    throw new FST_RRL_INVALID_OPTION('configKey', `must be a property name of 1 to ${MAX_CONFIG_KEY_LENGTH} characters from A-Z a-z 0-9 _ $, not starting with a digit, and not an Object.prototype name (got ${got})`)
  }
  return configKey
}
