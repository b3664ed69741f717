import { FST_RRL_INVALID_API_CALL } from '../errors.js'
import { shown } from '../util/validate.js'
import type { RateLimitIdentity } from '../types/index.js'
import { MAX_CHANGE_TEXT_LENGTH } from '../limits.js'

/* What the programmatic API checks of its callers' input, shared by peek/consume/reset, overrides and bans. */

export function identityInput (identity: unknown, method: string): RateLimitIdentity {
  if (identity === null || typeof identity !== 'object' || Array.isArray(identity)) {
    throw new FST_RRL_INVALID_API_CALL(method, 'the identity must be an object like { ip: \'1.2.3.4\' } or { user: \'alice\' }')
  }
  const input = identity as Record<string, unknown>
  for (const field of ['ip', 'user', 'apiKey', 'tier'] as const) {
    if (input[field] !== undefined && typeof input[field] !== 'string') {
      throw new FST_RRL_INVALID_API_CALL(method, `identity.${field} must be a string (got ${typeof input[field]})`)
    }
  }
  for (const field of ['headers', 'params', 'body'] as const) {
    if (input[field] !== undefined && (input[field] === null || typeof input[field] !== 'object')) {
      throw new FST_RRL_INVALID_API_CALL(method, `identity.${field} must be an object`)
    }
  }
  return input as RateLimitIdentity
}

/** A record's `ttl`: milliseconds, or null for `'permanent'`. */
export function ttlInput (ttl: unknown, method: string): number | null {
  if (ttl === 'permanent') return null
  if (typeof ttl !== 'number' || !(Number.isSafeInteger(ttl) && ttl > 0)) {
    throw new FST_RRL_INVALID_API_CALL(method, `ttl must be a positive number of milliseconds or 'permanent' (got ${shown(ttl)})`)
  }
  return ttl
}

export function changeText (value: unknown, field: string, method: string): string {
  if (typeof value !== 'string' || value.trim() === '' || value.length > MAX_CHANGE_TEXT_LENGTH) {
    throw new FST_RRL_INVALID_API_CALL(method, `${field} must be a non-empty string of at most ${MAX_CHANGE_TEXT_LENGTH} characters (who makes the change, and why, is logged)`)
  }
  return value
}

/** What a listing shows of the caller: its kinds, with the ip and user values; secrets and free text never. */
export function shownIdentity (identity: RateLimitIdentity): Record<string, string> {
  const shownFields: Record<string, string> = {}
  for (const [field, value] of Object.entries(identity)) {
    if (value === undefined) continue
    shownFields[field] = field === 'ip' || field === 'user' || field === 'tier' || field === 'keyHash' ? String(value) : '(given)'
  }
  return shownFields
}
