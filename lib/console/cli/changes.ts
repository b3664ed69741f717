import { CLI_DEFAULTS } from '../../limits.js'
import type { RateLimitBan, RateLimitBanInput, RateLimitIdentity, RateLimitOverride } from '../../types/index.js'
import { identityOf, integer, namesCaller, required, text, ttl } from './args.js'
import { CliError, EXIT, usage, type ExitCode } from './exit.js'
import { escapeText, expiry, identityText, table } from './render.js'
import type { RebuiltRoute, Replica } from './replica.js'
import { apiError, Session } from './session.js'
import { print } from './views.js'

/* The commands on records and usage: bans, overrides, peek, reset, audit. Each goes through the plugin's API. */

/** Runs an API call; its errors become one-line CLI errors. */
async function call<T> (work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (error) {
    throw apiError(error)
  }
}

function change (session: Session, command: string): { actor: string, reason: string } {
  return { actor: required(session.values, 'actor', command), reason: required(session.values, 'reason', command) }
}

function one (operands: string[], what: string, command: string): string {
  const [value, extra] = operands
  if (value === undefined || value === '') throw usage(`${command} needs ${what}`)
  if (extra !== undefined) throw usage(`${command} takes one ${what} (got also ${JSON.stringify(extra)})`)
  return value
}

function none (operands: string[], command: string): void {
  if (operands.length > 0) throw usage(`${command} takes no operand (got ${JSON.stringify(operands[0])})`)
}

function banRows (bans: RateLimitBan[], now: number): string {
  if (bans.length === 0) return 'no bans in force'
  return table(['ID', 'ROUTE', 'STATUS', 'EXPIRES', 'ACTOR', 'REASON', 'SET'], bans.map((ban) => [
    ban.id, ban.route, ban.statusCode, expiry(ban.expiresAt, now), ban.actor, ban.reason, new Date(ban.setAt).toISOString()
  ]))
}

function overrideRows (overrides: RateLimitOverride[], now: number): string {
  if (overrides.length === 0) return 'no overrides in force'
  return table(['ID', 'BLOCK', 'ROUTE', 'CALLER', 'LIMIT', 'EXPIRES', 'ACTOR', 'REASON'], overrides.map((override) => [
    override.id, override.block, override.route, identityText(override.identity), override.limit, expiry(override.expiresAt, now), override.actor, override.reason
  ]))
}

/** `bans` and `overrides`: the records in force, read from Redis now. */
async function listRecords (session: Session, operands: string[], noun: 'bans' | 'overrides'): Promise<ExitCode> {
  none(operands, noun)
  const { api } = await session.bare()
  const now = Date.now()
  if (noun === 'bans') {
    const list = await call(async () => await api.listBans())
    print(session, list, () => banRows(list, now))
  } else {
    const list = await call(async () => await api.listOverrides())
    print(session, list, () => overrideRows(list, now))
  }
  return EXIT.ok
}

export async function bans (session: Session, operands: string[]): Promise<ExitCode> {
  return await listRecords(session, operands, 'bans')
}

/** The one identity a ban names. */
function banIdentity (session: Session): RateLimitBanInput['identity'] {
  const { ip, user, apiKey } = identityOf(session.values)
  const identity = { ip, user, apiKey, keyHash: text(session.values, 'key-hash') }
  const given = (['ip', 'user', 'apiKey', 'keyHash'] as const).filter((field) => identity[field] !== undefined)
  if (given.length !== 1) throw usage('bans add needs exactly one of --ip, --user, --api-key, --key-hash')
  const field = given[0] as 'ip' | 'user' | 'apiKey' | 'keyHash'
  return { [field]: identity[field] as string } as RateLimitBanInput['identity']
}

export async function banAdd (session: Session, operands: string[]): Promise<ExitCode> {
  none(operands, 'bans add')
  const identity = banIdentity(session)
  const who = change(session, 'bans add')
  const lasts = ttl(session.values, 'bans add')
  const route = text(session.values, 'route')
  const status = text(session.values, 'status')
  if (status !== undefined && status !== '403' && status !== '429') throw usage(`--status must be 403 or 429 (got ${JSON.stringify(status)})`)
  // A user or an API key is hashed in the key (with the app's hashSecret when it has one); an IP address never is.
  const hashed = !('ip' in identity)
  const app: Replica = route !== undefined || hashed ? await session.replica(hashed) : await session.bare()
  if (route !== undefined) knownRoute(app, route)
  const ban = await call(async () => await app.api.ban({
    identity,
    ttl: lasts,
    ...who,
    ...(route === undefined ? {} : { target: route }),
    ...(status === undefined ? {} : { statusCode: Number(status) as 403 | 429 })
  }))
  print(session, ban, () => `banned ${escapeText(ban.id)} (${ban.statusCode}, ${expiry(ban.expiresAt, ban.setAt)}); every instance applies it within its next poll`)
  return EXIT.ok
}

/** Lifts a ban or clears an override by id: exit 1 when there was none. */
async function removeRecord (session: Session, operands: string[], noun: 'ban' | 'override'): Promise<ExitCode> {
  const command = noun === 'ban' ? 'bans remove' : 'overrides clear'
  const id = one(operands, `${noun === 'ban' ? 'a ban' : 'an override'} id`, command)
  const who = change(session, command)
  const { api } = await session.bare()
  const removed = await call(async () => noun === 'ban' ? await api.unban(id, who) : await api.clearOverride(id, who))
  print(session, { id, removed }, () => removed ? `${noun === 'ban' ? 'lifted' : 'cleared'} ${escapeText(id)}` : `no ${noun} with id ${escapeText(id)}`)
  return removed ? EXIT.ok : EXIT.failure
}

export async function banRemove (session: Session, operands: string[]): Promise<ExitCode> {
  return await removeRecord(session, operands, 'ban')
}

export async function overrides (session: Session, operands: string[]): Promise<ExitCode> {
  return await listRecords(session, operands, 'overrides')
}

/** The rebuilt route a target names; a custom one (or one the replica could not declare) is refused with why. */
function knownRoute (replica: Replica, target: string): RebuiltRoute | undefined {
  const route = Session.routeOf(replica, target)
  if (route === undefined) return undefined
  if (route.custom !== undefined || !route.declared) {
    throw usage(`${route.label} cannot be rebuilt exactly from its published limits (${route.custom ?? 'its constraints'}): use the app's own fastify.rateLimit API for it`)
  }
  return route
}

export async function overrideSet (session: Session, operands: string[]): Promise<ExitCode> {
  const target = one(operands, 'a target (a route or a block name)', 'overrides set')
  const identity = identityOf(session.values)
  const who = change(session, 'overrides set')
  const limit = integer(session.values, 'limit', undefined, 1, Number.MAX_SAFE_INTEGER)
  if (limit === undefined) throw usage('overrides set needs --limit')
  const lasts = ttl(session.values, 'overrides set')
  const caller = namesCaller(identity)
  const replica = await session.replica(caller)
  knownRoute(replica, target)
  const override = await call(async () => await replica.api.setOverride({ target, limit, ttl: lasts, ...who, ...(caller ? { identity } : {}) }))
  print(session, override, () => `override ${escapeText(override.id)}: ${escapeText(override.block)} at ${override.limit} for ${escapeText(identityText(override.identity))} (${expiry(override.expiresAt, override.setAt)}); every instance applies it within its next poll`)
  return EXIT.ok
}

export async function overrideClear (session: Session, operands: string[]): Promise<ExitCode> {
  return await removeRecord(session, operands, 'override')
}

/** A caller as the CLI echoes it: ip, user and tier values; an API key and the request fields by name only. */
function callerText (identity: RateLimitIdentity): string {
  const parts: string[] = []
  for (const [field, value] of Object.entries(identity)) {
    if (value === undefined) continue
    if (typeof value === 'string') parts.push(`${field}=${field === 'apiKey' ? '(given)' : value}`)
    else parts.push(...Object.keys(value as object).map((name) => `${field} ${name}=(given)`))
  }
  return parts.join(', ')
}

/** What a `by` part needs from the command line: the value it reads, else an IP to fall back to. */
function partGiven (part: string, identity: RateLimitIdentity): boolean {
  const [kind, name = ''] = part.split(/:(.*)/s) as [string, string | undefined]
  if (kind === 'ip') return identity.ip !== undefined
  if (kind === 'user' || part === 'ip (when no user)') return identity.user !== undefined || identity.ip !== undefined
  if (kind === 'api-key') return identity.apiKey !== undefined
  if (kind === 'header') return Object.keys(identity.headers ?? {}).some((header) => header.toLowerCase() === name.toLowerCase())
  if (kind === 'param') return identity.params?.[name] !== undefined
  if (kind === 'body') return identity.body?.[name] !== undefined
  return false
}

/** The caller of peek and reset, checked against the route's parts: a part without its value falls back to the IP, which must then be given. */
function callerFor (session: Session, route: RebuiltRoute | undefined, command: string): RateLimitIdentity {
  const identity = identityOf(session.values)
  if (!namesCaller(identity)) throw usage(`${command} needs a caller: --ip, --user, --api-key, --header, --param or --body`)
  if (route === undefined || identity.ip !== undefined) return identity
  // A reset leaves the caller's global blocks alone: only the route's own blocks' parts count there.
  const parts = [...new Set(route.row.limits.filter((block) => command === 'peek' || !block.global).flatMap((block) => block.by))]
  const missing = parts.filter((part) => !partGiven(part, identity))
  if (missing.length > 0) {
    const flags = [...new Set(missing.map((part) => part === 'api-key' ? '--api-key' : part.includes(':') ? `--${part.split(':')[0] as string} ${part.split(':')[1] as string}=…` : `--${part.replace(' (when no user)', '')}`))]
    const fallback = parts.includes('ip') ? '' : ' (or --ip, for a caller without them)'
    throw usage(`${route.label} keys callers by ${parts.join(', ')}: give ${flags.join(', ')}${fallback}`)
  }
  return identity
}

export async function peek (session: Session, operands: string[]): Promise<ExitCode> {
  const target = one(operands, 'a route', 'peek')
  const cost = integer(session.values, 'cost', 1, 1, 100_000_000) as number
  identityOf(session.values)
  const replica = await session.replica(true)
  const identity = callerFor(session, knownRoute(replica, target), 'peek')
  const decision = await call(async () => await replica.api.peek(target, identity, cost))
  if (decision.degraded) throw new CliError('Redis did not answer the peek (the decision was degraded)', EXIT.failure)
  print(session, decision, () => [
    `${escapeText(target)} for ${escapeText(callerText(identity))}: ${decision.allowed ? 'would be admitted' : `would be refused (retry in ${Math.ceil(decision.retryAfterMs / 1000)} s)`}`,
    table(['POLICY', 'ALLOWED', 'LIMIT', 'REMAINING', 'RESET IN', 'RETRY AFTER', 'TIER'], decision.policies.map((policy) => [
      policy.policy, policy.allowed ? 'yes' : 'no', policy.limit, policy.remaining, `${policy.resetMs}ms`, `${policy.retryAfterMs}ms`, policy.tier ?? ''
    ]))
  ].join('\n'))
  return EXIT.ok
}

export async function reset (session: Session, operands: string[]): Promise<ExitCode> {
  const target = one(operands, 'a route', 'reset')
  const who = change(session, 'reset')
  identityOf(session.values)
  const replica = await session.replica(true)
  const identity = callerFor(session, knownRoute(replica, target), 'reset')
  await call(async () => { await replica.api.reset(target, identity, who) })
  print(session, { target, identity: callerText(identity), reset: true }, () => `reset ${escapeText(target)} for ${escapeText(callerText(identity))} (written to the audit trail)`)
  return EXIT.ok
}

export async function audit (session: Session, operands: string[]): Promise<ExitCode> {
  none(operands, 'audit')
  const count = integer(session.values, 'count', CLI_DEFAULTS.audit, 1, 1000) as number
  const { api } = await session.bare()
  const entries = await call(async () => await api.auditTrail(count))
  print(session, entries, () => entries.length === 0
    ? 'no operator changes in the audit trail'
    : table(['AT', 'CHANGE', 'NOUN', 'ID', 'ACTOR', 'REASON'], entries.map((entry) => [entry.at, entry.change, entry.noun, entry.id, entry.actor, entry.reason])))
  return EXIT.ok
}
