import { createHmac } from 'node:crypto'
import { HASH_CHARS, hashValue } from '../util/hash.js'
import { item } from '../util/item.js'
import { MAX_IDENTITY_LENGTH, MAX_ROUTE_LENGTH } from '../limits.js'

export { hashValue, HASH_CHARS }

/*
 * The whole key layout, and the one place keys are assembled. Every key of
 * one request shares one Redis Cluster hash tag:
 *
 *   - no globalLimits:  <prefix>:{<METHOD>:<route>|<identity>}:<suffix>
 *   - with globalLimits, route block:  <prefix>:{<identity>}:<METHOD>:<route>:<suffix>
 *   - with globalLimits, global block: <prefix>:{<identity>}:*:<suffix>        (route-independent)
 *
 * <suffix> is the algorithm's two letters and the window in ms (`SW60000`;
 * compact forms for longer windows and calendar periods: each kind's keySuffix, lib/kinds/), or `cc`
 * for a concurrency block's slots, plus `.<index>` for a same-suffix sibling. Limits and tiers are not part of
 * a key, so a new limit or tier keeps the count. Blocks with different `by`
 * cannot share a tag (a startup error with a Cluster client only).
 *
 * Key names are shared by old and new instances during a rolling deploy:
 * nothing here may change a key for the same configuration.
 *
 * - Nothing a client sends reaches a key verbatim: identity values are either
 *   canonical IPs (hex digits, dots, colons, a slash) or base64url hashes, so no
 *   `{`, `}` or separator from a client can move the hash tag or fake another key.
 * - Route templates are percent-escaped (`%`, `{`, `}`, `|`), which keeps the
 *   mapping one-to-one; a route's constraints add `%C<hash>`; anything over
 *   budget is replaced by `%H<hash>`: forms the escaping can never produce.
 * - Budgets keep every key within MAX_KEY_BYTES.
 * - With `hashSecret`, identity values are hashed with HMAC-SHA256 keyed by it,
 *   so a key name cannot be checked against guessed usernames or API keys.
 */

export type ValueHasher = (value: string) => string

/**
 * The hash applied to identity values: SHA-256, or HMAC-SHA256 keyed with
 * `secret` (same length, same alphabet). Chosen once per plugin instance.
 */
export function identityHasher (secret: Buffer | undefined): ValueHasher {
  if (secret === undefined) return hashValue
  const key = Buffer.from(secret) // a private copy: later changes to the caller's buffer change nothing
  return (value) => createHmac('sha256', key).update(value).digest('base64url').slice(0, HASH_CHARS)
}

/** `%H` + hash: never produced by escapeRouteChars, so it cannot collide with a short form. */
function hashedForm (value: string): string {
  return '%H' + hashValue(value)
}

function escapeRouteChars (value: string): string {
  return value.replace(/[%{}|]/g, (char) => '%' + char.charCodeAt(0).toString(16).toUpperCase())
}

/** Marks the hash of a route's constraints: `%C` is never produced by escapeRouteChars either. */
const CONSTRAINED = '%C'

function bounded (segment: string, whole: string): string {
  return Buffer.byteLength(segment) <= MAX_ROUTE_LENGTH ? segment : hashedForm(whole)
}

/**
 * `METHOD:/route/template`, escaped, hashed when it would not fit; computed
 * once per route. A constrained route (keys/constraints.ts) appends `%C` and
 * the hash of its constraints' text; without constraints the segment is what
 * it always was.
 */
export function routeSegment (method: string, url: string, constraints = ''): string {
  const escaped = `${method}:${escapeRouteChars(url)}`
  if (constraints === '') return bounded(escaped, escaped)
  return bounded(escaped + CONSTRAINED + hashValue(constraints), escaped + CONSTRAINED + constraints)
}

/** The part of a key before the identity; computed once per route. */
export function keyHead (prefix: string, segment: string): string {
  return `${prefix}:{${segment}|`
}

/** The part after the identity, outside the hash tag; computed once per block. */
export function keyTail (suffix: string): string {
  return `}:${suffix}`
}

/**
 * Bounds an identity built from parts. Parts are ASCII (IPs, hashes, labels),
 * so length equals bytes; a long combination is hashed as a whole.
 */
export function boundIdentity (identity: string): string {
  return identity.length <= MAX_IDENTITY_LENGTH ? identity : hashedForm(identity)
}

/** The HEAD route Fastify adds for a GET shares the GET's bucket, and so does an explicit HEAD. */
export function keyMethod (method: string | string[]): string {
  if (Array.isArray(method)) return [...new Set(method.map(keyMethod))].sort().join(',')
  const upper = method.toUpperCase()
  return upper === 'HEAD' ? 'GET' : upper
}

/** Gives same-suffix siblings distinct keys: the second `SW60000` becomes `SW60000.1`. */
export function distinctSuffixes (blocks: ReadonlyArray<{ suffix: string }>): void {
  const seen = new Set<string>()
  blocks.forEach((block, index) => {
    if (seen.has(block.suffix)) block.suffix = `${block.suffix}.${index}`
    seen.add(block.suffix)
  })
}

/** Where the keys of one policy come from: key i = heads[i] + identity[identityOf[i]] + tails[i]. */
export interface KeyLayout {
  keyHeads: readonly string[]
  keyTails: readonly string[]
  /** Block i's identity is the identityOf[i]-th resolved value. */
  identityOf: readonly number[]
}

/**
 * The layout of one policy's keys, computed once at startup. `route` is
 * undefined for a policy of global blocks alone (they have no route).
 */
export function keyLayout (
  prefix: string,
  route: { method: string | string[], url: string, constraints?: string } | undefined,
  blocks: ReadonlyArray<{ global: boolean, suffix: string }>,
  identityOf: readonly number[]
): KeyLayout {
  const segment = route === undefined ? '' : routeSegment(keyMethod(route.method), route.url, route.constraints)
  const identityCount = Math.max(...identityOf) + 1
  // With a global block and one identity, the identity alone is the tag, so route and global keys share a slot.
  const tagByIdentity = blocks.some((block) => block.global) && identityCount === 1
  return {
    keyHeads: blocks.map((block) => block.global || tagByIdentity ? `${prefix}:{` : keyHead(prefix, segment)),
    keyTails: blocks.map((block) => keyTail(block.global ? `*:${block.suffix}` : tagByIdentity ? `${segment}:${block.suffix}` : block.suffix)),
    identityOf
  }
}

/** One key per block, from the identities resolved for this request (one value per distinct identity). */
export function assembleKeys (layout: KeyLayout, identities: readonly string[]): string[] {
  const { keyHeads, keyTails, identityOf } = layout
  const keys: string[] = []
  for (const [i, head] of keyHeads.entries()) {
    const identity = identities[identityOf[i] ?? -1]
    const tail = keyTails[i]
    // keyLayout gives every head a tail and an identity: a broken layout throws rather than share one key among callers.
    if (identity === undefined || tail === undefined) throw new RangeError(`key ${i} of ${keyHeads.length} has no identity or tail`)
    keys.push(head + identity + tail)
  }
  return keys
}

/**
 * Block i's id for runtime overrides: its key with `*` as the identity. No
 * identity value is ever `*` (IPs, base64url hashes, labels), so it names the
 * block and no caller; a global block's id is the same on every route.
 */
export function blockId (layout: KeyLayout, index: number): string {
  return item(layout.keyHeads, index) + '*' + item(layout.keyTails, index)
}

/** The one hash of runtime overrides per prefix (outside any hash tag: one slot, read by every instance). */
export function overridesKey (prefix: string): string {
  return `${prefix}:overrides`
}

/** The one hash of operator bans per prefix (like overridesKey: one slot, read by every instance). */
export function bansKey (prefix: string): string {
  return `${prefix}:bans`
}

/**
 * The console's keys (the fleet's pictures, the audit trail) sit beside the
 * limiter's, under `<prefix>/console:`: a prefix never holds `/` (PREFIX,
 * options/fields.ts), so no limiter key of any prefix has this form, and a
 * scan of `<prefix>:*` finds the limiter's keys alone.
 */
function consoleHead (prefix: string): string {
  return `${prefix}/console:`
}

/** The fleet's pictures (lib/picture/): one hash tag, so one call writes an instance's picture and its lapse time on a Cluster. */
export function pictureKeys (prefix: string): { pictures: string, lapses: string } {
  return { pictures: `${consoleHead(prefix)}{picture}:instances`, lapses: `${consoleHead(prefix)}{picture}:lapses` }
}

/** The audit trail of operator changes (bans, overrides, resets): one stream per prefix. */
export function auditKey (prefix: string): string {
  return `${consoleHead(prefix)}audit`
}
