import { FST_RRL_INVALID_API_CALL } from '../errors.js'
import { canonicalIp } from '../keys/ip.js'
import { shown } from '../util/validate.js'
import type { PolicySummary, RateLimitApi, RateLimitBan, RateLimitBanInput, RateLimitBanKind } from '../types/index.js'
import { BAN_KINDS, banScope, EVERY_ROUTE, keyHashForm, type Bans } from './bans.js'
import { HASH_CHARS } from '../keys/layout.js'
import { changeText, shownIdentity, ttlInput } from '../api/inputs.js'
import type { PolicyRegistry } from '../api/registry.js'

/* fastify.rateLimit.ban / unban / listBans, and the routes' ban counts in policies(). */

const METHOD = 'ban'
const KEY_HASH = new RegExp(`^[A-Za-z0-9_-]{${HASH_CHARS}}$`)

/** The one kind and value a ban names. */
function banIdentity (identity: unknown): { kind: RateLimitBanKind, value: string } {
  const fields = identity !== null && typeof identity === 'object' && !Array.isArray(identity) ? Object.entries(identity).filter(([, value]) => value !== undefined) : []
  const [field, value] = fields[0] ?? []
  if (fields.length !== 1 || !BAN_KINDS.includes(field as RateLimitBanKind)) {
    throw new FST_RRL_INVALID_API_CALL(METHOD, 'the identity must name exactly one of ip, user, apiKey or keyHash, e.g. { ip: \'203.0.113.7\' } or { user: \'alice\' }')
  }
  if (typeof value !== 'string' || value === '') {
    throw new FST_RRL_INVALID_API_CALL(METHOD, `identity.${field as string} must be a non-empty string (got ${shown(value)})`)
  }
  return { kind: field as RateLimitBanKind, value }
}

/** The scope a ban's target names: a limited route (by route or one of its block names), or every route. */
function banRoute (registry: PolicyRegistry, bans: Bans, target: unknown): string {
  if (target === undefined) return EVERY_ROUTE
  const policy = registry.find(target, METHOD)
  if (!bans.covers(policy)) {
    throw new FST_RRL_INVALID_API_CALL(METHOD, `${JSON.stringify(target)} is not a route's limit (a global block or a named policy): name a route ('GET /path'), or no target for every route`)
  }
  return banScope(policy)
}

/** The key-form rendering of the banned value (`ip=…`, `u=<hash>`, `k=<hash>`), as the route hook renders a request's. */
async function rendered (bans: Bans, kind: RateLimitBanKind, value: string): Promise<string> {
  if (kind === 'ip' && canonicalIp(value, 128) === undefined) {
    throw new FST_RRL_INVALID_API_CALL(METHOD, `identity.ip is not an IP address (got ${shown(value)})`)
  }
  if (kind === 'keyHash') {
    if (!KEY_HASH.test(value)) throw new FST_RRL_INVALID_API_CALL(METHOD, `identity.keyHash must be a key hash as fleet() shows it: ${HASH_CHARS} characters of base64url (got ${shown(value)})`)
    return keyHashForm(value)
  }
  const identity = bans.identity(kind)
  if (typeof identity === 'string') throw new FST_RRL_INVALID_API_CALL(METHOD, `a ${kind} ban needs the plugin option \`${kind}\`: without it no request has a ${kind} to match`)
  return await identity.resolveInput({ [kind]: value })
}

async function banRecord (registry: PolicyRegistry, bans: Bans, input: RateLimitBanInput): Promise<RateLimitBan> {
  if (input === null || typeof input !== 'object') {
    throw new FST_RRL_INVALID_API_CALL(METHOD, 'takes { identity, ttl, actor, reason, target?, statusCode? }')
  }
  const route = banRoute(registry, bans, input.target)
  const { kind, value } = banIdentity(input.identity)
  const ttl = ttlInput(input.ttl, METHOD)
  const statusCode = input.statusCode ?? 403
  if (statusCode !== 403 && statusCode !== 429) {
    throw new FST_RRL_INVALID_API_CALL(METHOD, `statusCode must be 403 or 429 (got ${shown(statusCode)})`)
  }
  if (statusCode === 429 && ttl === null) {
    throw new FST_RRL_INVALID_API_CALL(METHOD, 'statusCode 429 needs a ttl in ms: its Retry-After is the time left, which a permanent ban does not have (use 403)')
  }
  const actor = changeText(input.actor, 'actor', METHOD)
  const reason = changeText(input.reason, 'reason', METHOD)
  const id = `${route}|${await rendered(bans, kind, value)}`
  // The store's clock: every instance judges the expiry by it (fleet/records.ts).
  const now = await bans.stamp()
  return {
    id,
    route,
    kind,
    identity: shownIdentity({ [kind]: value }),
    statusCode,
    expiresAt: ttl === null ? null : now + ttl,
    actor,
    reason,
    setAt: now
  }
}

export function banApi (registry: PolicyRegistry, bans: Bans): Pick<RateLimitApi, 'ban' | 'unban' | 'listBans'> {
  return {
    async ban (input) {
      const record = await banRecord(registry, bans, input)
      await bans.set(record)
      return { ...record }
    },
    async unban (id, change) {
      if (typeof id !== 'string') throw new FST_RRL_INVALID_API_CALL('unban', `the id must be a string (got ${typeof id})`)
      const input = (change ?? {}) as { actor?: unknown, reason?: unknown }
      return await bans.clear(id, changeText(input.actor, 'actor', 'unban'), changeText(input.reason, 'reason', 'unban'))
    },
    async listBans () {
      await bans.refresh()
      return bans.current()
    }
  }
}

/** policies() with each limited route's count of bans in force. */
export function withBans (summaries: PolicySummary[], registry: PolicyRegistry, bans: Bans): PolicySummary[] {
  if (bans.size === 0) return summaries
  for (const summary of summaries) {
    if (summary.limits.length === 0) continue
    const policy = registry.findRow(summary)
    const count = policy === undefined ? 0 : bans.countFor(policy)
    if (count > 0) summary.bans = count
  }
  return summaries
}
