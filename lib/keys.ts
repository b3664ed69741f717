import { createHash, createHmac } from 'node:crypto'

/*
 * Key scheme: `<prefix>:{<METHOD>:<route>|<identity>}:<suffix>`.
 *
 * - The route and identity sit inside one hash tag, so every key of one
 *   decision lands in one Redis Cluster slot, while different callers spread.
 * - Nothing a client sends reaches a key verbatim: identity values are either
 *   canonical IPs (hex digits, dots, colons, a slash) or base64url hashes, so no
 *   `{`, `}` or separator from a client can move the hash tag or fake another key.
 * - Route templates are percent-escaped (`%`, `{`, `}`, `|`), which keeps the
 *   mapping one-to-one; anything over budget is replaced by `%H<hash>`, a form
 *   the escaping can never produce.
 * - Budgets keep every key within MAX_KEY_BYTES.
 * - With `hashSecret`, identity values are hashed with HMAC-SHA256 keyed by it,
 *   so a key name cannot be checked against guessed usernames or API keys.
 */

export const MAX_KEY_BYTES = 128
export const MAX_PREFIX_LENGTH = 20
const MAX_ROUTE_LENGTH = 44
export const MAX_IDENTITY_LENGTH = 44
const HASH_CHARS = 22 // 132 bits of SHA-256, base64url

export function hashValue (value: string): string {
  return createHash('sha256').update(value).digest('base64url').slice(0, HASH_CHARS)
}

/** Minimum `hashSecret` length: 128 bits. */
export const MIN_SECRET_BYTES = 16

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

/** `METHOD:/route/template`, escaped, hashed when it would not fit. Computed once per route. */
export function routeSegment (method: string, url: string): string {
  const escaped = `${method}:${escapeRouteChars(url)}`
  return Buffer.byteLength(escaped) <= MAX_ROUTE_LENGTH ? escaped : hashedForm(escaped)
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
