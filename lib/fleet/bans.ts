import type { FastifyBaseLogger, FastifyRequest } from 'fastify'
import { compileIdentity, type CompiledIdentity, type IdentityContext } from '../keys/identity.js'
import { identityHasher, keyMethod, type ValueHasher } from '../keys/layout.js'
import type { CompiledPolicy } from '../policy/policy.js'
import type { AuditTrail, RecordHash } from '../store/port.js'
import type { RateLimitBan, RateLimitBanKind } from '../types/index.js'
import { FleetRecords, parseJson, type FleetEntry } from './records.js'

/*
 * Operator bans, fleet-wide, as fleet records (records.ts: one hash per
 * prefix, keys/layout.ts bansKey, read by every instance every poll). A ban
 * names one identity kind and value, rendered exactly as a key's identity part
 * is (`ip=<canonical ip>`, `u=<hash>`, `k=<hash>`: keys/identity.ts), so no
 * user id or API key is needed to match and no API key is ever stored. Its id
 * is `<scope>|<rendered>`, the scope being a route (`GET /orders`) or `*` for
 * every limited route. The route hook asks `match` only while the map holds a
 * ban, and renders only the kinds some ban names.
 */

/** The scope of a ban without a target: every limited route. */
export const EVERY_ROUTE = '*'

export const BAN_KINDS: readonly RateLimitBanKind[] = ['ip', 'user', 'apiKey', 'keyHash']
const BY_PART = { ip: 'ip', user: 'user', apiKey: 'api-key' } as const

/** A key hash's rendered form: `#` never starts an identity part (`ip=`, `u=`, `k=`, labels), so it names no other ban. */
export function keyHashForm (hash: string): string {
  return '#' + hash
}

const scopes = new WeakMap<CompiledPolicy, string>()

/** A route's ban scope: its method(s) and URL as its keys see them (the HEAD twin of a GET is the GET). */
export function banScope (policy: CompiledPolicy): string {
  let scope = scopes.get(policy)
  if (scope === undefined) {
    const space = policy.route.indexOf(' ')
    scope = keyMethod(policy.route.slice(0, space).split(',')) + policy.route.slice(space)
    scopes.set(policy, scope)
  }
  return scope
}

function parse (json: string): RateLimitBan | undefined {
  const record = parseJson(json)
  return typeof record?.id === 'string' && BAN_KINDS.includes(record.kind as RateLimitBanKind) && (record.statusCode === 403 || record.statusCode === 429)
    ? record as unknown as RateLimitBan
    : undefined
}

/** Of two bans, the one that lapses last (a permanent one before any). */
function later (a: RateLimitBan | undefined, b: RateLimitBan | undefined): RateLimitBan | undefined {
  if (a === undefined || b === undefined) return a ?? b
  if (a.expiresAt === null) return a
  return b.expiresAt === null || b.expiresAt > a.expiresAt ? b : a
}

export class Bans extends FleetRecords<RateLimitBan, FleetEntry<RateLimitBan>> {
  readonly #context: IdentityContext
  readonly #hash: ValueHasher
  readonly #identities = new Map<RateLimitBanKind, CompiledIdentity>()
  /** The kinds some ban names: only these are rendered per request. */
  #kinds: RateLimitBanKind[] = []
  /** Policies of limited routes (their hooks registered them): what a ban's target may name. */
  readonly #routes = new WeakSet<CompiledPolicy>()

  /** `context`: the plugin's identity options, so values render (and hash) as in keys. */
  constructor (records: RecordHash, log: FastifyBaseLogger, context: IdentityContext, audit?: AuditTrail) {
    super(records, log, { noun: 'ban', parse, entry: (record, json) => ({ record, json }) }, audit)
    this.#context = context
    this.#hash = identityHasher(context.hashSecret)
  }

  /** A key's identity part in a key hash ban's form (the picture's hash of a refused caller). */
  #hashed (identity: string): string {
    return keyHashForm(this.#hash(identity))
  }

  protected override changed (): void {
    const kinds = new Set<RateLimitBanKind>()
    for (const { record } of this.entries.values()) kinds.add(record.kind)
    this.#kinds = BAN_KINDS.filter((kind) => kinds.has(kind))
  }

  /** The compiled identity of one kind; a string (why not) when the plugin options cannot read it, or for a key hash (no one part). */
  identity (kind: RateLimitBanKind): CompiledIdentity | string {
    if (kind === 'keyHash') return 'a key hash names a whole key identity'
    let identity = this.#identities.get(kind)
    if (identity === undefined) {
      const compiled = compileIdentity(BY_PART[kind], this.#context, 'ban check')
      if (typeof compiled === 'string') return compiled
      identity = compiled
      this.#identities.set(kind, identity)
    }
    return identity
  }

  /** Registers a limited route's policy (its hook does, at startup). */
  watch (policy: CompiledPolicy): void {
    this.#routes.add(policy)
  }

  covers (policy: CompiledPolicy): boolean {
    return this.#routes.has(policy)
  }

  /** How many bans in force apply to this route (its own and every-route ones). */
  countFor (policy: CompiledPolicy): number {
    const scope = banScope(policy)
    return this.current().filter((ban) => ban.route === EVERY_ROUTE || ban.route === scope).length
  }

  #lookup (scope: string, rendered: string): RateLimitBan | undefined {
    const now = this.now()
    let found: RateLimitBan | undefined
    for (const id of [EVERY_ROUTE + '|' + rendered, scope + '|' + rendered]) {
      const ban = this.entries.get(id)?.record
      if (ban !== undefined && (ban.expiresAt === null || ban.expiresAt > now)) found = later(found, ban)
    }
    return found
  }

  /**
   * The ban in force on this request (the one lapsing last), or undefined.
   * Renders each kind some ban names; a Promise only when an async `user` or
   * `apiKey` function returned one.
   */
  match (policy: CompiledPolicy, request: FastifyRequest): RateLimitBan | undefined | Promise<RateLimitBan | undefined> {
    const scope = banScope(policy)
    let found: RateLimitBan | undefined
    let pending: Array<Promise<string>> | undefined
    for (const kind of this.#kinds) {
      // A key hash: each identity the route's keys carry, hashed as the picture hashes a refused caller.
      const parts = kind === 'keyHash' ? policy.identities : [this.identity(kind)]
      for (const identity of parts) {
        if (typeof identity === 'string') continue
        const resolved = identity.resolve(request)
        const rendered = kind !== 'keyHash' ? resolved : typeof resolved === 'string' ? this.#hashed(resolved) : resolved.then((value) => this.#hashed(value))
        if (typeof rendered === 'string') found = later(found, this.#lookup(scope, rendered))
        else (pending ??= []).push(rendered)
      }
    }
    if (pending === undefined) return found
    return Promise.all(pending).then((all) => all.reduce((best, rendered) => later(best, this.#lookup(scope, rendered)), found))
  }
}
