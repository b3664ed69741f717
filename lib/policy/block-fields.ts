import { createHash } from 'node:crypto'
import { DEFAULT_PENALTY_BACKOFF, DEFAULT_PENALTY_MAX_MS, MAX_PENALTY_AFTER, MAX_PENALTY_BACKOFF, MAX_POLICY_NAME_LENGTH, MAX_TIER_NAME_LENGTH } from '../limits.js'
import type { Penalty } from '../store/port.js'
import type { RateLimitBlock } from '../types/index.js'
import { parseWindow } from './duration.js'
import { isCount, shown } from '../util/validate.js'

/** Throws the block's coded error for `field` (block.ts binds it to the route). */
export type Fail = (field: string, message: string) => never

/** Tier names: short tokens, so they can be shown in headers and metrics as they are. */
const TIER_NAME = new RegExp(`^[A-Za-z0-9_.-]{1,${MAX_TIER_NAME_LENGTH}}$`)
/** The tier every tier map must define: used when `tier(request)` gives nothing or an unknown name. */
export const FALLBACK_TIER = 'default'

/**
 * The name a block gets when it has none: `get-orders-id` for `GET /orders/:id`.
 * A route the slug cannot show faithfully (characters other than A-Z a-z 0-9
 * / : -) or one too long for 64 characters keeps a readable prefix and ends in
 * 8 hex digits of SHA-256 over method and route: valid for any route, the same
 * on every start, distinct per route (plain names of routes that differ only in
 * punctuation, `/a/:b` and `/a/b`, coincide).
 */
export function defaultName (method: string, url: string, suffix: string): string {
  const slug = url.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-+|-+$/g, '')
  const readable = `${method.toLowerCase().replace(/,/g, '-')}-${slug === '' ? 'root' : slug}`
  if (readable.length + suffix.length <= MAX_POLICY_NAME_LENGTH && /^[A-Za-z0-9/:-]*$/.test(url)) return readable + suffix
  const hash = createHash('sha256').update(`${method} ${url}`).digest('hex').slice(0, 8)
  const kept = readable.slice(0, MAX_POLICY_NAME_LENGTH - suffix.length - hash.length - 1).replace(/-+$/, '')
  return `${kept}-${hash}${suffix}`
}

const PENALTY_FIELDS = new Set(['after', 'for', 'backoff', 'max'])

/** `penalty: { after, for, backoff?, max? }`, validated and compiled; undefined when absent. */
export function readPenalty (value: unknown, fail: Fail): Penalty | undefined {
  if (value === undefined) return undefined
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return fail('penalty', 'must be an object like { after: 3, for: \'15m\', backoff: 2 }')
  }
  const input = value as Record<string, unknown>
  for (const field of Object.keys(input)) {
    if (!PENALTY_FIELDS.has(field)) {
      fail(`penalty.${field}`, `is not a penalty field (known: ${[...PENALTY_FIELDS].join(', ')})`)
    }
  }
  if (!isCount(input.after, MAX_PENALTY_AFTER)) {
    fail('penalty.after', `must be an integer from 1 to ${MAX_PENALTY_AFTER} (got ${shown(input.after)})`)
  }
  const forMs = parseWindow(input.for)
  if (typeof forMs === 'string') return fail('penalty.for', forMs)
  const maxMs = input.max === undefined ? DEFAULT_PENALTY_MAX_MS : parseWindow(input.max)
  if (typeof maxMs === 'string') return fail('penalty.max', maxMs)
  if (maxMs < forMs) fail('penalty.max', `must be at least penalty.for (${forMs} ms; got ${maxMs} ms)`)
  const backoff = input.backoff ?? DEFAULT_PENALTY_BACKOFF
  if (typeof backoff !== 'number' || !Number.isFinite(backoff) || backoff < 1 || backoff > MAX_PENALTY_BACKOFF) {
    fail('penalty.backoff', `must be a number from 1 to ${MAX_PENALTY_BACKOFF} (got ${shown(input.backoff)})`)
  }
  const after = input.after
  return { after, forMs, backoff, maxMs, arg: `${after}:${forMs}:${String(backoff)}:${maxMs}` }
}

export function describeBy (by: RateLimitBlock['by'], hasUser: boolean): string[] {
  if (by === undefined) return hasUser ? ['user', 'ip (when no user)'] : ['ip']
  return (Array.isArray(by) ? by : [by]).map((part) => typeof part === 'function' ? `function ${part.name || '(anonymous)'}` : part)
}

/** A count per tier (undefined: the block has no tiers), fallback tier first. */
export type Counts = Array<[string | undefined, number]>

function readTierMap (value: object, field: string, max: number, maxText: string, fail: Fail): Counts {
  const entries = Object.entries(value as Record<string, unknown>)
  if (!Object.hasOwn(value, FALLBACK_TIER)) {
    const names = entries.map(([name]) => JSON.stringify(name)).join(', ') || 'none'
    fail(field, `is a tier map without the fallback tier '${FALLBACK_TIER}' (got tiers ${names})`)
  }
  const out: Counts = []
  for (const [tier, count] of entries) {
    if (!TIER_NAME.test(tier)) {
      fail(field, `has a tier name ${JSON.stringify(tier)}: use 1 to ${MAX_TIER_NAME_LENGTH} characters from A-Z a-z 0-9 _ . -`)
    }
    if (!isCount(count, max)) {
      fail(field, `must be an integer from 1 to ${maxText} for tier ${JSON.stringify(tier)} (got ${shown(count)})`)
    }
    out.push([tier, count])
  }
  out.sort((a, b) => (a[0] === FALLBACK_TIER ? -1 : b[0] === FALLBACK_TIER ? 1 : 0))
  return out
}

/** A count, or a tier map of counts with the fallback tier. Returns the map's entries (fallback first). */
export function readCounts (value: unknown, field: string, max: number, maxText: string, fail: Fail): Counts {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    return readTierMap(value, field, max, maxText, fail)
  }
  if (!isCount(value, max)) {
    fail(field, `must be an integer from 1 to ${maxText}, or a tier map like { ${FALLBACK_TIER}: 60, pro: 600 } (got ${shown(value)})`)
  }
  return [[undefined, value]]
}

export function routeHasParam (url: string, name: string): boolean {
  // Fastify params: `/:id`, `/:id(^\\d+)`, `/:from-:to`, `/:file.:ext`.
  let at = url.indexOf(':' + name)
  while (at !== -1) {
    const next = url.charAt(at + name.length + 1)
    if (!/[A-Za-z0-9_]/.test(next)) return true
    at = url.indexOf(':' + name, at + 1)
  }
  return false
}
